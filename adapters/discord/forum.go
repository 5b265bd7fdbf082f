package discord

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/pinplan/pinplan/chat"
)

// Forum channels as task boards (DESIGN §20). A forum (type 15) or a
// media channel (type 16) holds posts: public threads whose parent is
// the forum, whose starter message has the thread's id, and which carry
// applied_tags, ids of the forum's available_tags. A post whose starter
// message mentions the bot, or any post in a forum of Options.Forums, is
// a session keyed by the post (Key): its task is the post's title and
// starter message, and its plan is posted and pinned in it as in any
// thread.
//
// The post's tags follow the run (runTag): planning when the session
// starts, then the tag of each plan rendered. The bot's run tags replace
// each other; people's other tags stay. Discord's limits hold: at most
// 20 tags on a forum (a missing run tag is created on it only where
// there is room, said once per forum) and 5 on a post (a post whose
// people's tags fill it is left alone, said once). Changing a forum's
// tags needs Manage Channels and changing another's post's tags Manage
// Threads (Discord's Modify Channel); where either is refused the
// forum's tags are left alone until the forum changes (CHANNEL_UPDATE:
// its permissions may have), said once per forum. A tag change never holds up the plan: it runs on the
// forum's own lane after the render, and only when the tag changes.
//
// A post closed (archived) by a person while its session exists ends
// the turn as the plan's Stop does, as the post's owner (only the owner,
// or a member with Manage Threads, may close a post). A reopened post
// goes on as any thread: its next message is a follow-up. The bot never
// archives a post, so every archive it hears of is a person's (or
// Discord's, after the post's inactivity).

// The run tags, in the order they are created on a forum.
const (
	tagPlanning = "planning"
	tagWorking  = "working"
	tagWaiting  = "waiting"
	tagDone     = "done"
	tagStopped  = "stopped"
)

var runTags = []string{tagPlanning, tagWorking, tagWaiting, tagDone, tagStopped}

// Discord's limits on tags (Channel resource: forum tag object, Modify
// Channel).
const (
	maxForumTags = 20
	maxPostTags  = 5
)

// forumStopName is who stopped a turn, as the plan's footer says it:
// "stopped by closing the post". The event does not say who closed it.
const forumStopName = "closing the post"

// forums is what the adapter knows of forums and their posts, from the
// gateway (GUILD_CREATE, CHANNEL_UPDATE, THREAD_CREATE, THREAD_UPDATE)
// and its own requests. The zero value is ready.
type forums struct {
	mu     sync.Mutex            // guards the maps and what they point to
	boards map[string]*forumInfo // by forum id
	posts  map[string]*forumPost // by post (thread) id
}

// forumInfo is a forum as last seen.
type forumInfo struct {
	tags     []discordgo.ForumTag // its available tags; nil until known
	known    bool                 // tags were told or fetched
	noManage bool                 // tags are left alone here until the forum changes
	said     bool                 // that they are left alone was logged
	dirty    map[string]bool      // posts whose run tag is to be set
}

// forumPost is a post as last seen, and the run tag the bot wants on it.
type forumPost struct {
	forum, owner, title string
	guild               string   // its guild, whose shard hears of it
	applied             []string // its tags, as Discord last said
	archived, locked    bool
	want                string // the run tag the bot wants; "" before any
	full                bool   // people's tags fill it (said once)
	// rendered: a plan of the post's session was rendered here, so its
	// run tag is this process's to keep; a replica that only heard the
	// post's mention (planning) leaves the owner's tag alone.
	rendered bool
	// active is when its newest message the adapter saw was sent;
	// autoArchive is its auto_archive_duration (the inactivity after
	// which Discord archives it); archivedAt its archive_timestamp (when
	// it was last archived or reopened); last its last_message_id.
	active      time.Time
	autoArchive time.Duration
	archivedAt  time.Time
	last        string
}

// isForum reports whether a channel of type t holds posts.
func isForum(t discordgo.ChannelType) bool {
	return t == discordgo.ChannelTypeGuildForum || t == discordgo.ChannelTypeGuildMedia
}

// boardLocked returns forum id's record, made when new.
func (f *forums) boardLocked(id string) *forumInfo {
	if f.boards == nil {
		f.boards = map[string]*forumInfo{}
	}
	b, ok := f.boards[id]
	if !ok {
		b = &forumInfo{}
		f.boards[id] = b
	}
	return b
}

