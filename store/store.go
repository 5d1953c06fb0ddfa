package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/devledger/devledger/events"
)

// FormatVersion is the ledger format this build writes and the newest it
// reads. It changes only when the layout of doc.go changes; new event types
// and schema versions are the events package's business.
const FormatVersion = 1

// DefaultLockTimeout is how long Open waits for the file lock when
// Options.LockTimeout is not set.
const DefaultLockTimeout = time.Second

// DefaultMaxBatch is the largest number of events one group commit takes
// when Options.MaxBatch is not set.
const DefaultMaxBatch = 1024

var (
	bucketEvents    = []byte("events")
	bucketSnapshots = []byte("snapshots")
	bucketMeta      = []byte("meta")

	metaKind      = []byte("kind")
	metaFormat    = []byte("format_version")
	metaNode      = []byte("node")
	metaCreated   = []byte("created")
	metaKindValue = []byte("devledger ledger")
)

// Options configure Open. The zero value opens (or creates) a ledger for
// writing with the defaults below.
type Options struct {
	// ReadOnly opens the ledger for reading only: the file is never created
	// or modified, and bbolt takes a shared lock, so any number of readers
	// may open it while no daemon runs (a running daemon holds the lock
	// exclusively: readers get ErrLocked after LockTimeout).
	ReadOnly bool
	// LockTimeout bounds the wait for the file lock. Zero or negative means
	// DefaultLockTimeout: the store never waits forever.
	LockTimeout time.Duration
	// Node is written into the meta bucket when Open creates the ledger.
	Node string
	// BootID stamps the events the store appends itself (SnapshotTaken,
	// EventsDropped), as events.New would.
	BootID string
	// Logger receives one line per ledger-level change (open, snapshot,
	// retention); nothing per append. The zero Logger discards.
	Logger zerolog.Logger
	// MaxBatch is the largest number of events one group commit takes from
	// waiting callers (one call's events are never split, so one larger
	// call commits alone). Zero or negative means DefaultMaxBatch.
	MaxBatch int
	// CheckPages has a writer's Open walk the file's page graph before
	// bbolt reads it, as a reader's always does: bbolt follows a loop in
	// that graph until memory runs out. A writer leaves the walk out
	// unless asked (it costs a fifth of a second at a million events)
	// and can walk it later (Log.CheckPages).
	CheckPages bool
	// FaultQuiet is how long a ledger whose append faults came and went
	// must record with none refused before it is steady again: before the
	// log says it records again and Unsteady is nil. Zero or negative
	// means DefaultFaultQuiet.
	FaultQuiet time.Duration
	// pageSize is the page size of a ledger Open creates; zero: bbolt's
	// default, the OS's. Tests make ledgers of a larger host's pages.
	pageSize int
}

// Meta is what the ledger says about itself.
type Meta struct {
	// FormatVersion is the on-disk format version of the file.
	FormatVersion int
	// Node is the node name given when the ledger was created.
	Node string
	// Created is when the ledger was created (UTC).
	Created time.Time
	// Path is the file, as given to Open.
	Path string
}

// Log is an open ledger. Its methods are safe for concurrent use. A Log
// opened for writing owns the file exclusively until Close.
type Log struct {
	path     string
	db       *bolt.DB
	meta     Meta
	log      zerolog.Logger
	readOnly bool
	bootID   string
	maxBatch int
	now      func() time.Time // the clock for the store's own events; tests set it

	lastSeq  atomic.Uint64
	firstSeq atomic.Uint64
	commits  atomic.Uint64 // group commits made, for the benchmarks
	// failures counts the appends' transactions that failed, and fault is
	// the error of the last one when no commit has succeeded since (see
	// AppendFault).
	failures atomic.Uint64
	fault    atomic.Pointer[error]
	// stuck is the fault that left bbolt holding its writer lock: every
	// write, and bbolt's Close, would wait for it forever, so they fail
	// with it instead.
	stuck atomic.Pointer[error]
	// edges says what the log last said of the faults (see failed).
	edges faultEdges
	// writeFault, set by tests only (writefault.go), fails write
	// transactions as a full disk would.
	writeFault atomic.Pointer[writeFault]

	// mu guards closed; active counts calls in progress, which Close waits
	// for.
	mu     sync.Mutex
	closed bool
	active sync.WaitGroup

	// Group commit (append.go): reqs queues the calls for the one writer
	// goroutine, which closes writerDone when it ends; batch and arena are
	// its buffers. writeMu serialises every write transaction (the
	// writer's, snapshots', retention's), so the writer's idea of the next
	// sequence is exact.
	reqs       chan *appendReq
	writerDone chan struct{}
	batch      []*appendReq
	arena      []byte
	writeMu    sync.Mutex
	// sized is the size of the records as the last retention pass
	// counted them (under writeMu), for the next to go on from.
	sized bytesCounted

	// damage is what Open found wrong in the pages bbolt reads past, and
	// found (under mu) what reads found since (see Damage).
	damage error
	found  []error
}

