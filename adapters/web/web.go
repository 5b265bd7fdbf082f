// Package web is pinplan's local web console: a real chat platform for the
// chat router and plan board (threads, messages, the pinned plan updating
// live over Server-Sent Events) and an operator's view of every session.
// It serves embedded files; no front-end build step exists: the page is ES
// modules (static/*.js, app.js the main one), whose pure ones are tested
// with `node --test adapters/web/static/*.test.mjs`. The server sends the
// words the page shows (view.go) and stable message ids (messages.go).
//
// It implements chat.Platform and imports chat, agent (for its public
// types) and todo; never store or another adapter. cmd/bot wires it.
package web

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// static is what the page loads: only the runtime files, not the
// front end's tests (static/*.test.mjs) or its package.json, which only
// tells Node the modules are ES modules.
//
//go:embed static/index.html static/app.css static/*.js
var static embed.FS

// Store is what the console reads of the database.
type Store interface {
	// Threads lists every session with its thread and shown plan.
	Threads(ctx context.Context) ([]Summary, error)
	// History returns a session's conversation.
	History(ctx context.Context, key string) ([]agent.Entry, error)
	// Plans returns every plan revision of a session.
	Plans(ctx context.Context, key string) ([]agent.PlanRevision, error)
}

// Handler is what the console sends messages, button presses and thread
// changes to, and where it reads a session's approval cards (for a
// thread whose cards it did not see live: another platform's, or one
// whose live view it forgot): chat.Router, or with replicas the
// replicas' hand-over handler.
type Handler interface {
	chat.CardSource
	Handle(ctx context.Context, in chat.Incoming) error
	Click(ctx context.Context, c chat.Click) chat.ClickResult
	Visible(key string) bool
	Rename(key, title string) (chat.Thread, bool)
	Delete(ctx context.Context, key, by string) error
}

// Summary is one thread in the list.
type Summary struct {
	ID       string      `json:"id"` // the console's id of the thread (see idOf)
	Key      string      `json:"key"`
	Platform string      `json:"platform"`
	Title    string      `json:"title"`
	State    string      `json:"state"`  // idle, running or waiting
	Status   string      `json:"status"` // the pill: working, waiting for approval, done, stopped, failed, ...; "" before any turn
	Seq      int64       `json:"seq"`    // the console's event sequence number when this was read: the thread's later events have higher ones
	Plan     *chat.Plan  `json:"plan,omitempty"`
	Updated  time.Time   `json:"updated"`
	Usage    agent.Usage `json:"usage"`
}

// Options configures the console.
type Options struct {
	Store Store
	Demo  bool   // label the page as running the built-in demo model
	Model string // model name shown on the page
	// Usage lists the tokens people used today (GET /api/usage); nil
	// lists none. DailyBudget is PINPLAN_USER_TOKENS_PER_DAY (0: none).
	Usage       UsageSource
	DailyBudget int64
	Logger      *slog.Logger
	Now         func() time.Time
	// Stream shows answers growing as the model writes them
	// (PINPLAN_STREAM; live.go).
	Stream bool
	// FileBytes is PINPLAN_FILE_BYTES: attached text files up to it are
	// kept for the model (files.go); 0 means chat.DefaultFileBytes.
	FileBytes int64
}

// Console is the web platform and its HTTP handlers.
type Console struct {
	opts Options

	mu      sync.Mutex // guards the fields below
	plans   map[string]chat.Plan
	notices map[string][]Message
	cards   map[string]map[string]chat.Card // by thread key, then card id
	seq     int64                           // events sent, all threads: each event's seq, so a thread's grow
	status  map[string]string               // the pill, by thread key
	issued  map[string][]string             // stored message IDs handed out, by thread key (see stored)
	touched map[string]time.Time            // when each thread's live view last changed, for Expire
	clients map[chan []byte]struct{}
	streams map[string]int        // open event streams, by client address
	lives   map[string]*liveReply // answers being written, by the router's reply id
	closed  bool
}

