package store

import (
	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/store/internal/writefault"
)

func init() {
	writefault.Set = func(log any, err error) {
		l := log.(*Log)
		if err == nil {
			l.writeFault.Store(nil)
			return
		}
		l.writeFault.Store(&err)
	}
}

// faulted is fn, made to fail with the write fault set on l (see
// storetest.RefuseWrites) once fn has done its work: bbolt then rolls the
// transaction back and the file stays as it was, as when a full disk
// fails the first page a commit writes.
func (l *Log) faulted(fn func(*bolt.Tx) error) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if p := l.writeFault.Load(); p != nil {
			return *p
		}
		return nil
	}
}
