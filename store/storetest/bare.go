package storetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bareBucket = []byte("events")

// BareUpdater is a bbolt file with one bucket, written with one Update per
// Put: one transaction, its commit and fsyncs, and nothing else. It is the
// cheapest durable write bbolt offers, and so the baseline for anything
// that must be on disk before it answers.
type BareUpdater struct {
	db *bolt.DB
}

// NewBareUpdater creates a bbolt file in dir, with bbolt's defaults (fsync
// on every commit), and closes it in tb's Cleanup after checking its
// consistency.
func NewBareUpdater(tb testing.TB, dir string) *BareUpdater {
	tb.Helper()
	path := filepath.Join(dir, "bare.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		tb.Fatalf("open bare bbolt file: %v", err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bareBucket); return err }); err != nil {
		db.Close()
		tb.Fatalf("create bucket in %s: %v", path, err)
	}
	tb.Cleanup(func() {
		if err := db.View(func(tx *bolt.Tx) error {
			var errs []error
			for err := range tx.Check() {
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		}); err != nil {
			tb.Errorf("check %s: %v", path, err)
		}
		if err := db.Close(); err != nil {
			tb.Errorf("close %s: %v", path, err)
		}
	})
	return &BareUpdater{db: db}
}

// Put stores value under key in one Update: it returns once the
// transaction is committed and fsynced.
func (u *BareUpdater) Put(key, value []byte) error {
	if err := u.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bareBucket).Put(key, value) }); err != nil {
		return fmt.Errorf("bare put: %w", err)
	}
	return nil
}

// Get returns a copy of the value under key, nil when there is none.
func (u *BareUpdater) Get(key []byte) ([]byte, error) {
	var out []byte
	err := u.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bareBucket).Get(key); v != nil {
			out = append([]byte{}, v...)
		}
		return nil
	})
	return out, err
}

// BareGroup is a bbolt file written by one goroutine that commits every
// Append queued while it committed the last batch in one Update: the
// simplest group commit, and so the baseline for concurrent appends.
// Get reads it as BareUpdater.Get does, keys being big-endian sequences.
type BareGroup struct {
	*BareUpdater
	q    chan bareAppend
	done chan struct{}
	// commits and appends count what the writer did; only it writes them
	// before done closes.
	commits, appends int
}

type bareAppend struct {
	value []byte
	err   chan error
}

// NewBareGroup creates a bbolt file in dir and starts its writer. tb's
// Cleanup stops the writer, checks the file and closes it.
func NewBareGroup(tb testing.TB, dir string) *BareGroup {
	tb.Helper()
	u := NewBareUpdater(tb, dir) // its Cleanup, registered first, runs last
	g := &BareGroup{BareUpdater: u, q: make(chan bareAppend, 64), done: make(chan struct{})}
	go g.write(u.db)
	tb.Cleanup(func() {
		close(g.q)
		<-g.done
	})
	return g
}

// Append stores value under the next sequence and returns once the batch
// that carried it is committed and fsynced.
func (g *BareGroup) Append(value []byte) error {
	a := bareAppend{value: value, err: make(chan error, 1)}
	g.q <- a
	return <-a.err
}

func (g *BareGroup) write(db *bolt.DB) {
	defer close(g.done)
	for a := range g.q {
		batch := []bareAppend{a}
		for more := true; more; {
			select {
			case next, ok := <-g.q:
				if more = ok; ok {
					batch = append(batch, next)
				}
			default:
				more = false
			}
		}
		err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bareBucket)
			for _, a := range batch {
				seq, err := b.NextSequence()
				if err != nil {
					return err
				}
				if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), a.value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			err = fmt.Errorf("bare group commit: %w", err)
		}
		g.commits++
		g.appends += len(batch)
		for _, a := range batch {
			a.err <- err
		}
	}
}

// Batches says how many commits the writer made and how many Appends they
// carried; read it once the Appends it should count have returned.
func (g *BareGroup) Batches() (commits, appends int) { return g.commits, g.appends }
