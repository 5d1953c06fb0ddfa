package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
)

// ledgerFileName is the ledger's file name inside the state dir.
const ledgerFileName = "ledger.db"

// defaultStateDir is where the daemon keeps its ledger on a node.
const defaultStateDir = "/var/lib/devledger"

// ledgerFlags are the flags that say which ledger a tool reads.
type ledgerFlags struct {
	stateDir string
	db       string
}

func (lf *ledgerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&lf.stateDir, "state-dir", defaultStateDir, "the daemon's state dir; the ledger is `DIR`/"+ledgerFileName)
	fs.StringVar(&lf.db, "db", "", "read this ledger `FILE` (a copy taken off a node) instead of the state dir's")
}

// oneLedger refuses --db beside a --state-dir given on the command line
// (fs parsed them): each names a ledger, and reading one of them while the
// other is ignored would show an operator a history not the one asked for.
// An empty --db (a script's unset variable) is refused too: it would read
// the node's own ledger in place of the copy meant; and so is an empty
// --state-dir, which would read (for acknowledge, write) the ledger.db of
// the directory the tool runs in, or for scan, no ledger at all.
func (lf *ledgerFlags) oneLedger(fs *flag.FlagSet) error {
	stateDir, db := false, false
	fs.Visit(func(f *flag.Flag) {
		stateDir = stateDir || f.Name == "state-dir"
		db = db || f.Name == "db"
	})
	switch {
	case db && lf.db == "":
		return usageErrf("--db \"\": names no ledger file (without --db, the state dir's ledger is read)")
	case stateDir && lf.stateDir == "":
		return usageErrf("--state-dir \"\": names no state dir (the daemon's is %s)", defaultStateDir)
	case db && stateDir:
		return usageErrf("--state-dir and --db: give one of them")
	}
	return nil
}

// path is the ledger file the flags name.
func (lf *ledgerFlags) path() string {
	if lf.db != "" {
		return lf.db
	}
	return filepath.Join(lf.stateDir, ledgerFileName)
}

// openLedger opens the ledger read-only for an offline tool. It never creates
// or modifies a file, and turns the store's errors into exit codes: a missing
// file, a file that is not a ledger or a ledger too new is bad input (2).
func openLedger(lf *ledgerFlags) (*store.Log, error) {
	return openLedgerWaiting(lf, 500*time.Millisecond)
}

// openLedgerWaiting is openLedger waiting at most wait for the file lock.
func openLedgerWaiting(lf *ledgerFlags, wait time.Duration) (*store.Log, error) {
	path := lf.path()
	l, err := store.Open(path, store.Options{ReadOnly: true, LockTimeout: wait})
	if err == nil {
		return l, nil
	}
	if merr := lf.misnamed(); merr != nil {
		return nil, merr
	}
	switch {
	case errors.Is(err, store.ErrNoLedger), errors.Is(err, store.ErrNotLedger), errors.Is(err, store.ErrNewerFormat):
		return nil, usageErr(err)
	default:
		return nil, fmt.Errorf("open ledger: %w", err)
	}
}

// misnamed is the usage error for a ledger file given as --state-dir, or
// a state dir given as --db, each with the flag that reads it; nil
// otherwise.
func (lf *ledgerFlags) misnamed() error {
	if lf.db != "" {
		if isDir(lf.db) {
			return usageErrf("--db %s is a directory: --db names a ledger file; --state-dir %s reads the ledger in a state dir", lf.db, lf.db)
		}
		return nil
	}
	if fi, err := os.Stat(lf.stateDir); err == nil && !fi.IsDir() {
		return usageErrf("--state-dir %s is not a directory: --state-dir names the daemon's state dir (the ledger is DIR/%s); --db %s reads a ledger file", lf.stateDir, ledgerFileName, lf.stateDir)
	}
	return nil
}

// isDir says whether path is a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// eventSource streams the events of a ledger, oldest first, and reads its
// snapshots: the newest readable one at or before a sequence (0: the
// newest), false when there is none.
type eventSource interface {
	read(fn func(events.Envelope) error) error
	snapshot(atOrBefore uint64) (events.State, bool, error)
	close() error
}

// snapshotExplainer is a source that can say why the snapshot at a
// sequence cannot be read: a ledger file can, and so can a daemon's admin
// socket (one older than GET /v1/snapshot?exact=1 cannot).
type snapshotExplainer interface {
	// unreadableSnapshot is why the snapshot at seq cannot be read; nil
	// when it can, or when there is none there.
	unreadableSnapshot(seq uint64) error
}

