package httphost

import (
	"errors"
	"sync"
)

// Readiness is what /readyz answers (Options.Ready): not ready while the
// process starts or stops (Set), or while one of its checks fails (Add: a
// platform's connection, the store's ping).
type Readiness struct {
	mu       sync.Mutex // guards notReady and checks
	notReady error
	checks   []func() error
}

// NewReadiness returns a Readiness that says "starting" until Set(nil).
func NewReadiness() *Readiness { return &Readiness{notReady: errors.New("starting")} }

// Add adds a check.
func (r *Readiness) Add(check func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, check)
}

// Set sets why the process is not ready (nil: it is, if its checks pass).
func (r *Readiness) Set(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notReady = err
}

// Check is nil when ready, else why not.
func (r *Readiness) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notReady != nil {
		return r.notReady
	}
	for _, f := range r.checks {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}
