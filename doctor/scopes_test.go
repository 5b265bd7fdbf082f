package doctor

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pinplan/pinplan/internal/fakeslack"
)

// TestManifestScopes: the scopes doctor checks, and those the Slack fake
// grants by default, are the bot scopes slack-app-manifest.yaml asks for.
func TestManifestScopes(t *testing.T) {
	raw, err := os.ReadFile("../slack-app-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var manifest []string
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "bot:":
			in = true
		case in && strings.HasPrefix(trimmed, "- "):
			scope, _, _ := strings.Cut(strings.TrimPrefix(trimmed, "- "), "#")
			manifest = append(manifest, strings.TrimSpace(scope))
		case in && trimmed != "" && !strings.HasPrefix(trimmed, "#"):
			in = false
		}
	}
	var checked []string
	for _, s := range manifestScopes {
		checked = append(checked, s.name)
	}
	if len(manifest) == 0 || !slices.Equal(checked, manifest) {
		t.Errorf("doctor checks scopes %v, want the manifest's %v", checked, manifest)
	}
	if !slices.Equal(fakeslack.BotScopes, manifest) {
		t.Errorf("fakeslack grants %v, want the manifest's %v", fakeslack.BotScopes, manifest)
	}
}
