package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// CheckReport is what Check found.
type CheckReport struct {
	// Events is the number of events verified: by Check, those before
	// FirstBad (if any); by CheckAll, every one it read that is sound.
	Events uint64
	// Snapshots is the number of snapshots verified, and Newer of those
	// passed over: of a format newer than this build reads (a rollback),
	// which is not damage.
	Snapshots, Newer int
	// FirstSeq and LastSeq are the ledger's bounds.
	FirstSeq, LastSeq uint64
	// FirstBad is the sequence of the first bad record, 0 when none was
	// found (or when the damage is in the file's structure).
	FirstBad uint64
	// Problems describes what is wrong, one line each; empty for a sound
	// ledger.
	Problems []string
}

// Check verifies the whole ledger in one read transaction: every event's
// checksum, that it decodes and carries the sequence it is stored under,
// that the sequences run without a gap from FirstSeq to LastSeq, and that
// every snapshot decodes and equals the fold of the log up to it (folded on
// from the snapshot before, or from the empty state; the oldest snapshot of
// a ledger whose start retention dropped is where the fold starts). On a
// read-only Log it also runs bbolt's own page consistency check, which is
// not safe beside a writer.
//
// It stops at the first problem and returns a *CorruptError naming it, with
// the report filled up to there. It checks ctx between records. A snapshot
// of a format newer than this build reads (a rollback) is no problem: it
// is passed over and counted in Newer, as replay passes over it.
func (l *Log) Check(ctx context.Context) (CheckReport, error) {
	rep, problems, err := l.check(ctx, 1, nil)
	if err == nil && len(problems) > 0 {
		err = problems[0]
	}
	return rep, err
}

// CheckAll is Check that goes on past damage it can read around: a record
// that fails (the fold is not checked again until the next snapshot), a
// snapshot that does not decode or does not equal the fold. It returns the
// problems, each a *CorruptError, in the order met, up to the limit-th
// that known (if not nil) does not know: damage found and recorded before
// must not hide damage past it. err is for what stopped it (ctx, or damage
// the read cannot go past, which is also the last problem). A snapshot of
// a format newer than this build reads (a rollback) is passed over, and is
// not damage.
func (l *Log) CheckAll(ctx context.Context, limit int, known func(problem error) bool) (CheckReport, []error, error) {
	return l.check(ctx, max(limit, 1), known)
}

