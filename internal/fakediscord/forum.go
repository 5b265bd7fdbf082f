package fakediscord

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"
)

// Forum channels as Discord keeps them (discord.com/developers/docs,
// Channel resource: channel types, the forum tag object, Modify Channel
// and Start Thread in Forum or Media Channel). A forum (type 15, media
// 16) holds posts, never messages of its own; each post is a public
// thread (type 11) whose parent is the forum, whose starter message has
// the thread's id, and which carries applied_tags, ids of the forum's
// available_tags.
//
// The limits, from the same pages: a forum has at most 20 available
// tags, a tag's name is at most 20 characters, a post has at most 5
// applied tags; changing a forum's tags needs MANAGE_CHANNELS; a tag
// marked moderated is added or removed only by a member with
// MANAGE_THREADS; editing a thread someone else started, locking it, or
// unarchiving a locked one needs MANAGE_THREADS, and a change to an
// archived thread must unarchive it (else 50083).
const (
	maxForumTags   = 20
	maxTagName     = 20
	maxAppliedTags = 5
	codeNonText    = 50008 // Cannot send messages in a non-text channel
)

// PermManageChannels is MANAGE_CHANNELS, which editing a forum's tags
// needs (Permissions, bitwise permission flags).
const PermManageChannels int64 = 1 << 4

// Tag is a forum's tag (the forum tag object).
type Tag struct {
	ID, Name           string
	Moderated          bool
	EmojiID, EmojiName string
}

func (t Tag) json() map[string]any {
	out := map[string]any{"id": t.ID, "name": t.Name, "moderated": t.Moderated, "emoji_id": nil, "emoji_name": nil}
	if t.EmojiID != "" {
		out["emoji_id"] = t.EmojiID
	}
	if t.EmojiName != "" {
		out["emoji_name"] = t.EmojiName
	}
	return out
}

// ErrForum is the helpers' error for what Discord would refuse.
var ErrForum = errors.New("fakediscord: refused as Discord refuses it")

func isForum(typ int) bool { return typ == 15 || typ == 16 }

// forumJSON adds a forum's available_tags, or a post's applied_tags and
// owner, to a channel's JSON.
func (c *channel) forumJSON(out map[string]any) {
	if isForum(c.typ) {
		tags := make([]any, 0, len(c.tags))
		for _, t := range c.tags {
			tags = append(tags, t.json())
		}
		out["available_tags"] = tags
	}
	if isThread(c.typ) {
		if c.owner != "" {
			out["owner_id"] = c.owner
		}
		if c.post {
			applied := make([]any, 0, len(c.applied))
			for _, id := range c.applied {
				applied = append(applied, id)
			}
			out["applied_tags"] = applied
		}
	}
}

// checkTags checks a forum's available tags, giving an id to a tag
// without one, as Discord does.
func (s *Server) checkTagsLocked(tags []Tag) ([]Tag, *apiError) {
	if len(tags) > maxForumTags {
		return nil, formError("available_tags", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxForumTags))
	}
	out := make([]Tag, 0, len(tags))
	for _, t := range tags {
		if n := utf8.RuneCountInString(t.Name); n < 1 || n > maxTagName {
			return nil, formError("available_tags.name", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxTagName))
		}
		if t.ID == "" {
			t.ID = s.idLocked()
		}
		out = append(out, t)
	}
	return out, nil
}

// AddForum registers a forum channel (type 15) in guild with its
// available tags; a tag without an ID gets one. More than 20 tags or a
// name over 20 characters is refused (ErrForum), as Discord refuses it.
func (s *Server) AddForum(id, guild string, tags ...Tag) error {
	return s.addForum(id, guild, 15, tags)
}

// AddMediaChannel registers a media channel (type 16): a forum whose
// posts Discord shows as a gallery; the same rules hold.
func (s *Server) AddMediaChannel(id, guild string, tags ...Tag) error {
	return s.addForum(id, guild, 16, tags)
}

func (s *Server) addForum(id, guild string, typ int, tags []Tag) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	checked, err := s.checkTagsLocked(tags)
	if err != nil {
		return fmt.Errorf("forum %s: %s: %w", id, err.message, ErrForum)
	}
	s.channels[id] = &channel{id: id, typ: typ, guildID: guild, name: "forum " + id, tags: checked}
	return nil
}

// Tags returns a forum's available tags.
func (s *Server) Tags(forum string) []Tag {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.channels[forum]; ch != nil {
		return slices.Clone(ch.tags)
	}
	return nil
}

// TagID returns the id of the forum's tag named name, or "".
func (s *Server) TagID(forum, name string) string {
	for _, t := range s.Tags(forum) {
		if t.Name == name {
			return t.ID
		}
	}
	return ""
}

