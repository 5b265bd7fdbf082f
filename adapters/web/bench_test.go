package web

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/chat/chattest"
	"github.com/pinplan/pinplan/todo"
)

// BenchmarkRevisionToSSE measures the time from a committed revision to its
// plan event arriving at each of 100 open SSE clients (one op is one
// revision delivered to all of them); p50 and p99 over every delivery.
func BenchmarkRevisionToSSE(b *testing.B) {
	const clients = 100
	console := New(Options{})
	r := chat.NewRouter(chat.Options{Runner: &chattest.Runner{}, Store: &chattest.Boards{}, Platforms: map[string]chat.Platform{"web": console}})
	defer r.Close()
	mux := http.NewServeMux()
	console.Register(mux, r)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	key := "web/bench"
	r.Handle(context.Background(), chat.Incoming{Thread: chat.Thread{Platform: "web", Key: key, Channel: key}, Text: "bench"})

	type arrival struct {
		rev string
		at  time.Time
	}
	arrivals := make(chan arrival, clients*1024)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ready.Done()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			first := true
			for sc.Scan() {
				line := sc.Text()
				if first && strings.HasPrefix(line, ": connected") {
					first = false
					ready.Done()
				}
				if i := strings.Index(line, `"revision":`); i >= 0 && strings.HasPrefix(line, "data:") {
					rest := line[i+len(`"revision":`):]
					arrivals <- arrival{rev: rest[:strings.IndexAny(rest, ",}")], at: time.Now()}
				}
			}
		}()
	}
	ready.Wait()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rev := int64(i + 1)
		ev := agent.Event{Session: key, Kind: agent.PlanChanged, Revision: rev, At: time.Now(),
			Plan: todo.NewSnapshot([]todo.Item{{Content: fmt.Sprintf("step %d", rev), Status: todo.InProgress}})}
		r.Observe(ev)
		want := fmt.Sprint(rev)
		for got := 0; got < clients; {
			a := <-arrivals
			if a.rev == want {
				lat = append(lat, a.at.Sub(ev.At))
				got++
			}
		}
	}
	b.StopTimer()
	cancel()
	console.Close()
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
