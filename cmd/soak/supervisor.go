package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// event is a kill, start or unexpected exit of a bot process, for the
// report and the plot.
type event struct {
	T    float64 `json:"t_s"` // seconds since the workload started
	Slot int     `json:"slot"`
	PID  int     `json:"pid"`
	What string  `json:"what"` // start, kill, exit
	Note string  `json:"note,omitempty"`
}

// sample is one reading of a bot process.
type sample struct {
	T          float64 `json:"t_s"`
	Slot       int     `json:"slot"`
	Run        int     `json:"run"`
	PID        int     `json:"pid"`
	RSSKB      int64   `json:"rss_kb"`
	AnonKB     int64   `json:"rss_anon_kb"` // of RSSKB: heap and stacks
	FileKB     int64   `json:"rss_file_kb"` // of RSSKB: the binary and mapped files (the bbolt file)
	Goroutines int     `json:"goroutines"`  // -1: not known yet
	// The Go runtime's own account of its memory, from go_memstats_* at
	// /metrics (absent when the scrape failed): what of AnonKB is heap
	// in use (HeapInuseKB, live objects and garbage not yet collected),
	// heap free but not yet returned to the system (HeapRetainedKB) and
	// goroutine stacks (StackKB); HeapAllocKB is the bytes of objects,
	// and NextGCKB the heap goal, which GOGC=100 sets to twice the heap
	// found live by the last collection.
	HeapAllocKB    int64 `json:"heap_alloc_kb,omitempty"`
	NextGCKB       int64 `json:"next_gc_kb,omitempty"`
	HeapInuseKB    int64 `json:"heap_inuse_kb,omitempty"`
	HeapRetainedKB int64 `json:"heap_retained_kb,omitempty"`
	StackKB        int64 `json:"stack_kb,omitempty"`
}

// withRuntime adds the runtime's memory figures of m to the sample.
func (x sample) withRuntime(m scrape) sample {
	kb := func(name string) int64 { return int64(m.values[name] / 1024) }
	x.HeapAllocKB = kb("go_memstats_heap_alloc_bytes")
	x.NextGCKB = kb("go_memstats_next_gc_bytes")
	x.HeapInuseKB = kb("go_memstats_heap_inuse_bytes")
	x.HeapRetainedKB = kb("go_memstats_heap_idle_bytes") - kb("go_memstats_heap_released_bytes")
	x.StackKB = kb("go_memstats_stack_inuse_bytes")
	return x
}

// supervisor runs the bot's slots (one process, or the replicas): it
// starts them, kills one on request, starts again what died without
// being asked to, and samples them all.
type supervisor struct {
	binary     string
	env        func(slot int) map[string]string
	logDir     string
	token      string
	schedtrace bool
	client     *http.Client
	origin     time.Time // the workload's start, for event and sample times

	mu       sync.Mutex // guards the fields below
	live     []*botProc // by slot; nil while down
	starting []bool     // by slot: a start is under way
	runs     []*botProc // every run of every slot, in start order
	events   []event
	samples  []sample
	stopping bool
	watchers sync.WaitGroup
}

func (s *supervisor) since() float64 { return time.Since(s.origin).Seconds() }

func (s *supervisor) logEvent(slot, pid int, what, note string) {
	s.mu.Lock()
	s.events = append(s.events, event{T: s.since(), Slot: slot, PID: pid, What: what, Note: note})
	s.mu.Unlock()
}

// start starts slot and watches it.
func (s *supervisor) start(ctx context.Context, slot int) (*botProc, error) {
	s.mu.Lock()
	if s.starting == nil {
		s.starting = make([]bool, len(s.live))
	}
	if s.live[slot] != nil || s.starting[slot] || s.stopping {
		s.mu.Unlock()
		return nil, fmt.Errorf("slot %d is running, starting or stopping", slot)
	}
	s.starting[slot] = true
	run := 0
	for _, p := range s.runs {
		if p.slot == slot {
			run++
		}
	}
	s.mu.Unlock()
	logPath := filepath.Join(s.logDir, fmt.Sprintf("bot-slot%d.log", slot))
	p, err := startBot(ctx, s.binary, s.env(slot), logPath, s.schedtrace, slot, run)
	s.mu.Lock()
	s.starting[slot] = false
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.stopping {
		s.mu.Unlock()
		p.stop(10 * time.Second)
		return nil, fmt.Errorf("slot %d: the soak is stopping", slot)
	}
	s.runs = append(s.runs, p)
	s.live[slot] = p
	s.watchers.Add(1)
	s.mu.Unlock()
	s.logEvent(slot, p.pid, "start", "")
	go s.watch(ctx, p)
	return p, nil
}

// watch starts p's slot again when p exits without the soak killing it.
func (s *supervisor) watch(ctx context.Context, p *botProc) {
	defer s.watchers.Done()
	<-p.done
	s.mu.Lock()
	if s.live[p.slot] == p {
		s.live[p.slot] = nil
	}
	stopping := s.stopping
	s.mu.Unlock()
	if p.wasKilled() || stopping {
		return
	}
	s.logEvent(p.slot, p.pid, "exit", fmt.Sprint(p.err))
	for try := 0; try < 5; try++ {
		if sleepCtx(ctx, time.Second) != nil || s.isStopping() {
			return
		}
		if _, err := s.start(ctx, p.slot); err == nil {
			return
		} else {
			s.logEvent(p.slot, 0, "exit", "restart failed: "+err.Error())
		}
	}
}

func (s *supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// proc is slot's running process, or nil.
func (s *supervisor) proc(slot int) *botProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[slot]
}