// check is Check and CheckAll: it stops at the limit-th problem known does
// not know.
func (l *Log) check(ctx context.Context, limit int, known func(error) bool) (CheckReport, []error, error) {
	var rep CheckReport
	var problems []error
	if err := l.enter(); err != nil {
		return rep, nil, err
	}
	defer l.leave()
	// problem notes err; a non-nil return stops the check.
	fresh := 0
	problem := func(err error) error {
		problems = append(problems, err)
		if ce := (*CorruptError)(nil); errors.As(err, &ce) {
			if rep.FirstBad == 0 {
				rep.FirstBad = ce.Seq
			}
			rep.Problems = append(rep.Problems, ce.Error())
		}
		if known == nil || !known(err) {
			fresh++
		}
		if fresh >= limit {
			return errStopFold
		}
		return nil
	}
	// The records' size as read, which retention's first pass then need
	// not read again (see Log.sized).
	var sized bytesCounted
	err := l.view(func(tx *bolt.Tx) error {
		evb := tx.Bucket(bucketEvents)
		rep.LastSeq = evb.Sequence()
		rep.FirstSeq = firstSeqTx(tx)
		sized.first = rep.FirstSeq

		// The fold runs from the empty state when the ledger starts at 1,
		// else from the snapshot just before the oldest event kept, else
		// from the first snapshot met.
		var (
			fold    events.State
			folding bool
		)
		if rep.FirstSeq <= 1 {
			fold, folding = events.NewState(), true
		}
		// base: a snapshot stands for the events before the oldest kept
		// (the one retention cut at, or a later one).
		base := rep.FirstSeq <= 1
		sc := tx.Bucket(bucketSnapshots).Cursor()
		sk, sv := sc.First()
		for ; sk != nil; sk, sv = sc.Next() {
			seq, ok := keySeq(sk)
			if !ok {
				return problem(l.corrupt(0, fmt.Sprintf("snapshots key %x is not a sequence", sk), nil))
			}
			if seq >= rep.FirstSeq && rep.FirstSeq != 0 {
				base = true
				break
			}
			if seq+1 < rep.FirstSeq {
				if err := problem(l.corrupt(seq, fmt.Sprintf("snapshot older than the oldest event kept (seq %d)", rep.FirstSeq), nil)); err != nil {
					return err
				}
				continue
			}
			base = true
			st, err := decodeSnapshot(sk, sv)
			if errors.Is(err, events.ErrSnapshotFormat) {
				rep.Newer++
				continue
			}
			if err != nil {
				if err := problem(l.corrupt(seq, "snapshot: "+err.Error(), err)); err != nil {
					return err
				}
				continue
			}
			rep.Snapshots++
			if rep.FirstSeq == 0 {
				return problem(l.corrupt(seq, "snapshot in a ledger without events", nil))
			}
			fold, folding = st, true
		}
		if !base {
			if err := problem(l.missingStart(rep.FirstSeq)); err != nil {
				return err
			}
		}

		var n int
		visit := func(seq uint64, rec []byte) error {
			sized.bytes, sized.last = sized.bytes+int64(crcSize+len(rec)), seq
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			e, err := l.decodeForFold(seq, rec)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) && limit > 1 {
					folding = false // a newer devledger's event: not damage
					return nil
				}
				if err := problem(err); err != nil {
					return err
				}
				folding = false // the fold misses it from here
				return nil
			}
			rep.Events++
			if folding {
				fold = events.Apply(fold, e)
			}
			for ; sk != nil; sk, sv = sc.Next() {
				sseq, ok := keySeq(sk)
				if !ok {
					return problem(l.corrupt(0, fmt.Sprintf("snapshots key %x is not a sequence", sk), nil))
				}
				if sseq > seq {
					break
				}
				st, format, err := decodeSnapshotFormat(sk, sv)
				if errors.Is(err, events.ErrSnapshotFormat) {
					rep.Newer++
					continue
				}
				if err != nil {
					if err := problem(l.corrupt(sseq, "snapshot: "+err.Error(), err)); err != nil {
						return err
					}
					continue
				}
				if folding && !events.SnapshotMatches(fold, st, format) {
					if err := problem(l.corrupt(sseq, "snapshot does not equal the fold of the log up to it", nil)); err != nil {
						return err
					}
				}
				rep.Snapshots++
				fold, folding = st, true
			}
			return nil
		}
		// A record that fails its checksum ends a scan; CheckAll notes it
		// and scans on from the record after it.
		from := rep.FirstSeq
		var err error
		for {
			err = l.scan(tx, from, 0, false, visit)
			var ce *CorruptError
			if err == nil || !errors.As(err, &ce) || !errors.Is(err, errBadRecord) || limit == 1 {
				break
			}
			if perr := problem(err); perr != nil {
				err = perr
				break
			}
			folding = false // the fold misses it from here
			from = ce.Seq + 1
		}
		if err != nil {
			if !errors.Is(err, errStopFold) {
				if ce := (*CorruptError)(nil); errors.As(err, &ce) {
					problem(err) // what the read cannot go past: the last
				}
			}
			return err
		}
		if sk != nil {
			seq, _ := keySeq(sk)
			return problem(l.corrupt(seq, fmt.Sprintf("snapshot past the last event (seq %d)", rep.LastSeq), nil))
		}
		if l.readOnly {
			// bbolt's check asserts on a damaged meta page in a goroutine
			// of its own, where no recover reaches: look at them first.
			if l.damage != nil {
				return problem(l.damage)
			}
			var first error
			for err := range tx.Check() { // drain: the checker blocks on each send
				if first == nil {
					first = l.corrupt(0, "bbolt consistency check: "+err.Error(), err)
				}
			}
			if first != nil {
				return problem(first)
			}
		}
		return nil
	})
	if errors.Is(err, errStopFold) {
		err = nil
	}
	if err != nil && len(problems) > 0 && errors.Is(err, problems[len(problems)-1]) {
		err = nil // a problem, reported as one
	}
	if err == nil && len(problems) == 0 && !l.readOnly && sized.last != 0 {
		l.writeMu.Lock()
		if l.sized.last == 0 {
			l.sized = sized
		}
		l.writeMu.Unlock()
	}
	return rep, problems, err
}