// foldFrom is the state a fold of src's events starts from, first being
// the first event it read: the empty state when that is the ledger's first
// event, else the snapshot that retention kept at the sequence before it.
// Retention always keeps that one: without it the start is missing, and
// where it is there but cannot be read, the error says why (a newer
// devledger wrote it, or it is damaged), when src can tell.
func foldFrom(src eventSource, first uint64) (events.State, error) {
	if first <= 1 {
		return events.NewState(), nil
	}
	s, ok, err := src.snapshot(first - 1)
	if err != nil {
		return s, err
	}
	if !ok || s.Seq != first-1 {
		if why, can := src.(snapshotExplainer); can {
			switch err := why.unreadableSnapshot(first - 1); {
			case errors.Is(err, events.ErrSnapshotFormat):
				return s, fmt.Errorf("%w; it stands for the events before #%d, which retention dropped: read the ledger with that version, or take the events from #%d on alone", err, first, first)
			case errors.Is(err, store.ErrCorrupt), errors.Is(err, grpcapi.ErrSnapshotDamaged):
				return s, fmt.Errorf("the snapshot at #%d, which stands for the events before #%d, is damaged: %w", first-1, first, err)
			case err != nil:
				return s, err
			}
		}
		return s, fmt.Errorf("the events before #%d are missing, and no snapshot this build reads at #%d stands for them", first, first-1)
	}
	return s, nil
}

// priorStates hands each pass over src the state before its first
// event: the tools that tell an event by what came before it (the pool a
// device is in, the allocation that holds it, the pod that allocation
// went to, a VF's PF) start there, so that after retention the events
// kept read as they did before. On a node up for longer than
// --retain-age, what came before the cut is in the snapshot retention
// kept (foldFrom), not nowhere.
type priorStates struct {
	src eventSource
	// missingAt is the first event kept when the ledger holds no readable
	// snapshot before it (a salvage lost it, it is damaged, or a newer
	// devledger wrote it), why in missing: the passes then start from the
	// empty state and the tool warns (warnMissing), but still shows every
	// event.
	missingAt uint64
	missing   error
}

// around wraps the visit of one pass: at the first event it hands prior
// the state before it, then visits every event.
func (p *priorStates) around(prior func(events.State), visit func(events.Envelope) error) func(events.Envelope) error {
	started := false
	return func(e events.Envelope) error {
		if !started {
			started = true
			s, err := foldFrom(p.src, e.Seq)
			if err != nil {
				p.missingAt, p.missing, s = e.Seq, err, events.NewState()
			}
			prior(s)
		}
		return visit(e)
	}
}

// warnMissing says on w, when a pass found no state to start from, that
// what it told of the events came from the events kept alone.
func (p *priorStates) warnMissing(w io.Writer, tool string) {
	if p.missing != nil {
		fmt.Fprintf(w, "devledger %s: warning: no readable snapshot holds the state before #%d, the first event kept (%v); pools, holders, pods and PFs are told from the events kept alone\n",
			tool, p.missingAt, p.missing)
	}
}

// fileSource reads a ledger file opened read-only.
type fileSource struct{ l *store.Log }

func (s fileSource) close() error { return s.l.Close() }

func (s fileSource) snapshot(atOrBefore uint64) (events.State, bool, error) {
	return s.l.LatestSnapshot(atOrBefore)
}

func (s fileSource) unreadableSnapshot(seq uint64) error {
	_, _, err := s.l.SnapshotAt(seq)
	return err
}

func (s fileSource) read(fn func(events.Envelope) error) error {
	err := s.l.ReadRaw(0, func(seq uint64, rec []byte) error {
		e, err := decodeShown(s.l.Meta().Path, seq, rec)
		if err != nil {
			return err
		}
		return fn(e)
	})
	if err != nil {
		return err
	}
	return readDamaged(s.l)
}

// decodeShown decodes a record for showing. An event this build does not
// know (its type, or its schema version: a newer devledger wrote it, and
// this one was rolled back to) is shown with what its header says
// (sequence, time, type, version) and no payload, and reading goes on; a
// fold cannot go on past it (the store refuses), a history can.
func decodeShown(where string, seq uint64, rec []byte) (events.Envelope, error) {
	e, err := events.Unmarshal(rec)
	if errors.Is(err, events.ErrUnknownType) || errors.Is(err, events.ErrUnknownVersion) {
		e.Payload, e.Subject = nil, ""
		err = nil
	}
	switch {
	case err != nil:
		return e, &store.CorruptError{Path: where, Seq: seq, Reason: "cannot decode: " + err.Error(), Err: err}
	case e.Seq != seq:
		return e, &store.CorruptError{Path: where, Seq: seq, Reason: fmt.Sprintf("record says seq %d", e.Seq)}
	}
	return e, nil
}

