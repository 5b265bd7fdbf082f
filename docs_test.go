package pinplan_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEFirstScreen: the README's first code block, within its first
// screen, is the two commands: the one that runs pinplan (./run, which
// deploy's TestRunScript runs) and the one that runs the tests.
func TestREADMEFirstScreen(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start, end := -1, -1
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			if start < 0 {
				start = i
			} else {
				end = i
				break
			}
		}
	}
	if start < 0 || end < 0 || end > 24 {
		t.Fatalf("README.md: the first code block spans lines %d to %d; want it closed within the first 24 lines", start+1, end+1)
	}
	block := lines[start+1 : end]
	if len(block) != 2 || !strings.HasPrefix(block[0], "./run -demo ") || !strings.HasPrefix(block[1], "go test ./... ") {
		t.Errorf("README.md's first code block:\n%s\nwant `./run -demo` and `go test ./...`, each with what it does", strings.Join(block, "\n"))
	}
}

// slug is GitHub's anchor for a Markdown heading.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// TestDocLinks: every relative link of README.md and docs/ names a file
// that exists and, with a #fragment, a heading of that file.
func TestDocLinks(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := p
			if file != "" {
				path = filepath.Join(filepath.Dir(p), file)
			}
			tb, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s links to %s: %v", p, target, err)
				continue
			}
			if frag == "" {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(tb), -1) {
				if slug(h[1]) == frag {
					found = true
				}
			}
			if !found {
				t.Errorf("%s links to %s: %s has no such heading", p, target, path)
			}
		}
	}
}
