package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool result of any size must come out of the transport as a result,
// cut, and never as a broken session (DESIGN.md §16). The SDK buffers a
// whole message before it decodes it, and gives up on one over 16 MiB
// (its line and SSE event limits). So what a server sends is read through
// a cutter, which shortens each overlong JSON string as it streams past
// and leaves a mark saying how much it left out; the call takes the marks
// out and counts those bytes in its cut note. The SDK's limits are raised
// to maxFrame, for what the cutter leaves long: base64 data, and a huge
// structure of short values.

// maxFrame bounds one message from a server after the cutter.
const maxFrame = 256 << 20

// minCutString is the encoded length past which the cutter shortens a
// string at the least: a result within it passes the transport as it is.
const minCutString = 1 << 20

// cutAt returns the encoded length past which the cutter shortens a
// string: at least 8 times the result limit, since an escape is up to 6
// bytes on the wire for 1 of text, so the cutter never takes any of what
// call keeps for the model.
func cutAt(resultBytes int) int { return max(minCutString, 8*resultBytes) }

// cutter reads a stream of JSON-RPC messages, one a line (stdio) or in SSE
// data lines (HTTP), and shortens every JSON string longer than max bytes,
// as encoded, to about max bytes followed by mark, the number of bytes of
// text left out, and "]". It never splits an escape or a UTF-8 character,
// so the message stays valid JSON. Strings under the keys "data" and
// "blob" are base64 (images, audio, blobs) and pass whole: a cut would make
// them undecodable. It keeps no more than one read's worth of bytes.
type cutter struct {
	r    io.Reader
	max  int
	mark string

	in  []byte // read from r
	buf []byte // in, filtered
	out []byte // what of buf Read has not returned yet
	err error  // r's, returned once out is empty

	cutState
}

// cutState is where the cutter is in the JSON. It starts afresh at every
// newline: a message never holds a raw one, so a state confused by text
// that is not JSON lasts one line at most.
type cutState struct {
	inString    bool
	esc         int    // in a string: 0, escStart after a backslash, or the hex digits of a \u still to come
	hex         rune   // the \u escape being read while cutting
	n           int    // encoded bytes of the current string so far
	head        []byte // the current string's first bytes, to tell data and blob
	binary      bool   // the current string is base64
	cutting     bool   // the rest of the current string is left out
	dropped     int    // bytes of text left out of the current string
	afterString bool   // the last token was a string: a ':' makes it a key
	lastBinary  bool   // the last string was "data" or "blob"
	keyBinary   bool   // the current key is "data" or "blob"
}

const escStart = -1

func newCutter(r io.Reader, max int, mark string) *cutter {
	return &cutter{r: r, max: max, mark: mark, cutState: cutState{head: make([]byte, 0, 8)}}
}

func (c *cutter) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.in == nil {
			c.in = make([]byte, 32<<10)
		}
		n, err := c.r.Read(c.in)
		c.buf = c.filter(c.buf[:0], c.in[:n])
		c.out, c.err = c.buf, err
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// filter appends src to dst, leaving out what is cut.
func (c *cutter) filter(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		b := src[i]
		switch {
		case b == '\n':
			// The end of a message (or of a broken one: a string cut short
			// by a newline was not JSON to begin with).
			c.cutState = cutState{head: c.head[:0]}
			dst = append(dst, b)
			i++
		case !c.inString:
			j := i
			for ; j < len(src) && src[j] != '"' && src[j] != '\n'; j++ {
				switch src[j] {
				case ':':
					if c.afterString {
						c.keyBinary = c.lastBinary
					}
					c.afterString = false
				case ' ', '\t', '\r':
				default:
					c.afterString = false
				}
			}
			dst = append(dst, src[i:j]...)
			if j < len(src) && src[j] == '"' {
				c.inString, c.n, c.head = true, 0, c.head[:0]
				c.binary, c.cutting, c.dropped, c.esc = c.keyBinary, false, 0, 0
				dst = append(dst, '"')
				j++
			}
			i = j
		case c.cutting:
			i += c.skip(src[i:])
			if i < len(src) && src[i] == '"' && c.esc == 0 {
				dst = append(dst, c.mark...)
				dst = strconv.AppendInt(dst, int64(c.dropped), 10)
				dst = append(dst, ']', '"')
				c.endString()
				i++
			}
		case c.esc != 0:
			c.escape(b)
			dst = append(dst, b)
			c.n++
			i++
		case b == '"':
			dst = append(dst, b)
			c.endString()
			i++
		case !c.binary && c.n >= c.max && !isContinuation(b):
			c.cutting = true
		case b == '\\':
			c.esc = escStart
			dst = append(dst, b)
			c.n++
			i++
		default:
			// Text up to the next quote, backslash or newline, or to the
			// cut; past the cut, the rest of a character.
			k := bytes.IndexAny(src[i:], "\"\\\n")
			if k < 0 {
				k = len(src) - i
			}
			if !c.binary {
				k = max(min(k, c.max-c.n), 1)
			}
			dst = append(dst, src[i:i+k]...)
			if len(c.head) < cap(c.head) {
				c.head = append(c.head, src[i:i+min(k, cap(c.head)-len(c.head))]...)
			}
			c.n += k
			i += k
		}
	}
	return dst
}