// maxStreamsPerClient caps the event streams one client address holds
// open (DESIGN §16): each costs a goroutine and a buffer for as long as
// it lasts, so without a cap one client could open thousands. A browser
// opens one per tab. Behind a reverse proxy every client shares the
// proxy's address, as for the wrong-guess limit (httphost).
const maxStreamsPerClient = 16

var (
	_ chat.Platform    = (*Console)(nil)
	_ chat.Interactive = (*Console)(nil)
	_ chat.LiveReplier = (*Console)(nil)
	_ chat.Forgetter   = (*Console)(nil)
)

// Caps implements chat.Platform: the console streams answers (when
// Options.Stream), shows approval cards, keeps a live view per thread,
// serves the files uploaded with a message,
// and has no users of its own: whoever holds the token is its one
// person, so its turns have no requester and anyone at the console may
// decide, stop and reset.
func (c *Console) Caps() chat.Caps {
	return chat.Caps{Live: c, Cards: c, Forget: c, Files: c, Anonymous: true}
}

// New returns a console.
func New(opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Console{opts: opts, plans: map[string]chat.Plan{}, notices: map[string][]Message{}, cards: map[string]map[string]chat.Card{},
		status: map[string]string{}, issued: map[string][]string{}, touched: map[string]time.Time{}, clients: map[chan []byte]struct{}{}, streams: map[string]int{}, lives: map[string]*liveReply{}}
}

// Close ends every event stream, so a server shutdown does not wait on them.
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for ch := range c.clients {
		close(ch)
		delete(c.clients, ch)
	}
}

// event is one SSE event.
type event struct {
	Type        string    `json:"type"` // plan, message, live, state, thread, card
	Thread      string    `json:"thread"`
	Seq         int64     `json:"seq"` // one counter for all threads, so each thread's increase: older never overwrites newer
	Plan        *planJSON `json:"plan,omitempty"`
	Card        *cardJSON `json:"card,omitempty"`
	Message     *Message  `json:"message,omitempty"`
	Replaces    string    `json:"replaces,omitempty"`     // with type message: the live message it replaces
	State       string    `json:"state,omitempty"`        // with type state: idle, running or waiting
	Status      string    `json:"status,omitempty"`       // with type state: the pill
	StatusClass string    `json:"status_class,omitempty"` // with type state: the pill's class
}

func (c *Console) broadcast(e event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	e.Seq = c.seq
	raw, err := json.Marshal(e)
	if err != nil {
		return
	}
	for ch := range c.clients {
		select {
		case ch <- raw:
		default: // a client too slow to keep up resyncs when it reconnects
		}
	}
}

// PostPlan implements chat.Platform.
func (c *Console) PostPlan(_ context.Context, th chat.Thread, p chat.Plan) (chat.MessageRef, error) {
	id := "plan-" + randomID()
	c.setPlan(th, p)
	return chat.MessageRef{Channel: th.Key, ID: id}, nil
}

// EditPlan implements chat.Platform.
func (c *Console) EditPlan(_ context.Context, th chat.Thread, _ chat.MessageRef, p chat.Plan) error {
	c.setPlan(th, p)
	return nil
}

func (c *Console) setPlan(th chat.Thread, p chat.Plan) {
	c.mu.Lock()
	c.plans[th.Key] = p
	c.touched[th.Key] = c.opts.Now()
	c.mu.Unlock()
	c.broadcast(event{Type: "plan", Thread: th.Key, Plan: viewPlan(&p)})
}

// Mirror shows the operator the plan message of another
// platform's session live; web threads are shown through the Platform
// methods already.
func (c *Console) Mirror(th chat.Thread, p chat.Plan) {
	if th.Platform != "web" {
		c.setPlan(th, p)
	}
}

// SetState shows a session's run state and status pill live, for every
// platform's sessions.
func (c *Console) SetState(th chat.Thread, state, status string) {
	c.mu.Lock()
	c.status[th.Key] = status
	c.touched[th.Key] = c.opts.Now()
	c.mu.Unlock()
	c.broadcast(event{Type: "state", Thread: th.Key, State: state, Status: status, StatusClass: pillClass(status)})
}

