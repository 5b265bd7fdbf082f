package discord

import "time"

// Share spreads each channel's edit pace over n replicas (DESIGN §14):
// Discord's per-channel budget is the bot's, so n replicas together keep
// to it rather than multiply it. n below 1 counts as 1.
func (a *Adapter) Share(n int) {
	n = max(n, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.share = n
	for _, l := range a.limiters {
		every, burst := a.editEvery()
		l.SetPerMinute(float64(time.Minute) / float64(every))
		l.SetBurst(burst)
	}
}

// editEvery is the pace of one channel's edits on this replica; called
// with a.mu held.
func (a *Adapter) editEvery() (time.Duration, int) {
	n := max(a.share, 1)
	return a.opts.EditEvery * time.Duration(n), max(3/n, 1)
}
