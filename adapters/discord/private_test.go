package discord

import (
	"context"
	"strings"
	"testing"
)

// TestReplyPrivatelyByDirectMessage: a refusal goes to the person as a
// direct message naming the channel, nothing in the channel; a person
// who takes no direct messages (50007) is not told in public either: the
// refusal is dropped without an error, so the outbox does not retry it.
func TestReplyPrivatelyByDirectMessage(t *testing.T) {
	a, fake, _ := v2Rig(t, false)
	ctx := context.Background()
	if err := a.ReplyPrivately(ctx, v2Thread, "222", "Only <@111> or an approver can stop this turn."); err != nil {
		t.Fatal(err)
	}
	dms := fake.DMs("222")
	if len(dms) != 1 || !strings.HasPrefix(dms[0].Content, "In <#C1>: Only <@111>") {
		t.Errorf("direct messages %+v, want the refusal naming the channel", dms)
	}
	fake.RefuseDMs("333")
	if err := a.ReplyPrivately(ctx, v2Thread, "333", "Only <@111> or an approver can reset this thread."); err != nil {
		t.Errorf("a person who takes no DMs: %v, want the refusal dropped", err)
	}
	if got := fake.DMs("333"); len(got) != 0 {
		t.Errorf("direct messages %+v to a person who takes none", got)
	}
	if got := fake.Messages("C1"); len(got) != 0 {
		t.Errorf("the channel heard of the refusals: %+v", got)
	}
}
