package storetest

import (
	"testing"

	"github.com/devledger/devledger/store"
)

// ReopenReadOnly closes l and opens its file again read-only, closed in
// tb's Cleanup: a ledger that reads as before and refuses every append at
// once, as a full disk refuses them slowly.
func ReopenReadOnly(tb testing.TB, l *store.Log) *store.Log {
	tb.Helper()
	path := l.Meta().Path
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	ro, err := store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ro.Close() })
	return ro
}
