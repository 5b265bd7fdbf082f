package main

import (
	"path/filepath"

	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/httphost"
)

// tokenFile is where a generated console token is kept: beside the DB, so
// a restart (and `bot backup` against the running bot) finds the same one.
func tokenFile(cfg *config.Config) string { return filepath.Join(filepath.Dir(cfg.DB), "web-token") }

// consoleToken returns the console's token (DESIGN §7): PINPLAN_WEB_TOKEN
// when set, else the one kept in tokenFile (httphost.KeptToken). generated
// is true when it did not come from the settings, so the startup line may
// print it: the operator has no other way to learn it. A configured token
// is never printed.
func consoleToken(cfg *config.Config) (token string, generated bool, err error) {
	if tok := cfg.WebToken.Reveal(); tok != "" {
		return tok, false, nil
	}
	tok, err := httphost.KeptToken(tokenFile(cfg))
	return tok, err == nil, err
}
