package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/store"
)

// formatChars are the invisible format characters a file name must not
// carry into a thread or a prompt: the bidirectional embeddings,
// overrides, isolates and marks, and other Cf characters.
const formatChars = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\ufeff"

// formatIn returns the format characters of formatChars in s, "" if none.
func formatIn(s string) string {
	var found []rune
	for _, r := range s {
		if strings.ContainsRune(formatChars, r) {
			found = append(found, r)
		}
	}
	return string(found)
}

// consoleFile is a file as the console lists it under a message.
type consoleFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// consoleThread is GET /api/threads/{id} with the files of each message.
type consoleThread struct {
	Messages []struct {
		Role  string        `json:"role"`
		Text  string        `json:"text"`
		Files []consoleFile `json:"files"`
	} `json:"messages"`
}

// TestConsoleFileNameBidi (issue 40, item 8): a console message with a
// file named "invoice\u202efdp.exe" (it reads "invoiceexe.pdf"), which
// the model is not given (not text): the thread's notice, the console's
// listing of the message's files (in the POST's answer and in the stored
// thread) and the <file name=…> the model is given carry the name
// without its format characters.
func TestConsoleFileNameBidi(t *testing.T) {
	t.Parallel()
	script := fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{donePlan(), {Content: "Looked at it."}}
	})
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply { return script(req) }}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test"}, botBinary)
	defer p.stop(t)
	api := apiClient{t, p.URL}
	name := "invoice\u202efdp.exe\u2066\u200f\u061c\u200b"
	status, body := api.do("POST", "/api/threads", map[string]any{"text": "what is this file?",
		"files": []map[string]string{{"name": name, "type": "application/x-msdownload\u202e", "data": base64.StdEncoding.EncodeToString([]byte("MZ\x90\x00"))}}})
	if status != http.StatusCreated {
		t.Fatalf("POST /api/threads: %d %s", status, body)
	}
	if got := formatIn(string(decodeJSONString(t, body))); got != "" {
		t.Errorf("the POST's answer holds %+q: %s", got, body)
	}
	var created struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &created)
	var th consoleThread
	waitFor(t, 60*time.Second, "the answer and the notice", func() bool {
		_, raw := api.do("GET", "/api/threads/"+created.ID, nil)
		th = consoleThread{}
		json.Unmarshal(raw, &th)
		answered, told := false, false
		for _, m := range th.Messages {
			answered = answered || strings.Contains(m.Text, "Looked at it.")
			told = told || (m.Role != "user" && strings.Contains(m.Text, "attached file"))
		}
		return answered && told
	})
	listed := false
	for _, m := range th.Messages {
		if got := formatIn(m.Text); got != "" {
			t.Errorf("the console's %s message %q holds %+q", m.Role, m.Text, got)
		}
		for _, f := range m.Files {
			listed = true
			if got := formatIn(f.Name + f.Type); got != "" || f.Name != "invoicefdp.exe" {
				t.Errorf("the console lists the file as %+q (type %+q), want \"invoicefdp.exe\" without %+q", f.Name, f.Type, got)
			}
		}
		if m.Role != "user" && strings.Contains(m.Text, "attached file") && !strings.Contains(m.Text, "invoicefdp.exe") {
			t.Errorf("the notice %q does not name the file as invoicefdp.exe", m.Text)
		}
	}
	if !listed {
		t.Errorf("the console lists no file under the message: %+v", th.Messages)
	}
	var q string
	for _, req := range fake.Requests() {
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "Files attached to") {
				q = m.Content
			}
		}
	}
	if !strings.Contains(q, `<file name="invoicefdp.exe"`) || formatIn(q) != "" {
		t.Errorf("the model was given %+q: want the file named invoicefdp.exe, no format characters", q)
	}
}

// TestSlackFileNameBidi (issue 40, item 8): the notice in a Slack thread
// names an attached file without the bidirectional controls in its
// name, and so does the file element the model is given.
func TestSlackFileNameBidi(t *testing.T) {
	t.Parallel()
	r := newSlackRig(t, 1, 0, true)
	p := r.start(t)
	defer p.stop(t)
	ev := mention("C1", "1700400000.000100", "what is this?")
	ev["files"] = []any{r.slack.AddFile("invoice\u202efdp.exe", "application/x-msdownload", []byte("MZ\x90\x00"))}
	if _, err := r.slack.Push("EvB1", ev); err != nil {
		t.Fatal(err)
	}
	waitReply(t, r.slack, "C1", "1700400000.000100", "All done.")
	told := waitReply(t, r.slack, "C1", "1700400000.000100", "attached file")
	if got := formatIn(told.Text); got != "" || !strings.Contains(told.Text, "invoicefdp.exe") {
		t.Errorf("the thread was told %+q: want invoicefdp.exe named without %+q", told.Text, got)
	}
	if q := fileRequestContent(r); !strings.Contains(q, `<file name="invoicefdp.exe"`) || formatIn(q) != "" {
		t.Errorf("the model was given %+q: want the file named invoicefdp.exe, no format characters", q)
	}
}

