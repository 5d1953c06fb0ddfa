package storetest

import (
	"io/fs"
	"sync"
	"syscall"
	"testing"

	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/internal/writefault"
)

// RefuseWrites makes every write transaction of l (appends, snapshots,
// retention) fail as on a disk with no room left: with the write error
// bbolt returns, ENOSPC naming the file, and nothing written, the file
// as the last commit left it. Reads go on. room ends it, and so does
// tb's Cleanup. Unlike NewFullDisk it needs no root, and it refuses
// every write at once, where a real disk first fills the pages bbolt
// has free.
func RefuseWrites(tb testing.TB, l *store.Log) (room func()) {
	tb.Helper()
	writefault.Set(l, &fs.PathError{Op: "write", Path: l.Meta().Path, Err: syscall.ENOSPC})
	room = sync.OnceFunc(func() { writefault.Set(l, nil) })
	tb.Cleanup(room)
	return room
}
