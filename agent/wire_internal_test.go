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

// TestExtraStoredForm: an entry's Extra is stored as the JSON the server
// sent and read back the same; an entry or a checkpoint written before
// there was one reads with none.
func TestExtraStoredForm(t *testing.T) {
	x := &Extra{
		Message: map[string]json.RawMessage{"reasoning_content": json.RawMessage(`"first read the notes"`)},
		Calls:   []map[string]json.RawMessage{{"extra_content": json.RawMessage(`{"google":{"thought_signature":"c2ln"}}`)}, nil},
	}
	raw, err := json.Marshal(Entry{Extra: x})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"extra":{"message":{"reasoning_content":"first read the notes"},"calls":[{"extra_content":{"google":{"thought_signature":"c2ln"}}},null]}`; !strings.Contains(string(raw), want) {
		t.Errorf("stored entry %s, want it to hold %s", raw, want)
	}
	var back Entry
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(back); string(again) != string(raw) {
		t.Errorf("read back as %s, want %s", again, raw)
	}
	var old Entry
	var cp Checkpoint
	if err := json.Unmarshal([]byte(`{"message":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},"at":"2025-01-01T00:00:00Z"}`), &old); err != nil || old.Extra != nil {
		t.Errorf("an entry stored without extra reads with %+v (%v), want none", old.Extra, err)
	}
	if err := json.Unmarshal([]byte(`{"key":"web/x","state":"running","pending":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}}`), &cp); err != nil || cp.PendingExtra != nil || cp.Pending == nil {
		t.Errorf("a checkpoint stored without pending_extra reads with %+v, pending %v (%v), want the message and no extra", cp.PendingExtra, cp.Pending, err)
	}
}
