package store

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the store returns for one of these conditions
// wraps the sentinel (test with errors.Is) and says, in its message, which
// file it concerns and what was found there.
var (
	// ErrNoLedger: a read-only open of a path where no file exists. Nothing
	// is created.
	ErrNoLedger = errors.New("no ledger")
	// ErrNotLedger: the file exists but is not a devledger ledger: an empty
	// file, a file that is not a bbolt database, or a bbolt database without
	// devledger's meta bucket. The file is left as it was.
	ErrNotLedger = errors.New("not a devledger ledger")
	// ErrNewerFormat: the ledger was written by a newer devledger whose
	// format this build does not read.
	ErrNewerFormat = errors.New("ledger format newer than this build reads")
	// ErrLocked: another process holds the file's lock (the daemon holds it
	// exclusively while it runs) and Options.LockTimeout passed.
	ErrLocked = errors.New("ledger locked")
	// ErrCorrupt: a record failed its checksum, could not be decoded, or
	// broke sequence continuity; or the file's structure is damaged. The
	// error is a *CorruptError naming the sequence.
	ErrCorrupt = errors.New("corrupt ledger")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("ledger closed")
	// ErrReadOnly: a write (Append, SaveSnapshot, Retain) on a Log opened
	// with Options.ReadOnly.
	ErrReadOnly = errors.New("ledger opened read-only")
	// ErrHistoryDropped: a replay asked for a point before the oldest state
	// the ledger can still rebuild, because retention dropped the events
	// that lead to it.
	ErrHistoryDropped = errors.New("history dropped by retention")
)

// ledgerError carries a sentinel and a complete message, so that the message
// reads naturally ("no ledger at /x") rather than as a chain of prefixes.
type ledgerError struct {
	kind error
	msg  string
}

func (e *ledgerError) Error() string { return e.msg }
func (e *ledgerError) Unwrap() error { return e.kind }

func newError(kind error, format string, args ...any) error {
	return &ledgerError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// CorruptError reports the first bad record found. Seq is the sequence of
// the record (or of the snapshot) that failed; a record that should exist but
// is missing is reported by the sequence it should have had. Seq 0 means the
// damage is in the file's structure (bbolt pages, meta), not in a record.
// Everything before Seq was read and verified.
type CorruptError struct {
	Path   string
	Seq    uint64
	Reason string
	// Err is the underlying error (a decode error from package events, a
	// bbolt error), nil when Reason says it all.
	Err error
}

func (e *CorruptError) Error() string {
	if e.Seq == 0 {
		return fmt.Sprintf("ledger %s is corrupt: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("ledger %s is corrupt at seq %d: %s", e.Path, e.Seq, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true for every *CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the underlying error, so that errors.Is also finds, for
// example, events.ErrUnknownType in a record written by a newer build.
func (e *CorruptError) Unwrap() error { return e.Err }
