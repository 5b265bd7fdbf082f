package fakediscord

import (
	"net/http"
	"testing"
)

// TestCurrentApplication: GET /applications/@me answers the bot's
// application, its flags saying whether the Message Content intent is
// enabled, as the gateway's DenyIntents has it; without a token, 401.
func TestCurrentApplication(t *testing.T) {
	tests := []struct {
		name      string
		deny      int64
		wantFlags int
	}{
		{"intent enabled", 0, AppFlagGatewayMessageContentLimited},
		{"intent not enabled", IntentMessageContent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := serve(t, &Server{DenyIntents: tt.deny})
			a := rest(t, base, http.MethodGet, "applications/@me", nil)
			if a.status != http.StatusOK {
				t.Fatalf("got HTTP %d, want 200", a.status)
			}
			if got := int(a.field("flags").(float64)); got != tt.wantFlags {
				t.Errorf("got flags %d, want %d", got, tt.wantFlags)
			}
			if got := a.field("id"); got != BotID {
				t.Errorf("got id %v, want the bot's %s", got, BotID)
			}
		})
	}
	base := serve(t, &Server{Token: "the-token"})
	if a := rest(t, base, http.MethodGet, "applications/@me", nil); a.status != http.StatusUnauthorized {
		t.Errorf("another token: got HTTP %d, want 401", a.status)
	}
}
