package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pinplan/pinplan/config"
)

// tokenFile is where a generated console token is kept: beside the DB, so
// a restart (and `bot backup` against the running bot) finds the same one.
func tokenFile(cfg *config.Config) string { return filepath.Join(filepath.Dir(cfg.DB), "web-token") }

// consoleToken returns the console's token (DESIGN §7): PINPLAN_WEB_TOKEN
// when set, else the one kept in tokenFile, generated (32 random bytes,
// hex) and written with mode 0600 at first start. generated is true when
// it did not come from the settings, so the startup line may print it: the
// operator has no other way to learn it. A configured token is never
// printed.
func consoleToken(cfg *config.Config) (token string, generated bool, err error) {
	if tok := cfg.WebToken.Reveal(); tok != "" {
		return tok, false, nil
	}
	path := tokenFile(cfg)
	if tok, err := readToken(path); err == nil {
		return tok, true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	var b [32]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("console token: %w", err)
	}
	// Written whole to a temporary file, then linked into place: another
	// process never reads a half-written token, and link (unlike rename)
	// never replaces one written first.
	f, err := os.CreateTemp(filepath.Dir(path), ".web-token-*")
	if err != nil {
		return "", false, fmt.Errorf("console token: %w", err)
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
		tok, err := readToken(path)
		return tok, true, err
	}
	if err != nil {
		return "", false, fmt.Errorf("console token: write %s: %w", path, err)
	}
	return tok, true, nil
}

// readToken reads a kept token, tightening the file's mode to 0600 if
// someone loosened it.
func readToken(path string) (string, error) {
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
