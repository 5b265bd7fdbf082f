package slack

import "golang.org/x/time/rate"

// Share divides the workspace's budgets (posts, edits, pins, stream
// appends) by n, the replicas sharing this workspace (DESIGN §14): the
// budget is Slack's per workspace, so n replicas together keep to it
// rather than multiply it. Each replica takes an even share, whatever its
// own load; n below 1 counts as 1.
func (a *Adapter) Share(n int) {
	n = max(n, 1)
	a.budgets.setShare(n)
	a.appends.SetLimit(rate.Limit(a.opts.AppendsPerMinute / 60 / float64(n)))
	a.appends.SetBurst(max(5/n, 1))
}
