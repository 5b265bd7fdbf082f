package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinplan/pinplan/internal/fakediscord"
	"github.com/pinplan/pinplan/internal/fakeopenai"
	"github.com/pinplan/pinplan/internal/fakeslack"
)

// faults injects the soak's faults while on: a share of platform calls
// answered 500 (the fakes' FailHTTP, queued for the call at hand), a
// share of model requests answered 500 or slowly (the model fake's
// Fail), 429 bursts (the fakes' Limit), Discord gateway drops and Slack
// Socket Mode refreshes. Everything it does is on loopback, and it does
// nothing once off.
type faults struct {
	on           atomic.Bool
	platform500  float64
	model500     float64
	modelSlow    float64
	modelSlowMax time.Duration

	mu  sync.Mutex // guards rng
	rng *rand.Rand

	slack500, discord500, model500s, modelSlows atomic.Int64
	bursts, drops, refreshes                    atomic.Int64
}

func (f *faults) roll(p float64) bool {
	if p <= 0 || !f.on.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64() < p
}

func (f *faults) duration(max time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(f.rng.Int64N(int64(max)/2) + int64(max)/2)
}

// slackFront serves the Slack fake, failing platform500 of its Web API
// calls with a 500. auth.test and apps.connections.open are spared: they
// are the bot's start and its Socket Mode reconnects, not its work.
func (f *faults) slackFront(s *fakeslack.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if method, ok := strings.CutPrefix(r.URL.Path, "/api/"); ok && method != "auth.test" && method != "apps.connections.open" && f.roll(f.platform500) {
			s.FailHTTP(method, http.StatusInternalServerError, 1)
			f.slack500.Add(1)
		}
		s.ServeHTTP(w, r)
	})
}

// discordFront serves the Discord fake, failing platform500 of its REST
// calls with a 500; the gateway, the bot's own user and interaction
// callbacks are spared (a failed callback is a click the user sees fail).
func (f *faults) discordFront(s *fakediscord.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/api/") && !strings.Contains(p, "gateway") && !strings.Contains(p, "/users/") &&
			!strings.Contains(p, "/interactions/") && f.roll(f.platform500) {
			s.FailHTTP("", http.StatusInternalServerError, 1)
			f.discord500.Add(1)
		}
		s.ServeHTTP(w, r)
	})
}

// model queues a fault for the model request at hand, maybe.
func (f *faults) model(s *fakeopenai.Server) {
	switch {
	case f.roll(f.model500):
		s.Fail(fakeopenai.Fault{Status: http.StatusInternalServerError})
		f.model500s.Add(1)
	case f.roll(f.modelSlow):
		s.Fail(fakeopenai.Fault{Delay: f.duration(f.modelSlowMax)})
		f.modelSlows.Add(1)
	}
}

// unlimited lifts a Limit: more calls than any run makes, per second.
const unlimited = 1 << 30

// burst is one 429 burst: for d, Slack's chat.update (Tier 3, a limit
// per method and workspace, as the fake keeps it) and Discord's message
// edits (per channel) are held to a few calls, the fakes answering 429
// with Retry-After past them, and Discord's next posts get an
// unannounced 429. Slack's chat.postMessage is left alone: its limit is
// per channel, where the fake's Limit is per method, and a post to
// another channel during the Retry-After would count against the bot.
func (f *faults) burst(ctx context.Context, slack *fakeslack.Server, discord *fakediscord.Server, d time.Duration) {
	f.bursts.Add(1)
	slack.Limit("chat.update", 4, 5*time.Second)
	discord.Limit("PATCH message", 1, 3*time.Second)
	discord.FailHTTP("POST messages", http.StatusTooManyRequests, 2)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	slack.Limit("chat.update", unlimited, time.Second)
	discord.Limit("PATCH message", 50, time.Second) // Discord's global limit, what a route without one gets
}

// loop runs the timed faults until ctx ends: a 429 burst every
// burstEvery (the first at half of it), a gateway drop every dropEvery,
// a Socket Mode refresh every refreshEvery.
func (f *faults) loop(ctx context.Context, slack *fakeslack.Server, discord *fakediscord.Server, burstEvery, burstFor, dropEvery, refreshEvery time.Duration) {
	var wg sync.WaitGroup
	every := func(first, d time.Duration, do func()) {
		if d <= 0 {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(first)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if f.on.Load() {
					do()
				}
				t.Reset(d)
			}
		}()
	}
	every(burstEvery/2, burstEvery, func() { f.burst(ctx, slack, discord, burstFor) })
	every(dropEvery, dropEvery, func() { discord.Drop(); f.drops.Add(1) })
	every(refreshEvery, refreshEvery, func() { slack.Disconnect(); f.refreshes.Add(1) })
	wg.Wait()
}
