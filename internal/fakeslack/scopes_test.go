package fakeslack

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestScopesHeader: an answer to a token Slack accepts names the token's
// scopes in X-OAuth-Scopes; an answer to one it refuses names none.
func TestScopesHeader(t *testing.T) {
	all := strings.Join(BotScopes, ",")
	tests := []struct {
		name   string
		server *Server
		token  string
		method string
		want   string
	}{
		{"bot token", &Server{}, "xoxb-1", "auth.test", all},
		{"without files:read", &Server{NoFilesRead: true}, "xoxb-1", "auth.test", strings.Replace(all, ",files:read", "", 1)},
		{"scopes set", &Server{Scopes: []string{"chat:write"}}, "xoxb-1", "auth.test", "chat:write"},
		{"app-level token", &Server{}, "xapp-1", "apps.connections.open", "connections:write"},
		{"refused token", &Server{}, "hunter2", "auth.test", ""},
		{"app-level token where it is refused", &Server{}, "xapp-1", "auth.test", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.server)
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/"+tt.method, strings.NewReader(""))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer "+tt.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-OAuth-Scopes"); got != tt.want {
				t.Errorf("got X-OAuth-Scopes %q, want %q", got, tt.want)
			}
		})
	}
}
