package store

import (
	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store/internal/writefault"
)

// writeFault is what storetest made l's writes fail with, and which.
type writeFault struct {
	err    error
	refuse func(appended []events.Envelope) bool // nil: every write
}

func init() {
	writefault.Set = func(log any, err error, refuse func([]events.Envelope) bool) {
		l := log.(*Log)
		if err == nil {
			l.writeFault.Store(nil)
			return
		}
		l.writeFault.Store(&writeFault{err: err, refuse: refuse})
	}
}

// faulted is fn, made to fail with the write fault set on l (see
// storetest.RefuseWrites) once fn has done its work: bbolt then rolls the
// transaction back and the file stays as it was, as when a full disk
// fails the first page a commit writes. appended are the events the
// transaction appends, for the fault to choose by.
func (l *Log) faulted(appended []events.Envelope, fn func(*bolt.Tx) error) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if f := l.writeFault.Load(); f != nil && (f.refuse == nil || f.refuse(appended)) {
			return f.err
		}
		return nil
	}
}