// kill reads slot's metrics a last time (what it counted dies with it),
// then kills it with SIGKILL.
func (s *supervisor) kill(ctx context.Context, slot int, note string) {
	p := s.proc(slot)
	if p == nil {
		return
	}
	p.sample(ctx, s.client, s.token)
	p.kill()
	s.mu.Lock()
	if s.live[slot] == p {
		s.live[slot] = nil
	}
	s.mu.Unlock()
	s.logEvent(slot, p.pid, "kill", note)
}

// sampleAll reads every live process and keeps the samples.
func (s *supervisor) sampleAll(ctx context.Context) {
	s.mu.Lock()
	live := append([]*botProc(nil), s.live...)
	s.mu.Unlock()
	for _, p := range live {
		if p == nil {
			continue
		}
		mem, g, err := p.sample(ctx, s.client, s.token)
		if err != nil && mem.rss == 0 {
			continue // gone between the list and the read
		}
		x := sample{T: s.since(), Slot: p.slot, Run: p.run, PID: p.pid, RSSKB: mem.rss, AnonKB: mem.anon, FileKB: mem.file, Goroutines: g}
		if err == nil {
			p.mu.Lock()
			x = x.withRuntime(p.last)
			p.mu.Unlock()
		}
		s.mu.Lock()
		s.samples = append(s.samples, x)
		s.mu.Unlock()
	}
}

// sampler samples every d until ctx ends.
func (s *supervisor) sampler(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		s.sampleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stopAll stops every process (SIGTERM, then SIGKILL after d) and waits
// for the watchers.
func (s *supervisor) stopAll(d time.Duration) {
	s.mu.Lock()
	s.stopping = true
	live := append([]*botProc(nil), s.live...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range live {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(d)
		}()
	}
	wg.Wait()
	s.watchers.Wait()
}

// totals adds up every run's last metrics and CPU: the histograms'
// counts, model rounds and utime+stime.
func (s *supervisor) totals() (revToEdit, delivery map[string]*histogram, rounds float64, cpuTicks int64, scraped int) {
	s.mu.Lock()
	runs := append([]*botProc(nil), s.runs...)
	s.mu.Unlock()
	revToEdit, delivery = map[string]*histogram{}, map[string]*histogram{}
	for _, p := range runs {
		p.mu.Lock()
		last, ok, ticks := p.last, p.scraped, p.cpuTicks
		p.mu.Unlock()
		cpuTicks += ticks
		if !ok {
			continue
		}
		scraped++
		rounds += last.values["pinplan_model_rounds_total"]
		for _, pl := range []string{"slack", "discord"} {
			key := `{platform="` + pl + `"}`
			revToEdit[pl] = mergeHist(revToEdit[pl], last.hists["pinplan_revision_to_edit_seconds"+key])
			delivery[pl] = mergeHist(delivery[pl], last.hists["pinplan_reply_delivery_seconds"+key])
		}
	}
	return revToEdit, delivery, rounds, cpuTicks, scraped
}

// counter adds a counter over every run's last metrics.
func (s *supervisor) counter(name string) float64 {
	s.mu.Lock()
	runs := append([]*botProc(nil), s.runs...)
	s.mu.Unlock()
	total := 0.0
	for _, p := range runs {
		p.mu.Lock()
		if p.scraped {
			total += p.last.sumPrefix(name)
		}
		p.mu.Unlock()
	}
	return total
}

// goroutinesSince reports whether every live process has a goroutine
// count taken after t: from /metrics, always; from the scheduler trace,
// once a trace that began after t has been read whole.
func (s *supervisor) goroutinesSince(ctx context.Context, t time.Time) bool {
	s.mu.Lock()
	live := append([]*botProc(nil), s.live...)
	s.mu.Unlock()
	for _, p := range live {
		if p == nil {
			continue
		}
		if !s.schedtrace {
			continue
		}
		p.mu.Lock()
		ok := p.goroutines >= 0 && p.countAt.After(t)
		p.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// snapshot reads every live process now: its goroutines and RSS, by slot.
func (s *supervisor) snapshot(ctx context.Context) []slotReading {
	s.mu.Lock()
	live := append([]*botProc(nil), s.live...)
	s.mu.Unlock()
	var out []slotReading
	for _, p := range live {
		if p == nil {
			continue
		}
		mem, g, _ := p.sample(ctx, s.client, s.token)
		out = append(out, slotReading{Slot: p.slot, PID: p.pid, Goroutines: g, RSSKB: mem.rss})
	}
	return out
}

// slotReading is one process's goroutines and RSS at a moment.
type slotReading struct {
	Slot       int   `json:"slot"`
	PID        int   `json:"pid"`
	Goroutines int   `json:"goroutines"`
	RSSKB      int64 `json:"rss_kb"`
}

// heapProfile saves slot's heap profile, taken after a GC, to path: the
// run's memory window opens and closes with one (heap-<slot>-from.pb.gz,
// heap-<slot>-to.pb.gz), so `go tool pprof -base` shows what grew.
func (s *supervisor) heapProfile(ctx context.Context, slot int, path string) error {
	return s.profile(ctx, slot, "heap?gc=1", path)
}

// goroutineDump saves slot's goroutines, grouped by stack with a count
// each (pprof's debug=1), to path: the idle ones before the load and
// after the drain (goroutines-<slot>-before.txt, -after.txt) show what
// stayed.
func (s *supervisor) goroutineDump(ctx context.Context, slot int, path string) error {
	return s.profile(ctx, slot, "goroutine?debug=1", path)
}

// profile saves slot's /debug/pprof/<what> to path.
func (s *supervisor) profile(ctx context.Context, slot int, what, path string) error {
	p := s.proc(slot)
	if p == nil {
		return fmt.Errorf("slot %d is down", slot)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