// decodeJSONString returns raw with JSON's \u escapes decoded, so the
// characters they stand for can be looked for.
func decodeJSONString(t testing.TB, raw []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				b.WriteString(k + "\n")
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		case string:
			b.WriteString(v + "\n")
		}
	}
	walk(v)
	return []byte(b.String())
}

// TestConsoleMessageOverStoreLimit (issue 40, item 9): on etcd a console
// message whose files' types are padded to 40 KB was refused as "the
// bot's database is unavailable" after etcd refused the write
// ("request is too large"). A file's type is bounded: the message is
// refused as too large (413), naming the limit, before the store is
// asked. The same files with their real types go through: what does
// not fit the message as stored is described, and the thread answered.
func TestConsoleMessageOverStoreLimit(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	script := fakeopenai.Script(func(string) []fakeopenai.Reply {
		return []fakeopenai.Reply{donePlan(), {Content: "Read them."}}
	})
	fake := &fakeopenai.Server{Respond: func(req *openai.ChatCompletionRequest) fakeopenai.Reply { return script(req) }}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "unused.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0",
		"PINPLAN_ETCD_ENDPOINTS": etcd.Endpoint, "PINPLAN_ETCD_PREFIX": "/pinplan/", "PINPLAN_REPLICA_ID": "r0",
		"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test"}, botBinary)
	defer p.stop(t)
	api := apiClient{t, p.URL}
	files := func(typ string) []map[string]string {
		var out []map[string]string
		for i := range 10 {
			data := strings.Repeat(fmt.Sprintf("line %d of a note\n", i), 90<<10/18)
			out = append(out, map[string]string{"name": fmt.Sprintf("note%d.txt", i), "type": typ, "data": base64.StdEncoding.EncodeToString([]byte(data))})
		}
		return out
	}
	padded := "text/plain; x=" + strings.Repeat("a", 40<<10)
	status, body := api.do("POST", "/api/threads", map[string]any{"text": "read these", "files": files(padded)})
	var refused struct {
		Error string `json:"error"`
	}
	json.Unmarshal(body, &refused)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(refused.Error, "type") || !strings.Contains(refused.Error, "255") {
		t.Errorf("a message with 40 KB file types: %d %s, want 413 saying a type's limit (255 characters)", status, body)
	}
	status, body = api.do("POST", "/api/threads", map[string]any{"text": "read these", "files": files("text/plain")})
	if status != http.StatusCreated {
		t.Fatalf("a message with 10 files of 90 KiB: %d %s, want 201", status, body)
	}
	var created struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &created)
	waitFor(t, 60*time.Second, "the answer", func() bool {
		_, raw := api.do("GET", "/api/threads/"+created.ID, nil)
		return strings.Contains(string(raw), "Read them.")
	})
	if log := p.stderr.String(); strings.Contains(log, "request is too large") {
		t.Errorf("etcd refused a write as too large:\n%s", log)
	}
}

