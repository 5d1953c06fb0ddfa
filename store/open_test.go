package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestOpenMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")

	_, err := Open(path, Options{ReadOnly: true})
	if !errors.Is(err, ErrNoLedger) || err.Error() != "no ledger at "+path {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("read-only open left %v behind", entries)
	}

	l, err := Open(path, Options{Node: "n1"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if m := l.Meta(); m.Node != "n1" || m.FormatVersion != FormatVersion || m.Path != path || time.Since(m.Created) > time.Minute {
		t.Errorf("meta of a new ledger: %+v", m)
	}
	if l.LastSeq() != 0 || l.FirstSeq() != 0 || l.SizeBytes() == 0 {
		t.Errorf("new ledger: bounds %d..%d, size %d", l.FirstSeq(), l.LastSeq(), l.SizeBytes())
	}
	l.Close()
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("create left %d files, want the ledger alone", len(entries))
	}
	checkBolt(t, path)
}

// newerLedger writes a ledger whose meta claims format version 99.
func newerLedger(t *testing.T, path string) {
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaFormat, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRejectsWhatIsNotALedger(t *testing.T) {
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(rand.Uint32())
	}
	tests := []struct {
		name  string
		write func(t *testing.T, path string)
		is    error
		says  []string
	}{
		{"empty file", writeBytes(nil), ErrNotLedger, []string{"empty file"}},
		{"text file", writeBytes([]byte("pools:\n  - name: sriov\n")), ErrNotLedger, []string{"not a bbolt database", `"pools:`}},
		{"random bytes", writeBytes(random), ErrNotLedger, []string{"not a bbolt database"}},
		{"directory", func(t *testing.T, path string) { os.Mkdir(path, 0o755) }, ErrNotLedger, []string{"directory"}},
		{"another bbolt database", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.Update(func(tx *bolt.Tx) error {
				b, _ := tx.CreateBucket([]byte("meta"))
				return b.Put([]byte("owner"), []byte("someone else"))
			})
		}, ErrNotLedger, []string{"bbolt database without devledger meta"}},
		{"newer format", newerLedger, ErrNewerFormat, []string{"format version 99", "up to 1"}},
		{"truncated ledger", func(t *testing.T, path string) {
			l, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			b, _ := os.ReadFile(path)
			os.WriteFile(path, b[:5000], 0o600)
		}, ErrCorrupt, nil},
	}
	for _, tc := range tests {
		for _, ro := range []bool{true, false} {
			name := tc.name + "/read-write"
			if ro {
				name = tc.name + "/read-only"
			}
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "ledger.db")
				tc.write(t, path)
				before, _ := os.ReadFile(path)
				l, err := Open(path, Options{ReadOnly: ro, LockTimeout: 100 * time.Millisecond})
				if err == nil {
					l.Close()
					t.Fatal("opened")
				}
				if !errors.Is(err, tc.is) {
					t.Fatalf("err %v, want %v", err, tc.is)
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("%q does not name the file", err)
				}
				for _, s := range tc.says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%q does not say %q", err, s)
					}
				}
				if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
					t.Error("the file was modified")
				}
			})
		}
	}
}

func writeBytes(b []byte) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenLocked(t *testing.T) {
	l := openTestLog(t)
	path := l.Meta().Path
	for _, ro := range []bool{true, false} {
		start := time.Now()
		_, err := Open(path, Options{ReadOnly: ro, LockTimeout: 100 * time.Millisecond})
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("read-only %v: err %v, want ErrLocked", ro, err)
		}
		want := "ledger " + path + " is locked by another process (a running daemon?)"
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q does not start with %q", err, want)
		}
		if waited := time.Since(start); waited > 5*time.Second {
			t.Errorf("waited %s for a 100ms lock timeout", waited)
		}
	}
}

func TestReadOnlyOpenModifiesNothing(t *testing.T) {
	l := openTestLog(t)
	mustAppend(t, l, newHistory(4, 8).take(100)...)
	path := l.Meta().Path
	l.Close()
	before, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)

	// Two readers at once: both get the shared lock.
	r1, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Open(path, Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r1, 0)
	if _, err := r2.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.Replay(0); err != nil {
		t.Fatal(err)
	}
	r1.Close()
	r2.Close()

	after, _ := os.ReadFile(path)
	fi2, _ := os.Stat(path)
	if !bytes.Equal(before, after) || !fi.ModTime().Equal(fi2.ModTime()) {
		t.Fatal("read-only use modified the file")
	}
}