// Forget implements chat.Forgetter: the live view of a session that went
// idle leaves memory. Its plan and status pill are read from the store
// again (Store.Threads has the shown plan), its approval cards from the
// router (Handler.Cards). Notices stay: they are kept nowhere else, and there
// are at most 50 per thread. The stored message ids handed out go: a
// reply after that is matched to the newest stored answer with its text,
// which is the new one, since answers are stored before they are sent.
func (c *Console) Forget(th chat.Thread) { c.forget(th.Key) }

func (c *Console) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(key)
}

func (c *Console) forgetLocked(key string) {
	delete(c.plans, key)
	delete(c.cards, key)
	delete(c.status, key)
	delete(c.issued, key)
	delete(c.touched, key)
	for id, l := range c.lives {
		if l.key == key {
			delete(c.lives, id)
		}
	}
}

// Expire forgets (as Forget does) the live view of every thread whose
// view has not changed for idle and that has no open approval card: with
// replicas, the threads the others run, which this router never holds
// and so never evicts. It returns how many went.
func (c *Console) Expire(idle time.Duration) int {
	cutoff := c.opts.Now().Add(-idle)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for key, at := range c.touched {
		open := false
		for _, card := range c.cards[key] {
			open = open || card.Open()
		}
		if at.Before(cutoff) && !open {
			c.forgetLocked(key)
			n++
		}
	}
	return n
}

// Pin implements chat.Platform. The console always shows the current plan
// on top of its thread, so there is nothing to pin.
func (c *Console) Pin(context.Context, chat.Thread, chat.MessageRef, bool) error { return nil }

// Reply implements chat.Platform.
// The model's answer is in the session history (committed before it is
// replied): it goes out live with its stored ID and time. Replies that are
// not (errors, notices) the console keeps, the last ones of each thread,
// in memory to show them on reload; they do not survive a restart.
func (c *Console) Reply(ctx context.Context, th chat.Thread, _, text string) error {
	m := Message{Role: "assistant", Text: text, At: c.opts.Now()}
	if s, ok := c.stored(ctx, th.Key, m); ok {
		c.broadcast(event{Type: "message", Thread: th.Key, Message: &s})
		return nil
	}
	c.notice(th, m)
	return nil
}

// notice keeps the last 50 notices of a thread and shows m live.
func (c *Console) notice(th chat.Thread, m Message) {
	if m.ID == "" {
		m.ID = "n-" + randomID()
	}
	c.mu.Lock()
	n := append(c.notices[th.Key], m)
	if len(n) > 50 {
		n = n[len(n)-50:]
	}
	c.notices[th.Key] = n
	c.mu.Unlock()
	c.broadcast(event{Type: "message", Thread: th.Key, Message: &m})
}

// Undelivered shows the operator, in the thread's console view, a reply
// that Slack or Discord refused for good; the log has it too.
func (c *Console) Undelivered(th chat.Thread, text string, err error) {
	c.notice(th, Message{Role: "notice", Text: fmt.Sprintf("Not delivered to %s (%v): %s", th.Platform, err, text), At: c.opts.Now()})
}

// PostCard implements chat.Interactive: the card joins the thread's view.
func (c *Console) PostCard(_ context.Context, th chat.Thread, card chat.Card) (chat.MessageRef, error) {
	c.setCard(th, card)
	return chat.MessageRef{Channel: th.Key, ID: "card-" + card.ID}, nil
}

// EditCard implements chat.Interactive.
func (c *Console) EditCard(_ context.Context, th chat.Thread, _ chat.MessageRef, card chat.Card) error {
	c.setCard(th, card)
	return nil
}