// Open opens the ledger at path. Opened for writing, a missing file is
// created (atomically: a complete empty ledger appears under path, or
// nothing); opened read-only, a missing file is ErrNoLedger. A file that is
// not a devledger ledger is ErrNotLedger, one of a newer format
// ErrNewerFormat, one whose lock is held ErrLocked; in all of these the file
// is left untouched.
func Open(path string, opts Options) (*Log, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.FaultQuiet <= 0 {
		opts.FaultQuiet = DefaultFaultQuiet
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if opts.ReadOnly {
			return nil, newError(ErrNoLedger, "no ledger at %s", path)
		}
		if err := create(path, opts); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	case fi.IsDir():
		return nil, newError(ErrNotLedger, "%s is not a devledger ledger: it is a directory", path)
	case !fi.Mode().IsRegular():
		return nil, newError(ErrNotLedger, "%s is not a devledger ledger: not a regular file (%s)", path, fi.Mode().Type())
	}
	if err := sniff(path); err != nil {
		return nil, err
	}

	// A writer first validates the file through a read-only open: bbolt may
	// write to a file it opens read-write (a freelist sync), and a file that
	// is not ours must not be touched.
	if !opts.ReadOnly {
		ro, err := openBolt(path, true, opts.LockTimeout)
		if err != nil {
			return nil, err
		}
		_, err = readMeta(ro, path)
		pageSize := ro.Info().PageSize
		ro.Close()
		if err != nil {
			return nil, err
		}
		if err := (&Log{path: path}).writable(pageSize); err != nil {
			return nil, err
		}
	}
	db, err := openBolt(path, opts.ReadOnly, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	l := &Log{
		path:     path,
		db:       db,
		log:      opts.Logger,
		readOnly: opts.ReadOnly,
		bootID:   opts.BootID,
		maxBatch: opts.MaxBatch,
		now:      time.Now,
		edges:    faultEdges{quiet: opts.FaultQuiet},
	}
	// Before bbolt walks a page tree: damage it cannot survive keeps the
	// file closed.
	fatal, damage := l.checkStructure(db.Info().PageSize, l.readOnly || opts.CheckPages)
	if fatal != nil {
		db.Close()
		return nil, fatal
	}
	if l.meta, err = readMeta(db, path); err != nil {
		db.Close()
		return nil, err
	}
	if err := l.loadBounds(); err != nil {
		db.Close()
		return nil, err
	}
	if l.damage = damage; l.damage != nil {
		l.log.Error().Err(l.damage).Str("path", path).Msg("ledger damaged")
	}
	if !l.readOnly {
		l.reqs = make(chan *appendReq, opts.MaxBatch)
		l.writerDone = make(chan struct{})
		go l.writer()
	}
	l.log.Info().Str("path", path).Bool("read_only", l.readOnly).
		Uint64("first_seq", l.FirstSeq()).Uint64("last_seq", l.LastSeq()).Msg("ledger opened")
	return l, nil
}

// create makes a new, empty ledger at path: built under a temporary name in
// the same directory, then linked into place, so that a crash never leaves
// a half-made file under path, and two processes creating the same ledger at
// once do not overwrite each other (the second one opens the first one's).
func create(path string, opts Options) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".creating-*")
	if err != nil {
		return fmt.Errorf("create ledger %s: %w", path, err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)

	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: opts.LockTimeout, PageSize: opts.pageSize})
	if err != nil {
		return fmt.Errorf("create ledger %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketEvents, bucketSnapshots} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		m, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		for k, v := range map[string]string{
			string(metaKind):    string(metaKindValue),
			string(metaFormat):  strconv.Itoa(FormatVersion),
			string(metaNode):    opts.Node,
			string(metaCreated): time.Now().UTC().Format(time.RFC3339Nano),
		} {
			if err := m.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create ledger %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		// No hard links on this file system: rename, which is atomic too
		// but would replace a ledger created since the Stat above.
		if _, serr := os.Stat(path); !errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("create ledger %s: %w", path, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("create ledger %s: %w", path, err)
		}
	}
	return syncDir(dir)
}

