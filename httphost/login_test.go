package httphost

import (
	"html"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestLoginPageSaysWhereTheTokenIs: a new user who opens the console
// without the printed link learns where a generated token is kept, and
// an operator running replicas learns that they share one token.
func TestLoginPageSaysWhereTheTokenIs(t *testing.T) {
	srv := newHost(t, "s3cret")
	resp, err := http.Get(srv.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	page := strings.ToLower(html.UnescapeString(string(b)))
	for _, want := range []string{"web-token", "data/web-token", "pinplan_web_token", "replicas"} {
		if !strings.Contains(page, want) {
			t.Errorf("the sign-in page does not say %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "s3cret") {
		t.Error("the sign-in page shows the token")
	}
}