func (c *Console) setCard(th chat.Thread, card chat.Card) {
	c.mu.Lock()
	if c.cards[th.Key] == nil {
		c.cards[th.Key] = map[string]chat.Card{}
	}
	c.cards[th.Key][card.ID] = card
	c.touched[th.Key] = c.opts.Now()
	c.mu.Unlock()
	c.broadcast(event{Type: "card", Thread: th.Key, Card: viewCard(&card)})
}

// MirrorCards shows the approval cards of a session held by another
// replica live, as its records now have them (replica.Follow): each card
// that is new or changed goes out as a "card" event, and the thread's
// cards are these, so a reload shows the same and the buttons decide
// through the handler from any replica.
func (c *Console) MirrorCards(th chat.Thread, cards []chat.Card) {
	sort.Slice(cards, func(i, j int) bool { return cards[i].Deadline.Before(cards[j].Deadline) })
	c.mu.Lock()
	old := c.cards[th.Key]
	now := make(map[string]chat.Card, len(cards))
	var changed []chat.Card
	for _, card := range cards {
		now[card.ID] = card
		if o, ok := old[card.ID]; !ok || !sameCard(o, card) {
			changed = append(changed, card)
		}
	}
	if len(now) == 0 {
		delete(c.cards, th.Key)
	} else {
		c.cards[th.Key] = now
		c.touched[th.Key] = c.opts.Now()
	}
	c.mu.Unlock()
	for _, card := range changed {
		c.broadcast(event{Type: "card", Thread: th.Key, Card: viewCard(&card)})
	}
}

// sameCard reports whether a and b show the same.
func sameCard(a, b chat.Card) bool {
	return a.ID == b.ID && a.Tool == b.Tool && a.Server == b.Server && a.Arguments == b.Arguments && a.Requester == b.Requester &&
		a.Deadline.Equal(b.Deadline) && a.Outcome == b.Outcome && a.By == b.By && a.At.Equal(b.At)
}

// Working implements chat.Platform. The run state is shown through
// SetState, which cmd/bot calls for every session.
func (c *Console) Working(context.Context, chat.Thread, string, bool) error { return nil }

// messageID is a console message's id: the time it was sent (as 16 hex
// digits of Unix nanoseconds) and 8 random bytes, so that ids compare as
// the messages were sent, as Slack's and Discord's do (the agent takes
// messages queued together in that order).
func messageID(at time.Time) string {
	return fmt.Sprintf("%016x", at.UnixNano()) + randomID()
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Mux is where the console mounts its routes: the process's HTTP host
// (package httphost), which guards them against other websites and asks
// for the token.
type Mux interface {
	// Handle serves h behind the guard and the token.
	Handle(pattern string, h http.Handler)
}

// routes are the console's handlers that use its inbox: messages,
// button presses and thread changes go to in, and a thread is shown only
// when in says it is visible.
type routes struct {
	*Console
	in Handler
}

// Register adds the console's pages and API to m; messages, button
// presses and thread changes go to in (chat.Router, or with replicas the
// hand-over handler).
func (c *Console) Register(m Mux, in Handler) {
	rt := routes{Console: c, in: in}
	sub, _ := fs.Sub(static, "static")
	m.Handle("GET /", http.FileServerFS(sub))
	m.Handle("GET /api/info", http.HandlerFunc(c.info))
	m.Handle("GET /api/threads", http.HandlerFunc(c.listThreads))
	m.Handle("POST /api/threads", http.HandlerFunc(rt.newThread))
	m.Handle("GET /api/threads/{id}", http.HandlerFunc(rt.getThread))
	m.Handle("POST /api/threads/{id}/messages", http.HandlerFunc(rt.postMessage))
	m.Handle("GET /api/threads/{id}/plans", http.HandlerFunc(rt.getPlans))
	m.Handle("POST /api/threads/{id}/click", http.HandlerFunc(rt.click))
	m.Handle("PATCH /api/threads/{id}", http.HandlerFunc(rt.renameThread))
	m.Handle("DELETE /api/threads/{id}", http.HandlerFunc(rt.deleteThread))
	m.Handle("GET /api/events", http.HandlerFunc(c.events))
	m.Handle("GET /api/usage", http.HandlerFunc(c.usageToday))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// info is GET /api/info: the model, each status's mark and name (a
// person's "skipped" among them), the largest file kept for the model
// and the longest item an Add control takes, in characters.
func (c *Console) info(w http.ResponseWriter, _ *http.Request) {
	marks, names := map[string]string{}, map[string]string{}
	for _, st := range append(todo.Statuses(), chat.Skipped) {
		marks[string(st)] = chat.Mark(st) // the same marks as Slack and Discord
		names[string(st)] = strings.ReplaceAll(string(st), "_", " ")
	}
	limit := c.opts.FileBytes
	if limit <= 0 {
		limit = chat.DefaultFileBytes
	}
	writeJSON(w, http.StatusOK, map[string]any{"demo": c.opts.Demo, "model": c.opts.Model, "marks": marks, "status_names": names, "file_bytes": limit,
		"item_chars": todo.MaxContentLength})
}

func (c *Console) listThreads(w http.ResponseWriter, r *http.Request) {
	list, err := c.opts.Store.Threads(r.Context())
	if err != nil {
		c.opts.Logger.Error("list threads", "err", err)
		writeErr(w, http.StatusInternalServerError, "could not read the database")
		return
	}
	c.mu.Lock()
	for i := range list {
		list[i].ID = idOf(list[i].Key)
		if p, ok := c.plans[list[i].Key]; ok {
			list[i].Plan = &p
		}
		c.fillLocked(&list[i])
	}
	c.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Updated.After(list[j].Updated) })
	out := make([]threadJSON, len(list))
	for i, s := range list {
		out[i] = viewThread(s)
	}
	writeJSON(w, http.StatusOK, out)
}

