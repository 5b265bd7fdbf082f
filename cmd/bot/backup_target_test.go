package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRefusesAnotherBot: `bot backup` whose PINPLAN_DB is held by
// bot A but whose PINPLAN_HTTP_ADDR reaches bot B (another pinplan, same
// console token, another DB) refuses, names the address it asked and
// writes nothing; pointed at A it writes A's database.
func TestBackupRefusesAnotherBot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const token = "0123456789abcdef0123456789abcdef"
	dbA, dbB := filepath.Join(dir, "a", "p.db"), filepath.Join(dir, "b", "p.db")
	a := startBot(t, map[string]string{"PINPLAN_DB": dbA, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": token}, botBinary)
	b := startBot(t, map[string]string{"PINPLAN_DB": dbB, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": token}, botBinary)
	threadIn := func(p *botProc, text string) string {
		t.Helper()
		out, err := postJSON(context.Background(), p.URL+"/api/threads", map[string]string{"text": text})
		if err != nil {
			t.Fatal(err)
		}
		return out["id"].(string)
	}
	inA, inB := threadIn(a, "a thread of bot A"), threadIn(b, "a thread of bot B")

	backup := func(addr, file string) (string, error) {
		cmd := exec.Command(botBinary, "backup", file)
		cmd.Env = []string{"PINPLAN_DB=" + dbA, "PINPLAN_HTTP_ADDR=" + addr, "PINPLAN_WEB_TOKEN=" + token}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	addrA, addrB := strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://")

	wrong := filepath.Join(dir, "wrong.db")
	out, err := backup(addrB, wrong)
	if err == nil {
		t.Errorf("backup of %s from bot B at %s succeeded, want a refusal:\n%s", dbA, addrB, out)
	}
	t.Logf("refusal: %s", out)
	if !strings.Contains(out, addrB) || !strings.Contains(out, dbA) {
		t.Errorf("refusal does not name the address %s and the DB %s:\n%s", addrB, dbA, out)
	}
	for _, path := range []string{wrong, wrong + ".tmp"} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s written after the refusal (stat: %v)", filepath.Base(path), err)
		}
	}

	right := filepath.Join(dir, "right.db")
	if out, err := backup(addrA, right); err != nil || !strings.Contains(out, "from the running bot") {
		t.Fatalf("backup from bot A at %s: %v\n%s", addrA, err, out)
	}
	a.stop(t)
	b.stop(t)
	q := startBot(t, map[string]string{"PINPLAN_DB": right, "PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_WEB_TOKEN": token}, botBinary)
	defer q.stop(t)
	for _, c := range []struct {
		id   string
		want int
	}{{inA, http.StatusOK}, {inB, http.StatusNotFound}} {
		resp, err := http.Get(q.URL + "/api/threads/" + c.id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("the backup's thread %s: got %d, want %d", c.id, resp.StatusCode, c.want)
		}
	}
}
