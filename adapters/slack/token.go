package slack

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// tokenTransport sends a workspace's Web API calls with the bot token of
// its installation, as it is when the call is made (a refreshed token
// takes over at once), and retries a call Slack answered token_expired
// once, after a refresh. slack-go puts its own token in the form of
// form-encoded calls and in the Authorization header of JSON and GET
// calls; here the form's is dropped and the header carries the
// installation's, which Slack takes for every method.
type tokenTransport struct {
	base   http.RoundTripper
	tokens *tokenSource
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	token, err := t.tokens.token(ctx)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(withToken(req, body, token))
	if err != nil {
		return resp, err
	}
	switch answerError(resp) {
	case "token_expired":
	case "token_revoked", "invalid_auth", "account_inactive", "team_access_not_granted":
		// Uninstalled, perhaps through another replica, or installed
		// again since, or an org install removed from the workspace
		// (team_access_revoked): the next call reads the installation
		// again.
		t.tokens.drop(token)
		return resp, nil
	default:
		return resp, nil
	}
	fresh, rerr := t.tokens.renew(ctx, token)
	if rerr != nil || fresh == token {
		if rerr != nil {
			t.tokens.a.log.Warn("slack token expired and not refreshed", "team", t.tokens.team, "err", rerr)
		}
		return resp, nil // the token_expired answer stands
	}
	resp.Body.Close()
	return t.base.RoundTrip(withToken(req, body, fresh))
}

// readBody reads a request's body whole, for a retry; closed after.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body) // whole, as heldTransport reads it (Slack's own cap is far below memory's)
}

// withToken is req with body, carrying token in its Authorization header
// and no token in its form.
func withToken(req *http.Request, body []byte, token string) *http.Request {
	out := req.Clone(req.Context())
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		if form, err := url.ParseQuery(string(body)); err == nil && form.Has("token") {
			form.Del("token")
			body = []byte(form.Encode())
		}
	}
	if q := out.URL.Query(); q.Has("token") {
		q.Del("token")
		out.URL.RawQuery = q.Encode()
	}
	if req.Body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
		out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	out.Header.Set("Authorization", "Bearer "+token)
	return out
}

// answerError is the error code of a Slack answer, "" for none, keeping
// the answer's body readable.
func answerError(resp *http.Response) string {
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return ""
	}
	raw, err := io.ReadAll(resp.Body) // slack-go reads it whole next
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil || !bytes.Contains(raw, []byte(`"error"`)) {
		return "" // an answer that is no error is not decoded twice
	}
	var ans struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &ans) != nil || ans.OK {
		return ""
	}
	return ans.Error
}
