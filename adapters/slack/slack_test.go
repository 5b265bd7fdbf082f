package slack

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/todo"
)

func testAdapter(t *testing.T, native bool) (*Adapter, *fakeslack.Server) {
	t.Helper()
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/", NativePlan: native}), fake
}

func TestNativeBlocksFallBack(t *testing.T) {
	a, fake := testAdapter(t, true)
	fake.Fail("chat.postMessage", "invalid_blocks")
	th := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1", ThreadID: "1.1"}
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	ref, err := a.PostPlan(context.Background(), th, p)
	if err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls("chat.postMessage")
	if len(calls) != 2 || !strings.Contains(calls[0].Params["blocks"], `"type":"plan"`) || strings.Contains(calls[1].Params["blocks"], `"type":"plan"`) {
		t.Fatalf("calls: %+v", calls)
	}
	// Later edits go straight to standard blocks.
	if err := a.EditPlan(context.Background(), th, ref, p); err != nil {
		t.Fatal(err)
	}
	if up := fake.Calls("chat.update"); len(up) != 1 || strings.Contains(up[0].Params["blocks"], `"type":"plan"`) {
		t.Errorf("edit after fallback: %+v", up)
	}
}

func TestErrorClassification(t *testing.T) {
	a, fake := testAdapter(t, false)
	th := chat.Thread{Platform: "slack", Channel: "C1", ThreadID: "1.1"}
	ctx := context.Background()
	p := chat.Plan{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	if err := a.EditPlan(ctx, th, chat.MessageRef{Channel: "C1", ID: "9.9"}, p); !errors.Is(err, chat.ErrMessageGone) {
		t.Errorf("edit of a missing message: %v", err)
	}
	ref, _ := a.PostPlan(ctx, th, p)
	fake.Fail("pins.add", "too_many_pins")
	if err := a.Pin(ctx, th, ref, true); !errors.Is(err, chat.ErrPinUnavailable) {
		t.Errorf("pin limit: %v", err)
	}
	if err := a.Pin(ctx, th, ref, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Pin(ctx, th, ref, true); err != nil {
		t.Errorf("already pinned is fine: %v", err)
	}
	fake.Limit("chat.update", 1, time.Minute)
	if err := a.EditPlan(ctx, th, ref, p); err != nil {
		t.Fatal(err)
	}
	var rl *chat.RateLimitError
	if err := a.EditPlan(ctx, th, ref, p); !errors.As(err, &rl) || rl.RetryAfter <= 0 {
		t.Errorf("429: %v", err)
	}
}

// TestErrorsClassifiedPerOperation: codes that mean "no pinning here" for
// pins.add mean "this reply can never be delivered" for chat.postMessage:
// a reply must not be retried as if a pin had failed.
func TestErrorsClassifiedPerOperation(t *testing.T) {
	ctx := context.Background()
	th := chat.Thread{Platform: "slack", Channel: "C1", ThreadID: "1.1"}
	p := chat.Plan{Revision: 1, Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	for _, code := range []string{"not_in_channel", "missing_scope", "access_denied"} {
		a, fake := testAdapter(t, false)
		fake.Fail("chat.postMessage", code)
		if err := a.Reply(ctx, th, "", "the answer"); !errors.Is(err, chat.ErrUndeliverable) || errors.Is(err, chat.ErrPinUnavailable) {
			t.Errorf("reply met with %s: %v, want undeliverable (not a pin problem)", code, err)
		}
		fake.Fail("chat.postMessage", code)
		if _, err := a.PostPlan(ctx, th, p); !errors.Is(err, chat.ErrUndeliverable) || errors.Is(err, chat.ErrPinUnavailable) {
			t.Errorf("plan post met with %s: %v, want undeliverable", code, err)
		}
		ref, err := a.PostPlan(ctx, th, p)
		if err != nil {
			t.Fatal(err)
		}
		fake.Fail("pins.add", code)
		if err := a.Pin(ctx, th, ref, true); !errors.Is(err, chat.ErrPinUnavailable) {
			t.Errorf("pin met with %s: %v, want pin unavailable", code, err)
		}
	}
}

// tagAdapter is a started adapter (it knows its bot user) on a fake, and
// a thread in it.
func tagAdapter(t *testing.T) (*Adapter, *fakeslack.Server, chat.Thread) {
	t.Helper()
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	a := New(Options{BotToken: "xoxb-t", APIURL: srv.URL + "/api/"})
	if err := a.Start(t.Context(), nopHandler{}); err != nil {
		t.Fatal(err)
	}
	_, root, err := a.one.api.PostMessage("C1", slack.MsgOptionText("the task", false))
	if err != nil {
		t.Fatal(err)
	}
	return a, fake, chat.Thread{Platform: "slack", Key: Key("T1", "C1", root), Channel: "C1", ThreadID: root}
}

// TestReplyFoundByItsKey: a reply is tagged with its send key; sent again
// when an earlier attempt may have landed, it is found in the thread and
// not posted twice. Without the doubt it is not looked for.
func TestReplyFoundByItsKey(t *testing.T) {
	a, fake, th := tagAdapter(t)
	since := time.Now()
	if err := a.Reply(chat.WithSend(t.Context(), "outbox/k/1", since, false), th, "", "the answer"); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Calls("conversations.replies")); n != 0 {
		t.Errorf("a first attempt read the thread %d times, want none", n)
	}
	if err := a.Reply(chat.WithSend(t.Context(), "outbox/k/1", since, true), th, "", "the answer"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reply(chat.WithSend(t.Context(), "outbox/k/2", since, true), th, "", "the answer"); err != nil {
		t.Fatal(err)
	}
	var answers []fakeslack.Message
	for _, m := range fake.Messages("C1") {
		if m.Text == "the answer" {
			answers = append(answers, m)
		}
	}
	if len(answers) != 2 {
		t.Fatalf("%d answers, want 2: key 1 once, and key 2 (never posted before) once", len(answers))
	}
	if !strings.Contains(answers[0].Metadata, `"send_key":"outbox/k/1/0"`) || !strings.Contains(answers[0].Metadata, `"event_type":"pinplan_reply"`) {
		t.Errorf("metadata %s, want the reply's key", answers[0].Metadata)
	}
	for _, c := range fake.Calls("conversations.replies") {
		if c.Params["include_all_metadata"] != "1" || c.Params["oldest"] == "" {
			t.Errorf("conversations.replies %v, want include_all_metadata and oldest", c.Params)
		}
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Errorf("Slack would have refused: %v", v)
	}
}

// TestLookingFailsPostsOrRetries: a conversations.replies refusal that
// every retry would meet posts the reply anyway; a rate limit is retried,
// and nothing is posted meanwhile.
func TestLookingFailsPostsOrRetries(t *testing.T) {
	a, fake, th := tagAdapter(t)
	fake.Fail("conversations.replies", "missing_scope")
	if err := a.Reply(chat.WithSend(t.Context(), "outbox/k/1", time.Now(), true), th, "", "posted anyway"); err != nil {
		t.Fatalf("a refused look dropped the reply: %v", err)
	}
	fake.Fail("conversations.replies", "ratelimited")
	err := a.Reply(chat.WithSend(t.Context(), "outbox/k/2", time.Now(), true), th, "", "not yet")
	if err == nil || errors.Is(err, chat.ErrUndeliverable) {
		t.Errorf("a rate-limited look: %v, want an error to retry", err)
	}
	for _, m := range fake.Messages("C1") {
		if m.Text == "not yet" {
			t.Error("posted while the look was rate limited")
		}
	}
}

// TestPlanFoundByItsKey: a plan message an earlier attempt posted is
// found and returned, not posted again (the board edits it to the plan
// wanted now); once it is deleted, a new one is posted.
func TestPlanFoundByItsKey(t *testing.T) {
	a, fake, th := tagAdapter(t)
	p1 := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.InProgress}}}
	p2 := chat.Plan{Revision: 2, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Completed}}}
	since := time.Now()
	ref, err := a.PostPlan(chat.WithSend(t.Context(), "plan/k/1", since, false), th, p1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.PostPlan(chat.WithSend(t.Context(), "plan/k/1", since, true), th, p2)
	if err != nil {
		t.Fatal(err)
	}
	if again != ref {
		t.Fatalf("the second attempt returned %v, want the first message %v", again, ref)
	}
	var plans []fakeslack.Message
	for _, m := range fake.Messages("C1") {
		if m.Blocks != "" {
			plans = append(plans, m)
		}
	}
	if len(plans) != 1 || plans[0].TS != ref.ID {
		t.Errorf("plan messages %+v, want only the first", plans)
	}
	fake.Delete("C1", ref.ID)
	third, err := a.PostPlan(chat.WithSend(t.Context(), "plan/k/1", since, true), th, p2)
	if err != nil {
		t.Fatal(err)
	}
	if third == ref || third.IsZero() {
		t.Errorf("after the message was deleted: %v, want a new message", third)
	}
}

