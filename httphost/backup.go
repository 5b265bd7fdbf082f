package httphost

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// DBIDHeader carries a database's store.FileID: `bot backup` sends its
// PINPLAN_DB's, the running bot answers with its own, so a backup is
// never written from another pinplan that happens to answer at
// PINPLAN_HTTP_ADDR with the same console token.
const DBIDHeader = "Pinplan-Db-Id"

// Backuper is a database that writes a hot backup of itself (a
// *store.DB), and says which file it is.
type Backuper interface {
	FileID() string
	WriteTo(w io.Writer) (int64, error)
}

// BackupHandler streams a hot backup of db (GET /api/backup, mounted with
// Handle: the console's token guards it). A request naming another
// database (DBIDHeader) is refused before the copy is made.
func BackupHandler(db Backuper) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(DBIDHeader, db.FileID())
		if want := r.Header.Get(DBIDHeader); want != "" && want != db.FileID() {
			http.Error(w, "this pinplan runs with another database", http.StatusConflict)
			return
		}
		// A large DB may take longer than the server's write timeout.
		http.NewResponseController(w).SetWriteDeadline(time.Time{})
		w.Header().Set("Content-Type", "application/octet-stream")
		if _, err := db.WriteTo(w); err != nil {
			// Refused before a byte is sent when the file is damaged.
			w.Header().Del("Content-Type")
			http.Error(w, "backup failed: "+err.Error(), http.StatusInternalServerError)
		}
	})
}

// BackupRequest is a backup asked of a running pinplan.
type BackupRequest struct {
	Addr  string // its PINPLAN_HTTP_ADDR
	Token string // its console token
	DBID  string // the FileID of the database it must run with
	DB    string // that database's path, for the errors
	File  string // where to write the backup
}

// BackupFromBot is `bot backup` when a running bot holds r.DB locked: it
// asks that bot at r.Addr (FetchBackup) with r.Token, or without one the
// token kept beside r.DB (TokenFile), and says what it wrote on w.
func BackupFromBot(ctx context.Context, r BackupRequest, w io.Writer) error {
	if r.Token == "" {
		tok, err := ReadToken(TokenFile(r.DB))
		if err != nil {
			return fmt.Errorf("backup: %s is locked by a running pinplan; to ask it at %s (PINPLAN_HTTP_ADDR) its console token is needed, and it could not be read (set PINPLAN_WEB_TOKEN): %w", r.DB, r.Addr, err)
		}
		r.Token = tok
	}
	n, err := FetchBackup(ctx, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "pinplan: wrote %d bytes to %s (from the running bot at %s)\n", n, r.File, r.Addr)
	return nil
}

// FetchBackup asks the pinplan at r.Addr for a backup of r.DB, which it
// holds locked, and writes it to r.File (through a temporary file). What
// it sends is written only if it says it runs with that very file
// (DBIDHeader); every error names the address asked. It returns the
// bytes written.
func FetchBackup(ctx context.Context, r BackupRequest) (int64, error) {
	addr, db, file := r.Addr, r.DB, r.File
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/backup", nil)
	if err != nil {
		return 0, fmt.Errorf("backup: %s is locked by a running pinplan, and PINPLAN_HTTP_ADDR %s is no address to ask it at: %w", db, addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	req.Header.Set(DBIDHeader, r.DBID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("backup: %s is locked by a running pinplan, and it did not answer at %s (PINPLAN_HTTP_ADDR): %w", db, addr, err)
	}
	defer resp.Body.Close()
	switch got := resp.Header.Get(DBIDHeader); {
	case got == "" && resp.StatusCode == http.StatusOK:
		return 0, fmt.Errorf("backup: the pinplan at %s (PINPLAN_HTTP_ADDR) did not say which database it runs with (an older version?), so its backup may not be of %s: nothing was written; stop the bot that holds %s and run the backup again, or upgrade it", addr, db, db)
	case got != "" && got != r.DBID:
		return 0, fmt.Errorf("backup: the pinplan at %s (PINPLAN_HTTP_ADDR) runs with another database, not %s: nothing was written; set PINPLAN_HTTP_ADDR to the address of the bot that runs with %s", addr, db, db)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return 0, fmt.Errorf("backup: the pinplan at %s answered %s: %s", addr, resp.Status, strings.TrimSpace(string(msg)))
	}
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) // a backup holds every thread's history
	if err != nil {
		return 0, fmt.Errorf("backup to %s (from the pinplan at %s): %w", file, addr, err)
	}
	n, err := io.Copy(f, resp.Body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("backup to %s (from the pinplan at %s): %w", file, addr, err)
	}
	return n, nil
}
