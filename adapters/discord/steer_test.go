package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/inboxtest"
	"github.com/pinplan/pinplan/internal/plantest"
	"github.com/pinplan/pinplan/todo"
)

// menuOf is the item menu of a plan payload read back as Discord reads
// it, its options' labels and values; nil when there is none.
func menuOf(t *testing.T, payload any) []discordgo.SelectMenuOption {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	var m discordgo.Message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return menuOptions(m.Components)
}

// TestSkippedItemAndControls: a skipped item shows struck through with
// its mark and who skipped it, as V2 and as an embed; the item menu
// offers each item's first change, numbered as the message numbers it,
// its value the item's control, then "Add an item…"; Start and Change
// stand beside Stop while the plan waits for Start.
func TestSkippedItemAndControls(t *testing.T) {
	p := waitingForStart()
	v2 := strings.Join(readV2(t, PlanMessageV2(p)).texts, "\n")
	embed := PlanEmbed(p).Description
	for name, text := range map[string]string{"V2": v2, "embed": embed} {
		if want := "⏭️ 2. ~~Tag the \\*release\\* candidate~~\n↳ skipped by ann\n⬜ 3. Write the changelog\n↳ added by bo"; !strings.Contains(text, want) {
			t.Errorf("%s: %q\nwant it to hold %q", name, text, want)
		}
	}
	want := []discordgo.SelectMenuOption{
		{Label: "Skip 1. Check the release branch", Value: chat.ItemButton(chat.ActionSkip, p, p.Items[0])},
		{Label: "Reopen 2. Tag the *release* candidate", Value: chat.ItemButton(chat.ActionReopen, p, p.Items[1])},
		{Label: "Skip 3. Write the changelog", Value: chat.ItemButton(chat.ActionSkip, p, p.Items[2])},
		{Label: "Skip 4. Publish the release notes", Value: chat.ItemButton(chat.ActionSkip, p, p.Items[3])},
		{Label: "Add an item…", Value: "pinplan:add-form:3", Description: addOptionDesc},
	}
	for name, payload := range map[string]any{"V2": PlanMessageV2(p), "embed": PlanMessage(p)} {
		if got := menuOf(t, payload); !slices.Equal(got, want) {
			t.Errorf("%s: menu %+v\nwant %+v", name, got, want)
		}
		ids := readV2(t, payload).customIDs
		if i := slices.Index(ids, p.Start); i < 0 || !slices.Equal(ids[i:], []string{p.Start, changeID, stopID}) {
			t.Errorf("%s: custom_ids %q, want Start, Change and Stop in a row", name, ids)
		}
	}
	started := p
	started.Start = ""
	if ids := readV2(t, PlanMessageV2(started)).customIDs; slices.Contains(ids, changeID) || !slices.Contains(ids, stopID) {
		t.Errorf("started: custom_ids %q, want Stop without Start and Change", ids)
	}
	unwritten := chat.Plan{Updated: at, State: chat.StateWorking, Stoppable: true}
	if menu := menuOf(t, PlanMessageV2(unwritten)); menu != nil {
		t.Errorf("a plan the agent has not written offers %+v", menu)
	}
}

// items is n pending items "step 1" to "step n", the first done of them
// completed.
func items(n, done int) []todo.Item {
	out := make([]todo.Item, n)
	for i := range out {
		out[i] = todo.Item{Content: fmt.Sprintf("step %d", i+1), Status: todo.Pending}
		if i < done {
			out[i].Status = todo.Completed
		}
	}
	return out
}

// TestMenuOffersAtMost24Items: a select holds 25 options, so a longer
// plan's menu offers 24 items in a row from the first open one, reaching
// back where fewer follow it; an item whose text came before is offered
// once.
func TestMenuOffersAtMost24Items(t *testing.T) {
	dup := items(5, 0)
	dup[3].Content = dup[1].Content
	tests := []struct {
		name   string
		items  []todo.Item
		offers []int // item numbers
	}{
		{"all of a short plan", items(10, 3), seq(1, 10)},
		{"24 of 50 from the first open", items(50, 0), seq(1, 24)},
		{"from the first open item", items(50, 10), seq(11, 34)},
		{"reaching back", items(50, 40), seq(27, 50)},
		{"nothing open", items(50, 50), seq(27, 50)},
		{"a repeated text once", dup, []int{1, 2, 3, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := chat.Plan{Revision: 4, Updated: at, Items: tt.items}
			var got []int
			for _, c := range menuChoices(p) {
				got = append(got, c.n)
			}
			if !slices.Equal(got, tt.offers) {
				t.Errorf("offers items %v, want %v", got, tt.offers)
			}
			if opts := menuOf(t, PlanMessageV2(p)); len(opts) != len(tt.offers)+1 || opts[len(opts)-1].Label != addOptionLabel {
				t.Errorf("%d options ending %+v, want the items and Add", len(opts), opts[len(opts)-1])
			}
		})
	}
}