// placeNew puts the complete file tmp in place at path, which must not
// exist: a hard link, which fails rather than replace a file made
// meanwhile (a rename where the file system has no links), then a sync of
// path's directory. tmp is left for the caller to remove.
func placeNew(tmp, path string) error {
	err := os.Link(tmp, path)
	if errors.Is(err, fs.ErrExist) {
		return errors.New("it exists")
	}
	if err != nil {
		if _, serr := os.Lstat(path); !errors.Is(serr, fs.ErrNotExist) {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return syncDir(filepath.Dir(path))
}

// bbolt's file layout, as far as sniff needs it: every page starts with a
// 16-byte header; pages 0 and 1 are meta pages whose first field is a magic
// number, stored in the machine's byte order. The page size (1 KiB to
// 16 MiB) is only known once a meta page is read, so the second meta page is
// looked for at every possible page size, as bbolt itself does.
const (
	bboltMagic      = 0xED0CDAED
	bboltPageHeader = 16
)

// sniff tells, before bbolt sees the file, whether it can be a bbolt
// database at all, so that the error says what the file is.
func sniff(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	if fi.Size() == 0 {
		return newError(ErrNotLedger, "%s is not a devledger ledger: empty file", path)
	}
	hasMagic := func(off int64) bool {
		var b [4]byte
		if _, err := f.ReadAt(b[:], off+bboltPageHeader); err != nil {
			return false
		}
		return binary.NativeEndian.Uint32(b[:]) == bboltMagic
	}
	if hasMagic(0) {
		return nil
	}
	for i := range 15 {
		if off := int64(1024) << i; off < fi.Size() && hasMagic(off) {
			return nil
		}
	}
	head := make([]byte, 16)
	n, _ := io.ReadFull(f, head)
	return newError(ErrNotLedger, "%s is not a devledger ledger: not a bbolt database (%d bytes, starting %q)",
		path, fi.Size(), head[:n])
}

// openBolt opens the file with bbolt, always with a lock timeout (bbolt's
// default waits forever), and turns bbolt's failures into the store's.
func openBolt(path string, readOnly bool, timeout time.Duration) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, &CorruptError{Path: path, Reason: "bbolt cannot open it: " + boltProblem(p)}
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: readOnly, Timeout: timeout})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, newError(ErrLocked, "ledger %s is locked by another process (a running daemon?); gave up after %s", path, timeout)
	case errors.As(err, new(*fs.PathError)), errors.As(err, new(syscall.Errno)):
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	// Anything else is bbolt refusing the file's contents: invalid or
	// mismatched meta pages, a file shorter than its pages.
	return nil, &CorruptError{Path: path, Reason: "bbolt cannot open it: " + err.Error(), Err: err}
}

// readMeta checks that db is a devledger ledger this build reads and
// returns its meta.
func readMeta(db *bolt.DB, path string) (Meta, error) {
	m := Meta{Path: path}
	err := damageIn("the ledger's bucket directory or its meta", viewRecover(db, path, func(tx *bolt.Tx) error {
		// A file shorter than the pages its meta counts was cut short: a
		// read past its end would fault.
		if fi, err := os.Stat(path); err == nil && fi.Size() < tx.Size() {
			return &CorruptError{Path: path, Reason: fmt.Sprintf("truncated: the file has %d bytes, its meta page counts %d (%d pages of %d)",
				fi.Size(), tx.Size(), tx.Size()/int64(db.Info().PageSize), db.Info().PageSize)}
		}
		b := tx.Bucket(bucketMeta)
		if b == nil || !bytes.Equal(b.Get(metaKind), metaKindValue) {
			if k := plainTopKey(tx); k != nil {
				return &CorruptError{Path: path, Reason: fmt.Sprintf("the bucket directory is damaged: it holds key %x, which is not a bucket: "+
					"its page holds other data (as a copy made while the daemon wrote to the file can)", k)}
			}
			return newError(ErrNotLedger, "%s is not a devledger ledger: bbolt database without devledger meta", path)
		}
		raw := b.Get(metaFormat)
		v, err := strconv.Atoi(string(raw))
		if err != nil || v < 1 {
			return &CorruptError{Path: path, Reason: fmt.Sprintf("meta format_version %q is not a version", raw)}
		}
		if v > FormatVersion {
			return newError(ErrNewerFormat, "ledger %s has format version %d; this build of devledger reads format versions up to %d", path, v, FormatVersion)
		}
		m.FormatVersion = v
		m.Node = string(b.Get(metaNode))
		if c := b.Get(metaCreated); len(c) > 0 {
			t, err := time.Parse(time.RFC3339Nano, string(c))
			if err != nil {
				return &CorruptError{Path: path, Reason: fmt.Sprintf("meta created %q is not a time", c)}
			}
			m.Created = t.UTC()
		}
		for _, name := range [][]byte{bucketEvents, bucketSnapshots} {
			if tx.Bucket(name) == nil {
				return &CorruptError{Path: path, Reason: fmt.Sprintf("no %q bucket", name)}
			}
		}
		return nil
	}))
	return m, err
}