type postBody struct {
	Text   string     `json:"text"`
	Author string     `json:"author"`
	Title  string     `json:"title"`
	Files  []postFile `json:"files"`
}

// maxBody is the largest request body the console reads: a message with
// its files (files.go), in base64.
const maxBody = 4 << 20

// readBody decodes exactly one JSON object of at most 1 MiB: a larger
// body is 413, anything after the object 400.
func readBody(w http.ResponseWriter, r *http.Request) (postBody, bool) {
	var b postBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	err := dec.Decode(&b)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request is over %d bytes", maxBody))
		return b, false
	case err != nil:
		writeErr(w, http.StatusBadRequest, `send one JSON object like {"text":"..."}: `+err.Error())
		return b, false
	}
	return b, true
}

// newThread creates a web thread from its first message: 201 with the
// thread, or 422 with the reason and nothing created.
func (c routes) newThread(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	c.send(w, r, randomID(), b, true)
}

func (c routes) postMessage(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	key, ok := keyOf(r.PathValue("id"))
	switch {
	case !ok || !c.in.Visible(key):
		writeErr(w, http.StatusNotFound, "no such thread; start one with POST /api/threads")
		return
	case !strings.HasPrefix(key, "web/"):
		writeErr(w, http.StatusForbidden, "this thread lives on another platform; answer it there")
		return
	}
	c.send(w, r, strings.TrimPrefix(key, "web/"), b, false)
}

