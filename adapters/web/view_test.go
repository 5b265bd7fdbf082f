package web

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/golden"
	"github.com/pinplan/pinplan/internal/plantest"
	"github.com/pinplan/pinplan/todo"
)

// TestViews: the page gets the words chat renders for every platform, in
// the API's answers and in the live events, next to the fields it had.
func TestViews(t *testing.T) {
	c, srv, _, st := newConsole(t, "")
	events := openEvents(t, srv.URL)
	th := chat.Thread{Platform: "web", Key: "web/abc", Channel: "web/abc", ThreadID: "abc"}
	items := []todo.Item{{Content: "one", Status: todo.Completed}, {Content: "two", Status: todo.InProgress}, {Content: "three", Status: todo.Pending}}
	p := chat.Plan{Items: items, Revision: 3, State: chat.StateStopped, StoppedBy: "ann", Updated: time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)}

	// The plan: its event and the thread's fetch.
	if err := c.EditPlan(context.Background(), th, chat.MessageRef{}, p); err != nil {
		t.Fatal(err)
	}
	ev := events.next("plan")
	var fetched struct {
		Thread struct {
			Plan        map[string]any `json:"plan"`
			Status      string         `json:"status"`
			StatusClass string         `json:"status_class"`
		} `json:"thread"`
		Cards []map[string]any `json:"cards"`
	}
	getJSON(t, srv.URL+"/api/threads/abc", &fetched)
	for name, plan := range map[string]map[string]any{"event": ev["plan"].(map[string]any), "fetch": fetched.Thread.Plan} {
		view, _ := plan["view"].(map[string]any)
		if view["title"] != "Plan · 1/3 done" || view["footer"] != p.Footer() || view["progress"] != "1/3 done" {
			t.Errorf("%s: plan view %v, want chat's title %q and footer %q", name, view, p.Title(), p.Footer())
		}
		if _, ok := view["stop"]; ok {
			t.Errorf("%s: a stopped plan has a Stop button: %v", name, view)
		}
		if plan["revision"] != 3.0 || plan["state"] != "stopped" || len(plan["items"].([]any)) != 3 {
			t.Errorf("%s: the plan's own fields are gone: %v", name, plan)
		}
	}
	if fetched.Thread.Status != "stopped" || fetched.Thread.StatusClass != "pill-stopped" {
		t.Errorf("thread status %q class %q, want stopped, pill-stopped", fetched.Thread.Status, fetched.Thread.StatusClass)
	}
	p.State, p.Stoppable = chat.StateWorking, true
	c.EditPlan(context.Background(), th, chat.MessageRef{}, p)
	stop, _ := events.next("plan")["plan"].(map[string]any)["view"].(map[string]any)["stop"].(map[string]any)
	if stop["label"] != chat.LabelStop || stop["id"] != chat.ButtonID(chat.ActionStop, "plan") {
		t.Errorf("Stop button %v, want %q sending %q", stop, chat.LabelStop, chat.ButtonID(chat.ActionStop, "plan"))
	}

	// The state event carries the pill's class.
	c.SetState(th, "waiting", string(chat.StateWaiting))
	if state := events.next("state"); state["status"] != "waiting for approval" || state["status_class"] != "pill-waiting" {
		t.Errorf("state event %v, want the status and pill-waiting", state)
	}

	// A card: open with chat's three buttons, then decided.
	card := chat.Card{ID: "c1", Tool: "fs__write", Server: "fs", Arguments: `{"path":"a"}`, Deadline: time.Date(2026, 9, 1, 12, 30, 0, 0, time.UTC)}
	c.PostCard(context.Background(), th, card)
	open := events.next("card")["card"].(map[string]any)
	view := open["view"].(map[string]any)
	var labels []string
	for _, b := range view["buttons"].([]any) {
		b := b.(map[string]any)
		labels = append(labels, b["label"].(string)+"="+b["id"].(string))
	}
	wantLabels := []string{chat.LabelAllow + "=pinplan:allow:c1", chat.LabelAlways + "=pinplan:always:c1", chat.LabelDeny + "=pinplan:deny:c1"}
	if strings.Join(labels, ",") != strings.Join(wantLabels, ",") || view["title"] != card.Title() || view["status"] != card.Status() || view["class"] != "open" {
		t.Errorf("open card view %v, want chat's title %q, status %q and buttons %q", view, card.Title(), card.Status(), wantLabels)
	}
	if open["tool"] != "fs__write" || open["arguments"] != `{"path":"a"}` {
		t.Errorf("the card's own fields are gone: %v", open)
	}
	card.Outcome, card.By, card.At = "Denied", "ann", time.Date(2026, 9, 1, 12, 10, 0, 0, time.UTC)
	c.EditCard(context.Background(), th, chat.MessageRef{}, card)
	view = events.next("card")["card"].(map[string]any)["view"].(map[string]any)
	if view["class"] != "denied" || view["status"] != "Denied by ann at 2026-09-01 12:10:00 UTC." || len(view["buttons"].([]any)) != 0 {
		t.Errorf("decided card view %v, want denied, chat's status and no buttons", view)
	}

	// The click's answer has the views too.
	var click map[string]any
	postJSON(t, srv.URL+"/api/threads/abc/click", `{"button":"pinplan:allow:c1"}`, &click)
	if cv, _ := click["card"].(map[string]any)["view"].(map[string]any); cv["class"] != "decided" || cv["status"] != "Allowed once by the console user." {
		t.Errorf("click answer %v, want the decided card's view", click)
	}

	// Stored revisions: their progress.
	st.mu.Lock()
	st.plans = []agent.PlanRevision{{Revision: 1, Items: items}}
	st.mu.Unlock()
	var revs []map[string]any
	getJSON(t, srv.URL+"/api/threads/abc/plans", &revs)
	if len(revs) != 1 || revs[0]["view"].(map[string]any)["progress"] != "1/3 done" || revs[0]["revision"] != 1.0 {
		t.Errorf("revisions %v, want revision 1 with its progress", revs)
	}
}

