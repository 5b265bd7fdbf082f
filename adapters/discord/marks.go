package discord

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"golang.org/x/time/rate"
)

// Read marks. Discord replays missed events only to a session that
// resumes; a new session (after op 9, a non-resumable close, a restart
// of the process, or the gateway moving to another replica) gets
// nothing of what was sent in the gap. So the adapter keeps, per channel
// it listens in, the newest message it handled (a mark), and on every
// READY fetches, in each channel heard from in the hour before the gap
// began, the messages after the mark, oldest first. They go through the
// same queue and dedupe as live ones, so nothing runs twice.
//
// The marks are saved in Options.Marks, a record a shard, so that a
// restarted process or the next replica to hold the shard has them: a
// channel's first mark before its message is handed on, later ones at
// most marksEvery after.
// A saved mark behind the truth only refetches messages the dedupe
// already knows. Messages older than staleAfter are not caught up: their
// dedupe keys may be gone, so whether they ran cannot be told.
const (
	marksName     = "discord"   // the record in the MarkStore (marksRecord)
	marksEvery    = time.Second // how often changed marks are saved
	catchUpWindow = time.Hour   // channels heard from this long before a gap are caught up
	catchUpPages  = 5           // pages of 100 fetched per channel at most
	staleAfter    = agent.EventTTL - catchUpWindow
)

// catchUpPace bounds the fetches of one catch-up across channels, well
// under Discord's global 50 requests a second.
var catchUpPace = rate.Limit(10)

// seenChannel is a channel's mark.
type seenChannel struct {
	Last    string    `json:"last"`            // message id (a snowflake)
	GuildID string    `json:"guild,omitempty"` // REST messages carry no guild_id
	At      time.Time `json:"at"`              // when the message was handled
}

// savedMarks is the record kept in the MarkStore.
type savedMarks struct {
	Saved    time.Time              `json:"saved"` // the process was alive then
	Channels map[string]seenChannel `json:"channels"`
}

// markSeen advances channel's mark to id, the newest message handed on.
// A channel's first mark is saved before returning; later ones within
// marksEvery.
func (a *Adapter) markSeen(ctx context.Context, channel, guild, id string) {
	a.mu.Lock()
	cur, known := a.seen[channel]
	if known && !newer(id, cur.Last) {
		a.mu.Unlock()
		return
	}
	a.seen[channel] = seenChannel{Last: id, GuildID: guild, At: time.Now()}
	a.dirty = true
	if known {
		a.scheduleSaveLocked()
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.saveMarks(ctx)
}

// markBefore gives a channel without a mark one just before message id,
// saved before returning: the message is still to be fetched if the
// process dies before it is handed on.
func (a *Adapter) markBefore(ctx context.Context, channel, guild, id string) {
	a.mu.Lock()
	_, known := a.seen[channel]
	a.mu.Unlock()
	if known {
		return
	}
	if n, err := strconv.ParseUint(id, 10, 64); err == nil && n > 0 {
		a.markSeen(ctx, channel, guild, strconv.FormatUint(n-1, 10))
	}
}

// scheduleSaveLocked saves the marks marksEvery from now, or when the
// adapter's context ends, unless a save is scheduled already.
func (a *Adapter) scheduleSaveLocked() {
	if a.flushing || a.opts.Marks == nil || a.ctx == nil {
		return
	}
	a.flushing = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		select {
		case <-a.ctx.Done():
		case <-time.After(marksEvery):
		}
		a.mu.Lock()
		a.flushing = false
		a.mu.Unlock()
		a.saveMarks(a.ctx)
	}()
}

// saveMarks writes the marks if they changed, dropping those too old to
// be caught up ever again. It outlives a cancelled ctx by a few seconds,
// so that the last marks are saved on shutdown.
func (a *Adapter) saveMarks(ctx context.Context) {
	if a.opts.Marks == nil {
		return
	}
	// One save at a time, snapshot to write: a snapshot taken earlier
	// never lands over a newer one.
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	if !a.dirty {
		a.mu.Unlock()
		return
	}
	recs, closed := a.marksToSaveLocked(time.Now())
	a.dirty = false
	a.mu.Unlock()
	var err error
	for name, rec := range recs {
		data, merr := json.Marshal(rec)
		if merr == nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			merr = a.opts.Marks.SaveMarks(ctx, name, data)
			cancel()
		}
		err = cmp.Or(err, merr)
	}
	if err == nil {
		a.mu.Lock()
		for _, sh := range closed {
			sh.flush = false
		}
		a.mu.Unlock()
	}
	if err != nil {
		a.log.Warn("discord: save the read marks", "err", err)
		a.mu.Lock()
		a.dirty = true
		if a.ctx != nil && a.ctx.Err() == nil { // shutting down: this was the last try
			a.scheduleSaveLocked()
		}
		a.mu.Unlock()
	}
}

