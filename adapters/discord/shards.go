package discord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"
)

// Gateway shards (discord.com/developers/docs, Gateway: Sharding). A bot
// in many guilds splits its gateway into shards: each is a connection of
// its own, identified with shard [id, count], and gets the events of the
// guilds with (guild_id >> 22) % count == id (DMs go to shard 0). The
// count is GET /gateway/bot's recommendation or Options.Shards. Shards
// identify in buckets, rate_limit_key = id % max_concurrency, one
// IDENTIFY per bucket every 5 seconds.
//
// Every connection a shard dials takes its bucket first, a RESUME's
// too: discordgo answers a refused RESUME (op 9) with an IDENTIFY on the
// same connection at once, and an IDENTIFY refused for its bucket with
// another, as fast as the round trip allows, each counted against the
// day's 1,000; there is no hook between. So a resume waits only when
// another shard of its bucket connected in the last 5 s, as an identify
// would. An op 9 in the middle of a session (rare) is still answered by
// discordgo unpaced.
//
// Each shard has its own discordgo session with the same handlers, its
// own reconnects and its own read-mark gap (marks.go); REST goes through
// the adapter's one session. OpenShard and CloseShard let replicas hold
// different shards (replica.Election); OpenGateway and CloseGateway do
// every shard at once.

// identifyWindow is Discord's wait between two IDENTIFYs of one bucket.
const identifyWindow = 5 * time.Second

// Gateway close codes a shard cannot go on after.
const (
	closeInvalidShard     = 4010
	closeShardingRequired = 4011
	closeInvalidVersion   = 4012
)

// Errors a shard's opening is refused with, for errors.Is.
var (
	ErrInvalidShard      = errors.New("discord: the gateway refused the shard as invalid (close 4010)")
	ErrShardingRequired  = errors.New("discord: the gateway requires more shards for this bot's guilds (close 4011): leave PINPLAN_DISCORD_SHARDS unset to use GET /gateway/bot's count, or set it higher")
	ErrInvalidAPIVersion = errors.New("discord: the gateway refused the API version (close 4012)")
)

// IdentifyLimiter shares the identify buckets with other processes that
// hold shards of the same bot (replicas). WaitIdentify returns when
// bucket (of buckets, max_concurrency) may identify, and holds it for
// this process until release is called and 5 s more: the adapter calls
// release once the shard's dial has ended, at its READY (or RESUMED) or
// its failure, so that a slow dial cannot let another process's
// IDENTIFY in the bucket follow this one's within the window. The
// limiter bounds the hold itself, so that a dial hung before its READY
// does not keep the bucket for ever. release may be called more than
// once. The adapter's own pacing comes first.
type IdentifyLimiter interface {
	WaitIdentify(ctx context.Context, bucket, buckets int) (release func(), err error)
}

// shard is one gateway connection of the bot.
type shard struct {
	id int
	s  *discordgo.Session // this shard's gateway; never used for REST

	// Guarded by Adapter.mu. on admits dials and reconnects: set by
	// OpenShard, cleared by CloseShard, so that no connection is made
	// while another replica holds the shard. ctx lives as long as the
	// current opening; stop ends it, and a dial, a bucket wait or a
	// reconnect wait under way with it.
	on           bool
	ctx          context.Context
	stop         context.CancelFunc
	reconnecting bool      // a reconnect loop runs
	connected    bool      // discordgo said Connect (READY or RESUMED read); no Disconnect since
	downSince    time.Time // when its gap in the events began; zero while connected
	flush        bool      // closed since the marks were last saved: its marks are saved once more
	release      func()    // lets go of the identify bucket its dial took (IdentifyLimiter); nil: none held
	loaded       bool      // its saved marks were read (at READY) since OpenShard: its record may be written
}

// identifyBuckets paces this process's IDENTIFYs: one per bucket per
// window. A bucket is taken before a shard dials, and moved on again
// when the shard's READY arrives, so that the next IDENTIFY of
// the bucket reaches Discord a window after the last one did, however
// slow that one's dial was.
type identifyBuckets struct {
	window time.Duration
	limit  IdentifyLimiter // other processes' shards; nil: none
	n      int             // max_concurrency

	mu   sync.Mutex        // guards free
	free map[int]time.Time // when each bucket may identify next
}

