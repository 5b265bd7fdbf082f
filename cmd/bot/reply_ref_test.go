package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// TestDiscordAnswerRepliesToItsTurnsMessage: a turn's answer replies to
// the message the turn began on, read from the turn's log entries, not
// to the newest message in the channel: a second mention sent while the
// first turn's model request is in flight starts the next turn, whose
// answer replies to it.
func TestDiscordAnswerRepliesToItsTurnsMessage(t *testing.T) {
	t.Parallel()
	dc := &fakediscord.Server{HeartbeatInterval: time.Second}
	dc.AddChannel("C1", 0, "G1")
	release := make(chan struct{})
	var asked atomic.Int32
	model := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1].Content
		if strings.Contains(last, "first task") {
			asked.Add(1)
			<-release
			return fakeopenai.Reply{Content: "Answer one."}
		}
		return fakeopenai.Reply{Content: "Answer two."}
	}}
	ds := httptest.NewServer(dc)
	t.Cleanup(ds.Close)
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	r := &discordRig{dc: dc, model: model, env: map[string]string{
		"PINPLAN_DB": filepath.Join(t.TempDir(), "discord.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": ms.URL + "/v1", "OPENAI_API_KEY": "sk-test",
		"DISCORD_BOT_TOKEN": "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", "DISCORD_API_URL": ds.URL,
	}}
	p := r.start(t)
	defer p.stop(t)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	first := dc.UserMessage("C1", "111", "first task", true)
	waitFor(t, 30*time.Second, "the first turn's model request", func() bool { return asked.Load() > 0 })
	second := dc.UserMessage("C1", "222", "second task", true)
	time.Sleep(500 * time.Millisecond) // the second message reaches the bot while the first turn runs
	close(release)
	one := waitDiscordReply(t, dc, "C1", "Answer one.")
	two := waitDiscordReply(t, dc, "C1", "Answer two.")
	if one.Reference != first || two.Reference != second {
		t.Errorf("the answers reply to %q and %q, want the messages their turns began on, %s and %s\nstderr:\n%s",
			one.Reference, two.Reference, first, second, p.stderr)
	}
}