// AppliedTags returns a post's tags now.
func (s *Server) AppliedTags(thread string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.channels[thread]; ch != nil {
		return slices.Clone(ch.applied)
	}
	return nil
}

// TagHistory returns every set of tags a post has had, oldest first: the
// ones it was created with, then each change.
func (s *Server) TagHistory(thread string) [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.channels[thread]; ch != nil {
		out := make([][]string, len(ch.tagHistory))
		for i, h := range ch.tagHistory {
			out[i] = slices.Clone(h)
		}
		return out
	}
	return nil
}

// checkAppliedLocked checks tags for a post in forum set by user: known
// ids, at most 5, and moderated ones added or removed only with
// MANAGE_THREADS.
func (s *Server) checkAppliedLocked(forum *channel, thread string, old, tags []string, user string) *apiError {
	if len(tags) > maxAppliedTags {
		return formError("applied_tags", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxAppliedTags))
	}
	byID := map[string]Tag{}
	for _, t := range forum.tags {
		byID[t.ID] = t
	}
	for _, id := range tags {
		if _, ok := byID[id]; !ok {
			return formError("applied_tags", "BASE_TYPE_CHOICES", "Value must be one of the forum's tags.")
		}
	}
	perms := s.permissionsLocked(forum.id, user)
	if thread != "" {
		perms = s.permissionsLocked(thread, user)
	}
	if perms&PermManageThreads != 0 {
		return nil
	}
	for _, id := range symmetricDiff(old, tags) {
		if byID[id].Moderated {
			return fail(403, codeMissingPerms, "Missing Permissions")
		}
	}
	return nil
}

func symmetricDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, x)
		}
	}
	return out
}

// Post creates a person's forum post, as Start Thread in Forum does: a
// public thread (type 11) in forum titled title, started by user, with
// tags (ids of the forum's tags), and its starter message text (with
// <@BotID> before it when mentionBot), whose id is the thread's. It
// dispatches THREAD_CREATE (newly_created, owner_id, applied_tags) and
// then the starter's MESSAGE_CREATE in the thread, in that order as
// Discord sends them (THREAD_CREATE carries no message; the starter
// comes in the later MESSAGE_CREATE: discordjs/discord.js#9100; the
// starter's id is the thread's: Threads, Forums), and returns the post's
// id. What Discord would
// refuse (not a forum, a user without SEND_MESSAGES there, unknown or
// too many tags, a moderated tag from a user without MANAGE_THREADS, an
// empty or over-100-character title) is ErrForum.
func (s *Server) Post(forum, user, title, text string, mentionBot bool, tags ...string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	f, ok := s.channels[forum]
	if !ok || !isForum(f.typ) {
		return "", fmt.Errorf("post in %s: not a forum: %w", forum, ErrForum)
	}
	if s.permissionsLocked(forum, user)&PermSendMessages == 0 {
		// A post is a message in the forum: it needs SEND_MESSAGES.
		return "", fmt.Errorf("post in %s by %s: Missing Permissions: %w", forum, user, ErrForum)
	}
	if n := utf8.RuneCountInString(title); n < 1 || n > maxThreadName {
		return "", fmt.Errorf("post title %q: %w", title, ErrForum)
	}
	if err := s.checkAppliedLocked(f, "", nil, tags, user); err != nil {
		return "", fmt.Errorf("post tags %v: %s: %w", tags, err.message, ErrForum)
	}
	if mentionBot {
		text = "<@" + BotID + "> " + text
	}
	id := s.idLocked()
	th := &channel{id: id, typ: 11, guildID: f.guildID, parentID: f.id, name: title, owner: user, post: true,
		applied: slices.Clone(tags)}
	th.tagHistory = [][]string{slices.Clone(tags)}
	s.channels[id] = th
	s.joinLocked(th, user)
	ev := th.json()
	ev["newly_created"] = true
	// Forum threads count their messages, and the gateway says so only
	// in the events (Threads, Forums).
	ev["message_count"], ev["total_message_sent"], ev["member_count"] = 0, 0, 1
	ev["member"] = map[string]any{"id": id, "user_id": user, "join_timestamp": time.Now().UTC().Format(time.RFC3339Nano), "flags": 0}
	s.dispatchLocked("THREAD_CREATE", ev)
	m := &Message{ID: id, ChannelID: id, AuthorID: user, Content: text, at: time.Now()}
	s.addLocked(m)
	js := s.messageJSONLocked(m)
	js["member"] = map[string]any{"roles": []any{}, "joined_at": "2026-01-01T00:00:00Z", "deaf": false, "mute": false, "flags": 0}
	s.dispatchLocked("MESSAGE_CREATE", js)
	return id, nil
}