// marksToSaveLocked drops the marks too old to be caught up ever again
// and returns, by record name, the marks of each shard this process
// holds and has read the record of (at its READY), and of each it closed
// since its last save (closed lists those: their record is written once
// more, with the marks taken before the close). A shard held elsewhere,
// or held here but not read yet (waiting for its bucket, dialling), is
// not written: this process's view of it is older than the record, and
// writing it would lose the marks the shard's last holder saved.
//
// A record's Saved is when its shard's gap began, if it is down: a save
// never moves the start of a gap later than it was.
func (a *Adapter) marksToSaveLocked(now time.Time) (recs map[string]*savedMarks, closed []*shard) {
	recs = map[string]*savedMarks{}
	for _, sh := range a.shards {
		if sh.on && sh.loaded || sh.flush {
			saved := now
			if !sh.downSince.IsZero() && sh.downSince.Before(now) {
				saved = sh.downSince
			}
			recs[a.marksRecord(sh.id)] = &savedMarks{Saved: saved, Channels: map[string]seenChannel{}}
		}
		if !sh.on && sh.flush {
			closed = append(closed, sh)
		}
	}
	for ch, s := range a.seen {
		// Any later gap begins after now, so a mark this old is never
		// caught up from again; unless a catch-up is under way, which
		// began from marks older than that.
		if now.Sub(s.At) > catchUpWindow && a.catching == 0 {
			delete(a.seen, ch)
			continue
		}
		if rec := recs[a.marksRecord(ShardOf(s.GuildID, len(a.shards)))]; rec != nil {
			rec.Channels[ch] = s
		}
	}
	return recs, closed
}

// marksRecord names shard's record in the MarkStore: marksName for an
// unsharded gateway, marksName/<shard>-of-<count> else. (A new shard
// count starts without marks: its first sessions catch nothing up.)
func (a *Adapter) marksRecord(shard int) string {
	if len(a.shards) <= 1 {
		return marksName
	}
	return fmt.Sprintf("%s/%d-of-%d", marksName, shard, len(a.shards))
}

