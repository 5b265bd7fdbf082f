package todo

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
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
		// Snapshot is the canonical text the call yields; Count, when set,
		// is its number of items. A vector gives at least one of them.
		Snapshot string `json:"snapshot"`
		Count    *int   `json:"count"`
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
			if v.Snapshot == "" && v.Count == nil {
				t.Fatal("vector gives neither snapshot nor count")
			}
			if v.Snapshot != "" && snap.String() != v.Snapshot {
				t.Errorf("snapshot = %s, want %s", snap.String(), v.Snapshot)
			}
			if v.Count != nil && snap.Len() != *v.Count {
				t.Errorf("items = %d, want %d", snap.Len(), *v.Count)
			}
			// Every submitted item is kept, in order, its content trimmed,
			// whether or not the vector spells out the snapshot text.
			var plain struct{ Todos []Item }
			if err := json.Unmarshal([]byte(v.Arguments), &plain); err != nil {
				t.Fatalf("vector arguments: %v", err)
			}
			for i := range plain.Todos {
				plain.Todos[i].Content = TrimSpace(plain.Todos[i].Content)
			}
			if want := Encode(plain.Todos); snap.String() != want {
				t.Errorf("snapshot = %s, want %s", snap.String(), want)
			}
			if got := tr.Snapshot().String(); got != snap.String() {
				t.Errorf("tracker snapshot = %s, want %s", got, snap.String())
			}
			if tr.Revision() != 8 || tr.Stale() != 2 {
				t.Errorf("revision, stale = %d, %d; want 8, 2", tr.Revision(), tr.Stale())
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

func TestParseArgumentErrors(t *testing.T) {
	item := func(content, status string) string {
		return `{"content":"` + content + `","status":"` + status + `"}`
	}
	long := strings.Repeat("x", 1001)
	tests := []struct {
		name, args, code, message string
	}{
		{
			name:    "todos repeated",
			args:    `{"todos":[` + item("a", "pending") + `],"todos":[]}`,
			code:    CodeInvalidArguments,
			message: `arguments: key "todos" repeated`,
		},
		{
			name:    "content repeated",
			args:    `{"todos":[{"content":"a","content":"b","status":"pending"}]}`,
			code:    CodeInvalidArguments,
			message: `todos[0]: key "content" repeated`,
		},
		{
			name:    "status repeated",
			args:    `{"todos":[` + item("a", "pending") + `,{"content":"b","status":"pending","status":"completed"}]}`,
			code:    CodeInvalidArguments,
			message: `todos[1]: key "status" repeated`,
		},
		{
			name:    "unknown key repeated",
			args:    `{"todos":[` + item("a", "pending") + `],"x":1,"x":2}`,
			code:    CodeInvalidArguments,
			message: `arguments: key "x" repeated`,
		},
		{
			name:    "key repeated in an extra object",
			args:    `{"todos":[{"content":"a","status":"pending","x":{"y":1,"y":1}}]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].x: key "y" repeated`,
		},
		{
			name:    "key repeated through different escapes",
			args:    `{"todos":[{"content":"a","status":"pending","st\u0061tus":"completed"}]}`,
			code:    CodeInvalidArguments,
			message: `todos[0]: key "status" repeated`,
		},
		{
			name:    "todos huge number",
			args:    `{"todos":1e400}`,
			code:    CodeInvalidArguments,
			message: `todos: expected an array, got a number`,
		},
		{
			name:    "status huge number",
			args:    `{"todos":[{"content":"a","status":1e400}]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].status: expected a string, got a number`,
		},
		{
			name:    "content huge negative number",
			args:    `{"todos":[{"content":-1e400,"status":"pending"}]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: expected a string, got a number`,
		},
		{
			name:    "item huge number",
			args:    `{"todos":[` + item("a", "pending") + `,1E+999999999]}`,
			code:    CodeInvalidArguments,
			message: `todos[1]: expected an object, got a number`,
		},
		{
			name:    "arguments huge number",
			args:    ` 1e400 `,
			code:    CodeInvalidArguments,
			message: `arguments: expected an object, got a number`,
		},
		{
			name:    "lone high surrogate",
			args:    `{"todos":[` + item(`a\ud800`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \ud800; expected a string of valid Unicode`,
		},
		{
			name:    "lone low surrogate",
			args:    `{"todos":[` + item(`\udc00b`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \udc00; expected a string of valid Unicode`,
		},
		{
			name:    "high surrogate upper case before a letter escape",
			args:    `{"todos":[` + item(`\uD83D\u0041`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \uD83D; expected a string of valid Unicode`,
		},
		{
			name:    "two high surrogates",
			args:    `{"todos":[` + item(`\ud83d\ud83d\ude00`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \ud83d; expected a string of valid Unicode`,
		},
		{
			name:    "low before high",
			args:    `{"todos":[` + item(`\ude00\ud83d`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \ude00; expected a string of valid Unicode`,
		},
		{
			name:    "high surrogate then literal text",
			args:    `{"todos":[` + item(`\ud83dude00`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \ud83d; expected a string of valid Unicode`,
		},
		{
			name:    "escaped backslash then lone surrogate",
			args:    `{"todos":[` + item(`\\\ud800`, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \ud800; expected a string of valid Unicode`,
		},
		{
			name:    "lone surrogate with white space between tokens",
			args:    "{ \"todos\" :\n[ { \"status\" : \"pending\" ,\t\"content\"\r\n:  \"\\\"\\ud800\" } ] }",
			code:    CodeInvalidArguments,
			message: `todos[0].content: lone surrogate escape \ud800; expected a string of valid Unicode`,
		},
		{
			name:    "lone surrogate in status",
			args:    `{"todos":[` + item("a", `pending\udfff`) + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].status: lone surrogate escape \udfff; expected a string of valid Unicode`,
		},
		{
			name:    "lone surrogate in a key",
			args:    `{"todos":[{"content":"a","status":"pending","\udbff":1}]}`,
			code:    CodeInvalidArguments,
			message: `todos[0]: a key has a lone surrogate escape \udbff; expected a string of valid Unicode`,
		},
		{
			name:    "lone surrogate in an unknown value",
			args:    `{"todos":[],"note":["\ud800"]}`,
			code:    CodeInvalidArguments,
			message: `note[0]: lone surrogate escape \ud800; expected a string of valid Unicode`,
		},
		{
			name:    "content too long",
			args:    `{"todos":[` + item("a", "pending") + `,` + item(long, "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[1].content: expected at most 1000 characters after trimming white space, got 1001`,
		},
		{
			name:    "content too long in code points",
			args:    `{"todos":[` + item(strings.Repeat(`\ud83d\ude00`, 1001), "pending") + `]}`,
			code:    CodeInvalidArguments,
			message: `todos[0].content: expected at most 1000 characters after trimming white space, got 1001`,
		},
		{
			name: "trailing data",
			args: `{"todos":[]} {}`,
			code: CodeInvalidJSON,
		},
		{
			name: "huge number then trailing data",
			args: `{"todos":1e400}]`,
			code: CodeInvalidJSON,
		},
		{
			name: "malformed",
			args: `{"todos":[1e400,]}`,
			code: CodeInvalidJSON,
		},
		{
			name: "repeated key in malformed JSON",
			args: `{"todos":[],"todos":[]`,
			code: CodeInvalidJSON,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := Parse(tt.args)
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("Parse error = %v (%d items), want *Error", err, len(items))
			}
			if te.Code != tt.code {
				t.Errorf("code = %q, want %q (%s)", te.Code, tt.code, te.Message)
			}
			if tt.message != "" && te.Message != tt.message {
				t.Errorf("message = %s, want %s", te.Message, tt.message)
			}
		})
	}
}

func TestParseAcceptsEdgeCases(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"escaped backslash before u", `\\ud800`, `\ud800`},
		{"escaped backslashes before u", `\\\\udc00\\`, `\\udc00\`},
		{"escaped quote before u", `\"\u0041\"`, `"A"`},
		{"surrogate pair", `\ud83d\ude00`, "\U0001F600"},
		{"surrogate pair upper case", `\uD83D\uDE00!`, "\U0001F600!"},
		{"escaped backslash then pair", `\\\ud83d\ude00`, "\\\U0001F600"},
		{"BMP escapes", `\u00e9\uFFFF\uD7FF\uE000`, "\u00e9\uffff\ud7ff\ue000"},
		{"longest content", strings.Repeat("x", 1000), strings.Repeat("x", 1000)},
		{"longest content after trimming", ` \u3000` + strings.Repeat("x", 1000) + `\n\ufeff`, strings.Repeat("x", 1000)},
		{"longest content in code points", strings.Repeat(`\ud83d\ude00`, 1000), strings.Repeat("\U0001F600", 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := Parse(`{"todos":[{"content":"` + tt.content + `","status":"pending"}]}`)
			if err != nil {
				t.Fatalf("Parse error = %v, want nil", err)
			}
			if len(items) != 1 || items[0].Content != tt.want {
				t.Errorf("items = %q, want content %q", items, tt.want)
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
	want := `{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object","properties":{"content":{"type":"string","minLength":1,"maxLength":1000},"status":{"type":"string","enum":["pending","in_progress","completed"]}},"required":["content","status"],"additionalProperties":false},"maxItems":50}},"required":["todos"],"additionalProperties":false}`
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
			if TrimSpace(it.Content) != it.Content || it.Content == "" || !slices.Contains(Statuses(), it.Status) {
				t.Fatalf("accepted bad item %+v", it)
			}
		}
	})
}
