package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// steeredPlan is a plan a person changed: "Tag the release" skipped by
// ann (shown struck where it was), "Write the notes" added by bob.
func steeredPlan() chat.Plan {
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	return chat.Plan{
		Items: []todo.Item{
			{Content: "Check the branch", Status: todo.Completed},
			{Content: "Tag the release", Status: chat.Skipped},
			{Content: "Write the notes", Status: todo.Pending},
			{Content: "Publish", Status: todo.InProgress},
		},
		Marks: []agent.Mark{
			{Action: agent.SteerSkip, Item: "Tag the release", After: "Check the branch", By: "ann", At: at},
			{Action: agent.SteerAdd, Item: "Write the notes", By: "bob", At: at, Owed: true},
		},
		Revision: 4, State: chat.StateWaiting, Updated: at,
	}
}

// TestItemControls: each item of a steerable plan carries the controls
// chat offers on it, with chat's labels and the ids chat reads back
// (chat.ItemButton); a skipped item is struck, with its mark and who
// skipped it. A plan the agent has not written (revision 0) and a
// stored revision offer none.
func TestItemControls(t *testing.T) {
	p := steeredPlan()
	v := viewPlan(&p)
	want := [][]string{
		{chat.ActionReopen, chat.ActionAdd},
		{chat.ActionReopen, chat.ActionAdd},
		{chat.ActionSkip, chat.ActionAdd},
		{chat.ActionSkip, chat.ActionAdd},
	}
	labels := map[string]string{chat.ActionSkip: chat.LabelSkip, chat.ActionReopen: chat.LabelReopen, chat.ActionAdd: chat.LabelAdd}
	for i, it := range p.Items {
		iv := v.View.Items[i]
		var got []string
		for _, c := range iv.Controls {
			got = append(got, c.Action)
			if c.ID != chat.ItemButton(c.Action, p, it) || c.Label != labels[c.Action] || c.Style == "" {
				t.Errorf("item %d (%s): control %+v, want id %q, label %q and a style", i+1, it.Content, c, chat.ItemButton(c.Action, p, it), labels[c.Action])
			}
		}
		if strings.Join(got, ",") != strings.Join(want[i], ",") || strings.Join(p.Actions(it), ",") != strings.Join(want[i], ",") {
			t.Errorf("item %d (%s): controls %v, want chat's %v", i+1, it.Content, got, p.Actions(it))
		}
	}
	skipped := v.View.Items[1]
	if skipped.Mark != chat.MarkSkipped || skipped.Evidence != "↳ skipped by ann" || !skipped.Struck {
		t.Errorf("skipped item's view %+v, want mark %s, \"↳ skipped by ann\", struck", skipped, chat.MarkSkipped)
	}
	if added := v.View.Items[2]; added.Evidence != "↳ added by bob" || added.Struck {
		t.Errorf("added item's view %+v, want \"↳ added by bob\", not struck", added)
	}
	if !v.View.Items[0].Struck || v.View.Items[3].Struck {
		t.Errorf("struck: done %t, in progress %t; want only the done one", v.View.Items[0].Struck, v.View.Items[3].Struck)
	}
	if v.View.Title != "Plan · 1/3 done" {
		t.Errorf("title %q: a skipped item is not the agent's to do", v.View.Title)
	}

	// The page reads them under plan.view.items[i].controls.
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Marks []map[string]any `json:"marks"`
		View  struct {
			Items []struct {
				Controls []map[string]string `json:"controls"`
				Struck   bool                `json:"struck"`
			} `json:"items"`
		} `json:"view"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		t.Fatal(err)
	}
	if c := page.View.Items[3].Controls; len(c) != 2 || c[0]["id"] != chat.ItemButton(chat.ActionSkip, p, p.Items[3]) || c[0]["action"] != "skip" || c[0]["label"] != "Skip" {
		t.Errorf("the page gets controls %v", c)
	}
	if len(page.Marks) != 2 || !page.View.Items[1].Struck {
		t.Errorf("the page gets marks %v and struck %t", page.Marks, page.View.Items[1].Struck)
	}

	// None before the agent wrote the plan, and none in the history.
	unwritten := chat.Plan{Items: p.Items[:1]}
	for _, iv := range viewPlan(&unwritten).View.Items {
		if len(iv.Controls) != 0 {
			t.Errorf("a plan of revision 0 offers %v", iv.Controls)
		}
	}
	for _, iv := range viewRevision(agent.PlanRevision{Revision: 4, Items: []todo.Item{{Content: "Publish", Status: todo.Pending}}}).View.Items {
		if len(iv.Controls) != 0 {
			t.Errorf("a stored revision offers %v", iv.Controls)
		}
	}
}

// TestItemControlsBidi: an item whose text has bidirectional controls
// is shown without them, yet its controls name it as chat knows it, and
// its line still says who changed it.
func TestItemControlsBidi(t *testing.T) {
	content := "Tag \u202ethe\u202c release"
	p := chat.Plan{Items: []todo.Item{{Content: "Check", Status: todo.Pending}, {Content: content, Status: chat.Skipped}}, Revision: 2,
		Marks: []agent.Mark{{Action: agent.SteerSkip, Item: content, After: "Check", By: "\u202eann"}}}
	v := viewPlan(&p)
	iv := v.View.Items[1]
	if v.Items[1].Content != "Tag the release" {
		t.Errorf("shown text %q, want it without bidi controls", v.Items[1].Content)
	}
	if len(iv.Controls) == 0 || iv.Controls[0].ID != chat.ItemButton(chat.ActionReopen, p, p.Items[1]) {
		t.Errorf("controls %+v, want Reopen with chat's id for the item as chat holds it", iv.Controls)
	}
	if iv.Evidence != "↳ skipped by ann" {
		t.Errorf("line %q, want \"↳ skipped by ann\"", iv.Evidence)
	}
}

// TestClickText: a press carries the new item's text to the router as
// Click.Text, and the answer's private note back; a text over
// todo.MaxContentLength characters (as the agent counts them, trimmed)
// is refused with 422 and nothing is pressed; a body past the bound is
// 413.
func TestClickText(t *testing.T) {
	_, srv, h, _ := newConsole(t, "")
	h.answer = func(c chat.Click) chat.ClickResult {
		return chat.ClickResult{Private: "You added “" + c.Text + "”."}
	}
	button := chat.ButtonID(chat.ActionAdd, "4.0123456789ab")
	body := func(text string) string {
		b, _ := json.Marshal(map[string]string{"button": button, "text": text})
		return string(b)
	}
	var res map[string]any
	if code := postJSON(t, srv.URL+"/api/threads/abc/click", body("Write the notes"), &res); code != http.StatusOK || res["private"] != "You added “Write the notes”." {
		t.Errorf("add: %d %v, want 200 and the private note", code, res)
	}
	if len(h.clicks) != 1 || h.clicks[0].Text != "Write the notes" || h.clicks[0].Button != button || h.clicks[0].UserName != "the console user" {
		t.Fatalf("clicks %+v, want the Add with its text", h.clicks)
	}

	// The longest item, in characters outside the BMP: 4,000 bytes of
	// text, 12,000 as JSON escapes it.
	longest := strings.Repeat("😀", todo.MaxContentLength)
	escaped, _ := json.Marshal(map[string]string{"button": button, "text": longest})
	escapedBody := strings.ReplaceAll(string(escaped), "😀", `\ud83d\ude00`)
	if code := postJSON(t, srv.URL+"/api/threads/abc/click", escapedBody, &res); code != http.StatusOK {
		t.Errorf("the longest item, escaped (%d bytes): %d %v, want 200", len(escapedBody), code, res)
	}
	if code := postJSON(t, srv.URL+"/api/threads/abc/click", body("  "+longest+"\n"), &res); code != http.StatusOK {
		t.Errorf("the longest item with spaces around: %d %v, want 200 (trimmed, as the agent counts)", code, res)
	}
	n := len(h.clicks)

	res = nil
	if code := postJSON(t, srv.URL+"/api/threads/abc/click", body(longest+"x"), &res); code != http.StatusUnprocessableEntity || res["error"] != "the new item is 1001 characters long; the most is 1000" {
		t.Errorf("an item of 1,001 characters: %d %v, want 422 with the limit", code, res)
	}
	res = nil
	if code := postJSON(t, srv.URL+"/api/threads/abc/click", body(strings.Repeat("x", 20000)), &res); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 20 KB body: %d %v, want 413", code, res)
	}
	if len(h.clicks) != n {
		t.Errorf("refused presses reached the router: %+v", h.clicks[n:])
	}

	// Without text, as before: a card's or Stop's button.
	if code := postJSON(t, srv.URL+"/api/threads/abc/click", `{"button":"pinplan:stop:plan"}`, &res); code != http.StatusOK || h.clicks[len(h.clicks)-1].Text != "" {
		t.Errorf("a press without text: %d, click %+v", code, h.clicks[len(h.clicks)-1])
	}
}

// TestInfoNamesSkipped: the page knows a skipped item's mark and name,
// and the longest item an Add control takes.
func TestInfoNamesSkipped(t *testing.T) {
	_, srv, _, _ := newConsole(t, "")
	var info struct {
		Marks     map[string]string `json:"marks"`
		Names     map[string]string `json:"status_names"`
		ItemChars int               `json:"item_chars"`
	}
	getJSON(t, srv.URL+"/api/info", &info)
	if info.Marks["skipped"] != chat.MarkSkipped || info.Names["skipped"] != "skipped" || info.ItemChars != todo.MaxContentLength {
		t.Errorf("info %+v, want the skipped mark and name and %d", info, todo.MaxContentLength)
	}
}

// TestSteeredPlanEvent: a steered plan's live event and the thread's
// fetch carry the controls and the skipped item's line alike.
func TestSteeredPlanEvent(t *testing.T) {
	c, srv, _, _ := newConsole(t, "")
	events := openEvents(t, srv.URL)
	th := chat.Thread{Platform: "web", Key: "web/abc", Channel: "web/abc", ThreadID: "abc"}
	p := steeredPlan()
	if err := c.EditPlan(context.Background(), th, chat.MessageRef{}, p); err != nil {
		t.Fatal(err)
	}
	ev := events.next("plan")["plan"].(map[string]any)
	var fetched struct {
		Thread struct {
			Plan map[string]any `json:"plan"`
		} `json:"thread"`
	}
	getJSON(t, srv.URL+"/api/threads/abc", &fetched)
	for name, plan := range map[string]map[string]any{"event": ev, "fetch": fetched.Thread.Plan} {
		items := plan["view"].(map[string]any)["items"].([]any)
		second := items[1].(map[string]any)
		controls, _ := second["controls"].([]any)
		if second["evidence"] != "↳ skipped by ann" || second["struck"] != true || len(controls) != 2 ||
			controls[0].(map[string]any)["id"] != chat.ItemButton(chat.ActionReopen, p, p.Items[1]) {
			t.Errorf("%s: the skipped item's view %v", name, second)
		}
	}
}

// TestSteerHistory: the history names the person behind a revision they
// made, and the thread does not show the entry that told the model of
// it as a message someone wrote (the plan shows the change).
func TestSteerHistory(t *testing.T) {
	_, srv, _, st := newConsole(t, "")
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	items := []todo.Item{{Content: "Check", Status: todo.InProgress}, {Content: "Tag", Status: todo.Pending}}
	st.mu.Lock()
	st.plans = []agent.PlanRevision{
		{Revision: 1, Items: items, ToolCallID: "call_1"},
		{Revision: 2, Items: items[:1], Change: &agent.Steer{Action: agent.SteerSkip, Item: "Tag", By: "ann"}},
		{Revision: 3, Items: append(items[:1:1], todo.Item{Content: "Write \u202enotes", Status: todo.Pending}), Change: &agent.Steer{Action: agent.SteerAdd, Item: "Check", Text: "Write \u202enotes", By: "bob"}},
	}
	st.hist = []agent.Entry{
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "ship it"}, At: at},
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "[plan change] ann skipped \"Tag\" on the plan."}, At: at.Add(time.Second), Steer: true},
		{Message: openai.ChatCompletionMessage{Role: "assistant", Content: "Done."}, At: at.Add(2 * time.Second)},
	}
	st.mu.Unlock()
	var revs []struct {
		View struct {
			Change string `json:"change"`
		} `json:"view"`
	}
	getJSON(t, srv.URL+"/api/threads/abc/plans", &revs)
	var got []string
	for _, r := range revs {
		got = append(got, r.View.Change)
	}
	if want := []string{"", "Skipped by ann: Tag", "Added by bob: Write notes"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("history changes %q, want %q", got, want)
	}
	var th threadAnswer
	getJSON(t, srv.URL+"/api/threads/abc", &th)
	var texts []string
	for _, m := range th.Messages {
		texts = append(texts, m.Role+": "+m.Text)
	}
	if want := []string{"user: ship it", "assistant: Done."}; strings.Join(texts, "|") != strings.Join(want, "|") {
		t.Errorf("the thread shows %q, want %q", texts, want)
	}
}

// TestStartButtonView: a plan that waits for Start carries the Start
// button chat gave it, and only then.
func TestStartButtonView(t *testing.T) {
	p := chat.Plan{Items: []todo.Item{{Content: "a", Status: todo.Pending}}, Revision: 1, State: chat.StateWaiting, Start: chat.ButtonID(chat.ActionStart, "plan-1")}
	v := viewPlan(&p)
	if v.View.Start == nil || v.View.Start.ID != p.Start || v.View.Start.Label != chat.LabelStart {
		t.Errorf("start %+v", v.View.Start)
	}
	p.Start = ""
	if v := viewPlan(&p); v.View.Start != nil {
		t.Errorf("a plan not waiting for Start has %+v", v.View.Start)
	}
}