// notePost records what the gateway or a lookup told of a thread: a
// post known already, or a new one when its parent is a forum (create).
// It returns the post's record, nil for another thread.
func (f *forums) notePost(ch *discordgo.Channel, create bool) *forumPost {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch == nil || ch.ID == "" || ch.ParentID == "" {
		return nil
	}
	p, ok := f.posts[ch.ID]
	switch {
	case ok:
	case !create:
		return nil
	default:
		f.boardLocked(ch.ParentID)
		if f.posts == nil {
			f.posts = map[string]*forumPost{}
		}
		p = &forumPost{forum: ch.ParentID}
		f.posts[ch.ID] = p
	}
	p.owner, p.title = cmp.Or(ch.OwnerID, p.owner), cmp.Or(ch.Name, p.title)
	p.guild = cmp.Or(ch.GuildID, p.guild)
	p.applied = slices.Clone(ch.AppliedTags)
	if md := ch.ThreadMetadata; md != nil {
		p.archived, p.locked = md.Archived, md.Locked
		p.autoArchive = time.Duration(md.AutoArchiveDuration) * time.Minute
		p.archivedAt = md.ArchiveTimestamp
	}
	if ch.LastMessageID != "" && newer(ch.LastMessageID, p.last) {
		p.last = ch.LastMessageID
	}
	return p
}

// drop forgets a post that is no session: a new one is noted again by
// the events that tell of it, or looked up.
func (f *forums) drop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.posts, id)
}

// touch notes a message sent in channel at, if it is a post.
func (f *forums) touch(channel string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.posts[channel]; ok && at.After(p.active) {
		p.active = at
	}
}

// closedByPerson reports whether post id, just archived (now, as the
// THREAD_UPDATE tells it; before, as known until then), was closed by a
// person and not by Discord after its inactivity. Discord archives a
// post auto_archive_duration after its last activity: its newest
// message (last_message_id: a snowflake holds its time), its creation
// (the post's id) or its last reopening (the archive_timestamp before);
// an archive stamped at or after that is Discord's. The payload decides,
// so a process that saw none of the post's messages (restarted, or its
// shard moved here) tells the two apart as well. A post whose payload
// tells neither its duration nor its archive time counts as closed.
func closedByPerson(id string, before, now forumPost) bool {
	if now.autoArchive <= 0 || now.archivedAt.IsZero() {
		return true
	}
	active := before.active
	for _, t := range []time.Time{snowflakeTime(id), snowflakeTime(now.last), before.archivedAt} {
		if t.After(active) {
			active = t
		}
	}
	if active.IsZero() {
		return true
	}
	return now.archivedAt.Before(active.Add(now.autoArchive))
}

// discordEpoch is the first millisecond of 2015 (Unix ms), where
// snowflakes count from.
const discordEpoch = 1420070400000

// snowflakeTime is when snowflake id was made, (id >> 22) ms after
// discordEpoch; zero for an id that is none.
func snowflakeTime(id string) time.Time {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n>>22 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(n>>22) + discordEpoch)
}

// noteForum records a forum's available tags.
func (f *forums) noteForum(ch *discordgo.Channel) {
	if ch == nil || !isForum(ch.Type) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boardLocked(ch.ID)
	b.tags, b.known = slices.Clone(ch.AvailableTags), true
}

// post returns a copy of the post's record.
func (f *forums) post(id string) (forumPost, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.posts[id]; ok {
		return *p, true
	}
	return forumPost{}, false
}

// forumGuild notes the forums and posts of a GUILD_CREATE.
func (a *Adapter) forumGuild(chans, threads []*discordgo.Channel) {
	forumIDs := map[string]bool{}
	for _, ch := range chans {
		if ch != nil && isForum(ch.Type) {
			a.forums.noteForum(ch)
			forumIDs[ch.ID] = true
		}
	}
	for _, th := range threads {
		if th != nil {
			a.forums.notePost(th, forumIDs[th.ParentID])
		}
	}
}

// addForumHandlers adds the handlers of forum.go to a gateway session.
func (a *Adapter) addForumHandlers(s *discordgo.Session) {
	s.AddHandler(a.onThreadCreate)
	s.AddHandler(a.onThreadUpdate)
	s.AddHandler(a.onChannelCreate)
	s.AddHandler(a.onChannelUpdate)
	s.AddHandler(a.onThreadDelete)
}

// onChannelCreate and onChannelUpdate learn a forum's tags as they
// change: a moderator's edit, or the bot's own.
func (a *Adapter) onChannelCreate(_ *discordgo.Session, ev *discordgo.ChannelCreate) {
	a.forumChannel(ev.Channel)
}