func seq(from, to int) []int {
	var out []int
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

// TestControlsWithinDiscordsLimits: 50 items of 1,000 characters and ten
// skipped ones, waiting for Start: 25 options of at most 100 characters,
// values unique and within 100, and at most 40 components with the
// controls in; Discord takes it posted and edited, as V2 and as an embed.
func TestControlsWithinDiscordsLimits(t *testing.T) {
	p := worstCaseEvidence()
	p.Start = chat.ButtonID(chat.ActionStart, "plan-1")
	for i := range 10 {
		p.Items = append(p.Items, todo.Item{Content: fmt.Sprintf("skipped %d %s", i, strings.Repeat("x", 990)), Status: chat.Skipped})
	}
	for _, v2 := range []bool{true, false} {
		a, fake, _ := v2Rig(t, v2)
		ctx := context.Background()
		ref, err := a.PostPlan(ctx, v2Thread, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.EditPlan(ctx, v2Thread, ref, p); err != nil {
			t.Fatal(err)
		}
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("V2 %t: Discord refused: %q", v2, v)
		}
		m := planMessage(t, fake)
		if n := m.ComponentCount(); v2 && n > maxV2Components {
			t.Errorf("%d components, limit %d", n, maxV2Components)
		}
		if ids := m.CustomIDs(); !slices.Contains(ids, p.Start) || !slices.Contains(ids, changeID) || !slices.Contains(ids, stopID) || !slices.Contains(ids, itemMenuID) {
			t.Errorf("V2 %t: custom_ids %q, want the menu, Start, Change and Stop", v2, ids)
		}
	}
	opts := menuOf(t, PlanMessageV2(p))
	if len(opts) != maxSelectOptions {
		t.Errorf("%d options, want %d", len(opts), maxSelectOptions)
	}
	values := map[string]bool{}
	for _, o := range opts {
		if utf8.RuneCountInString(o.Label) > maxOptionLabel || len(o.Value) > maxOptionLabel || values[o.Value] {
			t.Errorf("option %q = %q: over 100 characters or repeated", o.Label, o.Value)
		}
		values[o.Value] = true
	}
}

// clickInbox records the clicks the adapter hands on and answers each as
// answer says (privately, "noted", without it).
type clickInbox struct {
	inboxtest.Inbox
	answer func(chat.Click) chat.ClickResult
	mu     sync.Mutex // guards clicks
	clicks []chat.Click
}

func (c *clickInbox) Click(_ context.Context, cl chat.Click) chat.ClickResult {
	c.mu.Lock()
	c.clicks = append(c.clicks, cl)
	c.mu.Unlock()
	if c.answer != nil {
		return c.answer(cl)
	}
	return chat.ClickResult{Private: "noted"}
}

func (c *clickInbox) got() []chat.Click {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.clicks)
}

// steerRig is an adapter connected to the fake's gateway, handing its
// clicks to in.
func steerRig(t *testing.T, in *clickInbox) (*Adapter, *fakediscord.Server) {
	t.Helper()
	fake := &fakediscord.Server{HeartbeatInterval: time.Second}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, ComponentsV2: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close() })
	for deadline := time.Now().Add(15 * time.Second); fake.Connected() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no gateway connection")
		}
	}
	return a, fake
}

// answered waits for the answer to interaction id.
func answered(t *testing.T, fake *fakediscord.Server, id string) fakediscord.Response {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if res := fake.Responses(id); len(res) > 0 {
			if res[0].Status >= 300 {
				t.Fatalf("the answer was refused: %+v; violations %q", res[0], fake.Violations())
			}
			return res[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the interaction was not answered")
		}
	}
}

// private reports whether r is an ephemeral note reading text.
func private(r fakediscord.Response, text string) bool {
	return r.Type == 4 && r.Data["flags"] == float64(64) && strings.Contains(fmt.Sprint(r.Data["content"]), text)
}