func (c routes) send(w http.ResponseWriter, r *http.Request, id string, b postBody, create bool) {
	author := strings.TrimSpace(b.Author) // optional: the console is one person's
	if n := utf8.RuneCountInString(author); n > chat.MaxAuthorRunes {
		writeErr(w, http.StatusUnprocessableEntity, fmt.Sprintf("the author name is %d characters long; the limit is %d", n, chat.MaxAuthorRunes))
		return
	}
	key := "web/" + id
	th := chat.Thread{Platform: "web", Key: key, Channel: key, ThreadID: id}
	in := chat.Incoming{Thread: th, Text: b.Text, Author: author, MessageID: messageID(time.Now()), Sync: true}
	sized := in
	if utf8.RuneCountInString(sized.Text) > chat.MaxMessageRunes {
		sized.Text = "" // refused for its length by the router, which says the limit
	}
	files, infos, ferr := c.takeFiles(b.Files, jsonLen(sized))
	var big tooLarge
	switch {
	case errors.As(ferr, &big):
		writeErr(w, http.StatusRequestEntityTooLarge, ferr.Error())
		return
	case ferr != nil:
		writeErr(w, http.StatusUnprocessableEntity, ferr.Error())
		return
	}
	in.Files = files
	m := Message{ID: "m-" + randomID(), Role: "user", Author: author, Text: b.Text, At: c.opts.Now(), Files: infos}
	if strings.TrimSpace(b.Text) == "" && len(files) > 0 {
		m.Text = agent.Inbound{Files: files}.Entry().Text() // what the history will say
	}
	err := c.in.Handle(r.Context(), in)
	var rej *chat.Rejection
	switch {
	case errors.As(err, &rej) && rej.Refused:
		writeErr(w, http.StatusUnprocessableEntity, rej.Reason)
		return
	case errors.As(err, &rej): // a command (stop, reset): answered in the thread
		c.broadcast(event{Type: "message", Thread: key, Message: &m})
		n := Message{ID: "n-" + randomID(), Role: "notice", Text: rej.Reason, At: c.opts.Now()}
		c.notice(th, n)
		writeJSON(w, http.StatusAccepted, map[string]any{"message": m, "notice": n})
		return
	case err != nil:
		writeErr(w, http.StatusServiceUnavailable, "the message was not accepted: "+err.Error())
		return
	}
	// The message is queued in the store now: the page gets it with the
	// ID and time a fetch of the thread shows it with.
	if s, ok := c.stored(r.Context(), key, m); ok {
		s.Files = m.Files // the inbox keeps them by reference, unread yet
		m = s
	}
	c.broadcast(event{Type: "message", Thread: key, Message: &m})
	c.broadcast(event{Type: "thread", Thread: key})
	if !create {
		writeJSON(w, http.StatusAccepted, map[string]any{"message": m})
		return
	}
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	sum := Summary{ID: id, Key: key, Platform: "web", Title: chat.Shorten(strings.TrimSpace(b.Text), 80), State: "running",
		Status: string(chat.StateWorking), Updated: m.At, Seq: seq}
	writeJSON(w, http.StatusCreated, map[string]any{"id": id, "key": key, "thread": viewThread(sum), "message": m})
}

// renameThread: PATCH {"title": "..."}.
func (c routes) renameThread(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	key, ok := keyOf(r.PathValue("id"))
	if !ok || !c.in.Visible(key) {
		writeErr(w, http.StatusNotFound, "no such thread")
		return
	}
	if !strings.HasPrefix(key, "web/") {
		writeErr(w, http.StatusForbidden, "this thread lives on another platform")
		return
	}
	if strings.TrimSpace(b.Title) == "" {
		writeErr(w, http.StatusUnprocessableEntity, "the title is empty")
		return
	}
	th, _ := c.in.Rename(key, b.Title)
	c.broadcast(event{Type: "thread", Thread: key})
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"thread": viewThread(Summary{ID: idOf(key), Key: key, Platform: "web", Title: th.Title, Updated: c.opts.Now(), Seq: seq})})
}