// plainTopKey returns the first key at the top of tx that is not a
// bucket, nil when there is none. bbolt keeps only buckets there: a plain
// key is a page of other data (events, say) where the bucket directory
// should be, not a database of someone else's.
func plainTopKey(tx *bolt.Tx) []byte {
	c := tx.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			return bytes.Clone(k)
		}
	}
	return nil
}

// loadBounds reads the first and last sequence from the file. The last is
// the events bucket's sequence counter, not its last key: after a loss of
// trailing records the counter still says how far the ledger went (and Read
// and Check report the missing ones). No checksum covers the counter: one
// behind the last record would have the next append overwrite a record, so
// a writer refuses the file and a reader notes the damage.
func (l *Log) loadBounds() error {
	err := damageIn("the start of the events", l.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		l.lastSeq.Store(b.Sequence())
		if k, _ := b.Cursor().First(); k != nil {
			seq, ok := keySeq(k)
			if !ok {
				return &CorruptError{Path: l.path, Reason: fmt.Sprintf("events key %x is not a sequence", k)}
			}
			l.firstSeq.Store(seq)
		}
		return nil
	}))
	if err != nil {
		return err
	}
	var behind *CorruptError
	// A last page that cannot be read is for reads to report, where they
	// meet it: what comes before it can still be read.
	_ = l.view(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketEvents).Cursor().Last()
		if seq, ok := keySeq(k); ok && seq > l.LastSeq() {
			behind = counterBehind(l.path, l.LastSeq())
		}
		return nil
	})
	switch {
	case behind == nil:
		return nil
	case !l.readOnly:
		return behind
	}
	l.noteDamage(behind)
	return nil
}

// counterBehind is the damage of an events counter at last with records
// stored past it.
func counterBehind(path string, last uint64) *CorruptError {
	return &CorruptError{Path: path, Seq: last + 1, Reason: fmt.Sprintf(
		"records lie past the events' sequence counter (#%d): the counter is damaged, and an append would overwrite them", last)}
}

// damageIn says where a damaged page was met: a *CorruptError about a page
// is told what the page held.
func damageIn(what string, err error) error {
	if ce := (*CorruptError)(nil); errors.As(err, &ce) && strings.HasPrefix(ce.Reason, "page ") {
		ce.Reason = what + " cannot be read: " + ce.Reason
	}
	return err
}

// viewRecover runs a read transaction, turning a bbolt panic (which bbolt
// raises on damaged pages) into a *CorruptError.
func viewRecover(db *bolt.DB, path string, fn func(*bolt.Tx) error) (err error) {
	// A fault reading the mapped file (damage bbolt follows into a page
	// past the end) is this read's error, not the process's end.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if up, ok := p.(callerPanic); ok {
				panic(up.v)
			}
			err = &CorruptError{Path: path, Reason: boltProblem(p)}
		}
	}()
	return db.View(fn)
}

// boltProblem words a panic bbolt raised on a damaged file: a page that is
// not the one its parent points to, or a read past the mapped file.
func boltProblem(p any) string {
	s := fmt.Sprint(p)
	var want, got uint64
	if _, err := fmt.Sscanf(s, "assertion failed: Page expected to be: %d, but self identifies as %d", &want, &got); err == nil {
		return fmt.Sprintf("page %d is damaged (it says it is page %d)", want, got)
	}
	if isFault(p) {
		return "a damaged page points outside the file (" + s + ")"
	}
	return "bbolt: " + s
}

