package slack

// Share divides each workspace's budgets (posts, edits, pins, stream
// appends) by n, the replicas sharing the workspaces (DESIGN §14): a
// budget is Slack's per workspace, so n replicas together keep to it
// rather than multiply it. Each replica takes an even share, whatever its
// own load; n below 1 counts as 1.
func (a *Adapter) Share(n int) {
	n = max(n, 1)
	a.mu.Lock()
	a.share = n
	spaces := make([]*workspace, 0, len(a.spaces)+1)
	for _, w := range a.spaces {
		spaces = append(spaces, w)
	}
	a.mu.Unlock()
	if a.one != nil {
		spaces = append(spaces, a.one)
	}
	for _, w := range spaces {
		w.budgets.setShare(n)
	}
}