// wait returns when shard's bucket is this caller's to identify in, and
// the release of the other processes' hold on it.
func (b *identifyBuckets) wait(ctx context.Context, shard int) (release func(), err error) {
	key := shard % b.n
	for {
		b.mu.Lock()
		now, at := time.Now(), b.free[key]
		if !now.Before(at) {
			b.free[key] = now.Add(b.window)
			b.mu.Unlock()
			break
		}
		b.mu.Unlock()
		t := time.NewTimer(at.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
	if b.limit != nil {
		return b.limit.WaitIdentify(ctx, key, b.n)
	}
	return func() {}, nil
}

// identified moves shard's bucket a window past now: its IDENTIFY was
// answered.
func (b *identifyBuckets) identified(shard int) {
	key := shard % b.n
	b.mu.Lock()
	defer b.mu.Unlock()
	if next := time.Now().Add(b.window); next.After(b.free[key]) {
		b.free[key] = next
	}
}

// ShardOf is the shard of count that gets a guild's events:
// (guild_id >> 22) % count, and 0 for a DM ("") or an id that is not a
// snowflake.
func ShardOf(guild string, count int) int {
	g, err := strconv.ParseUint(guild, 10, 64)
	if err != nil || count <= 1 {
		return 0
	}
	return int((g >> 22) % uint64(count))
}

// ShardCount is the number of gateway shards: 0 before StartREST.
func (a *Adapter) ShardCount() int { return len(a.shards) }

// makeShards learns the shard count and max_concurrency (GET
// /gateway/bot; Options.Shards, when set, overrides the count) and makes
// each shard's session.
func (a *Adapter) makeShards(ctx context.Context) error {
	count, conc := a.opts.Shards, 1
	gb, err := a.s.GatewayBot(discordgo.WithContext(ctx))
	switch {
	case err != nil && count <= 0:
		return fmt.Errorf("discord: GET /gateway/bot for the shard count: %w", a.dialled(err))
	case err != nil:
		a.log.Warn("discord: GET /gateway/bot failed; identifying one shard at a time", "shards", count, "err", a.dialled(err))
	default:
		count = cmp.Or(max(count, 0), gb.Shards)
		conc = max(gb.SessionStartLimit.MaxConcurrency, 1)
	}
	count = max(count, 1)
	a.buckets = &identifyBuckets{window: cmp.Or(a.idWindow, identifyWindow), limit: a.opts.Identify, n: conc, free: map[int]time.Time{}}
	a.shards = make([]*shard, count)
	for i := range a.shards {
		a.shards[i] = a.newShard(i, count)
	}
	if count > 1 {
		a.log.Info("discord gateway sharded", "shards", count, "max_concurrency", conc)
	}
	return nil
}

// newShard makes shard id of count: a gateway session with the
// adapter's handlers, dialling behind its gate.
func (a *Adapter) newShard(id, count int) *shard {
	s, _ := discordgo.New("Bot " + a.opts.Token) // only fails for a mistyped argument list
	sh := &shard{id: id, s: s}
	s.Client = a.s.Client // GET /gateway goes to DISCORD_API_URL
	s.StateEnabled = false
	s.ShouldReconnectOnError = false // the adapter reconnects (onDisconnect)
	s.SyncEvents = true              // handlers run in order, in the reading goroutine
	s.Identify.Intents = a.s.Identify.Intents
	s.ShardID, s.ShardCount = id, count
	s.Dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 45 * time.Second,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return a.dialShard(ctx, sh, network, addr)
		}}
	a.addHandlers(s)
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Connect) { a.setConnected(sh, true) })
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) { a.onDisconnect(sh) })
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Resumed) { a.releaseIdentify(sh) })
	s.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) {
		a.buckets.identified(id)
		a.releaseIdentify(sh)
		a.mu.Lock()
		a.botID = r.User.ID
		a.mu.Unlock()
		a.onReady(sh)
	})
	return sh
}

// shard returns shard i, or an error naming the count.
func (a *Adapter) shard(i int) (*shard, error) {
	if i < 0 || i >= len(a.shards) {
		return nil, fmt.Errorf("discord: no gateway shard %d: %d shards (after StartREST)", i, len(a.shards))
	}
	return a.shards[i], nil
}

