package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite ../docs/settings.md from the settings")

const referencePath = "../docs/settings.md"

// reference renders docs/settings.md: every setting under its group, with
// the default and accepted values Load applies and the doc of settings.
func reference(t testing.TB) string {
	t.Helper()
	notes := map[string]note{}
	if _, err := load(func(string) string { return "" }, notes); err != nil {
		t.Fatalf("the defaults do not load: %v", err)
	}
	var b strings.Builder
	b.WriteString(`# Settings

<!-- Generated from config/settings.go and config.Load's defaults by
     go test ./config -run TestSettingsReference -update
     Edit those, not this page: the test fails when they differ. -->

Settings are environment variables. ` + "`PINPLAN_CONFIG`" + ` may name a TOML
file with the same keys in lower case (` + "`pinplan_db = \"/var/lib/pinplan/pinplan.db\"`" + `);
a key set in the environment wins over the file, and the file refuses a key
that is no setting. An invalid value stops the start with a message naming
the key. A ` + "`PINPLAN_`" + ` variable that is no setting is warned of at start,
with the nearest setting's name. Secrets are never printed: not in logs,
errors, ` + "`/readyz`" + ` or ` + "`/metrics`" + `.

MCP tool servers are tables of the same file: see [Tools](tools.md).
`)
	var groups []string
	for _, s := range settings {
		if !slices.Contains(groups, s.group) {
			groups = append(groups, s.group)
		}
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "\n## %s\n\n| key | default | accepts | meaning |\n|---|---|---|---|\n", g)
		for _, s := range settings {
			if s.group != g {
				continue
			}
			n, ok := notes[s.name]
			if !ok {
				t.Errorf("%s is in settings, but Load does not read it", s.name)
			}
			def := "-"
			switch {
			case n.def != "":
				def = "`" + n.def + "`"
			case s.unset != "":
				def = s.unset
			}
			accepts := n.accepts
			if accepts == "text" && s.kind != "" {
				accepts = s.kind
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.name, def, accepts, strings.ReplaceAll(s.doc, "|", `\|`))
		}
	}
	return b.String()
}

// TestSettingsReference keeps docs/settings.md the rendering of settings:
// a setting added, removed, renamed, re-documented or given another
// default fails it until the page is regenerated with -update.
func TestSettingsReference(t *testing.T) {
	want := reference(t)
	if *update {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./config -run TestSettingsReference -update)", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from the settings at line %d:\ngot  %s\nwant %s\nregenerate it: go test ./config -run TestSettingsReference -update", referencePath, i+1, g, w)
			}
		}
	}
}

// TestSettingsAreDocumented: every setting has a doc and a group, no name
// is listed twice, and every key Load reads is listed (the loader panics
// on one that is not, so loading the defaults proves it).
func TestSettingsAreDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range settings {
		if seen[s.name] {
			t.Errorf("%s is listed twice", s.name)
		}
		seen[s.name] = true
		if strings.TrimSpace(s.doc) == "" || s.group == "" {
			t.Errorf("%s has no doc or no group", s.name)
		}
	}
	notes := map[string]note{}
	if _, err := load(func(string) string { return "" }, notes); err != nil {
		t.Fatal(err)
	}
	if len(notes) != len(settings) {
		t.Errorf("Load reads %d keys, settings lists %d", len(notes), len(settings))
	}
}

// TestDocsNameOnlySettings: every PINPLAN_, OPENAI_, SLACK_ or DISCORD_
// name the README and docs/ mention in code is a setting (or
// PINPLAN_CONFIG), so a page cannot send anyone to a misspelt or removed
// one.
func TestDocsNameOnlySettings(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	name := regexp.MustCompile(`\b((?:PINPLAN|OPENAI|SLACK|DISCORD)_[A-Z0-9_]*[A-Z0-9])\b`)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "PINPLAN_CONFIG" && !slices.Contains(keys, m[1]) {
				t.Errorf("%s names %s, which is no setting", p, m[1])
			}
		}
	}
}
