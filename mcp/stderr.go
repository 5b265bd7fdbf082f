package mcp

import (
	"bytes"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A stdio server's stderr reaches the log at most stderrRate lines a
// second, after a burst of stderrBurst (a server's startup lines); the
// rest are counted, and their count is logged at most every stderrReport
// (DESIGN.md §16: a server writing its stderr in a loop must not fill the
// disk or take a core).
const (
	stderrRate   = 5
	stderrBurst  = 20
	stderrReport = time.Second

	maxStderrLine = 1024 // bytes of a line logged; a longer one is cut
	// stderrKeep is how much of a line is kept to log it: more than
	// maxStderrLine, so that a secret across the cut is still redacted
	// before the cut.
	stderrKeep = 4 * maxStderrLine
)

// stderrGate is a server's stderr on its way to the log, shared by every
// process the server starts, so that a crash loop does not reset it.
type stderrGate struct {
	s   *server
	lim *rate.Limiter

	mu      sync.Mutex // guards dropped, timer and closed
	dropped int        // lines not logged since the last report
	timer   *time.Timer
	closed  bool
}

func newStderrGate(s *server) *stderrGate {
	return &stderrGate{s: s, lim: rate.NewLimiter(stderrRate, stderrBurst)}
}

// line logs one line of stderr, redacted, or counts it when the server
// is over its rate. cut says the line went on past what was kept.
func (g *stderrGate) line(line []byte, cut bool) {
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		return
	}
	if !g.lim.Allow() {
		g.mu.Lock()
		g.dropped++
		if g.timer == nil && !g.closed {
			g.timer = time.AfterFunc(stderrReport, g.report)
		}
		g.mu.Unlock()
		return
	}
	text := g.s.redact.Log(string(line))
	if cut || len(text) > maxStderrLine {
		text = cutUTF8(text, maxStderrLine) + "…"
	}
	g.s.log.Info("mcp server stderr", "line", text)
}

// report logs how many lines were not logged since the last report.
func (g *stderrGate) report() {
	g.mu.Lock()
	n := g.dropped
	g.dropped, g.timer = 0, nil
	g.mu.Unlock()
	if n > 0 {
		g.s.log.Warn("mcp server stderr lines not logged", "count", n, "limit_per_second", stderrRate)
	}
}

// close reports what is left to report, and arms no more reports.
func (g *stderrGate) close() {
	g.mu.Lock()
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
	g.report()
}

// stderrLog splits one process's stderr into lines for its server's
// gate. It keeps at most stderrKeep bytes of a line: a longer line is
// passed on, cut, when it reaches that, and the rest of it is dropped.
type stderrLog struct {
	g *stderrGate

	mu   sync.Mutex // guards buf and long
	buf  []byte     // the current line, up to stderrKeep bytes
	long bool       // the current line was passed on cut; drop the rest of it
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		end := bytes.IndexByte(p, '\n')
		part := p
		if end >= 0 {
			part = p[:end]
		}
		if !w.long {
			room := stderrKeep - len(w.buf)
			w.buf = append(w.buf, part[:min(len(part), room)]...)
			if len(part) > room {
				w.g.line(w.buf, true)
				w.long = true
			}
		}
		if end < 0 {
			break
		}
		if !w.long {
			w.g.line(w.buf, false)
		}
		w.buf, w.long = w.buf[:0], false
		p = p[end+1:]
	}
	return n, nil
}