func TestPillClass(t *testing.T) {
	tests := []struct{ status, want string }{
		{"working", "pill-working"},
		{"resumed after restart", "pill-working"},
		{"waiting for approval", "pill-waiting"},
		{"done", "pill-done"},
		{"failed", "pill-failed"},
		{"stopped", "pill-stopped"},
		{"stopped at the round limit", "pill-stopped"},
		{"", "pill-idle"},
	}
	for _, tt := range tests {
		if got := pillClass(tt.status); got != tt.want {
			t.Errorf("pillClass(%q) = %q, want %q", tt.status, got, tt.want)
		}
	}
}

// TestStaticFiles: the page's runtime files are served, its tests and
// package.json are not, and every module app.js needs is embedded.
func TestStaticFiles(t *testing.T) {
	_, srv, _, _ := newConsole(t, "")
	get := func(path string) (int, string, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, _, page := get("/"); code != 200 || !strings.Contains(page, `<script type="module" src="/app.js"></script>`) {
		t.Errorf("GET /: %d, want the page loading app.js as a module", code)
	}
	for _, path := range []string{"/markdown.test.mjs", "/replay.test.mjs", "/package.json"} {
		if code, _, _ := get(path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404: only the runtime files are served", path, code)
		}
	}
	// Every import of every embedded module names an embedded module, so
	// the page loads whole.
	imports := regexp.MustCompile(`(?m)^\s*import\b[^;]*?from\s+"\./([\w.-]+)";`)
	mods, err := fs.Glob(static, "static/*.js")
	if err != nil || len(mods) < 5 {
		t.Fatalf("embedded modules %v, %v", mods, err)
	}
	for _, m := range mods {
		name := strings.TrimPrefix(m, "static/")
		if strings.Contains(name, ".test.") {
			t.Errorf("%s is embedded: tests are not served", m)
		}
		code, ctype, src := get("/" + name)
		if code != 200 || !strings.HasPrefix(ctype, "text/javascript") && !strings.HasPrefix(ctype, "application/javascript") {
			t.Errorf("GET /%s: %d %s, want a JavaScript module", name, code, ctype)
		}
		for _, imp := range imports.FindAllStringSubmatch(src, -1) {
			if _, err := fs.Stat(static, "static/"+imp[1]); err != nil {
				t.Errorf("%s imports %s, which is not embedded", name, imp[1])
			}
		}
	}
}

var evidenceAt = time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)

