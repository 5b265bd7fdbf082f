package httphost

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestShutdownBeforeServe: a stop that comes before the server's
// goroutine began serving (a SIGINT right after the start, on a loaded
// machine) still stops it: Serve then returns at once, and the port is
// let go.
func TestShutdownBeforeServe(t *testing.T) {
	h := New(Options{Token: "tok-123456789"})
	ln, err := h.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Serve(ln) }()
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve after Shutdown: %v, want http.ErrServerClosed", err)
		}
	case <-time.After(5 * time.Second):
		ln.Close()
		t.Fatal("Serve after Shutdown still serves")
	}
	if resp, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("the port still answers after Shutdown")
	}
}
