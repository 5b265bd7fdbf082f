package todo

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type argumentVectors struct {
	Rejected []struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Error     string `json:"error"`
	} `json:"rejected"`
	Accepted []struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Snapshot  string `json:"snapshot"`
	} `json:"accepted"`
}

type snapshotVector struct {
	Name     string `json:"name"`
	Todos    []Item `json:"todos"`
	Snapshot string `json:"snapshot"`
}

func readJSON(tb testing.TB, name string, v any) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
}

func TestSnapshotVectors(t *testing.T) {
	var vecs []snapshotVector
	readJSON(t, "snapshot_vectors.json", &vecs)
	if len(vecs) == 0 {
		t.Fatal("no snapshot vectors")
	}
	for _, v := range vecs {
		t.Run(v.Name, func(t *testing.T) {
			if got := Encode(v.Todos); got != v.Snapshot {
				t.Errorf("Encode = %s, want %s", got, v.Snapshot)
			}
			if got := NewSnapshot(v.Todos).String(); got != v.Snapshot {
				t.Errorf("Snapshot.String = %s, want %s", got, v.Snapshot)
			}
		})
	}
}

func TestArgumentVectors(t *testing.T) {
	var vecs argumentVectors
	readJSON(t, "arguments_vectors.json", &vecs)
	if len(vecs.Rejected) == 0 || len(vecs.Accepted) == 0 {
		t.Fatal("no argument vectors")
	}
	seed := `{"todos":[{"content":"before","status":"in_progress"}]}`
	for _, v := range vecs.Rejected {
		t.Run("rejected/"+v.Name, func(t *testing.T) {
			tr := &Tracker{}
			if _, err := tr.Write(seed); err != nil {
				t.Fatal(err)
			}
			tr.EndRound([]string{"other"})
			before, rev, stale := tr.Snapshot().String(), tr.Revision(), tr.Stale()
			_, err := tr.Write(v.Arguments)
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("Write(%q) error = %v, want *Error", v.Arguments, err)
			}
			if te.Code != v.Error {
				t.Errorf("code = %q, want %q (%s)", te.Code, v.Error, te.Message)
			}
			if te.Message == "" {
				t.Error("empty message")
			}
			if got := tr.Snapshot().String(); got != before {
				t.Errorf("snapshot after rejection = %s, want %s", got, before)
			}
			if tr.Revision() != rev || tr.Stale() != stale {
				t.Errorf("revision, stale = %d, %d; want %d, %d", tr.Revision(), tr.Stale(), rev, stale)
			}
		})
	}
	for _, v := range vecs.Accepted {
		t.Run("accepted/"+v.Name, func(t *testing.T) {
			tr := Restore([]Item{{Content: "old", Status: Pending}}, 7, 2)
			snap, err := tr.Write(v.Arguments)
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if v.Snapshot == "" { // the vector only says it is accepted
				return
			}
			if got := snap.String(); got != v.Snapshot {
				t.Errorf("snapshot = %s, want %s", got, v.Snapshot)
			}
			if tr.Revision() != 8 {
				t.Errorf("revision = %d, want 8", tr.Revision())
			}
		})
	}
}

func TestErrorMessagesNamePath(t *testing.T) {
	tests := []struct {
		name, args, want string
	}{
		{"status", `{"todos":[{"content":"a","status":"pending"},{"content":"b","status":"done"}]}`, "todos[1].status"},
		{"content", `{"todos":[{"content":"\u3000\ufeff","status":"pending"}]}`, "todos[0].content"},
		{"missing", `{"todos":[{"status":"pending"}]}`, "todos[0].content"},
		{"extra", `{"todos":[{"content":"a","status":"pending","x":1}]}`, `"x"`},
		{"too many", `{"todos":[` + strings.Repeat(`{"content":"a","status":"pending"},`, 50) + `{"content":"a","status":"pending"}]}`, "at most 50"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want it to mention %s", err, tt.want)
			}
		})
	}
}

