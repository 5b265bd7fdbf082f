package discord

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/internal/fakediscord"
)

func rig(b *testing.B, every time.Duration) (*fakediscord.Server, *chat.Router, string) {
	fake := &fakediscord.Server{}
	fake.AddChannel("C1", 0, "G1")
	srv := httptest.NewServer(fake)
	b.Cleanup(srv.Close)
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.x.y", APIURL: srv.URL, EditEvery: every})
	if err != nil {
		b.Fatal(err)
	}
	r := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Platforms: map[string]chat.Platform{"discord": a}})
	b.Cleanup(r.Close)
	key := Key("C1")
	r.Handle(context.Background(), chat.Incoming{Thread: chat.Thread{Platform: "discord", Key: key, Channel: "C1"}, Text: "bench"})
	return fake, r, key
}

// BenchmarkRevisionToEdit measures the time from a committed revision to
// its edit reaching the fake Discord, with no rate pressure.
func BenchmarkRevisionToEdit(b *testing.B) {
	fake, r, key := rig(b, time.Nanosecond)
	// No rate pressure: the fake announces (and enforces) 50 requests a
	// second by default, which discordgo waits out; lift it here.
	fake.Limit("PATCH message", 1_000_000, time.Second)
	r.Observe(chattest.Revision(key, 1))
	r.Flush(key)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := chattest.Revision(key, int64(i+2))
		r.Observe(ev)
		r.Flush(key)
		calls := fake.Calls("PATCH channels/C1/messages/")
		last := calls[len(calls)-1]
		lat = append(lat, last.At.Sub(ev.At))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkBurstPerChannelPace sends 20 bursts of 100 revisions against a
// fake enforcing Discord's 5 edits per 5 s per channel, at the default pace.
func BenchmarkBurstPerChannelPace(b *testing.B) {
	const bursts = 20
	for i := 0; i < b.N; i++ {
		fake, r, key := rig(b, 0)
		fake.LimitEdits(5, 5*time.Second)
		rev, correct := int64(0), 0
		for k := 0; k < bursts; k++ {
			for j := 0; j < 100; j++ {
				rev++
				r.Observe(chattest.Revision(key, rev))
			}
			r.Flush(key)
			for _, m := range fake.Messages("C1") {
				if len(m.Embeds) > 0 && strings.Contains(fmt.Sprint(m.Embeds[0]["footer"]), fmt.Sprintf("revision %d ", rev)) {
					correct++
				}
			}
		}
		if v := fake.Violations(); len(v) > 0 {
			b.Fatalf("retry_after ignored: %v", v)
		}
		b.ReportMetric(float64(len(fake.Calls("PATCH channels/C1/messages/")))/bursts, "edits/100-revisions")
		b.ReportMetric(float64(correct), "bursts-ending-on-last-of-20")
	}
}