// foldable refuses an event decodeShown kept without its payload (one a
// newer devledger wrote), as the store refuses it to a fold of the file:
// a fold cannot go past it, a history can.
func foldable(e events.Envelope) error {
	if e.Payload != nil {
		return nil
	}
	return fmt.Errorf("#%d: %s (schema v%d) is unknown to this build; a newer devledger wrote it: run that version or a newer one (dump shows such events as unknown)",
		e.Seq, e.Type, e.Version)
}

// errReadDamaged marks a ledger read to its end through a damaged page
// that bbolt reads past (store.Log.Damage): what was read is shown, then
// the damage named, and the tool exits 1.
var errReadDamaged = errors.New("shown above is what could be read")

// readAround reports whether err, the error a first pass over the ledger
// (one that prints nothing) ended with, is damage the tools read around:
// a record that fails its checksum or cannot be decoded, or a damaged
// page bbolt reads past. The pass then keeps what it read; the pass that
// prints meets the damage again, after what comes before it, and names it.
func readAround(err error) bool {
	return errors.Is(err, errReadDamaged) || errors.Is(err, store.ErrCorrupt)
}

// readDamaged is the damage Open found in l, for after its contents were
// shown; nil for a sound file.
func readDamaged(l *store.Log) error {
	if err := l.Damage(); err != nil {
		return fmt.Errorf("%w (%w)", err, errReadDamaged)
	}
	return nil
}

// adminSource reads the ledger of a running daemon through its admin socket:
// the daemon holds the file's lock, but serves the same records.
type adminSource struct {
	socket string
	// damaged is the damaged snapshot unreadableSnapshot was told of:
	// each read names it after its events, as a file's reads name the
	// damage the file's Log noted (readDamaged).
	damaged *error
}

func newAdminSource(socket string) adminSource {
	return adminSource{socket: socket, damaged: new(error)}
}

func (s adminSource) read(fn func(events.Envelope) error) error {
	var next uint64
	err := grpcapi.ReadRecordsFromAdmin(context.Background(), s.socket, 0, func(rec []byte) error {
		if next == 0 {
			// The oldest the daemon keeps: what the first record says.
			first, _ := events.Unmarshal(rec)
			next = first.Seq
		}
		e, err := decodeShown(s.socket, next, rec)
		if err != nil {
			return err
		}
		next++
		return fn(e)
	})
	if err == nil && *s.damaged != nil {
		err = fmt.Errorf("%w (%w)", *s.damaged, errReadDamaged)
	}
	return err
}

func (s adminSource) close() error { return nil }

func (s adminSource) snapshot(atOrBefore uint64) (events.State, bool, error) {
	return grpcapi.SnapshotFromAdmin(context.Background(), s.socket, atOrBefore)
}

// unreadableSnapshot is the daemon's reason; nil from a daemon that
// cannot say (older than GET /v1/snapshot?exact=1), as from one with
// none there.
func (s adminSource) unreadableSnapshot(seq uint64) error {
	_, _, err := grpcapi.SnapshotAtFromAdmin(context.Background(), s.socket, seq)
	switch {
	case errors.Is(err, grpcapi.ErrExactSnapshotUnsupported):
		return nil
	case errors.Is(err, grpcapi.ErrSnapshotDamaged):
		*s.damaged = err
	}
	return err
}

// openSource opens the ledger the flags name: the file, or, when a running
// daemon holds it, the daemon's admin socket beside it.
//
// A running daemon holds the file's lock for as long as it runs, so waiting
// for the lock first would only delay every dump on a live node: the file
// gets one quick try, then the admin socket. Only when no daemon listens
// there (one stopping, between closing its admin socket and its ledger)
// is the lock waited for as openLedger waits.
func openSource(lf *ledgerFlags) (eventSource, error) {
	l, err := openLedgerWaiting(lf, time.Millisecond)
	if err == nil {
		return fileSource{l}, nil
	}
	if !errors.Is(err, store.ErrLocked) {
		return nil, err
	}
	sock := grpcapi.AdminSocketPath(filepath.Dir(lf.path()))
	// Listening is enough: a daemon whose actors do not answer (when an
	// operator most needs the ledger) still serves its records.
	serr := grpcapi.AdminListening(context.Background(), sock)
	if serr == nil {
		return newAdminSource(sock), nil
	}
	l, err = openLedger(lf)
	if err == nil {
		return fileSource{l}, nil
	}
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("%w; and the daemon's admin socket does not answer: %v", err, serr)
	}
	return nil, err
}