// skip counts what it leaves out of the current string, up to its closing
// quote or a newline, and returns how many bytes of src it went over.
func (c *cutter) skip(src []byte) int {
	for i, b := range src {
		switch {
		case b == '\n':
			return i
		case c.esc == 0 && b == '"':
			return i
		case c.esc == 0 && b == '\\':
			c.esc = escStart
		case c.esc == 0:
			c.dropped++ // a byte of UTF-8 is a byte of the text
		case c.esc == escStart && b == 'u':
			c.esc, c.hex = 4, 0
		case c.esc == escStart:
			c.esc = 0
			c.dropped++
		default:
			c.hex = c.hex<<4 | hexValue(b)
			c.esc--
			if c.esc == 0 {
				if utf8.ValidRune(c.hex) {
					c.dropped += utf8.RuneLen(c.hex)
				} else {
					c.dropped += 2 // half of a surrogate pair, 4 bytes of UTF-8
				}
			}
		}
	}
	return len(src)
}

// escape follows an escape that is kept.
func (c *cutter) escape(b byte) {
	switch {
	case c.esc == escStart && b == 'u':
		c.esc = 4
	case c.esc == escStart:
		c.esc = 0
	default:
		c.esc--
	}
}

func (c *cutter) endString() {
	c.lastBinary = c.n == 4 && (string(c.head) == "data" || string(c.head) == "blob")
	c.inString, c.cutting, c.afterString = false, false, true
}

func isContinuation(b byte) bool { return b&0xC0 == 0x80 }

func hexValue(b byte) rune {
	switch {
	case '0' <= b && b <= '9':
		return rune(b - '0')
	case 'a' <= b && b <= 'f':
		return rune(b - 'a' + 10)
	case 'A' <= b && b <= 'F':
		return rune(b - 'A' + 10)
	}
	return 0
}

// uncut takes the cutter's marks out of text and returns it with the
// number of bytes they say were left out.
func uncut(text, mark string) (string, int) {
	if !strings.Contains(text, mark) {
		return text, 0
	}
	var b strings.Builder
	dropped := 0
	for {
		i := strings.Index(text, mark)
		if i < 0 {
			break
		}
		rest := text[i+len(mark):]
		j := strings.IndexByte(rest, ']')
		n, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil || n < 0 {
			// Not one of the cutter's: keep it.
			b.WriteString(text[:i+len(mark)])
			text = rest
			continue
		}
		b.WriteString(text[:i])
		dropped += n
		text = rest[j+1:]
	}
	b.WriteString(text)
	return b.String(), dropped
}

// commandTransport runs a stdio server like sdk.CommandTransport, but reads
// its stdout through a cutter and allows messages up to maxFrame.
type commandTransport struct {
	cmd  *exec.Cmd
	cut  func(io.Reader) io.Reader
	wait time.Duration // how long Close waits after closing stdin, and after SIGTERM
}

// Connect implements sdk.Transport.
func (t *commandTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	// The connection ends by closing stdin, not stdout.
	return (&sdk.IOTransport{Reader: io.NopCloser(t.cut(stdout)), Writer: &stdinCloser{t, stdin},
		MaxLineLength: maxFrame}).Connect(ctx)
}

// stdinCloser ends the server the way the MCP spec says a client should:
// close its stdin, wait for it to exit, then SIGTERM, then SIGKILL.
type stdinCloser struct {
	t *commandTransport
	io.WriteCloser
}

func (w *stdinCloser) Close() error {
	if err := w.WriteCloser.Close(); err != nil {
		return fmt.Errorf("close stdin: %w", err)
	}
	cmd := w.t.cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	wait := func() (error, bool) {
		select {
		case err := <-exited:
			return err, true
		case <-time.After(w.t.wait):
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the server process does not exit")
}
