package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// botProc is one run of the bot binary: a slot (the process, or one
// replica) lives through many of them, one per start after a kill.
type botProc struct {
	slot, run int
	cmd       *exec.Cmd
	pid       int
	url       string // the console, http://127.0.0.1:PORT
	started   time.Time
	done      chan struct{} // closed when the process has exited
	err       error         // its exit status, once done

	mu         sync.Mutex // guards the fields below
	killed     bool       // by the soak, on purpose
	last       scrape     // the newest /metrics read
	scraped    bool
	cpuTicks   int64 // utime+stime, the newest read of /proc/<pid>/stat
	goroutines int   // from the GODEBUG schedtrace, -1 before the first
	gCount     int   // goroutines counted in the schedtrace block being read
	inBlock    bool
	blockAt    time.Time // when the block being read began
	countAt    time.Time // when the block counted in goroutines began
}

var consoleLine = regexp.MustCompile(`web console at (http://[^/\s]+)/`)

// startBot starts the binary with env as its whole environment, writes
// its output to logPath, and waits until it prints its console address.
func startBot(ctx context.Context, binary string, env map[string]string, logPath string, schedtrace bool, slot, run int) (*botProc, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND // a slot's runs share its log
	if run == 0 {
		flags |= os.O_TRUNC // a new soak
	}
	logf, err := os.OpenFile(logPath, flags, 0o600)
	if err != nil {
		return nil, err
	}
	p := &botProc{slot: slot, run: run, done: make(chan struct{}), goroutines: -1}
	p.cmd = exec.Command(binary)
	p.cmd.Env = commandEnv(env, schedtrace)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kill -9 takes its MCP servers too
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p.pid, p.started = p.cmd.Process.Pid, time.Now()
	found := p.follow(logf, stdout, stderr)
	select {
	case p.url = <-found:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("bot exited before serving: %v (log %s)", p.err, logPath)
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("bot did not print its console address in 60 s (log %s)", logPath)
	case <-ctx.Done():
		p.kill()
		return nil, context.Cause(ctx)
	}
}

// commandEnv is env as the process's whole environment; with schedtrace,
// GODEBUG asks for the scheduler trace too.
func commandEnv(env map[string]string, schedtrace bool) []string {
	var out []string
	godebug := env["GODEBUG"]
	if schedtrace {
		// The bot serves no go_goroutines; the runtime's scheduler trace
		// lists every goroutine every 10 s on stderr instead.
		godebug = strings.TrimPrefix(godebug+",schedtrace=10000,scheddetail=1", ",")
	}
	for k, v := range env {
		if k != "GODEBUG" {
			out = append(out, k+"="+v)
		}
	}
	if godebug != "" {
		out = append(out, "GODEBUG="+godebug)
	}
	return out
}