// TestItemMenuAndAddForm: a change picked in the menu is a click on its
// item's control, answered privately; "Add an item…" opens the Add form
// (two text inputs in action rows), whose number is the item as the
// message numbered it and whose text goes with the click; a number of no
// item, or a form of a replaced revision, is refused privately without a
// click; Change points to the menu; Start is a click answered with the
// message updated.
func TestItemMenuAndAddForm(t *testing.T) {
	in := &clickInbox{}
	a, fake := steerRig(t, in)
	ctx := context.Background()
	p := waitingForStart()
	ref, err := a.PostPlan(ctx, v2Thread, p)
	if err != nil {
		t.Fatal(err)
	}
	skip := chat.ItemButton(chat.ActionSkip, p, p.Items[2])
	id, err := fake.Select("C1", ref.ID, "111", itemMenuID, skip)
	if err != nil {
		t.Fatal(err)
	}
	if r := answered(t, fake, id); !private(r, "noted") {
		t.Errorf("the pick was answered %+v, want the router's note to the picker alone", r)
	}
	if got := in.got(); len(got) != 1 || got[0].Button != skip || got[0].UserID != "111" || got[0].UserName != "User 111" || got[0].Thread != v2Thread {
		t.Fatalf("clicks %+v, want 111's on %s", got, skip)
	}

	openForm := func(t *testing.T, user string) fakediscord.Modal {
		t.Helper()
		id, err := fake.Select("C1", ref.ID, user, itemMenuID, addFormID(p.Revision))
		if err != nil {
			t.Fatal(err)
		}
		if r := answered(t, fake, id); r.Type != 9 {
			t.Fatalf("Add was answered %+v, want the form", r)
		}
		md, ok := fake.OpenModal(user)
		if !ok || md.CustomID != "pinplan:add-form:3" || len(md.Components) != 2 || md.Message != ref.ID {
			t.Fatalf("open form %+v, want the Add form of revision 3 on the plan", md)
		}
		return md
	}
	openForm(t, "111")
	id, err = fake.SubmitModal("111", "pinplan:add-form:3", map[string]string{addTextID: "  Update the docs ", addAfterID: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if r := answered(t, fake, id); !private(r, "noted") {
		t.Errorf("the form was answered %+v, want the router's note", r)
	}
	got := in.got()
	if want := chat.ItemButton(chat.ActionAdd, p, p.Items[1]); len(got) != 2 || got[1].Button != want || got[1].Text != "Update the docs" {
		t.Fatalf("clicks %+v, want Add after item 2 (%s) with the text", got, want)
	}

	for _, tc := range []struct{ after, says string }{
		{"9", "“9” is not the number of an item"},
		{"two", "“two” is not the number of an item"},
		{"0", "“0” is not the number of an item"},
	} {
		openForm(t, "111")
		id, err := fake.SubmitModal("111", "pinplan:add-form:3", map[string]string{addTextID: "x", addAfterID: tc.after})
		if err != nil {
			t.Fatal(err)
		}
		if r := answered(t, fake, id); !private(r, tc.says) {
			t.Errorf("after %q: answered %+v, want %q privately", tc.after, r, tc.says)
		}
	}

	// The plan moves on while the form is open: its revision is gone.
	openForm(t, "222")
	next := p
	next.Revision = 4
	if err := a.EditPlan(ctx, v2Thread, ref, next); err != nil {
		t.Fatal(err)
	}
	id, err = fake.SubmitModal("222", "pinplan:add-form:3", map[string]string{addTextID: "x", addAfterID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if r := answered(t, fake, id); !private(r, "The plan changed since you opened the form") {
		t.Errorf("a replaced revision's form was answered %+v", r)
	}
	if n := len(in.got()); n != 2 {
		t.Errorf("%d clicks, want no more for refused forms", n)
	}

	id, err = fake.Click("C1", ref.ID, "222", changeID)
	if err != nil {
		t.Fatal(err)
	}
	if r := answered(t, fake, id); !private(r, "“Change an item…” menu") {
		t.Errorf("Change was answered %+v, want a pointer to the menu", r)
	}

	started := next
	started.Start, started.State = "", chat.StateWorking
	in.answer = func(c chat.Click) chat.ClickResult {
		if c.UserID != "111" {
			return chat.ClickResult{Private: "Only the person who asked can start this plan."}
		}
		return chat.ClickResult{Plan: &started}
	}
	id, err = fake.Click("C1", ref.ID, "222", next.Start)
	if err != nil {
		t.Fatal(err)
	}
	if r := answered(t, fake, id); !private(r, "Only the person who asked") {
		t.Errorf("222's Start was answered %+v, want the refusal to them alone", r)
	}
	id, err = fake.Click("C1", ref.ID, "111", next.Start)
	if err != nil {
		t.Fatal(err)
	}
	if r := answered(t, fake, id); r.Type != 7 || r.Data["flags"] != float64(1<<15) {
		t.Errorf("Start was answered %+v, want the message updated as V2", r)
	}
	if ids := planMessage(t, fake).CustomIDs(); slices.Contains(ids, next.Start) || !slices.Contains(ids, itemMenuID) {
		t.Errorf("after Start the message has %q, want the menu without Start", ids)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Discord refused: %q", v)
	}
}

// TestAddFormFromTheMessage: where this process did not render the plan
// (after a restart, or another replica did), the form's number is read
// from the message's own menu: every item of a short plan; of a longer
// one, those the menu offers, and any other number is refused as not
// known just now rather than as no item.
func TestAddFormFromTheMessage(t *testing.T) {
	a, _, _ := v2Rig(t, true)
	interaction := func(p chat.Plan) *discordgo.Interaction {
		b, err := json.Marshal(PlanMessageV2(p))
		if err != nil {
			t.Fatal(err)
		}
		m := &discordgo.Message{}
		if err := json.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		m.ID, m.ChannelID = "M1", "C1"
		return &discordgo.Interaction{ChannelID: "C1", Message: m}
	}
	p := waitingForStart()
	got, whole := a.addControls(interaction(p), p.Revision)
	want := map[int]string{}
	for i, it := range p.Items {
		want[i+1] = chat.ItemButton(chat.ActionAdd, p, it)
	}
	if whole || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("from the message: %v (whole %t), want %v from the menu", got, whole, want)
	}
	if got, _ := a.addControls(interaction(p), p.Revision+1); len(got) != 0 {
		t.Errorf("for another revision: %v, want none", got)
	}

	long := chat.Plan{Revision: 9, Updated: at, Items: items(50, 40)}
	got, _ = a.addControls(interaction(long), long.Revision)
	if _, ok := got[27]; !ok || len(got) != maxItemOptions {
		t.Errorf("a long plan: %d items known, want the menu's 24 (27 to 50)", len(got))
	}

	// Rendered here, every item is known.
	a.remember("C1", "M1", long, true)
	if got, whole := a.addControls(interaction(long), long.Revision); !whole || len(got) != 50 || got[3] != chat.ItemButton(chat.ActionAdd, long, long.Items[2]) {
		t.Errorf("rendered here: %d items (whole %t), want all 50", len(got), whole)
	}
	// An earlier plan message edited (its final content given back)
	// leaves the newest one's record alone.
	a.remember("C1", "M0", p, false)
	if _, whole := a.addControls(interaction(long), long.Revision); !whole {
		t.Error("an edit of an older message replaced the newest one's record")
	}
	a.Forget(v2Thread)
	if _, whole := a.addControls(interaction(long), long.Revision); whole {
		t.Error("a forgotten channel's record stayed")
	}
}

// TestMarksWithoutBidiControls: a skipped item whose text, and a person
// whose name, hold bidirectional controls shows without them, still
// saying who skipped it; the menu's labels have none either.
func TestMarksWithoutBidiControls(t *testing.T) {
	item := "Rename \u202einvoice\u2066"
	p := chat.Plan{Revision: 2, State: chat.StateWorking, Updated: at, Items: []todo.Item{
		{Content: "Read the notes", Status: todo.InProgress},
		{Content: item, Status: chat.Skipped},
	}, Marks: []agent.Mark{{Action: agent.SteerSkip, Item: item, After: "Read the notes", By: "\u202ebob", At: at}}}
	for name, payload := range map[string]any{"V2": PlanMessageV2(p), "embed": PlanMessage(p)} {
		if got := plantest.BidiInJSON(payload); got != "" {
			t.Errorf("%s holds %+q", name, got)
		}
		b, _ := json.Marshal(payload)
		if !strings.Contains(string(b), "⏭️ 2. ~~Rename invoice~~\\n↳ skipped by bob") {
			t.Errorf("%s: %s\nwant the skipped item with who skipped it", name, b)
		}
	}
	if opts := menuOf(t, PlanMessageV2(p)); len(opts) != 3 || opts[1].Label != "Reopen 2. Rename invoice" || opts[1].Value != chat.ItemButton(chat.ActionReopen, p, p.Items[1]) {
		t.Errorf("menu %+v, want Reopen 2 naming the item as chat knows it", opts)
	}
}
