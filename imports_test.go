package pinplan_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/pinplan/pinplan"

// allowed lists, for each package, the packages of this module it may
// depend on (directly or not), following DESIGN.md §1: cmd/bot -> adapters
// -> chat -> agent -> todo; store implements agent's and chat's interfaces;
// adapters never import store or each other; config imports nothing of ours.
// internal/serial, the one serial executor, imports nothing of ours and
// sits under agent, so whatever depends on agent depends on it. etcdstore
// implements the same interfaces as store, and neither imports the other.
// replica runs sessions across processes on etcd (DESIGN §14): it sits
// beside the adapters, over chat, agent and etcdstore, and knows no
// adapter (what it needs of one is a small interface).
var allowed = map[string][]string{
	"todo":               {},
	"config":             {},
	"httphost":           {},
	"internal/serial":    {},
	"agent":              {"todo", "internal/serial"},
	"store":              {"agent", "todo", "internal/serial", "internal/boardrec"},
	"etcdstore":          {"agent", "todo", "internal/serial", "internal/boardrec"},
	"internal/boardrec":  {},
	"internal/storetest": {"agent", "todo", "internal/serial"},
	"internal/etcdtest":  {},
	"mcp":                {"agent", "todo", "internal/serial", "config"},
	"chat":               {"agent", "todo", "internal/serial"},
	"chat/chattest":      {"agent", "todo", "internal/serial"},
	"adapters/web":       {"chat", "agent", "todo", "internal/serial"},
	"adapters/slack":     {"chat", "agent", "todo", "internal/serial", "adapters/slack/install"},
	"adapters/discord":   {"chat", "agent", "todo", "internal/serial"},
	// adapters/slack/install is the Slack installations (OAuth, sealed
	// tokens, refresh): it keeps them through a small Store interface,
	// so it imports nothing of ours.
	"adapters/slack/install": {},
	"replica":                {"chat", "agent", "todo", "internal/serial", "etcdstore", "internal/boardrec"},
	"internal/golden":        {},
	// migrate copies the bbolt store into etcd (bot migrate -to etcd):
	// the one package that holds both stores; it reads the settings as
	// doctor does. tracing wraps the OpenTelemetry SDK and imports
	// nothing of ours. cli is bot's command line, and imports nothing of
	// ours either.
	"migrate": {"store", "etcdstore", "agent", "todo", "internal/serial", "internal/boardrec", "config"},
	"tracing": {},
	"cli":     {},
	// doctor is `bot doctor`, the settings' checks without serving: it
	// asks the platforms over plain HTTP, so it knows no adapter.
	"doctor": {"config", "agent", "todo", "internal/serial", "mcp", "store", "etcdstore", "internal/boardrec"},
	// demo is the scripted model of bot -demo.
	"demo": {"agent", "todo", "internal/serial"},
	// metrics is the Prometheus series: it measures the agent, chat's
	// deliveries, the MCP servers and the replica; cmd/bot wires it.
	"metrics":              {"agent", "chat", "mcp", "etcdstore", "todo", "internal/serial", "config", "internal/boardrec"},
	"internal/plantest":    {"chat", "agent", "todo", "internal/serial"},
	"internal/inboxtest":   {"chat", "agent", "todo", "internal/serial"},
	"internal/fakeopenai":  {},
	"internal/fakeslack":   {},
	"internal/fakediscord": {},
	// cmd/soak drives the built bot binary as a user would: through the
	// fakes, never through pinplan's own packages (todo only encodes the
	// model's todo_write arguments).
	"cmd/soak": {"internal/fakeopenai", "internal/fakeslack", "internal/fakediscord", "todo"},
	// deploy holds only tests of the install recipes (release.sh, the
	// Dockerfile, compose.yaml, the systemd unit); they load settings
	// through config.
	"deploy": {},
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.ImportPath, module+"/") {
			continue
		}
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		if rel == "cmd/bot" {
			continue // the composition root may import everything
		}
		rules, ok := allowed[rel]
		if !ok {
			t.Errorf("package %s has no import rule; add it to allowed", rel)
			continue
		}
		seen++
		for _, d := range p.Deps {
			if !strings.HasPrefix(d, module+"/") {
				if rel == "todo" && !isStd(d) {
					t.Errorf("todo imports %s; it may import only the standard library", d)
				}
				continue
			}
			dep := strings.TrimPrefix(d, module+"/")
			if !contains(rules, dep) {
				t.Errorf("%s depends on %s, which DESIGN.md §1 forbids", rel, dep)
			}
		}
	}
	if seen < 5 {
		t.Errorf("checked only %d packages", seen)
	}
}

func isStd(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
