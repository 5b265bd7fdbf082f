package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStrictOrder: for a server that refuses a user or system message
// right after a tool message (Mistral), a follow-up that joined the turn
// gets an assistant message before it and the stale reminder is folded
// into the tool result before it; the leading system messages stay.
func TestStrictOrder(t *testing.T) {
	in := `[{"role":"system","content":"rules"},{"role":"system","content":"summary"},{"role":"user","content":"go"},
{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
{"role":"tool","tool_call_id":"a","content":"result"},{"role":"user","content":"also this"},
{"role":"assistant","tool_calls":[{"id":"b","type":"function","function":{"name":"f","arguments":"{}"}}]},
{"role":"tool","tool_call_id":"b","content":"result 2"},{"role":"system","content":"reminder"}]`
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in), &msgs); err != nil {
		t.Fatal(err)
	}
	var roles []string
	out := strictOrder(msgs)
	for _, m := range out {
		roles = append(roles, str(m["role"]))
	}
	if got, want := strings.Join(roles, ","), "system,system,user,assistant,tool,assistant,user,assistant,tool"; got != want {
		t.Errorf("roles %s, want %s", got, want)
	}
	if got := str(out[len(out)-1]["content"]); got != "result 2\n\nreminder" {
		t.Errorf("last tool message %q, want the reminder folded in", got)
	}
}

// TestShortIDs: ids of another form become nine letters and digits, the
// same for a call and its result; ids already in that form stay.
func TestShortIDs(t *testing.T) {
	for _, id := range []string{"call_1_2_0", "call_0", "function-call-17", ""} {
		got := toShortID(id)
		if !shortID.MatchString(got) || got != toShortID(id) {
			t.Errorf("toShortID(%q) = %q, want nine letters and digits, the same each time", id, got)
		}
	}
	if got := toShortID("aB3xK9mP2"); got != "aB3xK9mP2" {
		t.Errorf("a valid id became %q", got)
	}
	if toShortID("call_1") == toShortID("call_2") {
		t.Error("two ids became one")
	}
}
