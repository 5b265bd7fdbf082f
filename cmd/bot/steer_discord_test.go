package main

import (
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/todo"
)

// Steering the plan on Discord (DESIGN §19) through the binary: the
// item menu and the Add form in the plan's container, and Start while
// the turn's first plan waits for it (PINPLAN_PLAN_APPROVAL=ask).

// Ids of the plan message's steering controls (adapters/discord).
const (
	discordItemMenu = "pinplan:items"
	discordAddForm  = "pinplan:add-form:"
	discordStartID  = "pinplan:start:"
)

// discordSteerItems is the plan the model of the steering tests writes
// first; then it answers discordSteerAnswer.
var discordSteerItems = []todo.Item{
	{Content: "Check the release branch", Status: todo.InProgress},
	{Content: "Tag the release candidate", Status: todo.Pending},
	{Content: "Publish the release notes", Status: todo.Pending},
}

const discordSteerAnswer = "Shipped: the release is out."

// newDiscordSteerRig is a Discord rig whose turns' first plans wait for
// Start, with a model that writes discordSteerItems, then answers.
func newDiscordSteerRig(t *testing.T) *discordRig {
	t.Helper()
	r := &discordRig{dc: &fakediscord.Server{HeartbeatInterval: time.Second}}
	r.dc.AddChannel("C1", 0, "G1")
	r.model = &fakeopenai.Server{Respond: fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{
			{ToolCalls: []fakeopenai.Call{{Name: todo.ToolName, Arguments: todo.Encode(discordSteerItems)}}},
			{Content: discordSteerAnswer},
		}
	})}
	ds := httptest.NewServer(r.dc)
	t.Cleanup(ds.Close)
	ms := httptest.NewServer(r.model)
	t.Cleanup(ms.Close)
	r.env = map[string]string{
		"PINPLAN_DB": filepath.Join(t.TempDir(), "discord.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": ds.URL,
		"PINPLAN_PLAN_APPROVAL": "ask",
	}
	return r
}

// discordWaitStartable waits for the channel's plan message to carry Start and
// returns it with Start's custom_id.
func discordWaitStartable(t *testing.T, r *discordRig) (fakediscord.Message, string) {
	t.Helper()
	var plan fakediscord.Message
	var start string
	waitFor(t, 30*time.Second, "the plan with its Start button", func() bool {
		pl := discordPlans(r.dc, "C1")
		if len(pl) != 1 {
			return false
		}
		plan = pl[0]
		for _, id := range plan.CustomIDs() {
			if strings.HasPrefix(id, discordStartID) {
				start = id
			}
		}
		return start != ""
	})
	return plan, start
}

// discordEditTexts is what each of a plan message's edits showed.
func discordEditTexts(calls []fakediscord.Call) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString("\n---\n" + bodyText(c.Body))
	}
	return b.String()
}

// discordPressStart has user press Start on the plan message msg and
// returns the interaction's id. Start may be missing from an edit for a
// moment (one made while the turn waits on its plan), so the press waits
// until the button is there to press.
func discordPressStart(t *testing.T, r *discordRig, msg, user, start string) string {
	t.Helper()
	var id string
	waitFor(t, 15*time.Second, "Start on the plan", func() bool {
		var err error
		id, err = r.dc.Click("C1", msg, user, start)
		return err == nil
	})
	return id
}

// discordMenuValue is the value of the option of the plan's item menu whose
// label starts with label.
func discordMenuValue(t *testing.T, m fakediscord.Message, label string) string {
	t.Helper()
	var value string
	var labels []string
	var walk func(list []any)
	walk = func(list []any) {
		for _, raw := range list {
			c, _ := raw.(map[string]any)
			if c["custom_id"] == discordItemMenu {
				opts, _ := c["options"].([]any)
				for _, o := range opts {
					o := o.(map[string]any)
					labels = append(labels, o["label"].(string))
					if strings.HasPrefix(o["label"].(string), label) {
						value = o["value"].(string)
					}
				}
			}
			children, _ := c["components"].([]any)
			walk(children)
		}
	}
	for _, c := range m.Components {
		walk([]any{c})
	}
	if value == "" {
		t.Fatalf("no option %q in the item menu %q", label, labels)
	}
	return value
}

