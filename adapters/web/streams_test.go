package web

import (
	"net/http"
	"testing"
	"time"
)

// TestEventStreamsCappedPerClient: one address cannot hold event streams
// open without limit. Past the cap a stream is refused with 429, and a
// closed stream's slot is given back.
func TestEventStreamsCappedPerClient(t *testing.T) {
	_, srv, _, _ := newConsole(t, "")
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	open := func() (*http.Response, error) {
		return client.Get(srv.URL + "/api/events")
	}
	var streams []*http.Response
	t.Cleanup(func() {
		for _, r := range streams {
			r.Body.Close()
		}
	})
	refused := 0
	for range 200 {
		resp, err := open()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			streams = append(streams, resp)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("stream %d: status %d, want 200 or 429", len(streams)+1, resp.StatusCode)
		}
		refused++
		break
	}
	if refused == 0 {
		t.Fatalf("%d streams from one address all accepted, want a cap", len(streams))
	}
	if len(streams) < 4 {
		t.Fatalf("refused after %d streams, want room for a few tabs", len(streams))
	}
	// Closing one gives its slot back.
	streams[0].Body.Close()
	streams = streams[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := open()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			streams = append(streams, resp)
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's slot not given back: still %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
