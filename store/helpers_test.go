package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// openTestLog opens a new ledger in a temp dir. On cleanup it closes it and
// runs bbolt's consistency check over the file, as bbolt's own test helpers
// do after every test.
func openTestLog(t testing.TB, opts ...func(*Options)) *Log {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	o := Options{Node: "node-7", BootID: "boot-test"}
	for _, f := range opts {
		f(&o)
	}
	l, err := Open(path, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkBolt(t, path)
	})
	return l
}

// checkBolt runs bbolt's page-level consistency check over a closed file.
func checkBolt(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Errorf("bbolt open for check: %v", err)
		return
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("bbolt check %s: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("bbolt check %s: %v", path, err)
	}
}

// reopen closes l and opens its file again with opts.
func reopen(t testing.TB, l *Log, o Options) *Log {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	l2, err := Open(l.Meta().Path, o)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { l2.Close() })
	return l2
}

// mustAppend appends and fails the test on error.
func mustAppend(t testing.TB, l *Log, envs ...events.Envelope) []events.Envelope {
	t.Helper()
	out, err := l.Append(context.Background(), envs...)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return out
}

// readAll collects every event from seq from.
func readAll(t testing.TB, l *Log, from uint64) []events.Envelope {
	t.Helper()
	var got []events.Envelope
	if err := l.Read(from, func(e events.Envelope) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatalf("read: %v", err)
	}
	return got
}

// foldAll folds envs from the empty state.
func foldAll(envs []events.Envelope) events.State {
	s := events.NewState()
	for _, e := range envs {
		s = events.Apply(s, e)
	}
	return s
}

// ev builds an envelope at second i after baseTime.
func ev(i int, p events.Payload) events.Envelope {
	return events.New(p, baseTime.Add(time.Duration(i)*time.Second), "boot-test")
}