// A forum changed (its permission overwrites among what may have) is
// tried again: its tags are left alone only while the bot is refused.
func (a *Adapter) onChannelUpdate(_ *discordgo.Session, ev *discordgo.ChannelUpdate) {
	if ev.Channel == nil || !isForum(ev.Type) {
		return
	}
	a.forums.mu.Lock()
	a.forums.boardLocked(ev.ID).noManage = false
	a.forums.mu.Unlock()
	a.forumChannel(ev.Channel)
}

// onThreadDelete forgets a deleted post.
func (a *Adapter) onThreadDelete(_ *discordgo.Session, ev *discordgo.ThreadDelete) {
	if ev.Channel != nil {
		a.forums.drop(ev.ID)
	}
}

func (a *Adapter) forumChannel(ch *discordgo.Channel) {
	if ch != nil && isForum(ch.Type) {
		a.mu.Lock()
		a.chanTypes[ch.ID] = ch.Type
		a.mu.Unlock()
		a.forums.noteForum(ch)
	}
}

// onThreadCreate notes a new thread's type, so its messages cost no
// lookup, and a new forum post. The starter message comes after it, in
// its own MESSAGE_CREATE.
func (a *Adapter) onThreadCreate(_ *discordgo.Session, ev *discordgo.ThreadCreate) {
	if ev.Channel == nil || ev.ID == "" {
		return
	}
	a.mu.Lock()
	a.chanTypes[ev.ID] = ev.Type
	a.chanParents[ev.ID] = ev.ParentID
	parent, ok := a.chanTypes[ev.ParentID]
	a.mu.Unlock()
	a.forums.notePost(ev.Channel, ok && isForum(parent))
}

// onThreadUpdate follows a post's tags and state. A post a person closed
// while its session exists has its turn stopped, on the post's queue,
// after the messages before it.
func (a *Adapter) onThreadUpdate(_ *discordgo.Session, ev *discordgo.ThreadUpdate) {
	if ev.Channel == nil || ev.ID == "" || a.ctx == nil {
		return
	}
	before, _ := a.forums.post(ev.ID)
	p := a.forums.notePost(ev.Channel, false)
	if p == nil {
		return
	}
	now, _ := a.forums.post(ev.ID)
	switch {
	case now.archived && !before.archived && !closedByPerson(ev.ID, before, now):
		a.log.Info("discord: a forum post was archived after its inactivity; its session goes on", "post", ev.ID)
	case now.archived && !before.archived:
		a.queue.Add(ev.ID, func() { a.postClosed(a.ctx, ev.ID, now.owner) })
	case !now.archived && before.archived && now.want != "" && now.rendered:
		a.kickTags(now.forum, ev.ID) // a change held while it was closed
	}
}

// postClosed stops the running turn of a post a person closed, as the
// post's owner presses Stop.
func (a *Adapter) postClosed(ctx context.Context, post, owner string) {
	key := Key(post)
	if !a.in.Known(key) {
		return
	}
	th := chat.Thread{Platform: "discord", Key: key, Channel: post}
	res := a.in.Click(ctx, chat.Click{Thread: th, Button: chat.ButtonID(chat.ActionStop, "forum"), UserID: owner, UserName: forumStopName})
	if res.Private != "" {
		a.log.Info("discord: forum post closed; its turn not stopped", "session", key, "why", res.Private)
		return
	}
	a.log.Info("discord: forum post closed; its turn stopped", "session", key)
}

// codeThreadArchived is Discord's answer to a change in an archived
// thread.
const codeThreadArchived = 50083

// reopenForPlan reopens a forum post a person closed, when the edit of
// its plan was refused for it (50083), and reports whether the edit may
// be made again. Discord reopens a post that is not locked for any
// message the bot sends in it, so the turn's last plan and its answer
// (a stopped turn's "Stopped.") show as they would in any thread,
// rather than a stale plan and a note that it could not be updated. A
// locked post stays closed (only Manage Threads reopens it).
func (a *Adapter) reopenForPlan(ctx context.Context, post string, err error) bool {
	if restCode(err) != codeThreadArchived {
		return false
	}
	p, ok := a.forums.post(post)
	if !ok || p.locked {
		return false
	}
	open := false
	ch, err := a.s.ChannelEdit(post, &discordgo.ChannelEdit{Archived: &open}, discordgo.WithContext(ctx))
	if err != nil {
		a.log.Warn("discord: reopen a closed forum post to show its plan", "post", post, "err", err)
		return false
	}
	a.forums.notePost(ch, true)
	a.log.Info("discord: reopened a closed forum post to show its plan", "post", post)
	return true
}

