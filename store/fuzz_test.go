package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
)

// FuzzOpenDamaged mutates ledger files: whatever the bytes, opening one
// read-only and reading it every way the tools do (Check, Read, Replay,
// the newest snapshot), and salvaging it, returns or fails, and never
// crashes the process.
// The seeds are the sound sample ledger and the damaged corpus beside it
// (testdata/ledger); a mutation is taken at the file's start, where
// bbolt's meta pages are, and as a byte flipped anywhere.
func FuzzOpenDamaged(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "testdata", "ledger", "damaged", "*.db"))
	seeds = append(seeds, filepath.Join("..", "testdata", "ledger", "sample.db"), filepath.Join("testdata", "v1.ledger"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint32(0), byte(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint32, flip byte) {
		if len(data) > 0 {
			data[int(at)%len(data)] ^= flip
		}
		path := filepath.Join(t.TempDir(), "fuzz.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _ = Salvage(path, filepath.Join(t.TempDir(), "salvaged.db"))
		l, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
		if err != nil {
			return
		}
		defer l.Close()
		_, _ = l.Check(context.Background())
		_ = l.Read(0, func(events.Envelope) error { return nil })
		_, _ = l.Replay(0)
		_, _, _ = l.LatestSnapshot(l.LastSeq())
	})
}
