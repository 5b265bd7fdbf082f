package fakediscord

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Gateway sharding as Discord does it (discord.com/developers/docs,
// Gateway: Sharding, Session Start Limit Object, Gateway Close Event
// Codes, Opcode 9 Invalid Session). IDENTIFY names its shard as
// [shard_id, num_shards]; a guild's events go only to the shard
// (guild_id >> 22) % num_shards, DMs to shard 0. A shard id not below
// num_shards is closed with 4010 (Invalid shard), a session that would
// hold more guilds than a shard may (2,500) with 4011 (Sharding
// required). Shards identify in buckets, rate_limit_key = shard_id %
// max_concurrency, one IDENTIFY per bucket every 5 seconds; the gateway
// answers one sent too soon with op 9 Invalid Session d=false (Gateway,
// Identifying: "if they exceed this limit, the gateway will respond with
// an Opcode 9 Invalid Session", quoted in discord/discord-api-docs#1328),
// and the client identifies again later (Violations records it).
// session_start_limit.total is
// 1,000 IDENTIFYs a day; remaining counts them down (not enforced: on
// Discord running out resets the token).

// IdentifyWindowDiscord is Discord's wait between two IDENTIFYs of one
// bucket (Sharding: max concurrency).
const IdentifyWindowDiscord = 5 * time.Second

// dailyIdentifies is session_start_limit.total, the IDENTIFYs a bot may
// make in 24 hours (Session Start Limit Object).
const dailyIdentifies = 1000

// ShardOf is the shard a guild's events go to among shards:
// (guild_id >> 22) % shards, and 0 for a DM ("") or an id that is not a
// snowflake (the fake's short test ids).
func ShardOf(guild string, shards int) int {
	g, err := strconv.ParseUint(guild, 10, 64)
	if err != nil || shards <= 1 {
		return 0
	}
	return int((g >> 22) % uint64(shards))
}

// owns reports whether the session's shard receives an event with data.
func (sess *session) owns(data map[string]any) bool {
	guild, _ := data["guild_id"].(string) // "" in a DM
	return ShardOf(guild, max(sess.shards, 1)) == sess.shard
}

// shardGuildsLocked lists the guilds a shard holds.
func (s *Server) shardGuildsLocked(shard, shards int) []string {
	var out []string
	for _, g := range s.guildsLocked() {
		if ShardOf(g, shards) == shard {
			out = append(out, g)
		}
	}
	return out
}

// checkShardLocked checks IDENTIFY's shard, its guild count and its
// bucket's window; it closes or answers c and reports false when the
// session is not to start.
func (s *Server) checkShardLocked(c *conn, raw []int) (shard, shards int, ok bool) {
	shards = 1
	if raw != nil {
		if len(raw) != 2 || raw[1] < 1 || raw[0] < 0 || raw[0] >= raw[1] {
			s.closeLocked(c, 4010, closeReasons[4010])
			return 0, 0, false
		}
		shard, shards = raw[0], raw[1]
	}
	limit := s.ShardGuildLimit
	if limit <= 0 {
		limit = 2500
	}
	if len(s.shardGuildsLocked(shard, shards)) > limit {
		s.closeLocked(c, 4011, closeReasons[4011])
		return 0, 0, false
	}
	if s.IdentifyWindow > 0 {
		if s.lastIdentify == nil {
			s.lastIdentify = map[int]time.Time{}
		}
		key := shard % s.maxConcurrency()
		now := time.Now()
		if last, seen := s.lastIdentify[key]; seen && now.Sub(last) < s.IdentifyWindow {
			s.violations = append(s.violations, fmt.Sprintf("IDENTIFY of shard %d in bucket %d %s after the bucket's last, limit %s",
				shard, key, now.Sub(last).Round(time.Millisecond), s.IdentifyWindow))
			c.send(map[string]any{"op": 9, "d": false})
			return 0, 0, false
		}
		s.lastIdentify[key] = now
	}
	return shard, shards, true
}

func (s *Server) maxConcurrency() int {
	return max(s.MaxConcurrency, 1)
}

// gatewayBotLocked fills GET /gateway/bot's shards and
// session_start_limit: remaining counts down with each IDENTIFY.
func (s *Server) gatewayBotLocked(out map[string]any) {
	out["shards"] = max(s.Shards, 1)
	out["session_start_limit"] = map[string]any{"total": dailyIdentifies, "remaining": max(dailyIdentifies-s.identifies, 0),
		"reset_after": 86400000, "max_concurrency": s.maxConcurrency()}
}

// DropShard cuts the gateway connections of one shard without a close
// frame, as Drop does for all; its session stays resumable, the other
// shards are untouched.
func (s *Server) DropShard(shard int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.sess != nil && c.sess.shard == shard {
			c.ready = false
			c.ws.UnderlyingConn().Close()
		}
	}
}

// ShardsConnected reports the shards with a ready gateway connection, in
// order.
func (s *Server) ShardsConnected() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int]bool{}
	var out []int
	for c := range s.conns {
		if c.ready && c.sess != nil && !seen[c.sess.shard] {
			seen[c.sess.shard] = true
			out = append(out, c.sess.shard)
		}
	}
	slices.Sort(out)
	return out
}