// forumMessage returns the forum post m was sent in (forumPostOf; the
// zero post for another message), whether m is the post's starter, and
// the text as the task: a starter's is the post's title and the text.
func (a *Adapter) forumMessage(ctx context.Context, m *discordgo.Message, mentioned bool, text string) (forumPost, bool, string) {
	post, ok := a.forumPostOf(ctx, m, mentioned)
	if !ok {
		return forumPost{}, false, text
	}
	if m.ID != m.ChannelID {
		return post, false, text
	}
	return post, true, forumTask(post.title, text)
}

// forumPostOf returns the forum post m was sent in, when m is a post's
// starter message (its id is the post's) or mentions the bot in a
// thread. A post the gateway did not tell of (after a restart, or a
// message fetched after a reconnect) is looked up, once per thread.
func (a *Adapter) forumPostOf(ctx context.Context, m *discordgo.Message, mentioned bool) (forumPost, bool) {
	if m.GuildID == "" || m.ID != m.ChannelID && !(mentioned && isThread(a.channelType(ctx, m.ChannelID))) {
		return forumPost{}, false
	}
	return a.lookUpPost(ctx, m.ChannelID)
}

// lookUpPost returns thread's post: as known, else looked up unless the
// thread's parent is known not to be a forum.
func (a *Adapter) lookUpPost(ctx context.Context, thread string) (forumPost, bool) {
	if p, ok := a.forums.post(thread); ok {
		return p, true
	}
	if a.noPost(thread) {
		return forumPost{}, false
	}
	ch, err := a.s.Channel(thread, discordgo.WithContext(ctx))
	if err != nil {
		a.log.Warn("discord: look up a thread's parent", "channel", thread, "err", err)
		return forumPost{}, false
	}
	parent := ""
	if isThread(ch.Type) {
		parent = ch.ParentID
	}
	a.mu.Lock()
	a.chanParents[thread], a.chanTypes[thread] = parent, ch.Type
	a.mu.Unlock()
	if parent == "" || !isForum(a.channelType(ctx, parent)) {
		return forumPost{}, false
	}
	a.forums.notePost(ch, true)
	return a.forums.post(thread)
}

// noPost reports whether channel is known, without a lookup, to be no
// forum post: no thread, or a thread whose parent is no forum.
func (a *Adapter) noPost(channel string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	parent, known := a.chanParents[channel]
	pt, typed := a.chanTypes[parent]
	return known && (parent == "" || typed && !isForum(pt))
}

// forumListed reports whether forum takes every post without a mention
// (Options.Forums).
func (a *Adapter) forumListed(forum string) bool { return slices.Contains(a.opts.Forums, forum) }

// forumTask is a post's task: its title, then its starter message.
func forumTask(title, text string) string {
	switch {
	case title == "":
		return text
	case text == "":
		return title
	}
	return title + "\n\n" + text
}

// runTag is the run tag of a post whose plan is p: waiting while the
// turn waits for an approval or for Start, done, stopped for every other
// ending (a stop, a limit, a budget, a failure), else working.
func runTag(p chat.Plan) string {
	switch {
	case p.Start != "" || p.State == chat.StateWaiting:
		return tagWaiting
	case p.State == chat.StateDone:
		return tagDone
	case p.State == chat.StateStopped, p.State == chat.StateFailed, p.State == chat.StateLimited,
		p.State == chat.StateTurnBudget, p.State == chat.StateDayBudget:
		return tagStopped
	}
	return tagWorking
}

// forumPlan follows a plan rendered in channel with the post's run tag,
// when channel is a forum post. It sends nothing itself: a channel not
// known as a post, nor as something else, is looked up on its own lane,
// once (a post whose session began before a restart, or one on a shard
// another replica holds: the owner renders the plan, and only the
// shard's holder hears of the post).
func (a *Adapter) forumPlan(channel string, p chat.Plan) {
	tag := runTag(p)
	if _, ok := a.forums.post(channel); ok {
		a.wantTag(channel, tag, false)
		return
	}
	a.mu.Lock()
	t, typed := a.chanTypes[channel]
	a.mu.Unlock()
	if typed && !isThread(t) || a.noPost(channel) || a.ctx == nil {
		return
	}
	a.queue.Add("forum-post/"+channel, func() {
		if _, ok := a.lookUpPost(a.ctx, channel); ok {
			a.wantTag(channel, tag, false)
		}
	})
}

