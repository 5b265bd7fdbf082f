package slack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// heldTransport keeps to Slack's Retry-After for the whole workspace: a
// 429 answer holds every later call of the same Web API method (its
// limit is per method and workspace, not per message; chat.postMessage's
// is per channel, so there only the channel's calls are held) until the wait
// ends, so that another thread's edit or a card does not meet the limit
// again (Slack may then lengthen it). Calls of other methods go on.
//
// With replicas the holds are shared (DESIGN §14: a budget is the bot's,
// not each replica's): say tells the others of a hold this one met, and
// hold applies one another met.
type heldTransport struct {
	base http.RoundTripper
	now  func() time.Time

	mu    sync.Mutex           // guards until and say
	until map[string]time.Time // method -> end of its Retry-After
	say   func(key string, until time.Time)
}

// hold keeps the calls of budget key until until, unless they are held
// longer already: a Retry-After another replica met.
func (t *heldTransport) hold(key string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if until.After(t.until[key]) {
		t.until[key] = until
	}
}

// sayHolds sets whom a hold this process meets is told to (nil: nobody).
func (t *heldTransport) sayHolds(say func(key string, until time.Time)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.say = say
}

// perChannel lists the methods Slack limits per channel rather than per
// workspace: a 429 for one channel holds only that channel's calls.
var perChannel = map[string]bool{"chat.postMessage": true}

// budgetKey is what a Retry-After holds: the method, and for a method
// limited per channel the channel too (read from the request's form or
// JSON body, which is put back for the send).
func budgetKey(req *http.Request) string {
	method := path.Base(req.URL.Path)
	if !perChannel[method] || req.Body == nil {
		return method
	}
	raw, err := io.ReadAll(req.Body) // whole: it is sent on as read (Slack's own cap is far below memory's)
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(raw))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	if err != nil {
		return method
	}
	var channel string
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/json") {
		var body struct {
			Channel string `json:"channel"`
		}
		json.Unmarshal(raw, &body)
		channel = body.Channel
	} else if form, err := url.ParseQuery(string(raw)); err == nil {
		channel = form.Get("channel")
	}
	if channel == "" {
		return method
	}
	return method + "/" + channel
}

func (t *heldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	method := budgetKey(req)
	// Read the end again after each wait: a 429 answered meanwhile (to
	// another call of the same budget) may have moved it later.
	for {
		t.mu.Lock()
		end := t.until[method]
		t.mu.Unlock()
		wait := end.Sub(t.now())
		if wait <= 0 {
			break
		}
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
			until := t.now().Add(time.Duration(secs) * time.Second)
			t.mu.Lock()
			later := until.After(t.until[method])
			if later {
				t.until[method] = until
			}
			say := t.say
			t.mu.Unlock()
			if later && say != nil {
				say(method, until)
			}
		}
	}
	return resp, err
}

// holdRetryAfter returns a copy of c whose requests keep to Retry-After.
func holdRetryAfter(c *http.Client, now func() time.Time) (*http.Client, *heldTransport) {
	held := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	t := &heldTransport{base: base, now: now, until: map[string]time.Time{}}
	held.Transport = t
	return &held, t
}

// HoldRetryAfter holds this process's calls of a Slack budget (a Web API
// method, or "chat.postMessage/<channel>"; with Options.Installations
// prefixed with its team and a colon, "T1:chat.update") until until: a
// Retry-After another replica met (replica.ShareHolds).
func (a *Adapter) HoldRetryAfter(key string, until time.Time) {
	if a.one != nil {
		a.one.held.hold(key, until)
		return
	}
	if team, rest, ok := strings.Cut(key, ":"); ok {
		a.space(team).held.hold(rest, until)
	}
}

// OnRetryAfter sets whom a Retry-After this process meets is told to,
// with the budget's key (as HoldRetryAfter takes it) and its end (the
// other replicas, through etcd); say must not block for long.
func (a *Adapter) OnRetryAfter(say func(key string, until time.Time)) {
	if a.one != nil {
		a.one.held.sayHolds(say)
		return
	}
	a.mu.Lock()
	a.say = say
	spaces := make([]*workspace, 0, len(a.spaces))
	for _, w := range a.spaces {
		spaces = append(spaces, w)
	}
	a.mu.Unlock()
	for _, w := range spaces {
		w.adopt(1, say)
	}
}