func typicalEvidence() chat.Plan   { return plantest.TypicalEvidence(evidenceAt, plantest.WebText) }
func worstCaseEvidence() chat.Plan { return plantest.WorstCaseEvidence(evidenceAt, plantest.WebText) }

// TestEvidenceViewGolden: the page gets each item's evidence line in the
// view, in item order, and the calls behind it once, in the plan's own
// evidence. The typical plan is kept whole; the worst case's view only
// (its 2,500 calls are the plan's own fields, checked below).
func TestEvidenceViewGolden(t *testing.T) {
	typical, err := json.MarshalIndent(viewPlan(ptr(typicalEvidence())), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "typical_evidence.json"), typical)

	worst := worstCaseEvidence()
	v := viewPlan(&worst)
	view, err := json.MarshalIndent(v.View, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "worst_case_evidence.json"), view)
	if len(v.View.Items) != len(worst.Items) {
		t.Fatalf("%d item views for %d items", len(v.View.Items), len(worst.Items))
	}
	for i, it := range worst.Items {
		if got, want := v.View.Items[i].Evidence, worst.EvidenceLine(it); got != want || !strings.HasPrefix(got, "↳ ") {
			t.Errorf("item %d: evidence %q, want chat's %q", i+1, got, want)
		}
	}

	// The calls reach the page whole: every kept call with its fields,
	// and the count beyond.
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Items    []todo.Item `json:"items"`
		Evidence map[string]struct {
			Calls []map[string]any `json:"calls"`
			More  int              `json:"more"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatal(err)
	}
	for i, it := range page.Items {
		ie := page.Evidence[it.Content]
		if len(ie.Calls) != 50 || ie.More != 2+i {
			t.Fatalf("item %d: %d calls and %d more, want 50 and %d", i+1, len(ie.Calls), ie.More, 2+i)
		}
		for _, k := range []string{"tool", "server", "outcome", "start", "duration", "args"} {
			if _, ok := ie.Calls[0][k]; !ok {
				t.Fatalf("item %d: a call without %s: %v", i+1, k, ie.Calls[0])
			}
		}
	}
}

// TestRevisionEvidence: each stored revision carries its items' evidence
// lines, as of that revision, beside its own evidence.
func TestRevisionEvidence(t *testing.T) {
	_, srv, _, st := newConsole(t, "")
	p := typicalEvidence()
	early := []todo.Item{{Content: "Read the failing test", Status: todo.InProgress}, {Content: "Check the old notes", Status: todo.Pending}}
	st.mu.Lock()
	st.plans = []agent.PlanRevision{
		{Revision: 1, Items: early, Evidence: agent.Evidence{"Read the failing test": {Calls: p.Evidence["Read the failing test"].Calls[:1]}}},
		{Revision: 2, Items: p.Items, Evidence: p.Evidence},
	}
	st.mu.Unlock()
	var revs []struct {
		Evidence agent.Evidence `json:"evidence"`
		View     struct {
			Items []struct {
				Evidence string `json:"evidence"`
			} `json:"items"`
		} `json:"view"`
	}
	getJSON(t, srv.URL+"/api/threads/abc/plans", &revs)
	lines := func(i int) []string {
		var out []string
		for _, it := range revs[i].View.Items {
			out = append(out, it.Evidence)
		}
		return out
	}
	if len(revs) != 2 {
		t.Fatalf("%d revisions, want 2", len(revs))
	}
	if got, want := lines(0), []string{"↳ fs__read_text_file", ""}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("revision 1: evidence %q, want %q", got, want)
	}
	want := []string{"↳ fs__read_text_file ×2, fs__search_files", "↳ no tool activity", "↳ fs__write_file (denied), fs__read_text_file (error)", ""}
	if got := lines(1); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("revision 2: evidence %q, want %q", got, want)
	}
	if c := revs[1].Evidence["Fix the parser <edge case>"].Calls; len(c) != 2 || c[0].Approver != "ann" {
		t.Errorf("revision 2's own evidence: %+v", c)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCardClass: a card's class says how it was closed; a card closed by
// Stop (its call never ran) is neither allowed nor denied.
func TestCardClass(t *testing.T) {
	tests := []struct {
		name, outcome, want string
	}{
		{"open", "", "open"},
		{"allowed once", "Allowed once", "decided"},
		{"always allowed", "Always allowed here", "decided"},
		{"denied", "Denied", "denied"},
		{"timed out", "Denied: no decision in time", "denied"},
		{"stopped", "Not run: the turn was stopped", "stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := viewCard(&chat.Card{ID: "c1", Tool: "t", Outcome: tt.outcome}).View.Class; got != tt.want {
				t.Errorf("class of a card %q: got %q, want %q", tt.outcome, got, tt.want)
			}
		})
	}
}

// TestMirrorCards: the cards of a session held by another replica show
// live as its records change (each card new or changed once), and a
// fetch of the thread lists what the records hold.
func TestMirrorCards(t *testing.T) {
	c, srv, _, _ := newConsole(t, "")
	events := openEvents(t, srv.URL)
	th := chat.Thread{Platform: "web", Key: "web/abc"}
	open := chat.Card{ID: "c1", Tool: "fs__write", Deadline: time.Date(2026, 9, 1, 12, 30, 0, 0, time.UTC)}
	c.MirrorCards(th, []chat.Card{open})
	if card := events.next("card")["card"].(map[string]any); card["id"] != "c1" || card["view"].(map[string]any)["class"] != "open" {
		t.Errorf("card event %v, want the open card c1", card)
	}
	decided := open
	decided.Outcome, decided.By = "Allowed once", "ann"
	other := chat.Card{ID: "c2", Tool: "fs__read", Deadline: open.Deadline.Add(time.Minute)}
	c.MirrorCards(th, []chat.Card{decided, other}) // c1 changed, c2 new
	got := map[string]string{}
	for range 2 {
		card := events.next("card")["card"].(map[string]any)
		got[card["id"].(string)] = card["view"].(map[string]any)["class"].(string)
	}
	if got["c1"] != "decided" || got["c2"] != "open" {
		t.Errorf("card events %v, want c1 decided and c2 open", got)
	}
	c.MirrorCards(th, []chat.Card{decided, other}) // nothing changed: no event
	c.SetState(th, "running", string(chat.StateWorking))
	if ev := events.nextAny(); ev["type"] != "state" {
		t.Errorf("after the same cards again: %v, want no card event before the state", ev)
	}
	c.mu.Lock()
	n := len(c.cards[th.Key])
	c.mu.Unlock()
	if n != 2 {
		t.Errorf("the console holds %d cards of the thread, want the records' 2", n)
	}
}

// nextAny is the next event, of any type.
func (s *eventStream) nextAny() map[string]any {
	s.t.Helper()
	timer := time.AfterFunc(5*time.Second, func() { s.body.Close() })
	defer timer.Stop()
	for s.sc.Scan() {
		if data, ok := strings.CutPrefix(s.sc.Text(), "data: "); ok {
			var e map[string]any
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				s.t.Fatalf("event %s: %v", data, err)
			}
			return e
		}
	}
	s.t.Fatalf("no event within 5 s")
	return nil
}
