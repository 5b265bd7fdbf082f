package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/store"
)

// compact writes a compacted copy of the database (PINPLAN_DB) to out,
// offline: bbolt never shrinks its file, so space freed by retention comes
// back only through a copy. The bot must be stopped (it holds the file
// lock), and out must not exist; the operator swaps the files.
func compact(ctx context.Context, cfg *config.Config, out string, stdout io.Writer) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := dbExists("compact", cfg); err != nil {
		return err
	}
	before, after, err := store.CompactFile(cfg.DB, out)
	switch {
	case errors.Is(err, store.ErrLocked):
		return fmt.Errorf("compact: %s: %w; is pinplan running? Stop it, then run `bot compact` again", cfg.DB, store.ErrLocked)
	case errors.Is(err, store.ErrExists):
		return fmt.Errorf("compact: %s: %w; name a file that does not exist yet", out, store.ErrExists)
	case err != nil:
		return fmt.Errorf("compact: %w", err)
	}
	fmt.Fprintf(stdout, "pinplan: compacted %s (%d bytes) into %s (%d bytes)\n", cfg.DB, before, out, after)
	fmt.Fprintf(stdout, "pinplan: to use it, with the bot stopped, move %s over %s (keep the old file until the bot has started on the new one)\n", out, cfg.DB)
	return nil
}

// dbExists refuses a command on a database file that is not there
// (opening it would create an empty one): a wrong PINPLAN_DB or folder
// must say so.
func dbExists(cmd string, cfg *config.Config) error {
	if _, err := os.Stat(cfg.DB); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %s does not exist; set PINPLAN_DB to the bot's database (or run from the folder the bot runs in)", cmd, cfg.DB)
	}
	return nil
}
