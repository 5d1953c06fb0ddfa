package storetest

import (
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
