package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// ErrContextTooLong means a request was longer than the model's context
// window; the runner compacts harder and tries once more.
var ErrContextTooLong = errors.New("the request is longer than the model's context window")

// ErrRateLimited means the server kept answering 429, or asked to wait
// longer than the bot waits.
var ErrRateLimited = errors.New("the model server is rate limiting this bot")

// ModelError is a model request that failed for good, with a sentence for
// the thread that says what to do about it.
type ModelError struct {
	Status  int    // HTTP status, 0 when none came back
	BaseURL string // the server, without credentials
	Model   string
	Err     error
}

func (e *ModelError) Error() string { return e.Err.Error() }
func (e *ModelError) Unwrap() error { return e.Err }

// UserMessage says plainly what went wrong, for the thread.
func (e *ModelError) UserMessage() string {
	var netErr net.Error
	switch {
	case errors.Is(e.Err, ErrContextTooLong):
		return "This thread's conversation is too long for the model, even after I summarised its older parts. Send `reset` to start fresh here (the history stays stored), or start a new thread."
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return fmt.Sprintf("The model server refused the API key (HTTP %d). Check OPENAI_API_KEY and restart pinplan.", e.Status)
	case e.Status == http.StatusNotFound:
		return fmt.Sprintf("The model server does not know the model %q (HTTP 404). Check OPENAI_MODEL (and OPENAI_BASE_URL) and restart pinplan.", e.Model)
	case errors.Is(e.Err, ErrRateLimited) || e.Status == http.StatusTooManyRequests:
		return "The model server is rate limiting this bot for longer than it waits. Send your message again in a few minutes."
	case e.Status >= 500:
		return fmt.Sprintf("The model server failed (HTTP %d) on every try, so this turn ended. Send a message to try again.", e.Status)
	case e.Status == 0 && errors.As(e.Err, &netErr):
		return fmt.Sprintf("The model server at %s could not be reached. Check OPENAI_BASE_URL and that the server is running, then send a message to try again.", e.BaseURL)
	}
	return "The model did not answer, so this turn ended. Send a message to try again."
}

// contextTooLong reports whether err is the server saying the request
// does not fit: OpenAI's code first, then the status, then the wording
// other servers use.
func contextTooLong(err error) bool {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		if code, _ := apiErr.Code.(string); code == "context_length_exceeded" || code == "string_above_max_length" {
			return true
		}
		return (apiErr.HTTPStatusCode == http.StatusBadRequest || apiErr.HTTPStatusCode == http.StatusRequestEntityTooLarge) && saysTooLong(apiErr.Message)
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		return (reqErr.HTTPStatusCode == http.StatusBadRequest || reqErr.HTTPStatusCode == http.StatusRequestEntityTooLarge) && saysTooLong(string(reqErr.Body))
	}
	return false
}

func saysTooLong(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"context length", "context window", "maximum context", "context size", "too many tokens", "prompt is too long", "reduce the length", "exceeds the context", "input is too long", "max_tokens"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// status is the HTTP status of a failed request, 0 if none came back.
func status(err error) int {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.HTTPStatusCode
	case errors.As(err, &reqErr):
		return reqErr.HTTPStatusCode
	}
	return 0
}