// ClosePost archives a post as the person user does with Close Post:
// THREAD_UPDATE with thread_metadata.archived true. A post already
// archived is left alone.
func (s *Server) ClosePost(thread, user string) error {
	return s.personArchive(thread, user, true)
}

// ReopenPost unarchives a post as user does by reopening it: THREAD_UPDATE
// with archived false. A locked post is reopened only by a user with
// MANAGE_THREADS (else ErrForum).
func (s *Server) ReopenPost(thread, user string) error {
	return s.personArchive(thread, user, false)
}

func (s *Server) personArchive(thread, user string, archived bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch, ok := s.channels[thread]
	if !ok || !isThread(ch.typ) {
		return fmt.Errorf("thread %s: unknown: %w", thread, ErrForum)
	}
	if ch.archived == archived {
		return nil
	}
	if err := s.modifyThreadLocked(ch, user, map[string]any{"archived": archived}); err != nil {
		return fmt.Errorf("thread %s: %s: %w", thread, err.message, ErrForum)
	}
	return nil
}

// modifyChannelLocked is PATCH /channels/{id} by the bot: a forum's name
// and available_tags, or a thread's (modifyThreadLocked).
func (s *Server) modifyChannelLocked(ch *channel, body map[string]any) (int, any, *apiError) {
	if isThread(ch.typ) {
		if err := s.modifyThreadLocked(ch, BotID, body); err != nil {
			return 0, nil, err
		}
		return 200, ch.json(), nil
	}
	if err := s.botMayLocked(ch, PermManageChannels); err != nil {
		return 0, nil, err
	}
	name := ch.name
	if v, ok := body["name"]; ok {
		n, _ := v.(string)
		if c := utf8.RuneCountInString(n); c < 1 || c > 100 {
			return 0, nil, formError("name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
		}
		name = n
	}
	tags := ch.tags
	if v, ok := body["available_tags"]; ok {
		if !isForum(ch.typ) {
			return 0, nil, formError("available_tags", "BASE_TYPE_INVALID", "Not a forum or media channel.")
		}
		list, ok := v.([]any)
		if !ok {
			return 0, nil, formError("available_tags", "BASE_TYPE_ARRAY", "Must be an array.")
		}
		var in []Tag
		for _, x := range list {
			m, _ := x.(map[string]any)
			t := Tag{}
			t.ID, _ = m["id"].(string)
			t.Name, _ = m["name"].(string)
			t.Moderated, _ = m["moderated"].(bool)
			t.EmojiID, _ = m["emoji_id"].(string)
			t.EmojiName, _ = m["emoji_name"].(string)
			in = append(in, t)
		}
		checked, err := s.checkTagsLocked(in)
		if err != nil {
			return 0, nil, err
		}
		tags = checked
	}
	ch.name, ch.tags = name, tags
	s.dispatchLocked("CHANNEL_UPDATE", ch.json())
	return 200, ch.json(), nil
}

// modifyThreadLocked applies a change to a thread by user: applied_tags,
// archived, locked and name, checked as Discord checks them, and
// dispatches THREAD_UPDATE.
func (s *Server) modifyThreadLocked(ch *channel, user string, body map[string]any) *apiError {
	perms := s.permissionsLocked(ch.id, user)
	mod := perms&PermManageThreads != 0
	own := ch.owner == user
	archived, locked, name, applied := ch.archived, ch.locked, ch.name, ch.applied
	if v, ok := body["archived"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return formError("archived", "BASE_TYPE_BOOLEAN", "Must be either true or false.")
		}
		archived = b
	}
	if v, ok := body["locked"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return formError("locked", "BASE_TYPE_BOOLEAN", "Must be either true or false.")
		}
		locked = b
	}
	if v, ok := body["name"]; ok {
		n, _ := v.(string)
		if c := utf8.RuneCountInString(n); c < 1 || c > maxThreadName {
			return formError("name", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxThreadName))
		}
		name = n
	}
	if v, ok := body["applied_tags"]; ok {
		parent := s.channels[ch.parentID]
		if parent == nil || !isForum(parent.typ) {
			return formError("applied_tags", "BASE_TYPE_INVALID", "Not a thread of a forum or media channel.")
		}
		list, _ := v.([]any)
		tags := make([]string, 0, len(list))
		for _, x := range list {
			id, _ := x.(string)
			tags = append(tags, id)
		}
		if err := s.checkAppliedLocked(parent, ch.id, ch.applied, tags, user); err != nil {
			return err
		}
		applied = tags
	}
	switch {
	case perms&PermViewChannel == 0:
		return fail(403, codeMissingAccess, "Missing Access")
	case ch.archived && archived:
		// Modify Channel: the thread must be unarchived, or be by
		// this request.
		return threadArchived()
	case ch.locked && ch.archived && !archived && !mod:
		// A locked thread is unarchived only with MANAGE_THREADS.
		return fail(403, codeMissingPerms, "Missing Permissions")
	case locked != ch.locked && !mod:
		return fail(403, codeMissingPerms, "Missing Permissions")
	case !own && !mod && (name != ch.name || !slices.Equal(applied, ch.applied) || archived && !ch.archived):
		// Another's post: only a moderator edits it or archives it.
		return fail(403, codeMissingPerms, "Missing Permissions")
	case !archived && ch.archived && !own && !mod && perms&PermSendMessagesInThreads == 0:
		return fail(403, codeMissingPerms, "Missing Permissions")
	}
	if archived != ch.archived {
		ch.archivedAt = time.Now()
	}
	changedTags := !slices.Equal(applied, ch.applied)
	ch.archived, ch.locked, ch.name, ch.applied = archived, locked, name, slices.Clone(applied)
	if changedTags {
		ch.tagHistory = append(ch.tagHistory, slices.Clone(applied))
	}
	s.dispatchLocked("THREAD_UPDATE", ch.json())
	return nil
}