// isFault says whether p, recovered, is a fault at an address that
// debug.SetPanicOnFault turned into a panic: a read of a mapped file past
// its end.
func isFault(p any) bool {
	re, ok := p.(runtime.Error)
	if !ok {
		return false
	}
	_, ok = re.(interface{ Addr() uintptr })
	return ok
}

// callerPanic carries a panic raised by a caller's callback through
// viewRecover, which re-raises it instead of calling it corruption.
type callerPanic struct{ v any }

// callFn calls a caller's callback, marking a panic as the caller's.
func callFn(fn func() error) (err error) {
	panicking := true
	defer func() {
		// recover is nil when fn called runtime.Goexit (t.FailNow in a
		// test): let that proceed.
		if r := recover(); panicking && r != nil {
			panic(callerPanic{r})
		}
	}()
	err = fn()
	panicking = false
	return err
}

func (l *Log) view(fn func(*bolt.Tx) error) error { return viewRecover(l.db, l.path, fn) }

// update runs a write transaction (callers hold writeMu), with bbolt panics
// turned into errors: the writer committing for everyone must not die of them.
// A fault reading the mapped file is one too (see viewRecover); bbolt rolls
// the transaction back as the panic unwinds.
func (l *Log) update(fn func(*bolt.Tx) error) error { return l.updateAppending(nil, fn) }

// updateAppending is update for a transaction that appends the events
// appended (see faulted).
func (l *Log) updateAppending(appended []events.Envelope, fn func(*bolt.Tx) error) (err error) {
	if stuck := l.stuck.Load(); stuck != nil {
		return *stuck
	}
	var tx *bolt.Tx
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptError{Path: l.path, Reason: boltProblem(p)}
			// A closed transaction has no DB: this one's rollback faulted
			// too (or Begin did), and bbolt still holds its writer lock.
			if tx == nil || tx.DB() != nil {
				l.stuck.Store(&err)
			}
		}
	}()
	return l.db.Update(l.faulted(appended, func(t *bolt.Tx) error { tx = t; return fn(t) }))
}

// enter registers a call in progress; it fails once Close has begun.
func (l *Log) enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("ledger %s: %w", l.path, ErrClosed)
	}
	l.active.Add(1)
	return nil
}

func (l *Log) leave() { l.active.Done() }

func (l *Log) errReadOnly(op string) error {
	return fmt.Errorf("%s: ledger %s: %w", op, l.path, ErrReadOnly)
}

// LastSeq is the sequence of the newest event (0 for an empty ledger).
func (l *Log) LastSeq() uint64 { return l.lastSeq.Load() }

// FirstSeq is the sequence of the oldest event still in the ledger: 1 until
// retention drops events, 0 for an empty ledger.
func (l *Log) FirstSeq() uint64 { return l.firstSeq.Load() }

// Meta returns what the ledger says about itself.
func (l *Log) Meta() Meta { return l.meta }

// SizeBytes is the size of the ledger file. bbolt never shrinks a file:
// space freed by retention is reused for new events, not returned (a
// compacted copy, CompactTo, is the way to return it).
func (l *Log) SizeBytes() int64 {
	fi, err := os.Stat(l.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Close waits for the calls in progress (every Append already made is
// committed and answered; calls made once Close has begun get ErrClosed),
// then closes the file and releases its lock. Closing twice is harmless.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.active.Wait()
	if l.reqs != nil {
		close(l.reqs)
		<-l.writerDone
	}
	if stuck := l.stuck.Load(); stuck != nil {
		return fmt.Errorf("close ledger %s: left open until the process ends, bbolt's writer lock lost to: %w", l.path, *stuck)
	}
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("close ledger %s: %w", l.path, err)
	}
	l.log.Info().Str("path", l.path).Uint64("last_seq", l.LastSeq()).Msg("ledger closed")
	return nil
}

// Damage is the damage reads went past, nil for none: what Open found
// wrong with the pages bbolt itself reads past (a damaged meta page, when
// bbolt reads the file through the other one, which may be older and so
// lack the newest transactions; a damaged freelist page), and the
// snapshots a replay passed over because they could not be read. Each is a
// *CorruptError; more than one are joined. Reads go on; a tool that shows
// what it read says so after.
func (l *Log) Damage() error { return errors.Join(l.Damages()...) }

// Damages is Damage, one error per damage, in the order found.
func (l *Log) Damages() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	if l.damage != nil {
		out = append(out, l.damage)
	}
	return append(out, l.found...)
}