// wantTag asks for tag on post; onlyFirst: only if the bot has wanted
// none yet (planning comes before any plan, never after one).
func (a *Adapter) wantTag(post, tag string, onlyFirst bool) {
	a.forums.mu.Lock()
	p, ok := a.forums.posts[post]
	if ok && !onlyFirst {
		p.rendered = true
	}
	if !ok || p.want == tag || onlyFirst && p.want != "" {
		a.forums.mu.Unlock()
		return
	}
	p.want = tag
	forum := p.forum
	a.forums.mu.Unlock()
	a.kickTags(forum, post)
}

// kickTags marks post as due and runs the forum's tag lane.
func (a *Adapter) kickTags(forum, post string) {
	a.forums.mu.Lock()
	b := a.forums.boardLocked(forum)
	if b.dirty == nil {
		b.dirty = map[string]bool{}
	}
	b.dirty[post] = true
	a.forums.mu.Unlock()
	if a.ctx == nil {
		return
	}
	a.queue.Kick("forum/"+forum, func() { a.syncTags(a.ctx, forum) })
}

// syncTags sets the run tag of each due post of forum, one request per
// post whose tags change.
func (a *Adapter) syncTags(ctx context.Context, forum string) {
	a.forums.mu.Lock()
	b := a.forums.boardLocked(forum)
	due := make([]string, 0, len(b.dirty))
	for id := range b.dirty {
		due = append(due, id)
	}
	clear(b.dirty)
	a.forums.mu.Unlock()
	slices.Sort(due)
	for _, post := range due {
		if ctx.Err() != nil {
			return
		}
		a.syncPost(ctx, forum, post)
	}
}

// syncPost puts the wanted run tag on post in place of the bot's others.
func (a *Adapter) syncPost(ctx context.Context, forum, post string) {
	p, ok := a.forums.post(post)
	if !ok || p.want == "" {
		return
	}
	if p, ok = a.freshPost(ctx, forum, post, p); !ok || p.want == "" || p.archived {
		return // a closed post takes no change; reopened, it is due again
	}
	id, ids, ok := a.forumTag(ctx, forum, p.want)
	if !ok {
		return
	}
	tags := make([]string, 0, maxPostTags)
	for _, t := range p.applied {
		if !slices.Contains(ids, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) >= maxPostTags {
		a.postFull(post, len(tags))
		return
	}
	tags = append(tags, id)
	if slices.Equal(tags, p.applied) {
		return
	}
	ch, err := a.s.ChannelEdit(post, &discordgo.ChannelEdit{AppliedTags: &tags}, discordgo.WithContext(ctx))
	switch c := restCode(err); {
	case err == nil:
		a.forums.notePost(ch, true)
	case c == codeMissingPerms || c == codeMissingAccess:
		a.leaveTags(forum, "the bot may not tag people's posts here (Manage Threads)", err)
	default:
		a.retryTags(ctx, forum, post, err)
	}
}

// freshPost returns post's record p, fetched anew (GET /channels/{id})
// when this process does not hear its guild's events: the replica that
// renders a session's plan need not hold the post's shard, and its copy
// of the post's applied tags would miss a person's change since, which
// the tag change would then undo. ok is false when the fetch failed.
func (a *Adapter) freshPost(ctx context.Context, forum, post string, p forumPost) (forumPost, bool) {
	if a.hears(p.guild) {
		return p, true
	}
	ch, err := a.s.Channel(post, discordgo.WithContext(ctx))
	if err != nil {
		a.retryTags(ctx, forum, post, err)
		return forumPost{}, false
	}
	a.forums.notePost(ch, true)
	return a.forums.post(post)
}

// hears reports whether this process gets guild's gateway events: it
// holds the guild's shard, connected.
func (a *Adapter) hears(guild string) bool {
	if guild == "" || len(a.shards) == 0 {
		return false
	}
	sh := a.shards[ShardOf(guild, len(a.shards))]
	a.mu.Lock()
	defer a.mu.Unlock()
	return sh.on && sh.connected
}

// retryTags tries a post's tags again after a rate limit; another
// failure is logged, and the next change of the run tries again.
func (a *Adapter) retryTags(ctx context.Context, forum, post string, err error) {
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) && rl.RateLimit != nil {
		a.queue.Later(ctx, "forum/"+forum, max(rl.RetryAfter, time.Second), func() { a.kickTags(forum, post) })
		return
	}
	a.log.Warn("discord: set a forum post's run tag", "post", post, "err", err)
}

