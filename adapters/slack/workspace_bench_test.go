package slack

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/pinplan/pinplan/adapters/slack/install"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/internal/etcdtest"
	"github.com/pinplan/pinplan/internal/fakeslack"
	"github.com/pinplan/pinplan/store"
)

// benchSpaces is how many installations the many-workspace benchmarks
// store (DESIGN §14's 1,000).
const benchSpaces = 1000

// benchStores are the installation stores the benchmarks run on: none
// (SLACK_BOT_TOKEN alone), in memory, a real bbolt file and an embedded
// etcd (one member, over loopback).
var benchStores = []string{"one-token", "mem", "bbolt", "etcd"}

// spacesRig is an adapter on a fake Slack with benchSpaces workspaces
// (team T<i>, channel C<i>, token xoxb-T<i>), installed in the named
// store; with "one-token", SLACK_BOT_TOKEN and the default workspace.
func spacesRig(b *testing.B, kind string) (*Adapter, func(i int) chat.Thread) {
	b.Helper()
	fake := &fakeslack.Server{}
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	opts := Options{APIURL: srv.URL + "/api/", EditsPerMinute: 1e9}
	if kind == "one-token" {
		opts.BotToken = "xoxb-bench"
		th := chat.Thread{Platform: "slack", Key: Key("T1", "C1", "1.1"), Channel: "C1", ThreadID: "1.1"}
		return New(opts), func(int) chat.Thread { return th }
	}
	var st install.Store = &memInstalls{}
	switch kind {
	case "bbolt":
		db, err := store.Open(filepath.Join(b.TempDir(), "pinplan.db"), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		st = db
	case "etcd":
		es, err := etcdstore.New(context.Background(), etcdtest.Start(b).Client(b), etcdstore.Options{Prefix: "/pinplan/"})
		if err != nil {
			b.Fatal(err)
		}
		st = es
	}
	seal, err := install.NewSealer("0123456789abcdef0123456789abcdef-bench")
	if err != nil {
		b.Fatal(err)
	}
	x := install.New(st, seal)
	for i := range benchSpaces {
		team := fmt.Sprintf("T%d", i)
		fake.AddTeam(fakeslack.Team{ID: team, Token: "xoxb-" + team, Channels: []string{fmt.Sprintf("C%d", i)}})
		if err := x.Save(context.Background(), install.Installation{ID: team, TeamID: team, BotToken: "xoxb-" + team, BotUserID: "UB" + team}); err != nil {
			b.Fatal(err)
		}
	}
	opts.Installations = x
	a := New(opts)
	threads := make([]chat.Thread, benchSpaces)
	for i := range threads {
		threads[i] = chat.Thread{Platform: "slack", Key: Key(fmt.Sprintf("T%d", i), fmt.Sprintf("C%d", i), "1.1"), Channel: fmt.Sprintf("C%d", i), ThreadID: "1.1"}
	}
	return a, func(i int) chat.Thread { return threads[i%benchSpaces] }
}

// BenchmarkWorkspaceRound measures a round's adapter path, a plan's
// post and one edit (chat.postMessage and chat.update against the fake
// over loopback HTTP), threads spread over every workspace: with
// SLACK_BOT_TOKEN alone against 1,000 installations in memory and in
// bbolt, every workspace in memory already (its first round reads its
// installation: BenchmarkWorkspaceLookup's cold case).
func BenchmarkWorkspaceRound(b *testing.B) {
	for _, kind := range benchStores {
		b.Run(kind, func(b *testing.B) {
			a, thread := spacesRig(b, kind)
			ctx := context.Background()
			p := plan()
			for i := range benchSpaces {
				if w := a.on(thread(i)); w.tokens != nil {
					w.tokens.token(ctx) // every workspace in memory
				}
			}
			i := 0
			for b.Loop() {
				th := thread(i)
				i++
				ref, err := a.PostPlan(ctx, th, p)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.EditPlan(ctx, th, ref, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWorkspaceLookup measures what many workspaces add to each
// call, without Slack: the workspace of a thread and its bot token.
// warm: the workspace and its token are in memory (every call after a
// workspace's first); cold: its installation is read and opened from
// the store each time (a workspace's first call, or one after
// Installed).
func BenchmarkWorkspaceLookup(b *testing.B) {
	for _, kind := range benchStores {
		for _, temp := range []string{"warm", "cold"} {
			if kind == "one-token" && temp == "cold" {
				continue
			}
			b.Run(kind+"/"+temp, func(b *testing.B) {
				a, thread := spacesRig(b, kind)
				ctx := context.Background()
				for i := range benchSpaces {
					if w := a.on(thread(i)); w.tokens != nil {
						w.tokens.token(ctx) // every workspace in memory
					}
				}
				i := 0
				for b.Loop() {
					th := thread(i)
					i++
					if temp == "cold" {
						a.Installed(install.Installation{ID: teamOf(th.Key)})
					}
					w := a.on(th)
					if w.tokens == nil {
						continue
					}
					if _, err := w.tokens.token(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