// deleteThread archives a web thread and takes it off the list.
func (c routes) deleteThread(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(r.PathValue("id"))
	if !ok || !c.in.Visible(key) {
		writeErr(w, http.StatusNotFound, "no such thread")
		return
	}
	if !strings.HasPrefix(key, "web/") {
		writeErr(w, http.StatusForbidden, "this thread lives on another platform")
		return
	}
	if err := c.in.Delete(r.Context(), key, "the console user"); err != nil {
		c.opts.Logger.Error("delete thread", "session", key, "err", err)
		writeErr(w, http.StatusInternalServerError, "could not delete the thread")
		return
	}
	c.forget(key)
	c.mu.Lock()
	delete(c.notices, key)
	c.mu.Unlock()
	c.broadcast(event{Type: "thread", Thread: key})
	w.WriteHeader(http.StatusNoContent)
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// idOf is a session's id in console URLs: a web thread's own id, or for
// Slack and Discord sessions (shown read-only, for operators) the key with
// "/" written as "~".
func idOf(key string) string {
	if id, ok := strings.CutPrefix(key, "web/"); ok {
		return id
	}
	return strings.ReplaceAll(key, "/", "~")
}

// keyOf reverses idOf; ok is false for ids that name no session key.
func keyOf(id string) (string, bool) {
	if validID(id) {
		return "web/" + id, true
	}
	if len(id) > 256 || !strings.Contains(id, "~") {
		return "", false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("~._-", r)) {
			return "", false
		}
	}
	return strings.ReplaceAll(id, "~", "/"), true
}

func (c routes) getThread(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(r.PathValue("id"))
	if !ok || !c.in.Visible(key) {
		writeErr(w, http.StatusNotFound, "no such thread")
		return
	}
	// The sequence number is read before the state: an event after it
	// is replayed by the page on top of this answer, so nothing that
	// lands while this reads is lost (at worst it comes twice, and the
	// page drops the second).
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	hist, err := c.opts.Store.History(r.Context(), key)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "could not read the database")
		return
	}
	msgs := historyMessages(key, hist)
	// A reply the console could not match to the stored answer when it
	// came (the store was unreadable) is kept as a notice: the answer shows
	// once.
	answers := map[string]bool{}
	for _, m := range msgs {
		if m.Role == "assistant" {
			answers[m.Text] = true
		}
	}
	c.mu.Lock()
	for _, n := range c.notices[key] {
		if !answers[n.Text] {
			msgs = append(msgs, n)
		}
	}
	c.mu.Unlock()
	sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].At.Before(msgs[j].At) })
	var summary *Summary
	list, err := c.opts.Store.Threads(r.Context())
	if err == nil {
		for i := range list {
			if list[i].Key == key {
				summary = &list[i]
			}
		}
	}
	if summary == nil {
		writeErr(w, http.StatusNotFound, "no such thread")
		return
	}
	summary.ID = idOf(key)
	c.mu.Lock()
	if p, ok := c.plans[key]; ok {
		summary.Plan = &p
	}
	c.fillLocked(summary)
	summary.Seq = seq
	live := maps.Clone(c.cards[key])
	c.mu.Unlock()
	// The router's records, with what the console saw live over them
	// (a card forgotten with its idle session is in the records only).
	byID := map[string]chat.Card{}
	for _, ci := range c.in.Cards(key) {
		byID[ci.ID] = ci.Card
	}
	maps.Copy(byID, live)
	cards := make([]*cardJSON, 0, len(byID))
	for _, card := range byID {
		cards = append(cards, viewCard(&card))
	}
	sort.Slice(cards, func(i, j int) bool { return cards[i].Deadline.Before(cards[j].Deadline) })
	if msgs == nil {
		msgs = []Message{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"thread": viewThread(*summary), "messages": msgs, "cards": cards, "seq": seq})
}

func (c routes) getPlans(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(r.PathValue("id"))
	if !ok || !c.in.Visible(key) {
		writeErr(w, http.StatusNotFound, "no such thread")
		return
	}
	plans, err := c.opts.Store.Plans(r.Context(), key)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, "could not read the database")
		return
	}
	out := make([]revisionJSON, len(plans))
	for i, p := range plans {
		out[i] = viewRevision(p)
	}
	writeJSON(w, http.StatusOK, out)
}