// checkStructure checks what bbolt trusts in the file before it reads it:
// its two meta pages, its freelist page and the page graph (walkPages).
// bbolt opens a file through the newer valid meta page, so a damaged newer
// one goes unseen, and with it the transactions since the older one; it
// reads the freelist only to write, or to check, where it panics on a
// damaged one in a goroutine of its own; and it follows a loop in the page
// graph until memory runs out. fatal is damage a read must not meet (a
// loop, a page outside the file): the file is not opened. damage is damage
// reads survive, for Damage.
//
// walk false leaves the page graph out: a writer's Open walks it later,
// in the background (CheckPages), rather than add a fifth of a second at a
// million events to every daemon start, unless Options.CheckPages asks.
func (l *Log) checkStructure(pageSize int, walk bool) (fatal, damage error) {
	f, err := os.Open(l.path)
	if err != nil {
		return err, nil
	}
	defer f.Close()
	meta, fatal, damage := l.newestMeta(f, pageSize)
	if fatal != nil {
		return fatal, nil
	}
	if walk {
		walkFatal, walkDamage := walkPages(context.Background(), f, pageSize, meta)
		if walkFatal != nil {
			return l.corrupt(0, walkFatal.Error(), nil), damage
		}
		if damage == nil && walkDamage != "" {
			damage = l.corrupt(0, walkDamage, nil)
		}
	}
	if damage == nil {
		damage = l.checkFreelist(f, pageSize, meta)
	}
	return nil, damage
}

// writable says why bbolt cannot open the file read-write, nil when it
// can: it loads the freelist of the newest meta page as it does, and
// panics on a damaged one after it took the file's lock, which nothing
// then releases.
func (l *Log) writable(pageSize int) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	meta, fatal, _ := l.newestMeta(f, pageSize)
	if fatal != nil {
		return fatal
	}
	return l.checkFreelist(f, pageSize, meta)
}

// newestMeta reads the two meta pages of f and returns the one bbolt reads
// the file through: the valid one (by bbolt's checks: the meta, not the
// page header) of the newer transaction. damage names what is wrong with
// either; fatal, that neither is usable.
func (l *Log) newestMeta(f *os.File, pageSize int) (meta []byte, fatal, damage error) {
	var metas [2][]byte
	var problems [2]string
	var usable [2]bool
	for id := range 2 {
		metas[id] = make([]byte, pageSize)
		if _, err := f.ReadAt(metas[id], int64(id*pageSize)); err != nil {
			problems[id] = "it cannot be read: " + err.Error()
			continue
		}
		problems[id], usable[id] = metaPageProblem(metas[id], uint64(id))
	}
	le := binary.LittleEndian
	use := 0
	switch {
	case !usable[0] && !usable[1]:
		return nil, l.corrupt(0, fmt.Sprintf("both meta pages are damaged (%s; %s)", problems[0], problems[1]), nil), nil
	case !usable[0]:
		use = 1
	case usable[1] && le.Uint64(metas[1][metaTxID:]) > le.Uint64(metas[0][metaTxID:]):
		use = 1
	}
	for id := range 2 {
		switch {
		case problems[id] == "" || damage != nil:
		case id == use:
			damage = l.corrupt(0, fmt.Sprintf("meta page %d is damaged (%s), though bbolt reads the file through it", id, problems[id]), nil)
		default:
			damage = l.corrupt(0, fmt.Sprintf("meta page %d is damaged (%s); bbolt reads the file through the other one, which may be older: the newest transactions may be missing", id, problems[id]), nil)
		}
	}
	return metas[use], nil, damage
}

// CheckPages walks the page graph of the ledger as it is now (walkPages),
// inside a read transaction, so that a writer can go on meanwhile: the
// pages the transaction reaches are not reused until it ends. It returns a
// *CorruptError naming the first damage found, nil for a sound graph. A
// writer's Open leaves this walk out; the daemon runs it right after it
// starts. It stops with ctx's error when ctx ends.
func (l *Log) CheckPages(ctx context.Context) error {
	if err := l.enter(); err != nil {
		return err
	}
	defer l.leave()
	return l.view(func(tx *bolt.Tx) error {
		f, err := os.Open(l.path)
		if err != nil {
			return err
		}
		defer f.Close()
		pageSize := tx.DB().Info().PageSize
		// The meta of this transaction: the one whose txid is its id.
		meta := make([]byte, pageSize)
		found := false
		for id := range 2 {
			if _, err := f.ReadAt(meta, int64(id*pageSize)); err == nil && binary.LittleEndian.Uint64(meta[metaTxID:]) == uint64(tx.ID()) {
				found = true
				break
			}
		}
		if !found {
			// Two commits since the transaction began: the slot of
			// its meta holds a newer one. Not damage.
			return fmt.Errorf("check the pages of ledger %s: it moved on while the check began; try again", l.path)
		}
		fatal, damage := walkPages(ctx, f, pageSize, meta)
		switch {
		case errors.Is(fatal, ctx.Err()) && ctx.Err() != nil:
			return fmt.Errorf("check the pages of ledger %s: %w", l.path, fatal)
		case fatal != nil:
			return l.corrupt(0, fatal.Error(), nil)
		case damage != "":
			return l.corrupt(0, damage, nil)
		}
		return nil
	})
}

