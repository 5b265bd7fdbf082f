package httphost

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is where a generated console token is kept for the database
// at db: beside it, so a restart (and `bot backup` against the running
// bot) finds the same one.
func TokenFile(db string) string { return filepath.Join(filepath.Dir(db), "web-token") }

// ConsoleToken returns the console's token (DESIGN §7): configured
// (PINPLAN_WEB_TOKEN) when set, else the one kept beside the database db
// (TokenFile, KeptToken). generated is true when it did not come from the
// settings, so the startup line may print it: the operator has no other
// way to learn it. A configured token is never printed.
func ConsoleToken(configured, db string) (token string, generated bool, err error) {
	if configured != "" {
		return configured, false, nil
	}
	tok, err := KeptToken(TokenFile(db))
	return tok, err == nil, err
}

// KeptToken returns the token kept in path, generated (32 random bytes,
// hex) and written with mode 0600 when there is none yet.
func KeptToken(path string) (string, error) {
	if tok, err := ReadToken(path); err == nil {
		return tok, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [32]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	// Written whole to a temporary file, then linked into place: another
	// process never reads a half-written token, and link (unlike rename)
	// never replaces one written first.
	f, err := os.CreateTemp(filepath.Dir(path), ".web-token-*")
	if err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(f.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		// Another process wrote it first: use that one.
		return ReadToken(path)
	}
	if err != nil {
		return "", fmt.Errorf("console token: write %s: %w", path, err)
	}
	return tok, nil
}

// ReadToken reads a kept token, tightening the file's mode to 0600 if
// someone loosened it.
func ReadToken(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(raw))
	if len(tok) < 16 {
		return "", fmt.Errorf("console token: %s is damaged (%d characters); delete it and restart to generate a new one", path, len(tok))
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return "", fmt.Errorf("console token: %s is readable by others and cannot be tightened: %w", path, err)
		}
	}
	return tok, nil
}

// ConsoleURL is an address a person can open: an unspecified host (":8080",
// "0.0.0.0") becomes localhost. A generated token is in the URL, as
// Jupyter prints its own: the operator has no other way to learn it, and
// the link signs the browser in. A configured PINPLAN_WEB_TOKEN is never
// printed; the line says to sign in with it.
func ConsoleURL(addr, token string, generated bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	u := "http://" + host + "/"
	if port != "" {
		u = "http://" + net.JoinHostPort(host, port) + "/"
	}
	if generated {
		return u + "?token=" + url.QueryEscape(token)
	}
	return u + " (sign in with PINPLAN_WEB_TOKEN)"
}