// SetPostTags changes a post's tags as the person user does in Discord's
// client: the same checks as PATCH applied_tags (ErrForum for what
// Discord refuses), then THREAD_UPDATE.
func (s *Server) SetPostTags(thread, user string, tags ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch, ok := s.channels[thread]
	if !ok || !isThread(ch.typ) {
		return fmt.Errorf("thread %s: unknown: %w", thread, ErrForum)
	}
	list := make([]any, 0, len(tags))
	for _, t := range tags {
		list = append(list, t)
	}
	if err := s.modifyThreadLocked(ch, user, map[string]any{"applied_tags": list}); err != nil {
		return fmt.Errorf("thread %s: %s: %w", thread, err.message, ErrForum)
	}
	return nil
}

// startPostLocked is Start Thread in Forum or Media Channel by the bot
// (POST /channels/{forum}/threads): SEND_MESSAGES in the forum, a name of
// 1 to 100 characters, applied_tags checked as a person's are, and a
// message checked as Create Message checks one; the post and its
// starter share an id, THREAD_CREATE comes before the starter's
// MESSAGE_CREATE, and the answer is the thread with the message in it.
// A thread without a message in a text channel is not faked (400
// 50024).
func (s *Server) startPostLocked(r *http.Request, rt route, ch *channel, body map[string]any) (int, any, *apiError) {
	if !isForum(ch.typ) {
		return 0, nil, fail(400, codeWrongChannelType, "Cannot execute action on this channel type")
	}
	if err := s.botMayLocked(ch, PermSendMessages); err != nil {
		return 0, nil, err
	}
	name, _ := body["name"].(string)
	if n := utf8.RuneCountInString(name); n < 1 || n > maxThreadName {
		return 0, nil, formError("name", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxThreadName))
	}
	list, _ := body["applied_tags"].([]any)
	tags := make([]string, 0, len(list))
	for _, x := range list {
		id, _ := x.(string)
		tags = append(tags, id)
	}
	if err := s.checkAppliedLocked(ch, "", nil, tags, BotID); err != nil {
		return 0, nil, err
	}
	msg, ok := body["message"].(map[string]any)
	if !ok {
		return 0, nil, formError("message", "BASE_TYPE_REQUIRED", "This field is required")
	}
	m := &Message{AuthorID: BotID}
	if err := s.applyLocked(m, msg, true); err != nil {
		return s.violationLocked(r, rt.major, err)
	}
	id := s.idLocked()
	th := &channel{id: id, typ: 11, guildID: ch.guildID, parentID: ch.id, name: name, owner: BotID, post: true,
		applied: tags, tagHistory: [][]string{slices.Clone(tags)}}
	s.channels[id] = th
	s.joinLocked(th, BotID)
	ev := th.json()
	ev["newly_created"] = true
	ev["message_count"], ev["total_message_sent"], ev["member_count"] = 0, 0, 1
	s.dispatchLocked("THREAD_CREATE", ev)
	m.ID, m.ChannelID, m.at = id, id, time.Now()
	s.addLocked(m)
	s.dispatchLocked("MESSAGE_CREATE", s.messageJSONLocked(m))
	out := th.json()
	out["message"] = s.messageJSONLocked(m)
	return 201, out, nil
}