// OpenShard connects shard i's gateway after StartREST and keeps it
// connected: a connection that ends is reopened, resuming its session.
// It waits for the shard's identify bucket first. ctx bounds the
// opening: if it ends first, the shard is closed again. The shard being
// open already is no error.
func (a *Adapter) OpenShard(ctx context.Context, i int) error {
	sh, err := a.shard(i)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("discord: open gateway shard %d: %w", i, context.Cause(ctx))
	}
	a.mu.Lock()
	if !sh.on {
		sh.on = true
		sh.ctx, sh.stop = context.WithCancel(cmp.Or[context.Context](a.ctx, context.Background()))
	}
	stop := sh.stop
	a.mu.Unlock()
	abandon := context.AfterFunc(ctx, stop) // ends a bucket wait or a dial under way
	err = a.open(sh)
	if !abandon() {
		a.CloseShard(i)
		return fmt.Errorf("discord: open gateway shard %d: %w", i, context.Cause(ctx))
	}
	if err != nil && !errors.Is(err, discordgo.ErrWSAlreadyOpen) {
		return fmt.Errorf("discord: open gateway shard %d of %d: %w", i, len(a.shards), shardRefusal(err))
	}
	return nil
}

// shardRefusal names the sentinel of a close code a shard cannot go on
// after, keeping the close error.
func shardRefusal(err error) error {
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Code {
	case closeInvalidShard:
		return fmt.Errorf("%w: %w", ErrInvalidShard, err)
	case closeShardingRequired:
		return fmt.Errorf("%w: %w", ErrShardingRequired, err)
	case closeInvalidVersion:
		return fmt.Errorf("%w: %w", ErrInvalidAPIVersion, err)
	}
	return err
}

// CloseShard closes shard i with 1000, which ends its session on
// Discord, and keeps it closed until OpenShard: a reconnect under way
// stops and cannot dial. The other shards and REST go on.
func (a *Adapter) CloseShard(i int) {
	sh, err := a.shard(i)
	if err != nil {
		return
	}
	a.mu.Lock()
	// A shard whose record was never read here is not this process's to
	// save. One that was is saved once more, soon: its next holder reads
	// the record at its READY.
	sh.flush = sh.flush || sh.on && sh.loaded
	sh.on, sh.loaded = false, false
	if sh.downSince.IsZero() {
		sh.downSince = time.Now()
	}
	if sh.flush {
		a.dirty = true
		a.scheduleSaveLocked()
	}
	if sh.stop != nil {
		sh.stop()
	}
	a.mu.Unlock()
	sh.s.Close()
}

// OpenGateway opens every shard (OpenShard), those of different
// buckets at once.
func (a *Adapter) OpenGateway(ctx context.Context) error {
	if len(a.shards) == 0 {
		return errors.New("discord: open the gateway: StartREST first")
	}
	errs := make([]error, len(a.shards))
	var wg sync.WaitGroup
	for i := range a.shards {
		wg.Go(func() { errs[i] = a.OpenShard(ctx, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// CloseGateway closes every shard (CloseShard), at once: discordgo
// waits a second after each close frame.
func (a *Adapter) CloseGateway() {
	var wg sync.WaitGroup
	for i := range a.shards {
		wg.Go(func() { a.CloseShard(i) })
	}
	wg.Wait()
}

// dialShard is a shard's gateway dialer behind its gate: refused while
// the shard is closed, ended with its opening, and made once its
// identify bucket is free (whether it is to identify or resume).
func (a *Adapter) dialShard(ctx context.Context, sh *shard, network, addr string) (net.Conn, error) {
	a.mu.Lock()
	on, gate := sh.on, sh.ctx
	a.mu.Unlock()
	if !on {
		return nil, errGatewayClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(gate, cancel)()
	release, err := a.buckets.wait(ctx, sh.id)
	if err != nil {
		return nil, fmt.Errorf("discord: shard %d waits for its identify bucket: %w", sh.id, err)
	}
	a.mu.Lock()
	prev := sh.release
	sh.release = release
	a.mu.Unlock()
	if prev != nil {
		prev()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		a.releaseIdentify(sh) // no IDENTIFY went out
	}
	return conn, err
}

// releaseIdentify lets go of the identify bucket sh's dial took, if it
// still holds it: its READY or RESUMED came, or its dial or opening
// ended without one.
func (a *Adapter) releaseIdentify(sh *shard) {
	a.mu.Lock()
	release := sh.release
	sh.release = nil
	a.mu.Unlock()
	if release != nil {
		release()
	}
}
