package slack

import (
	"slices"
	"testing"
)

// TestBotScopesAreTheManifests: an install by OAuth asks for the scopes
// the manifest declares, no more and no fewer.
func TestBotScopesAreTheManifests(t *testing.T) {
	lists, _ := manifestLists(t)
	want := slices.Sorted(slices.Values(lists["bot"]))
	got := slices.Sorted(slices.Values(BotScopes))
	if !slices.Equal(got, want) {
		t.Errorf("BotScopes %v, the manifest's bot scopes %v", got, want)
	}
}
