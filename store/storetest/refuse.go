package storetest

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
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
	return RefuseSomeWrites(tb, l, nil)
}

// RefuseSomeWrites is RefuseWrites for a nearly full disk, where some
// commits still fit in the pages bbolt has free and others do not: it
// refuses only the write transactions refuse returns true for. refuse
// is called once for each, one at a time, on the store's writer, with
// the events it appends (a group commit's batch; nil for a snapshot, a
// retention pass or a repair). A nil refuse refuses every write.
func RefuseSomeWrites(tb testing.TB, l *store.Log, refuse func(appended []events.Envelope) bool) (room func()) {
	tb.Helper()
	writefault.Set(l, &fs.PathError{Op: "write", Path: l.Meta().Path, Err: syscall.ENOSPC}, refuse)
	room = sync.OnceFunc(func() { writefault.Set(l, nil, nil) })
	tb.Cleanup(room)
	return room
}

// RecordOthers records a small DeviceHealthChanged of addr every 2ms
// through record until stop, as the other actors of a busy node would:
// on a disk that refuses some writes (RefuseSomeWrites) the ledger takes
// them, and a refusal (ENOSPC: a batch shared with a refused record) is
// let pass; any other error fails tb. stop waits for the last record.
func RecordOthers(tb testing.TB, record func(context.Context, events.Payload) error, addr string) (stop func()) {
	tb.Helper()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			h := events.DeviceHealthChanged{Address: addr, Healthy: i%2 == 0, Reason: "test"}
			if err := record(context.Background(), h); err != nil && !errors.Is(err, syscall.ENOSPC) {
				tb.Errorf("a small record on a nearly full disk: %v", err)
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }); <-stopped }
}