// postFull says once per post that people's tags leave no room for the
// run tag.
func (a *Adapter) postFull(post string, n int) {
	a.forums.mu.Lock()
	p := a.forums.posts[post]
	said := p == nil || p.full
	if p != nil {
		p.full = true
	}
	a.forums.mu.Unlock()
	if !said {
		a.log.Info("discord: a forum post has 5 tags of people's; its run tag is left off", "post", post, "tags", n)
	}
}

// leaveTags leaves forum's tags alone until the forum changes, and says
// why once per forum (sayTags).
func (a *Adapter) leaveTags(forum, why string, err error) {
	a.forums.mu.Lock()
	b := a.forums.boardLocked(forum)
	b.noManage = true
	clear(b.dirty)
	a.forums.mu.Unlock()
	a.sayTags(forum, why, err)
}

// sayTags says once per forum why its run tags are not all shown.
func (a *Adapter) sayTags(forum, why string, err error) {
	a.forums.mu.Lock()
	b := a.forums.boardLocked(forum)
	said := b.said
	b.said = true
	a.forums.mu.Unlock()
	if !said {
		a.log.Info("discord: forum tags are left alone; sessions go on without them", "forum", forum, "why", why, "err", err)
	}
}

// forumTag returns the id of forum's tag named name, creating the
// missing run tags when there is room, and the ids of every run tag the
// forum has. ok is false when the tag is not there and cannot be made.
func (a *Adapter) forumTag(ctx context.Context, forum, name string) (id string, runIDs []string, ok bool) {
	tags, ok := a.forumTags(ctx, forum)
	if !ok {
		return "", nil, false
	}
	if id, ids := findTags(tags, name); id != "" {
		return id, ids, true
	}
	var missing []string
	for _, t := range runTags {
		if i, _ := findTags(tags, t); i == "" {
			missing = append(missing, t)
		}
	}
	if len(tags)+len(missing) > maxForumTags {
		missing = []string{name} // only the one wanted now, if that fits
	}
	if len(tags)+len(missing) > maxForumTags {
		// The run tags the forum has are still used.
		a.sayTags(forum, "the forum has no room for the run tags it lacks (20 tags at most)", nil)
		return "", nil, false
	}
	next := slices.Clone(tags)
	for _, t := range missing {
		next = append(next, discordgo.ForumTag{Name: t})
	}
	ch, err := a.s.ChannelEdit(forum, &discordgo.ChannelEdit{AvailableTags: &next}, discordgo.WithContext(ctx))
	if c := restCode(err); c == codeMissingPerms || c == codeMissingAccess {
		a.leaveTags(forum, "the bot may not add tags to the forum (Manage Channels)", err)
		return "", nil, false
	} else if err != nil {
		a.log.Warn("discord: add run tags to a forum", "forum", forum, "err", err)
		return "", nil, false
	}
	a.forums.noteForum(ch)
	id, ids := findTags(ch.AvailableTags, name)
	return id, ids, id != ""
}

// forumTags returns forum's available tags, fetched once when the
// gateway has not told them; ok is false where tags are left alone.
func (a *Adapter) forumTags(ctx context.Context, forum string) ([]discordgo.ForumTag, bool) {
	a.forums.mu.Lock()
	b := a.forums.boardLocked(forum)
	tags, known, off := slices.Clone(b.tags), b.known, b.noManage
	a.forums.mu.Unlock()
	if off {
		return nil, false
	}
	if known {
		return tags, true
	}
	ch, err := a.s.Channel(forum, discordgo.WithContext(ctx))
	if err != nil {
		a.log.Warn("discord: look up a forum's tags", "forum", forum, "err", err)
		return nil, false
	}
	a.forums.noteForum(ch)
	return ch.AvailableTags, true
}

// findTags returns the id of the tag named name in tags, and the ids of
// all run tags there; a forum's own "Done" is the run tag done.
func findTags(tags []discordgo.ForumTag, name string) (id string, runIDs []string) {
	for _, t := range tags {
		if strings.EqualFold(t.Name, name) {
			id = t.ID
		}
		if slices.ContainsFunc(runTags, func(r string) bool { return strings.EqualFold(r, t.Name) }) {
			runIDs = append(runIDs, t.ID)
		}
	}
	return id, runIDs
}