// checkFreelist names a damaged freelist page of the file f whose meta
// page is meta: bbolt loads it to write, and to check, copying the page
// ids it counts out of the mapped file. A count past the page's own span
// faults (which no recover catches without SetPanicOnFault), and an id
// outside the file's pages (the meta pages among them) would have bbolt
// write there.
func (l *Log) checkFreelist(f *os.File, pageSize int, meta []byte) error {
	const noFreelist, freelistFlag, overflowCount = ^uint64(0), 0x10, 0xFFFF
	le := binary.LittleEndian
	freelist, pages := le.Uint64(meta[metaFreelist:]), le.Uint64(meta[metaPgid:])
	if freelist == noFreelist {
		return nil
	}
	damaged := func(problem string) error {
		return l.corrupt(0, fmt.Sprintf("page %d, the freelist, is damaged (%s); the events can be read, but bbolt cannot write to this file", freelist, problem), nil)
	}
	if freelist < 2 || freelist >= pages {
		return damaged(fmt.Sprintf("it lies outside the file's %d pages", pages))
	}
	buf := make([]byte, pageHeader)
	if _, err := f.ReadAt(buf, int64(freelist)*int64(pageSize)); err != nil {
		return l.corrupt(0, fmt.Sprintf("page %d, the freelist, cannot be read: %v", freelist, err), err)
	}
	switch {
	case le.Uint64(buf) != freelist:
		return damaged(fmt.Sprintf("it says it is page %d", le.Uint64(buf)))
	case le.Uint16(buf[8:]) != freelistFlag:
		return damaged(fmt.Sprintf("flags %#x, not a freelist page's", le.Uint16(buf[8:])))
	}
	overflow := uint64(le.Uint32(buf[12:]))
	if freelist+overflow >= pages {
		return damaged(fmt.Sprintf("its %d overflow pages run past the file's %d pages", overflow, pages))
	}
	at := int64(freelist)*int64(pageSize) + pageHeader
	read := func(b []byte) error {
		if _, err := f.ReadAt(b, at); err != nil {
			return l.corrupt(0, fmt.Sprintf("page %d, the freelist, cannot be read: %v", freelist, err), err)
		}
		at += int64(len(b))
		return nil
	}
	room := ((1+overflow)*uint64(pageSize) - pageHeader) / 8 // ids the pages hold
	count := uint64(le.Uint16(buf[10:]))
	if count == overflowCount {
		if err := read(buf[:8]); err != nil {
			return err
		}
		count, room = le.Uint64(buf), room-1
	}
	if count > room {
		return damaged(fmt.Sprintf("it counts %d page ids, more than its %d pages hold", count, 1+overflow))
	}
	ids := make([]byte, 8*count)
	if err := read(ids); err != nil {
		return err
	}
	for i := range count {
		if id := le.Uint64(ids[8*i:]); id < 2 || id >= pages {
			return damaged(fmt.Sprintf("it lists page %d, outside the file's %d pages", id, pages))
		}
	}
	return nil
}

// Offsets in a bbolt meta page: the page header, then the meta's freelist
// page id, page count and transaction id.
const (
	pageHeader   = 16
	metaFreelist = pageHeader + 32
	metaPgid     = pageHeader + 40 // the file's high-water mark, in pages
	metaTxID     = pageHeader + 48
)

// metaPageProblem says what is wrong with a bbolt meta page ("" when
// nothing is): its page header (id, meta flag), then the meta itself
// (magic, version, checksum), as bbolt lays them out. usable says whether
// bbolt would read the file through it: it checks the meta, not the
// header.
func metaPageProblem(p []byte, id uint64) (problem string, usable bool) {
	const header, metaFlag, magic, version, sumAt = 16, 0x04, bboltMagic, 2, 56
	le := binary.LittleEndian
	h := fnv.New64a()
	h.Write(p[header : header+sumAt])
	switch {
	case le.Uint32(p[header:]) != magic:
		return fmt.Sprintf("magic %#x", le.Uint32(p[header:])), false
	case le.Uint32(p[header+4:]) != version:
		return fmt.Sprintf("version %d", le.Uint32(p[header+4:])), false
	case le.Uint64(p[header+sumAt:]) != h.Sum64():
		return fmt.Sprintf("checksum %#x, its contents sum to %#x", le.Uint64(p[header+sumAt:]), h.Sum64()), false
	case le.Uint64(p[0:]) != id:
		return fmt.Sprintf("it says it is page %d", le.Uint64(p[0:])), true
	case le.Uint16(p[8:]) != metaFlag:
		return fmt.Sprintf("flags %#x, not a meta page's", le.Uint16(p[8:])), true
	}
	return "", true
}