// TestDemoPlansFromTheMessageNotItsFiles (issue 40, item 12): in the
// demo, a message with a file attached is planned from what the person
// wrote, not from the wrapper the files are quoted to the model in.
func TestDemoPlansFromTheMessageNotItsFiles(t *testing.T) {
	t.Parallel()
	p := demoBot(t, "20ms")
	defer p.stop(t)
	api := apiClient{t, p.URL}
	status, body := api.do("POST", "/api/threads", map[string]any{"text": "plan the team offsite",
		"files": []map[string]string{{"name": "budget.txt", "type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("2000 EUR"))}}})
	if status != http.StatusCreated {
		t.Fatalf("POST /api/threads: %d %s", status, body)
	}
	var created struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &created)
	var first string
	waitFor(t, 60*time.Second, "the demo's plan", func() bool {
		th := api.thread(created.ID)
		if th.Thread.Plan == nil || len(th.Thread.Plan.Items) == 0 {
			return false
		}
		first = th.Thread.Plan.Items[0].Content
		return true
	})
	if first != "Read the request: plan the team offsite" {
		t.Errorf("the plan's first item is %q, want %q", first, "Read the request: plan the team offsite")
	}
}

// runBot runs the binary with env to its end (a command, or a serve
// that stops at once), within a deadline, and returns its output.
func runBot(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, botBinary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("bot %q did not end within 30 s\nstderr:\n%s", args, errb.String())
	}
	return out.String(), errb.String(), err
}

// TestTokenShapesRefusedBeforeConnecting (issue 40, item 15): a Slack
// bot token that is no bot token (hello, a user token) or a Discord
// token given with its "Bot " prefix stops the start with a message
// naming the key, without the token, before any call to the platform.
func TestTokenShapesRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	slack := &fakeslack.Server{}
	ss := httptest.NewServer(slack)
	defer ss.Close()
	ds := httptest.NewServer(&fakediscord.Server{})
	defer ds.Close()
	base := func(extra map[string]string) map[string]string {
		env := map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "SLACK_API_URL": ss.URL + "/api/", "DISCORD_API_URL": ds.URL}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	for _, tc := range []struct {
		name, key, token string
		env              map[string]string
	}{
		{"hello", "SLACK_BOT_TOKEN", "hello", map[string]string{"SLACK_BOT_TOKEN": "hello", "SLACK_APP_TOKEN": "xapp-test-token"}},
		{"user token", "SLACK_BOT_TOKEN", "xoxp-1-2-3-usersecret", map[string]string{"SLACK_BOT_TOKEN": "xoxp-1-2-3-usersecret", "SLACK_APP_TOKEN": "xapp-test-token"}},
		{"Bot prefix", "DISCORD_BOT_TOKEN", "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", map[string]string{"DISCORD_BOT_TOKEN": "Bot OTAwMDAwMDAwMDAwMDAwMDAx.fake.token"}},
	} {
		_, stderr, err := runBot(t, base(tc.env), "-demo")
		if err == nil || !strings.Contains(stderr, tc.key) || strings.Contains(stderr, tc.token) {
			t.Errorf("%s: exit %v, stderr %q: want a refusal naming %s, without the token", tc.name, err, stderr, tc.key)
		}
	}
	if calls := slack.Calls(""); len(calls) > 0 {
		t.Errorf("Slack was called with a token of the wrong shape: %+v", calls)
	}
}

// TestUnknownSettingWarned (issue 40, item 15): a PINPLAN_ name in the
// environment that is no setting is said in the log, with the setting it
// is nearest to; the bot still starts.
func TestUnknownSettingWarned(t *testing.T) {
	t.Parallel()
	p := startBot(t, map[string]string{"PINPLAN_DB": filepath.Join(t.TempDir(), "p.db"), "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_MAX_ROUND": "5"}, botBinary, "-demo")
	defer p.stop(t)
	waitFor(t, 10*time.Second, "the warning", func() bool { return strings.Contains(p.stderr.String(), "PINPLAN_MAX_ROUND") })
	if log := p.stderr.String(); !strings.Contains(log, "did you mean PINPLAN_MAX_ROUNDS?") || !strings.Contains(log, "level=WARN") {
		t.Errorf("the log says:\n%s\nwant a warning naming PINPLAN_MAX_ROUND with \"did you mean PINPLAN_MAX_ROUNDS?\"", log)
	}
}

// TestCLINits (issue 40, item 17): `help -h` prints help's usage; an
// extra argument after -demo is named as the unknown command it is;
// compact and migrate on a DB that does not exist explain as backup
// does; migrate says "no read marks" rather than "read marks []", and
// into a prefix that holds pinplan's data says how to clear it.
func TestCLINits(t *testing.T) {
	t.Parallel()
	out, _, err := runWith(nil, "help", "-h")
	if err != nil || !strings.Contains(out, "help") {
		t.Errorf("help -h: %v, stdout %q; want help's usage", err, out)
	}
	if _, _, err := runWith(nil, "-demo", "extra"); err == nil || !strings.Contains(err.Error(), `unknown command "extra"`) {
		t.Errorf("-demo extra: %v; want the unknown command named", err)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "nothere.db")
	if _, _, err := runWith(map[string]string{"PINPLAN_DB": missing}, "compact", filepath.Join(dir, "out.db")); err == nil ||
		!strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "PINPLAN_DB") {
		t.Errorf("compact with no DB: %v; want it to say the DB does not exist and name PINPLAN_DB", err)
	}
	etcd := etcdtest.Start(t)
	env := map[string]string{"PINPLAN_DB": missing, "PINPLAN_ETCD_ENDPOINTS": etcd.Endpoint, "PINPLAN_ETCD_PREFIX": "/cli/"}
	if _, _, err := runWith(env, "migrate", "-to", "etcd"); err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "PINPLAN_DB") {
		t.Errorf("migrate with no DB: %v; want it to say the DB does not exist and name PINPLAN_DB", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("migrate created %s", missing)
	}
	db, err := store.Open(missing, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	out, _, err = runWith(env, "migrate", "-to", "etcd")
	if err != nil || strings.Contains(out, "[]") || !strings.Contains(out, "no read marks") {
		t.Errorf("migrate of a file with no read marks: %v, said %q; want \"no read marks\"", err, out)
	}
	db, err = store.Open(missing, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(db.SaveMarks(context.Background(), "discord", []byte(`{"channels":{}}`)), db.Close()); err != nil {
		t.Fatal(err)
	}
	env["PINPLAN_ETCD_PREFIX"] = "/cli2/"
	if out, _, err = runWith(env, "migrate", "-to", "etcd"); err != nil || !strings.Contains(out, "read marks of discord") {
		t.Errorf("migrate of a file with Discord's read marks: %v, said %q; want \"read marks of discord\"", err, out)
	}
	_, _, err = runWith(env, "migrate", "-to", "etcd")
	if err == nil || !strings.Contains(err.Error(), "etcdctl --endpoints="+etcd.Endpoint+" del --prefix /cli2/") {
		t.Errorf("migrate into a used prefix: %v; want how to clear it (etcdctl ... del --prefix /cli2/)", err)
	}
}
