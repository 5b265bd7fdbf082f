package discord

import (
	"context"
	"net"
	"strings"
	"testing"
)

// TestStartErrorNamesDialledURL: with DISCORD_API_URL set, a failed
// token check names the URL that was dialled, not https://discord.com,
// which was never contacted.
func TestStartErrorNamesDialledURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from here on
	a, err := New(Options{Token: "OTAwMDAwMDAwMDAwMDAwMDAx.fake.token", APIURL: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	err = a.StartREST(context.Background(), nil)
	if err == nil {
		t.Fatal("StartREST against a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "discord.com") {
		t.Errorf("err = %v; want it to name %s and not discord.com", err, addr)
	}
}
