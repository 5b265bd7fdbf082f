package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// TestDoctor runs `bot doctor` as a user would: against the fakes it
// prints its table and exits 0; with the Slack tokens swapped it exits
// 1 and says so; neither shows a token; -h exits 0 and an extra
// argument 1. A failed start points at doctor.
func TestDoctor(t *testing.T) {
	t.Parallel()
	serve := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	const (
		bot     = "xoxb-1-2-secretslackbot"
		app     = "xapp-1-A1-2-secretslackapp"
		discord = "OTAwMDAwMDAwMDAwMDAwMDAx.secretdiscord.zz"
		key     = "sk-secretopenai"
	)
	fd := &fakediscord.Server{Token: discord}
	fd.AddChannel("C1", 0, "G1")
	model := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply {
		if len(req.Tools) > 0 && strings.Contains(req.Messages[len(req.Messages)-1].Content, "todo_write") {
			return fakeopenai.Reply{ToolCalls: []fakeopenai.Call{{Name: "todo_write", Arguments: `{"todos":[{"content":"Read the settings","status":"in_progress"}]}`}}}
		}
		return fakeopenai.Reply{Content: "hello"}
	}}
	env := map[string]string{
		"SLACK_BOT_TOKEN": bot, "SLACK_APP_TOKEN": app, "SLACK_API_URL": serve(&fakeslack.Server{}) + "/api/",
		"DISCORD_BOT_TOKEN": discord, "DISCORD_API_URL": serve(fd),
		"OPENAI_API_KEY": key, "OPENAI_BASE_URL": serve(model) + "/v1",
		"PINPLAN_DB": filepath.Join(t.TempDir(), "pinplan.db"),
	}
	tests := []struct {
		name     string
		args     []string
		change   map[string]string
		exit     int
		stdout   string
		stderr   string
		noStdout string
	}{
		{"all good", []string{"doctor"}, nil, 0, "Everything checked works.", "", "FAILED"},
		{"swapped pair", []string{"doctor"}, map[string]string{"SLACK_BOT_TOKEN": app, "SLACK_APP_TOKEN": bot}, 1, "swapped", "doctor: 1 needed check(s) failed", ""},
		{"help", []string{"doctor", "-h"}, nil, 0, "", "usage: bot doctor", "AREA"},
		{"extra argument", []string{"doctor", "now"}, nil, 1, "", `unexpected argument "now"`, "AREA"},
		{"a failed start", nil, map[string]string{"SLACK_BOT_TOKEN": app, "SLACK_APP_TOKEN": bot}, 1, "", "run `pinplan doctor`", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(botBinary, tt.args...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			for k, v := range env {
				if c, ok := tt.change[k]; ok {
					v = c
				}
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			exit := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out, errOut := stdout.String(), stderr.String()
			if exit != tt.exit {
				t.Errorf("got exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", exit, tt.exit, out, errOut)
			}
			if !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("got stdout:\n%s\nstderr:\n%s\nwant %q on stdout and %q on stderr", out, errOut, tt.stdout, tt.stderr)
			}
			if tt.noStdout != "" && strings.Contains(out, tt.noStdout) {
				t.Errorf("stdout shows %q:\n%s", tt.noStdout, out)
			}
			for _, secret := range []string{"secretslackbot", "secretslackapp", "secretdiscord", "secretopenai"} {
				if strings.Contains(out+errOut, secret) {
					t.Errorf("the output shows a secret (%s):\nstdout:\n%s\nstderr:\n%s", secret, out, errOut)
				}
			}
		})
	}
}