func TestTrimSpaceIsECMAScript(t *testing.T) {
	tests := []struct{ in, want string }{
		{"\u00a0\u2028x\u2029\u205f", "x"},
		{"\ufeff x \u3000", "x"},
		{"\u0085x\u0085", "\u0085x\u0085"}, // NEL is not ECMAScript white space
		{"\u200bx", "\u200bx"},             // nor is the zero-width space
		{"\u2000\u200ax", "x"},
	}
	for _, tt := range tests {
		if got := TrimSpace(tt.in); got != tt.want {
			t.Errorf("TrimSpace(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestEncodeControlAndHTML(t *testing.T) {
	got := Encode([]Item{{Content: "<a&b>\b\x01\x7f\U0001F600", Status: Pending}})
	want := `{"todos":[{"content":"<a&b>\b\u0001` + "\x7f" + `\ud83d\ude00","status":"pending"}]}`
	if got != want {
		t.Errorf("Encode = %s, want %s", got, want)
	}
}

func TestSnapshotCannotBeChanged(t *testing.T) {
	items := []Item{{Content: "a", Status: Pending}}
	tr := Restore(items, 1, 0)
	items[0].Content = "changed by caller"
	snap := tr.Snapshot()
	got := snap.Items()
	got[0].Status = Completed
	if s := tr.Snapshot().String(); s != `{"todos":[{"content":"a","status":"pending"}]}` {
		t.Errorf("tracker snapshot changed through returned values: %s", s)
	}
}

func TestStaleRounds(t *testing.T) {
	tr := &Tracker{}
	var reminded []bool
	rounds := [][]string{{"read"}, {"read", "grep", "read"}, {"read"}, nil, {"read"}, {ToolName, "read"}, {"read"}}
	for _, r := range rounds {
		reminded = append(reminded, tr.TakeReminder(3))
		tr.EndRound(r)
	}
	want := []bool{false, false, false, true, false, false, false}
	for i := range want {
		if reminded[i] != want[i] {
			t.Fatalf("reminders = %v, want %v", reminded, want)
		}
	}
	if tr.Stale() != 1 {
		t.Errorf("stale = %d, want 1", tr.Stale())
	}
}

func TestSchemaJSON(t *testing.T) {
	b, err := json.Marshal(ArgumentsSchema())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object","properties":{"content":{"type":"string","minLength":1},"status":{"type":"string","enum":["pending","in_progress","completed"]}},"required":["content","status"],"additionalProperties":false},"maxItems":50}},"required":["todos"],"additionalProperties":false}`
	if string(b) != want {
		t.Errorf("schema = %s\nwant %s", b, want)
	}
}

func FuzzParse(f *testing.F) {
	var vecs argumentVectors
	readJSON(f, "arguments_vectors.json", &vecs)
	for _, v := range vecs.Rejected {
		f.Add(v.Arguments)
	}
	for _, v := range vecs.Accepted {
		f.Add(v.Arguments)
	}
	f.Fuzz(func(t *testing.T, args string) {
		tr := Restore([]Item{{Content: "keep", Status: InProgress}}, 3, 1)
		snap, err := tr.Write(args)
		if err != nil {
			var te *Error
			if !errors.As(err, &te) || (te.Code != CodeInvalidJSON && te.Code != CodeInvalidArguments) {
				t.Fatalf("error %v is not a coded *Error", err)
			}
			if tr.Revision() != 3 || tr.Snapshot().String() != `{"todos":[{"content":"keep","status":"in_progress"}]}` {
				t.Fatalf("rejected input changed the tracker")
			}
			return
		}
		if tr.Revision() != 4 || snap.Len() > MaxItems {
			t.Fatalf("accepted: revision %d, %d items", tr.Revision(), snap.Len())
		}
		// The canonical text is itself valid arguments and round-trips.
		again, err := Parse(snap.String())
		if err != nil {
			t.Fatalf("canonical snapshot %s rejected: %v", snap, err)
		}
		if Encode(again) != snap.String() {
			t.Fatalf("round trip changed the snapshot")
		}
		for _, it := range snap.Items() {
			if TrimSpace(it.Content) != it.Content || it.Content == "" || !it.Status.Valid() {
				t.Fatalf("accepted bad item %+v", it)
			}
		}
	})
}