// noteDamage adds err to what Damage says, once.
func (l *Log) noteDamage(err *CorruptError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.found {
		if f.Error() == err.Error() {
			return
		}
	}
	l.found = append(l.found, err)
	l.log.Error().Err(err).Str("path", l.path).Msg("ledger damaged")
}

// AppendFault is the error of the last append transaction that failed
// (the disk full, an I/O error) when none has succeeded since (an append,
// or a snapshot, which appends its SnapshotTaken): while it is not nil the
// ledger cannot record. AppendFailures counts those failed
// transactions since the log was opened. A call refused before it reached
// a transaction (its deadline, an event that does not encode) is neither.
func (l *Log) AppendFault() error {
	if p := l.fault.Load(); p != nil {
		return *p
	}
	return nil
}

// faultEdges is what the log last said of the append faults: a nearly
// full disk takes small commits and refuses larger ones, and a line at
// each edge would come with every other append.
type faultEdges struct {
	mu sync.Mutex
	// flapping is set once a fault came within quiet of the ledger
	// recording again; recoveredAt is when the log last said so, lastFail
	// when an append last failed (the store's clock), and lastErr why.
	flapping              atomic.Bool
	recoveredAt, lastFail time.Time
	lastErr               error
	quiet                 time.Duration // Options.FaultQuiet
}

// DefaultFaultQuiet: see Options.FaultQuiet.
const DefaultFaultQuiet = time.Minute

// failed notes an append transaction that failed; the first of a run
// says so, the others add nothing to the log but their callers' lines.
// A run that starts within the quiet (Options.FaultQuiet) of the end of
// the last says, once, that the ledger refuses some writes, and then
// nothing more until the ledger has recorded for the quiet with none
// failing.
func (l *Log) failed(err error) {
	l.failures.Add(1)
	first := l.fault.Swap(&err) == nil
	e := &l.edges
	e.mu.Lock()
	defer e.mu.Unlock()
	now := l.now()
	e.lastFail, e.lastErr = now, err
	switch {
	case !first || e.flapping.Load():
	case !e.recoveredAt.IsZero() && now.Sub(e.recoveredAt) < e.quiet:
		e.flapping.Store(true)
		l.log.Warn().Err(err).Str("path", l.path).Uint64("failures", l.failures.Load()).Dur("quiet", e.quiet).
			Msg("the ledger refuses some writes and takes others (a nearly full disk?); it says when it has recorded for a while with none refused")
	default:
		l.log.Error().Err(err).Str("path", l.path).Msg("the ledger cannot record")
	}
}

// recorded notes an append that went through: the first after a run of
// failures ends the outage in the log, whichever append it was; after
// failures that came and went, the first the quiet after the last.
func (l *Log) recorded() {
	ended := l.fault.Swap(nil) != nil
	e := &l.edges
	if !ended && !e.flapping.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := l.now()
	if e.flapping.Load() {
		if now.Sub(e.lastFail) < e.quiet {
			return
		}
		e.flapping.Store(false)
	}
	e.recoveredAt = now
	l.log.Info().Str("path", l.path).Msg("the ledger records again")
}

// NoteQuiet says that the ledger records again when faults that came
// and went (see failed) are the quiet past and the last write went
// through, if no append has said so yet: on a quiet node none may come
// for hours, and the log would go on saying that the disk refuses some
// writes. The daemon calls it at each snapshot check.
func (l *Log) NoteQuiet() {
	e := &l.edges
	if !e.flapping.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := l.now()
	if !e.flapping.Load() || l.fault.Load() != nil || now.Sub(e.lastFail) < e.quiet {
		return
	}
	e.flapping.Store(false)
	e.recoveredAt = now
	l.log.Info().Str("path", l.path).Msg("the ledger records again")
}

// Unsteady is the last refusal while faults come and go (see failed),
// from the warning that the ledger refuses some writes until the log says
// it records again; nil otherwise. Such a ledger may refuse the next
// record whatever the last one did, and AppendFault flips with each.
func (l *Log) Unsteady() error {
	e := &l.edges
	if !e.flapping.Load() {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.flapping.Load() {
		return nil
	}
	return e.lastErr
}

// AppendFailures: see AppendFault.
func (l *Log) AppendFailures() uint64 { return l.failures.Load() }

// Commits is the number of group commits made since the log was opened:
// events appended divided by it is the mean batch.
func (l *Log) Commits() uint64 { return l.commits.Load() }
