package fakediscord

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestCommandRegistration: a bulk overwrite is checked as Discord checks
// it and replaces the set whole, keeping a command's id; a command can
// be run only where it is registered.
func TestCommandRegistration(t *testing.T) {
	s := &Server{}
	s.AddChannel("C1", 0, "G1")
	s.AddChannel("C9", 0, "G9")
	srv := httptest.NewServer(s)
	defer srv.Close()
	put := func(path string, cmds []any) int {
		raw, _ := json.Marshal(cmds)
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/v9/applications/"+BotID+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bot x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := map[string]any{"name": "pinplan", "description": "d", "options": []any{
		map[string]any{"type": 1, "name": "task", "description": "d", "options": []any{map[string]any{"type": 3, "name": "task", "description": "d", "required": true, "max_length": 6000}}},
		map[string]any{"type": 1, "name": "stop", "description": "d"},
	}}
	for name, bad := range map[string]map[string]any{
		"upper-case name":   {"name": "PinPlan", "description": "d"},
		"no description":    {"name": "pinplan"},
		"long max_length":   {"name": "p", "description": "d", "options": []any{map[string]any{"type": 3, "name": "t", "description": "d", "max_length": 16000}}},
		"required late":     {"name": "p", "description": "d", "options": []any{map[string]any{"type": 3, "name": "a", "description": "d"}, map[string]any{"type": 3, "name": "b", "description": "d", "required": true}}},
		"nested subcommand": {"name": "p", "description": "d", "options": []any{map[string]any{"type": 1, "name": "a", "description": "d", "options": []any{map[string]any{"type": 1, "name": "b", "description": "d"}}}}},
	} {
		if status := put("/commands", []any{bad}); status != 400 {
			t.Errorf("%s: %d, want 400", name, status)
		}
	}
	if status := put("/commands", []any{good}); status != 200 {
		t.Fatalf("a good set: %d", status)
	}
	id := s.Commands("global")["pinplan"]["id"]
	if status := put("/commands", []any{good}); status != 200 || s.Commands("global")["pinplan"]["id"] != id || s.Overwrites()["global"] != 2 {
		t.Errorf("a second overwrite: %d, id %v (was %v), overwrites %v", status, s.Commands("global")["pinplan"]["id"], id, s.Overwrites())
	}
	if _, err := s.Command("C1", "U1", "pinplan", "task", map[string]string{"task": "x"}); err != nil {
		t.Errorf("a registered command: %v", err)
	}
	if _, err := s.Command("C1", "U1", "pinplan", "task", nil); err == nil {
		t.Error("a required option left out was dispatched")
	}
	if _, err := s.Command("C1", "U1", "pinplan", "dance", nil); !errors.Is(err, ErrNoCommand) {
		t.Errorf("an unknown subcommand: %v", err)
	}
	if status := put("/commands", []any{}); status != 200 {
		t.Fatal(status)
	}
	if status := put("/guilds/G1/commands", []any{good}); status != 200 {
		t.Fatal(status)
	}
	if _, err := s.Command("C1", "U1", "pinplan", "stop", nil); err != nil {
		t.Errorf("a guild command in its guild: %v", err)
	}
	if _, err := s.Command("C9", "U1", "pinplan", "stop", nil); !errors.Is(err, ErrNoCommand) {
		t.Errorf("a guild command in another guild: %v", err)
	}
}
