package slack

import (
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"
)

// heldTransport keeps to Slack's Retry-After for the whole workspace: a
// 429 answer holds every later call of the same Web API method (its
// limit is per method and workspace, not per message) until the wait
// ends, so that another thread's edit or a card does not meet the limit
// again (Slack may then lengthen it). Calls of other methods go on.
type heldTransport struct {
	base http.RoundTripper
	now  func() time.Time

	mu    sync.Mutex           // guards until
	until map[string]time.Time // method -> end of its Retry-After
}

func (t *heldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	method := path.Base(req.URL.Path)
	t.mu.Lock()
	end := t.until[method]
	t.mu.Unlock()
	if wait := end.Sub(t.now()); wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		if secs, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && secs > 0 {
			t.mu.Lock()
			if until := t.now().Add(time.Duration(secs) * time.Second); until.After(t.until[method]) {
				t.until[method] = until
			}
			t.mu.Unlock()
		}
	}
	return resp, err
}

// holdRetryAfter returns a copy of c whose requests keep to Retry-After.
func holdRetryAfter(c *http.Client, now func() time.Time) *http.Client {
	held := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	held.Transport = &heldTransport{base: base, now: now, until: map[string]time.Time{}}
	return &held
}