// discordAsked reports whether a model request carries a user message
// holding every one of parts.
func discordAsked(req openai.ChatCompletionRequest, parts ...string) bool {
	for _, m := range req.Messages {
		if m.Role != openai.ChatMessageRoleUser {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(m.Content, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestDiscordSteerStart: with PINPLAN_PLAN_APPROVAL=ask the turn's first
// plan carries Start (and Change) and no model request follows it;
// Change points to the item menu and another person's Start is refused,
// both to them alone; the requester's Start updates the message and the
// turn goes on to its answer.
func TestDiscordSteerStart(t *testing.T) {
	t.Parallel()
	r := newDiscordSteerRig(t)
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "111", "ship the release", true)
	plan, start := discordWaitStartable(t, r)
	if ids := plan.CustomIDs(); !slices.Contains(ids, "pinplan:change:plan") || !slices.Contains(ids, discordStopID) || !slices.Contains(ids, discordItemMenu) {
		t.Errorf("the waiting plan's controls %q, want the item menu, Start, Change and Stop", ids)
	}
	if text := planText(plan); !strings.Contains(text, "waiting for Start") {
		t.Errorf("the waiting plan reads %q", text)
	}

	id, err := r.dc.Click("C1", plan.ID, "222", "pinplan:change:plan")
	if err != nil {
		t.Fatal(err)
	}
	if got := privateAnswer(t, r.dc, "C1", "222", id); !strings.Contains(got, "“Change an item…” menu") {
		t.Errorf("Change was answered %q, want a pointer to the menu", got)
	}
	id, err = r.dc.Click("C1", plan.ID, "222", start)
	if err != nil {
		t.Fatal(err)
	}
	if got := privateAnswer(t, r.dc, "C1", "222", id); !strings.Contains(got, "can start this plan") {
		t.Errorf("222's Start was answered %q, want a refusal", got)
	}
	// The refusal was answered, so the bot had its chance to go on.
	if n := len(r.model.Requests()); n != 1 {
		t.Fatalf("%d model requests before Start, want 1", n)
	}

	id, err = r.dc.Click("C1", plan.ID, "111", start)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitResponses(t, r.dc, id, 1)[0]; res.Type != 7 || res.Data["flags"] != float64(flagComponentsV2) {
		t.Errorf("the requester's Start was answered %+v, want the plan updated as V2", res)
	}
	waitDiscordReply(t, r.dc, "C1", discordSteerAnswer)
	if n := len(r.model.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the plan, then the answer)", n)
	}
	if ids := discordPlans(r.dc, "C1")[0].CustomIDs(); slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, discordStartID) }) {
		t.Errorf("Start stayed on the plan: %q", ids)
	}
	if bad := refusedCalls(r.dc); len(bad) != 0 {
		t.Errorf("Discord refused %d requests:%s", len(bad), callList(bad))
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}