// loadMarks merges the saved marks into seen (the newer of two wins) and
// moves the start of sh's gap back to when they were saved, when that is
// earlier: the process that saved them (which may have held sh) stopped
// listening then.
func (a *Adapter) loadMarks(ctx context.Context, sh *shard) {
	if a.opts.Marks == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, err := a.opts.Marks.Marks(ctx, a.marksRecord(sh.id))
	if err != nil {
		a.log.Warn("discord: read the saved read marks; catching up only what this process saw", "err", err)
		return
	}
	if data == nil {
		return
	}
	var rec savedMarks
	if err := json.Unmarshal(data, &rec); err != nil {
		a.log.Warn("discord: the saved read marks are unreadable; ignored", "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch, s := range rec.Channels {
		if cur, ok := a.seen[ch]; !ok || newer(s.Last, cur.Last) {
			a.seen[ch] = s
		}
	}
	if sh.downSince.IsZero() || rec.Saved.Before(sh.downSince) {
		sh.downSince = rec.Saved
	}
}

// newer compares snowflakes: longer is newer, then by digits.
func newer(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

// onReady runs when a shard's gateway session starts (READY), in the
// shard's goroutine, so the catch-ups are queued on their channels before
// any event of the new session. The gap is the shard's own: only the
// channels of its guilds (its DMs on shard 0) are caught up, from when
// it went down; the other shards' sessions go on, and their channels'
// marks move on with them.
func (a *Adapter) onReady(sh *shard) {
	if a.ctx == nil {
		return
	}
	a.loadMarks(a.ctx, sh)
	a.mu.Lock()
	sh.loaded = sh.on // its record may be written from now on
	from := sh.downSince
	if from.IsZero() {
		from = time.Now()
	}
	sh.downSince = time.Time{}
	marks := map[string]seenChannel{}
	for ch, s := range a.seen {
		if from.Sub(s.At) <= catchUpWindow && s.Last != "" && ShardOf(s.GuildID, len(a.shards)) == sh.id {
			marks[ch] = s
		}
	}
	a.catching += len(marks)
	a.mu.Unlock()
	if len(marks) == 0 {
		return
	}
	a.log.Info("discord: new gateway session; fetching missed messages", "shard", sh.id, "channels", len(marks), "gap_began", from)
	pace := rate.NewLimiter(catchUpPace, 5)
	for ch, mark := range marks {
		a.queue.Add(ch, func() {
			defer func() {
				a.mu.Lock()
				a.catching--
				a.mu.Unlock()
			}()
			a.catchUp(a.ctx, ch, mark, pace)
		})
	}
}

// catchUpTries bounds the fetches of one page that fail (a 429, a 5xx, a
// timeout) before the channel's catch-up gives up; the channel's new
// messages wait behind it meanwhile, so that they cannot move its mark
// past what was not fetched.
const catchUpTries = 4

// catchUpBackoff is the wait after the first failed fetch; it doubles.
var catchUpBackoff = time.Second

// missedNotice is said in a channel whose missed messages could not all
// be fetched, so that whoever asked knows to ask again.
const missedNotice = "I was disconnected for a while and could not read every message sent here meanwhile. If you asked me something then, please send it again."

// catchUp fetches and processes the messages of channel after mark (or
// after the mark it has moved to since), oldest first, up to catchUpPages
// pages of 100.
func (a *Adapter) catchUp(ctx context.Context, channel string, mark seenChannel, pace *rate.Limiter) {
	s := mark
	for page := range catchUpPages {
		a.mu.Lock()
		if cur, ok := a.seen[channel]; ok && newer(cur.Last, s.Last) {
			s.Last = cur.Last
		}
		a.mu.Unlock()
		var msgs []*discordgo.Message
		var err error
		for try := range catchUpTries {
			if err := pace.Wait(ctx); err != nil {
				return
			}
			if msgs, err = a.s.ChannelMessages(channel, 100, "", s.Last, "", discordgo.WithContext(ctx)); err == nil {
				break
			}
			a.log.Warn("discord: fetch missed messages", "channel", channel, "try", try+1, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(catchUpBackoff << try):
			}
		}
		if err != nil {
			a.log.Error("discord: missed messages not fetched; telling the channel", "channel", channel, "after", s.Last, "err", err)
			a.tellMissed(ctx, channel)
			return
		}
		slices.SortFunc(msgs, func(x, y *discordgo.Message) int {
			switch {
			case x.ID == y.ID:
				return 0
			case newer(y.ID, x.ID):
				return -1
			}
			return 1
		})
		bot := a.bot()
		for _, m := range msgs {
			if m.GuildID == "" {
				m.GuildID = s.GuildID
			}
			if m.ChannelID == "" {
				m.ChannelID = channel
			}
			switch {
			case !m.Timestamp.IsZero() && time.Since(m.Timestamp) > staleAfter:
				a.log.Warn("discord: a missed message is too old to tell whether it ran; skipped", "channel", channel, "message", m.ID)
			case !a.ignorable(m, bot):
				a.process(ctx, m)
			}
			a.markSeen(ctx, channel, m.GuildID, m.ID)
		}
		if len(msgs) < 100 {
			return
		}
		if page == catchUpPages-1 {
			a.log.Warn("discord: more missed messages than a catch-up fetches; telling the channel", "channel", channel, "pages", catchUpPages)
			a.tellMissed(ctx, channel)
		}
	}
}

// tellMissed says missedNotice in the channel, pinging nobody, through
// the router's one delivery step (a few attempts: Discord may be failing
// still, which the router's log says).
func (a *Adapter) tellMissed(ctx context.Context, channel string) {
	th := chat.Thread{Platform: "discord", Key: Key(channel), Channel: channel}
	a.in.Tell(ctx, th, "", missedNotice)
}
