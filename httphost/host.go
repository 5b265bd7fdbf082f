// Package httphost is the process's HTTP host: the listener with its
// timeouts, the guard every browser-facing route passes (Host check
// against DNS rebinding, same-origin and JSON for state changes, security
// headers), the console token (DESIGN §7), the health probes, /metrics and
// the mux that the web console and Slack's signed endpoints mount on. The
// console is one tenant of the host, not its owner.
//
// Routes come in three kinds:
//
//   - Handle: the guard and the token. The console's pages and API,
//     /metrics, /debug/pprof/, the backup download.
//   - HandleOpen: the guard, no token. The sign-in form and its styles.
//   - HandlePublic: neither. Endpoints that carry their own proof (Slack
//     signs its requests) and the probes supervisors call with whatever
//     Host they use.
package httphost

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// Server limits (DESIGN §16): Slack's Events endpoint faces the internet,
// so a client that trickles its headers or body, or idles, is cut off.
// Long-lived answers (an event stream, a backup download) lift their own
// deadlines with http.ResponseController.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// Options configures a Host.
type Options struct {
	// Token guards every Handle route. Empty refuses them all: the host
	// fails closed rather than serve the world.
	Token string
	// Metrics is served at /metrics, behind the token; nil serves none.
	Metrics http.Handler
	// Ready answers /readyz; ReadyDetail adds lines to it (nothing secret:
	// it is open).
	Ready       func() error
	ReadyDetail func() string
	Logger      *slog.Logger
	Now         func() time.Time
}

// Host is the HTTP host. Mount routes, then Serve.
type Host struct {
	opts     Options
	mux      *http.ServeMux
	failures failureLimiter

	mu   sync.Mutex   // guards addr, srv and down
	addr string       // the listener's address, for the Host check
	srv  *http.Server // set by Serve
	// down: Shutdown came before Serve, which then serves nothing.
	down bool
}

// New returns a host with /healthz, /readyz and /metrics mounted.
func New(opts Options) *Host {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Host{opts: opts, mux: http.NewServeMux(), failures: failureLimiter{now: opts.Now}}
	h.HandlePublic("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
	h.HandlePublic("GET /readyz", http.HandlerFunc(h.readyz))
	if opts.Metrics != nil {
		h.Handle("GET /metrics", opts.Metrics)
	}
	// The Go runtime's profiles (heap, goroutines, CPU), for an operator
	// who asks where the memory or the time goes: behind the token, as
	// they show the process's insides.
	h.Handle("GET /debug/pprof/", http.HandlerFunc(pprof.Index))
	h.Handle("GET /debug/pprof/cmdline", http.HandlerFunc(pprof.Cmdline))
	h.Handle("GET /debug/pprof/profile", http.HandlerFunc(pprof.Profile))
	h.Handle("GET /debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
	h.Handle("GET /debug/pprof/trace", http.HandlerFunc(pprof.Trace))
	h.HandleOpen("GET /login", http.HandlerFunc(h.login))
	h.HandleOpen("POST /login", http.HandlerFunc(h.login))
	h.HandleOpen("GET /login.css", http.HandlerFunc(loginCSS))
	return h
}

// Handle mounts handler behind the guard and the token.
func (h *Host) Handle(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, h.guard(h.auth(handler)))
}

// HandleOpen mounts handler behind the guard only.
func (h *Host) HandleOpen(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, h.guard(handler))
}

// HandlePublic mounts handler with neither guard nor token: for endpoints
// that prove themselves (signed requests) and health probes.
func (h *Host) HandlePublic(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, handler)
}

// Handler is the host's whole handler: security headers on every answer,
// then the routes.
func (h *Host) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Content-Type-Options", "nosniff")
		h.mux.ServeHTTP(w, r)
	})
}

// SetAddr tells the host the address it is served on, for the Host check
// on loopback listeners. Serve sets it; tests that serve Handler
// themselves call it.
func (h *Host) SetAddr(addr string) {
	h.mu.Lock()
	h.addr = addr
	h.mu.Unlock()
}

// Listen opens the listener; Serve serves on it.
func (h *Host) Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h.SetAddr(ln.Addr().String())
	return ln, nil
}

// Serve serves on ln until Shutdown; it returns http.ErrServerClosed then,
// at once (ln closed) if Shutdown came first.
func (h *Host) Serve(ln net.Listener) error {
	h.mu.Lock()
	if h.down {
		h.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	if h.srv == nil {
		h.srv = &http.Server{
			Handler:           h.Handler(),
			ReadHeaderTimeout: ReadHeaderTimeout,
			ReadTimeout:       ReadTimeout,
			WriteTimeout:      WriteTimeout,
			IdleTimeout:       IdleTimeout,
			MaxHeaderBytes:    MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(h.opts.Logger.Handler(), slog.LevelWarn),
		}
	}
	srv := h.srv
	h.mu.Unlock()
	return srv.Serve(ln)
}

// Shutdown stops the server gracefully, waiting for requests in flight
// until ctx is done, then closes what is left. One that comes before
// Serve makes Serve serve nothing.
func (h *Host) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	srv := h.srv
	h.down = true
	h.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		srv.Close()
	}
	return err
}

func (h *Host) readyz(w http.ResponseWriter, _ *http.Request) {
	detail := ""
	if h.opts.ReadyDetail != nil {
		detail = h.opts.ReadyDetail()
	}
	if h.opts.Ready != nil {
		if err := h.opts.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error()+"\n"+detail, http.StatusServiceUnavailable)
			return
		}
	}
	io.WriteString(w, "ready\n"+detail)
}

// WriteError answers with a JSON error body, as the console's API does.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