// TestNativeBlocksNoFallBackAfterA5xx: a native plan post that meets a
// 500 may have landed, so it is not posted again at once with standard
// blocks (that would be a second message); the next attempt looks first.
func TestNativeBlocksNoFallBackAfterA5xx(t *testing.T) {
	a, fake := testAdapter(t, true)
	fake.FailHTTP("chat.postMessage", 500, 1)
	th := chat.Thread{Platform: "slack", Key: "slack/T1/C1/1.1", Channel: "C1", ThreadID: "1.1"}
	p := chat.Plan{Revision: 1, Updated: time.Now(), Items: []todo.Item{{Content: "a", Status: todo.Pending}}}
	if _, err := a.PostPlan(context.Background(), th, p); err == nil {
		t.Fatal("the post succeeded; want the 500 returned")
	}
	if n := len(fake.Calls("chat.postMessage")); n != 1 {
		t.Errorf("chat.postMessage called %d times after a 500, want once", n)
	}
}

// TestCardFoundByItsKey: an approval card an earlier attempt posted is
// found and returned, not posted again.
func TestCardFoundByItsKey(t *testing.T) {
	a, fake, th := tagAdapter(t)
	c := chat.Card{ID: "card1", Tool: "fs__write_file", Server: "fs", Requester: "U1", Deadline: time.Now().Add(time.Hour)}
	since := time.Now()
	ref, err := a.PostCard(chat.WithSend(t.Context(), "card/card1", since, false), th, c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.PostCard(chat.WithSend(t.Context(), "card/card1", since, true), th, c)
	if err != nil {
		t.Fatal(err)
	}
	if again != ref {
		t.Fatalf("the second attempt returned %v, want the first card %v", again, ref)
	}
	if n := len(fake.Messages("C1")); n != 2 {
		t.Errorf("%d messages, want the task and the one card", n)
	}
	other, err := a.PostCard(chat.WithSend(t.Context(), "card/card2", since, true), th, chat.Card{ID: "card2", Tool: "fs__write_file", Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if other == ref || other.IsZero() {
		t.Errorf("another card's key found %v, want a new message", other)
	}
}

// TestFetchFileOnlyFromSlack: a file is fetched with the bot token from
// Slack (here the fake, at the API URL's host); an address elsewhere
// never gets the token; a sign-in page is not the file.
func TestFetchFileOnlyFromSlack(t *testing.T) {
	a, fake, _ := tagAdapter(t)
	f := fake.AddFile("a.txt", "text/plain", []byte("hello"))
	got, err := a.FetchFile(t.Context(), "slack/T1/C1/1.1", agent.File{Name: "a.txt", Type: "text/plain", URL: f["url_private_download"].(string)}, 100)
	if err != nil || string(got) != "hello" {
		t.Fatalf("FetchFile = %q, %v", got, err)
	}
	var seen []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = append(seen, r.Header.Get("Authorization")) }))
	defer other.Close()
	for _, u := range []string{other.URL + "/a.txt", "http://files.slack.com/a.txt", "https://slack.com.evil.example/a.txt", "::"} {
		var fe *chat.FileError
		if _, err := a.FetchFile(t.Context(), "slack/T1/C1/1.1", agent.File{Name: "a.txt", URL: u}, 100); !errors.As(err, &fe) {
			t.Errorf("FetchFile(%s) = %v, want refused as not Slack's", u, err)
		}
	}
	if len(seen) != 0 {
		t.Errorf("the token went to another host: %q", seen)
	}
	if got, err := a.FetchFile(t.Context(), "slack/T1/C1/1.1", agent.File{Name: "big.txt", Type: "text/plain", URL: fake.AddFile("big.txt", "text/plain", []byte("0123456789"))["url_private_download"].(string)}, 4); err != nil || len(got) != 5 {
		t.Errorf("a file over max: %d bytes, %v; want max+1 read", len(got), err)
	}
}
