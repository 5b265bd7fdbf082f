package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrCorrupt means the database file is damaged: a page is not what bbolt
// expects, the file is shorter than its pages, or bbolt's consistency check
// failed. Errors that wrap it name the file and say how to restore a backup.
var ErrCorrupt = errors.New("database file is damaged")

// damaged is the error for damage found in the file at path; detail is
// what was found (an error, or the value bbolt panicked with).
func damaged(path string, detail any) error {
	return fmt.Errorf("%s: %w (%v); to restore it, stop pinplan, copy your latest backup (made with `bot backup FILE`) over %s and start pinplan again",
		path, ErrCorrupt, detail, path)
}

// bbolt panics when a page it reads is not what it should be (its type,
// its id, a freelist), and reading the mapped file past its end faults.
// Every transaction of the store runs with debug.SetPanicOnFault, so a
// fault is a panic too, and recovers: the panic becomes an error wrapping
// ErrCorrupt for that call, and the process goes on.

// recovered is the error for p, a panic met in a transaction.
func (db *DB) recovered(p any) error {
	if cp, ok := p.(callbackPanic); ok {
		panic(cp.v)
	}
	return damaged(db.path, p)
}

// view runs fn in a read transaction; damage it meets is an error.
func (db *DB) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = db.recovered(p)
		}
	}()
	return db.bolt.View(fn)
}

// update runs fn in a write transaction of its own.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	return db.writeWith(db.bolt.Update, fn)
}

// writeWith runs fn through do (bbolt's Update or Batch). A panic in fn is
// an error returned by fn, so bbolt rolls back as for any failed
// transaction. A panic outside fn, while bbolt commits or rolls back (a
// rollback reads the freelist page again), may leave bbolt's writer lock
// held for good: from then on every write fails at once with that error,
// rather than waiting forever.
func (db *DB) writeWith(do func(func(*bolt.Tx) error) error, fn func(*bolt.Tx) error) (err error) {
	if stuck := db.stuck.Load(); stuck != nil {
		return *stuck
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			stuck := db.recovered(p)
			db.stuck.CompareAndSwap(nil, &stuck)
			err = stuck
		}
	}()
	return do(func(tx *bolt.Tx) (err error) {
		// Batch may run fn in a goroutine of its own.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if p := recover(); p != nil {
				err = db.recovered(p)
			}
		}()
		return fn(tx)
	})
}

// callbackPanic carries a panic of a caller's callback (Outbox, Boards)
// out through the store's recover, which raises it again: the file is not
// to blame for it.
type callbackPanic struct{ v any }

// callback calls f, marking a panic in it as the caller's.
func callback(f func()) {
	defer func() {
		if p := recover(); p != nil {
			panic(callbackPanic{p})
		}
	}()
	f()
}

// openBolt is bolt.Open for the store: damage it finds (bad meta pages, a
// file too short, a panic reading the freelist) is an error wrapping
// ErrCorrupt.
func openBolt(path string, opts *bolt.Options) (b *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			// bbolt stopped half way, leaving the file open, mapped and
			// locked until the process ends; precheck keeps a damaged
			// file from getting this far.
			b, err = nil, damaged(path, p)
		}
	}()
	b, err = bolt.Open(path, 0o600, opts)
	if err != nil && isDamage(path, err) {
		err = damaged(path, err)
	}
	return b, err
}

// isDamage reports whether err, from bolt.Open, says the file's content
// is wrong (rather than that it could not be opened or locked).
func isDamage(path string, err error) bool {
	if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrVersionMismatch) {
		return true
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return false
	}
	// bbolt refuses a file shorter than its two meta pages without a
	// sentinel error.
	st, serr := os.Stat(path)
	return serr == nil && st.Size() > 0 && st.Size() < 2*int64(os.Getpagesize())
}

// precheck checks an existing file in full (see checkTx) before the
// read-write open, through a read-only open, which reads nothing but the
// meta pages: the read-write open reads the freelist page wherever the
// meta page says it is, even past the end of a file cut short, and a panic
// there would leave the file mapped and its lock held. A new or empty file
// passes.
func precheck(path string, lockTimeout time.Duration) error {
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		return nil // the read-write open creates it, or says why it cannot
	}
	b, err := openBolt(path, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return err
	}
	defer b.Close()
	return (&DB{bolt: b, path: path}).view(func(tx *bolt.Tx) error { return checkTx(path, tx) })
}

// checkTx checks the whole file through tx: that it is as long as its
// pages, that every bucket and key reads, and bbolt's consistency check.
// The keys are read here first, in the caller's goroutine where a fault is
// a panic (see view); tx.Check reads the same pages in a goroutine of its
// own, where a fault would end the process.
//
// bbolt's check compares tx's pages with the live freelist, so it holds
// only where no writer commits while it runs (a file opened read-only, or
// a backup's copy): pages freed by a later commit are still reachable in
// tx, and would be reported as "reachable freed".
func checkTx(path string, tx *bolt.Tx) error {
	return checkTxAs(path, path, tx)
}

// checkTxAs is checkTx on the file at file (tx's), with damage reported
// as path's: a backup's copy is checked, the live file is named.
func checkTxAs(path, file string, tx *bolt.Tx) error {
	if err := checkLengthOf(path, file, tx); err != nil {
		return err
	}
	if err := readKeys(tx); err != nil {
		return damaged(path, err)
	}
	var problems []string
	n := 0
	for err := range tx.Check() {
		if n++; len(problems) < 3 {
			problems = append(problems, err.Error())
		}
	}
	if n > len(problems) {
		problems = append(problems, fmt.Sprintf("and %d more", n-len(problems)))
	}
	if n > 0 {
		return damaged(path, strings.Join(problems, "; "))
	}
	return nil
}

// checkLength checks that the file at path holds all the pages tx's meta
// page counts.
func checkLength(path string, tx *bolt.Tx) error {
	return checkLengthOf(path, path, tx)
}

// checkLengthOf is checkLength of the file at file, reported as path's.
func checkLengthOf(path, file string, tx *bolt.Tx) error {
	st, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("check %s: %w", file, err)
	}
	if st.Size() < tx.Size() {
		return damaged(path, fmt.Sprintf("the file has %d bytes, its pages need %d: it was cut short", st.Size(), tx.Size()))
	}
	return nil
}

// readKeys reads every key of every bucket in tx and checks their order.
func readKeys(tx *bolt.Tx) error {
	var walk func(name []byte, b *bolt.Bucket) error
	walk = func(name []byte, b *bolt.Bucket) error {
		var prev []byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				return fmt.Errorf("bucket %q: keys out of order at %q", name, k)
			}
			prev = k
			if v != nil {
				continue
			}
			child := b.Bucket(k)
			if child == nil {
				return fmt.Errorf("bucket %q: nested bucket %q cannot be read", name, k)
			}
			if err := walk(k, child); err != nil {
				return err
			}
		}
		return nil
	}
	return tx.ForEach(walk)
}