// clientAddr is the request's remote address without its port: the unit
// event streams are capped by, as httphost counts wrong guesses by it.
// X-Forwarded-For is not trusted.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan []byte, 256)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	addr := clientAddr(r)
	if c.streams[addr] >= maxStreamsPerClient {
		c.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		writeErr(w, http.StatusTooManyRequests, fmt.Sprintf("too many open event streams from this address (at most %d); close a tab", maxStreamsPerClient))
		return
	}
	c.streams[addr]++
	c.clients[ch] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if _, ok := c.clients[ch]; ok {
			delete(c.clients, ch)
			close(ch)
		}
		if c.streams[addr]--; c.streams[addr] <= 0 {
			delete(c.streams, addr)
		}
		c.mu.Unlock()
	}()
	// The stream outlives the server's read and write timeouts (which cut
	// off slow clients elsewhere); pings keep it alive.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	fmt.Fprint(w, "retry: 1000\n: connected\n\n")
	flusher.Flush()
	ping := time.NewTicker(25 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case raw, ok := <-ch:
			if !ok {
				return
			}
			fmt.Fprintf(w, "data: %s\n\n", raw)
			flusher.Flush()
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
			flusher.Flush()
		}
	}
}

// maxClickBody bounds a button press's body: the button and, for Add, a
// new item of todo.MaxContentLength characters, each of which JSON may
// spell in up to 12 bytes (a character outside the BMP as two \u
// escapes).
const maxClickBody = 16 << 10

// clickBody is a button press: POST {"button":"pinplan:allow:<id>"}, and
// for an item's Add control the new item's text as well:
// {"button":"pinplan:add:<rev>.<hash>","text":"Write the notes"}.
type clickBody struct {
	Button string `json:"button"`
	Text   string `json:"text"`
}

// click handles a press of a card's button, the plan's Stop button or an
// item's control (view.go: planView.Stop, cardView.Buttons,
// itemView.Controls). The answer is the card or plan as it now is, or
// {"private": "..."} for the one who pressed alone: what happened (an
// item's change shows on the plan once the agent applied it, through the
// plan's event), or why nothing did. A body over 16 KiB is 413; a text
// over todo.MaxContentLength characters (after trimming, as the agent
// counts them) is 422, and nothing is pressed.
func (c routes) click(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(r.PathValue("id"))
	switch {
	case ok && !strings.HasPrefix(key, "web/"):
		writeErr(w, http.StatusForbidden, "this thread lives on another platform; decide there")
		return
	case !ok || !c.in.Visible(key):
		writeErr(w, http.StatusNotFound, "no such thread")
		return
	}
	var body clickBody
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxClickBody)).Decode(&body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request is over %d bytes", maxClickBody))
		return
	case err != nil || body.Button == "":
		writeErr(w, http.StatusBadRequest, `send JSON like {"button":"pinplan:allow:..."}, with "text" for a new item`)
		return
	}
	if n := utf8.RuneCountInString(todo.TrimSpace(body.Text)); n > todo.MaxContentLength {
		writeErr(w, http.StatusUnprocessableEntity, fmt.Sprintf("the new item is %d characters long; the most is %d", n, todo.MaxContentLength))
		return
	}
	th := chat.Thread{Platform: "web", Key: key, Channel: key, ThreadID: strings.TrimPrefix(key, "web/")}
	res := c.in.Click(r.Context(), chat.Click{Thread: th, Button: body.Button, Text: body.Text, UserID: "web", UserName: "the console user"})
	if res.Card != nil {
		c.setCard(th, *res.Card)
	}
	writeJSON(w, http.StatusOK, clickJSON{Card: viewCard(res.Card), Plan: viewPlan(res.Plan), Private: res.Private})
}

// fillLocked sets a summary's status pill and sequence number: the live
// status when the console saw one, else what the store says.
func (c *Console) fillLocked(sum *Summary) {
	sum.Seq = c.seq
	if st, ok := c.status[sum.Key]; ok {
		sum.Status = st
		return
	}
	switch {
	case sum.State == "waiting":
		sum.Status = string(chat.StateWaiting)
	case sum.State == "running":
		sum.Status = string(chat.StateWorking)
	case sum.Plan != nil:
		sum.Status = string(sum.Plan.State)
	}
}