// TestDiscordSteerSkipAndAdd: while the first plan waits for Start, Skip
// picked in the item menu changes the plan message in one edit (struck
// where it was, "skipped by" who), and "Add an item…" opens the Add form,
// whose item goes in pending after the item whose number it gives; each
// is answered to the person alone. After Start, the model's next request
// names who skipped and who added what.
func TestDiscordSteerSkipAndAdd(t *testing.T) {
	t.Parallel()
	r := newDiscordSteerRig(t)
	p := r.start(t)
	defer p.stop(t)
	r.dc.UserMessage("C1", "111", "ship the release", true)
	plan, start := discordWaitStartable(t, r)
	skipped := discordSteerItems[1].Content

	edits := len(okDiscord(r.dc, "PATCH channels/C1/messages/"+plan.ID))
	id, err := r.dc.Select("C1", plan.ID, "111", discordItemMenu, discordMenuValue(t, plan, "Skip 2. "))
	if err != nil {
		t.Fatal(err)
	}
	if got := privateAnswer(t, r.dc, "C1", "111", id); !strings.HasPrefix(got, "You skipped “"+skipped+"”") {
		t.Errorf("the Skip was answered %q, want what it did", got)
	}
	struck := "⏭️ 2. ~~" + skipped + "~~\n↳ skipped by User 111"
	waitFor(t, 15*time.Second, "the skip on the plan", func() bool { return strings.Contains(planText(discordPlans(r.dc, "C1")[0]), struck) })
	if after := okDiscord(r.dc, "PATCH channels/C1/messages/"+plan.ID)[edits:]; len(after) == 0 || !strings.Contains(bodyText(after[0].Body), struck) {
		t.Errorf("the edits after the skip showed:%s\nwant the first to show the item struck and who skipped it at once", discordEditTexts(after))
	}

	plan = discordPlans(r.dc, "C1")[0]
	id, err = r.dc.Select("C1", plan.ID, "111", discordItemMenu, discordMenuValue(t, plan, "Add an item"))
	if err != nil {
		t.Fatal(err)
	}
	if res := waitResponses(t, r.dc, id, 1)[0]; res.Type != 9 {
		t.Fatalf("Add an item… was answered %+v, want the form", res)
	}
	form, ok := r.dc.OpenModal("111")
	if !ok || !strings.HasPrefix(form.CustomID, discordAddForm) {
		t.Fatalf("the open form %+v, want the Add form", form)
	}
	added := "Write the changelog"
	id, err = r.dc.SubmitModal("111", form.CustomID, map[string]string{"text": added, "after": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if got := privateAnswer(t, r.dc, "C1", "111", id); !strings.HasPrefix(got, "You added “"+added+"”") {
		t.Errorf("the form was answered %q, want what it did", got)
	}
	want := "⏭️ 2. ~~" + skipped + "~~\n↳ skipped by User 111\n⬜ 3. Publish the release notes\n⬜ 4. " + added + "\n↳ added by User 111\n-# "
	waitFor(t, 15*time.Second, "the added item on the plan", func() bool { return strings.Contains(planText(discordPlans(r.dc, "C1")[0]), want) })
	if n := len(r.model.Requests()); n != 1 {
		t.Fatalf("%d model requests before Start, want 1", n)
	}

	waitResponses(t, r.dc, discordPressStart(t, r, plan.ID, "111", start), 1)
	waitDiscordReply(t, r.dc, "C1", discordSteerAnswer)
	reqs := r.model.Requests()
	if len(reqs) != 2 || !discordAsked(reqs[1], "User 111 skipped", skipped) || !discordAsked(reqs[1], "User 111 added", added) {
		t.Errorf("the request after Start does not name both changes: %+v", reqs[len(reqs)-1].Messages)
	}
	if bad := refusedCalls(r.dc); len(bad) != 0 {
		t.Errorf("Discord refused %d requests:%s", len(bad), callList(bad))
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}

// TestDiscordSteerSurvivesKill: a skip made while the plan waits for
// Start survives kill -9: the restarted bot takes the same Start, the
// model's next request reads the skip, and the plan message's edits since
// the restart end on it.
func TestDiscordSteerSurvivesKill(t *testing.T) {
	t.Parallel()
	r := newDiscordSteerRig(t)
	p := r.start(t)
	r.dc.UserMessage("C1", "111", "ship the release", true)
	plan, start := discordWaitStartable(t, r)
	skipped := discordSteerItems[2].Content
	id, err := r.dc.Select("C1", plan.ID, "111", discordItemMenu, discordMenuValue(t, plan, "Skip 3. "))
	if err != nil {
		t.Fatal(err)
	}
	if got := privateAnswer(t, r.dc, "C1", "111", id); !strings.HasPrefix(got, "You skipped") {
		t.Fatalf("the Skip was answered %q", got)
	}
	struck := "⏭️ 3. ~~" + skipped + "~~\n↳ skipped by User 111"
	waitFor(t, 15*time.Second, "the skip on the plan", func() bool { return strings.Contains(planText(discordPlans(r.dc, "C1")[0]), struck) })
	p.kill()

	edits := len(okDiscord(r.dc, "PATCH channels/C1/messages/"+plan.ID))
	p = r.start(t)
	defer p.stop(t)
	waitResponses(t, r.dc, discordPressStart(t, r, plan.ID, "111", start), 1)
	waitDiscordReply(t, r.dc, "C1", discordSteerAnswer)
	reqs := r.model.Requests()
	if last := reqs[len(reqs)-1]; len(reqs) != 2 || !discordAsked(last, "User 111 skipped", skipped) {
		t.Errorf("%d requests, the last without the skip: %+v", len(reqs), last.Messages)
	}
	// Every edit since the restart ends on the plan with the skip.
	waitFor(t, 15*time.Second, "the plan's final revision", func() bool {
		return strings.Contains(planText(discordPlans(r.dc, "C1")[0]), "· done")
	})
	after := okDiscord(r.dc, "PATCH channels/C1/messages/"+plan.ID)[edits:]
	if len(after) == 0 || !strings.Contains(bodyText(after[len(after)-1].Body), struck) {
		t.Errorf("the plan's edits since the restart showed:%s\nwant the last with the skip", discordEditTexts(after))
	}
	if n := len(discordPlans(r.dc, "C1")); n != 1 {
		t.Errorf("%d plan messages, want the one", n)
	}
	if v := r.dc.Violations(); len(v) > 0 {
		t.Errorf("violations %q", v)
	}
}
