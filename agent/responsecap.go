package agent

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DefaultResponseBytes is the longest model response read when
// OpenAIOptions.ResponseBytes is 0 (PINPLAN_MODEL_RESPONSE_BYTES).
const DefaultResponseBytes = 4 << 20

// ErrResponseTooLarge means the model's response was larger than
// OpenAIOptions.ResponseBytes. It is not retried: the same request would
// get the same answer.
var ErrResponseTooLarge = errors.New("the model's response is larger than this bot reads")

// tooLarge is ErrResponseTooLarge with the limit.
type tooLarge struct{ limit int64 }

func (e *tooLarge) Error() string {
	return fmt.Sprintf("the model's response is larger than %s (PINPLAN_MODEL_RESPONSE_BYTES)", byteSize(e.limit))
}

func (e *tooLarge) Is(target error) bool { return target == ErrResponseTooLarge }

// oversizeError is the final error of a response over the cap: a
// ModelError whose sentence for the thread says what happened.
type oversizeError struct {
	*ModelError
	limit int64
}

func (e *oversizeError) Unwrap() error { return e.ModelError }

// UserMessage says plainly what went wrong, for the thread.
func (e *oversizeError) UserMessage() string {
	return fmt.Sprintf("The model's answer was larger than the %s this bot reads (PINPLAN_MODEL_RESPONSE_BYTES), so I stopped reading it and this turn ended; nothing of it was kept. Ask for a shorter answer or for it in parts, or ask an operator to raise the limit.", byteSize(e.limit))
}

// byteSize writes n as people read it: 4 MiB, 64 KiB, 5000 bytes.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// capTransport cuts every response body at limit bytes, whatever the
// server sends, so that memory stays bounded before go-openai decodes a
// byte of it. A plain body (an answer or an error page) is cut at limit
// in all. A stream's framing is many times its content, so it is cut
// where what go-openai keeps passes limit: one line (it reads lines
// whole), or the lines that are not data lines together (comments and
// error text, which it gathers); what the data lines add up to is counted
// by once.
type capTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	stream := resp.StatusCode < 400 && strings.HasPrefix(req.Header.Get("Accept"), "text/event-stream")
	resp.Body = &cappedBody{rc: resp.Body, limit: t.limit, stream: stream}
	return resp, nil
}

// cappedBody fails the read that passes the limit, and every read after.
type cappedBody struct {
	rc     io.ReadCloser
	limit  int64
	stream bool
	n      int64 // bytes read: in all, or for a stream those of the current line
	other  int64 // stream: bytes of the lines that are not data lines
	prefix int   // stream: bytes of the current line that match "data:"; -1 once one does not
	err    error
}

const dataPrefix = "data:"

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// A byte past the limit is enough to know it was passed.
	if room := b.limit + 1 - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	if b.count(p[:n]) {
		b.err = &tooLarge{limit: b.limit}
		return 0, b.err
	}
	return n, err
}

// count adds p to what was read and reports whether the limit is passed.
func (b *cappedBody) count(p []byte) bool {
	if !b.stream {
		b.n += int64(len(p))
		return b.n > b.limit
	}
	for _, c := range p {
		if c == '\n' {
			b.n, b.prefix = 0, 0
			continue
		}
		b.n++
		switch {
		case b.prefix < 0:
			b.other++
		case b.prefix < len(dataPrefix) && c == dataPrefix[b.prefix]:
			b.prefix++
		case b.prefix < len(dataPrefix):
			b.other += int64(b.prefix) + 1
			b.prefix = -1
		}
	}
	return b.n > b.limit || b.other > b.limit
}

func (b *cappedBody) Close() error { return b.rc.Close() }