// follow writes the process's output to logf, stdout's lines and
// stderr's but the scheduler trace (read by schedLine), and closes
// p.done once both are read and the process has exited. found gets the
// console's address when stdout prints it.
func (p *botProc) follow(logf *os.File, stdout, stderr io.Reader) (found <-chan string) {
	var logMu sync.Mutex
	logLine := func(line string) {
		logMu.Lock()
		fmt.Fprintln(logf, line)
		logMu.Unlock()
	}
	console := make(chan string, 1)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logLine(line)
			if m := consoleLine.FindStringSubmatch(line); m != nil {
				select {
				case console <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !p.schedLine(line) {
				logLine(line)
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		readers.Wait()
		p.err = p.cmd.Wait()
		logLine(fmt.Sprintf("soak: process %d exited: %v", p.pid, p.err))
		logf.Close()
		close(p.done)
	}()
	return console
}

// schedLine reads one line of the scheduler trace: a "SCHED" line ends
// the previous block (its goroutine count becomes the newest), a G line
// is a goroutine, counted unless it is dead. It reports whether the line
// was the trace's. A log line written in the middle of a trace line can
// hide one goroutine from the count.
func (p *botProc) schedLine(line string) bool {
	switch {
	case strings.HasPrefix(line, "SCHED "):
		p.mu.Lock()
		// The first trace is printed as the process starts: not its
		// working count.
		if p.inBlock && p.blockAt.Sub(p.started) > 2*time.Second {
			p.goroutines, p.countAt = p.gCount, p.blockAt
		}
		p.inBlock, p.gCount, p.blockAt = true, 0, time.Now()
		p.mu.Unlock()
		return true
	case strings.HasPrefix(line, "  G"):
		if live, ok := liveG(line); ok {
			if live {
				p.mu.Lock()
				p.gCount++
				p.mu.Unlock()
			}
			return true
		}
	case strings.HasPrefix(line, "  P"), strings.HasPrefix(line, "  M"):
		return strings.Contains(line, ": ")
	}
	return false
}

// liveG reads "  G12: status=4(chan receive) m=nil lockedm=nil": a
// goroutine whose status is not dead (6) or dead-extra (11), with the
// GC's scan bit cleared.
func liveG(line string) (live, ok bool) {
	_, rest, found := strings.Cut(line, "status=")
	if !found {
		return false, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return false, false
	}
	st, err := strconv.Atoi(rest[:end])
	if err != nil {
		return false, false
	}
	st &^= 0x1000
	return st != 6 && st != 11, true
}

// ending marks the process as ended on purpose and reports whether it
// still runs.
func (p *botProc) ending() bool {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the bot's process group and waits for it.
func (p *botProc) kill() {
	if !p.ending() {
		return
	}
	syscall.Kill(-p.pid, syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to d, then kills.
func (p *botProc) stop(d time.Duration) {
	if !p.ending() {
		return
	}
	syscall.Kill(-p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		p.kill()
	}
}

func (p *botProc) wasKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// sample reads the process's RSS and CPU from /proc and its /metrics.
// The metrics and CPU are kept as the run's newest (a run's totals are
// its last read); RSS is returned for the time series.
func (p *botProc) sample(ctx context.Context, client *http.Client, token string) (mem memKB, goroutines int, err error) {
	mem, err = readMemory(p.pid)
	if err != nil {
		return memKB{}, 0, err
	}
	if ticks, err := readCPUTicks(p.pid); err == nil {
		p.mu.Lock()
		p.cpuTicks = ticks
		p.mu.Unlock()
	}
	s, err := fetchMetrics(ctx, client, p.url, token)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.last, p.scraped = s, true
	}
	goroutines = p.goroutines
	if v, ok := s.values["go_goroutines"]; ok {
		goroutines = int(v)
	}
	return mem, goroutines, err
}

func fetchMetrics(ctx context.Context, client *http.Client, base, token string) (scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return scrape{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return scrape{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(string(body)), nil
}

// memKB is a process's resident memory from /proc/<pid>/status, in kB:
// VmRSS, and its anonymous (heap, stacks) and file-backed (the binary,
// the mapped bbolt file) parts.
type memKB struct{ rss, anon, file int64 }

func readMemory(pid int) (memKB, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return memKB{}, err
	}
	var m memKB
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if !ok || len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			m.rss, found = n, true
		case "RssAnon":
			m.anon = n
		case "RssFile":
			m.file = n
		}
	}
	if !found {
		return memKB{}, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return m, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux the soak runs on (the kernel fixes it for user space).
const clockTicks = 100

// readCPUTicks is utime+stime of /proc/<pid>/stat (fields 14 and 15,
// counted after the command name, which may hold spaces).
func readCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc/<pid>/stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc/<pid>/stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("unreadable utime or stime")
	}
	return u + st, nil
}

// waitReady polls /readyz until it contains every want (an MCP server's
// "mcp fs: ready", say).
func waitReady(ctx context.Context, client *http.Client, p *botProc, token string, d time.Duration, want ...string) error {
	deadline := time.Now().Add(d)
	var body string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := client.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(body, w)
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready in %s; /readyz: %s", d, body)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
