package store

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Read calls fn with every event from sequence from (inclusive; 0, or a
// sequence retention dropped, means the oldest there is) to the newest, in
// order. It stops at fn's first error and returns that error as is.
//
// Every record is verified (checksum, decoding, the sequence it carries,
// continuity with the one before) before fn sees it. At the first bad or
// missing record Read returns a *CorruptError naming its sequence, fn having
// received every event before it.
//
// Read runs in one read transaction, so it sees the ledger as it was when it
// started, and memory stays flat however long the log: each envelope is
// decoded into fresh memory (events.Unmarshal copies what it keeps), so fn
// may retain it. A long Read delays a concurrent writer only when the file
// must grow (bbolt re-maps it then, waiting for open read transactions); for
// the same reason fn must not wait for a write to this Log (Append,
// SaveSnapshot, Retain), which could wait for the Read in turn.
func (l *Log) Read(from uint64, fn func(events.Envelope) error) error {
	if err := l.enter(); err != nil {
		return err
	}
	defer l.leave()
	return l.view(func(tx *bolt.Tx) error {
		return l.scan(tx, from, 0, true, func(seq uint64, rec []byte) error {
			e, err := l.decodeRecord(seq, rec)
			if err != nil {
				return err
			}
			return callFn(func() error { return fn(e) })
		})
	})
}

// ReadRaw is Read without decoding: fn gets each record's sequence and its
// bytes as events.Unmarshal reads them, checksum verified. rec aliases the
// file's memory map: it is valid only until fn returns, and must not be
// modified. What Read says of fn holds for it too.
func (l *Log) ReadRaw(from uint64, fn func(seq uint64, rec []byte) error) error {
	if err := l.enter(); err != nil {
		return err
	}
	defer l.leave()
	return l.view(func(tx *bolt.Tx) error {
		return l.scan(tx, from, 0, true, func(seq uint64, rec []byte) error {
			return callFn(func() error { return fn(seq, rec) })
		})
	})
}

// scan walks the events from..until (until 0: to the ledger's last
// sequence) in one transaction, verifying checksums and continuity, and
// calls visit with each record. With clamp, a from before the oldest event
// starts at the oldest; without, it is a missing record.
//
// A damaged page met on the way is a *CorruptError at the sequence it
// kept from being read: what comes before it was visited.
func (l *Log) scan(tx *bolt.Tx, from, until uint64, clamp bool, visit func(seq uint64, rec []byte) error) (err error) {
	expect := from
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(callerPanic); ok {
				panic(p)
			}
			err = l.corrupt(expect, "the events from here cannot be read: "+boltProblem(p), nil)
		}
	}()
	b := tx.Bucket(bucketEvents)
	last := b.Sequence()
	if until == 0 || until > last {
		until = last
	}
	from = max(from, 1)
	c := b.Cursor()
	if k, _ := c.First(); k != nil && clamp {
		if first, ok := keySeq(k); ok {
			from = max(from, first)
		}
	}
	if from > until {
		return nil
	}
	expect = from
	for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
		seq, ok := keySeq(k)
		if !ok {
			return l.corrupt(expect, fmt.Sprintf("events key %x is not a sequence", k), nil)
		}
		if seq > last {
			if expect <= last {
				// Out of order, with records still to come up to the
				// counter: a damaged key, not a counter behind.
				return l.corrupt(expect, fmt.Sprintf("record missing (the next key says seq %d, past the ledger's last seq %d)", seq, last), nil)
			}
			return counterBehind(l.path, last)
		}
		if seq > until {
			break
		}
		if seq != expect {
			return l.corrupt(expect, fmt.Sprintf("record missing (the next one is seq %d)", seq), nil)
		}
		rec, err := openValue(k, v)
		if err != nil {
			// The next record may still be read: CheckAll goes on there.
			return l.corrupt(seq, err.Error(), errBadRecord)
		}
		if err := visit(seq, rec); err != nil {
			return err
		}
		expect++
	}
	if expect <= until {
		return l.corrupt(expect, fmt.Sprintf("record missing (the ledger's last seq is %d)", last), nil)
	}
	return nil
}

// errBadRecord marks a CorruptError of one record that fails its checksum:
// the records after it can still be read.
var errBadRecord = errors.New("bad record")

func (l *Log) corrupt(seq uint64, reason string, err error) *CorruptError {
	return &CorruptError{Path: l.path, Seq: seq, Reason: reason, Err: err}
}

// decodeRecord decodes a verified record stored under seq.
func (l *Log) decodeRecord(seq uint64, rec []byte) (events.Envelope, error) {
	e, err := events.Unmarshal(rec)
	return l.decoded(seq, e, err)
}

// decodeForFold is decodeRecord for a fold: the envelope holds what
// events.Apply reads (events.UnmarshalForFold).
func (l *Log) decodeForFold(seq uint64, rec []byte) (events.Envelope, error) {
	e, err := events.UnmarshalForFold(rec)
	return l.decoded(seq, e, err)
}

// decoded names what is wrong with the record decoded under seq as e.
func (l *Log) decoded(seq uint64, e events.Envelope, err error) (events.Envelope, error) {
	if errors.Is(err, events.ErrUnknownType) || errors.Is(err, events.ErrUnknownVersion) {
		// Not damage: a newer devledger wrote it (a rollback).
		return e, fmt.Errorf("ledger %s: #%d: %w; a newer devledger wrote it: run that version or a newer one (dump shows such events as unknown)", l.path, seq, err)
	}
	if err != nil {
		return e, l.corrupt(seq, "cannot decode: "+err.Error(), err)
	}
	if e.Seq != seq {
		return e, l.corrupt(seq, fmt.Sprintf("record says seq %d", e.Seq), nil)
	}
	return e, nil
}

// LatestSnapshot returns the newest snapshot at or before sequence
// atOrBefore (0: the newest of all) that can be read; false when there is
// none. One that fails its checksum or does not decode is passed over for
// the one before it, and noted (Damage): never silently.
func (l *Log) LatestSnapshot(atOrBefore uint64) (events.State, bool, error) {
	return l.snapshotBetween(0, atOrBefore, false)
}

// SnapshotAt returns the snapshot stored at sequence seq; false when
// there is none there (never one at 0). One there that cannot be read is
// an error saying why: a *CorruptError (ErrCorrupt) when it is damaged,
// noted as LatestSnapshot notes it (Damage); one wrapping
// events.ErrSnapshotFormat when a newer devledger wrote it (a rollback,
// not damage).
func (l *Log) SnapshotAt(seq uint64) (events.State, bool, error) {
	if seq == 0 {
		return events.State{}, false, nil
	}
	return l.snapshotBetween(seq, seq, true)
}

// snapshotBetween is latestSnapshot in a read transaction: the newest
// snapshot from floor to atOrBefore that can be read. strict fails with
// why the newest one there was passed over, if it was.
func (l *Log) snapshotBetween(floor, atOrBefore uint64, strict bool) (events.State, bool, error) {
	if err := l.enter(); err != nil {
		return events.State{}, false, err
	}
	defer l.leave()
	var (
		s  events.State
		ok bool
	)
	err := l.view(func(tx *bolt.Tx) error {
		var skipped, err error
		s, ok, skipped, err = l.latestSnapshot(tx, atOrBefore, floor)
		if err == nil && strict {
			err = skipped
		}
		return err
	})
	return s, ok, err
}

// LatestSnapshotSeq is the sequence of the newest snapshot at or before
// atOrBefore (0: the newest of all), without reading the snapshot: cheap
// enough to ask on a timer. False when there is none (or on ErrClosed).
func (l *Log) LatestSnapshotSeq(atOrBefore uint64) (uint64, bool) {
	if err := l.enter(); err != nil {
		return 0, false
	}
	defer l.leave()
	var seq uint64
	err := l.view(func(tx *bolt.Tx) error {
		k, _ := lastAtOrBefore(tx.Bucket(bucketSnapshots).Cursor(), atOrBefore)
		seq, _ = keySeq(k)
		return nil
	})
	return seq, err == nil && seq > 0
}

// latestSnapshot finds the newest snapshot in notBefore..atOrBefore that
// can be read. One that cannot is damage: it is noted (Damage) and passed
// over for the one before it, from which the events rebuild the same
// state, only later. One of a format newer than this build reads (a
// rollback) is passed over too, and is not damage. skipped is the newest
// passed over, for a caller left with no way forward to name.
func (l *Log) latestSnapshot(tx *bolt.Tx, atOrBefore, notBefore uint64) (s events.State, ok bool, skipped, err error) {
	c := tx.Bucket(bucketSnapshots).Cursor()
	for k, v := lastAtOrBefore(c, atOrBefore); k != nil; k, v = c.Prev() {
		seq, _ := keySeq(k)
		if seq < notBefore {
			break
		}
		if st, ok := l.readSnapshot(seq, k, v, &skipped); ok {
			return st, true, skipped, nil
		}
	}
	return events.State{}, false, skipped, nil
}

// readSnapshot decodes the snapshot stored at seq (key k, value v); false
// when it cannot be read. Damage is noted (Damage); a format newer than
// this build reads is no damage. The first of either is kept in *skipped.
func (l *Log) readSnapshot(seq uint64, k, v []byte, skipped *error) (events.State, bool) {
	st, err := decodeSnapshot(k, v)
	if err == nil {
		return st, true
	}
	if !errors.Is(err, events.ErrSnapshotFormat) {
		// Named as Check names it: the same damage reads the same.
		ce := l.corrupt(seq, "snapshot: "+err.Error(), err)
		l.noteDamage(ce)
		if *skipped == nil {
			*skipped = ce
		}
	} else if *skipped == nil {
		// No damage; but a caller with no snapshot before it (retention
		// cut there) is left with no way forward, and must say why: a
		// rollback, not lost history.
		*skipped = fmt.Errorf("ledger %s: the snapshot at #%d: %w: a newer devledger wrote it, and this one cannot replay the events before it", l.path, seq, err)
	}
	return events.State{}, false
}

// lastAtOrBefore positions c on the last key <= seq (any key for seq 0).
func lastAtOrBefore(c *bolt.Cursor, seq uint64) ([]byte, []byte) {
	if seq == 0 {
		return c.Last()
	}
	k, v := c.Seek(seqKey(seq))
	if k != nil {
		if s, _ := keySeq(k); s == seq {
			return k, v
		}
		return c.Prev()
	}
	return c.Last()
}

// Replay returns the state after event untilSeq (0: the newest): the
// newest snapshot at or before untilSeq, with the events after it folded in.
// Past the end of the ledger is an error; so is a point before the oldest
// state retention kept (ErrHistoryDropped).
func (l *Log) Replay(untilSeq uint64) (events.State, error) {
	return l.replay(untilSeq, true)
}

func (l *Log) replay(untilSeq uint64, useSnapshots bool) (events.State, error) {
	if err := l.enter(); err != nil {
		return events.State{}, err
	}
	defer l.leave()
	s := events.NewState()
	err := l.view(func(tx *bolt.Tx) error {
		last := tx.Bucket(bucketEvents).Sequence()
		if untilSeq == 0 {
			untilSeq = last
		}
		if untilSeq > last {
			return fmt.Errorf("replay ledger %s to seq %d: the ledger ends at seq %d", l.path, untilSeq, last)
		}
		if untilSeq == 0 {
			return nil
		}
		first := firstSeqTx(tx)
		if useSnapshots {
			base, ok, skipped, err := l.latestSnapshot(tx, untilSeq, first-min(first, 1))
			if err != nil {
				return err
			}
			if ok {
				s = base
			}
			if !ok && first > 1 && skipped != nil {
				// Retention dropped the events before it: the damaged
				// snapshot was the way forward, and none is left.
				return skipped
			}
		}
		if s.Seq == 0 && first > 1 {
			if k, _ := tx.Bucket(bucketSnapshots).Cursor().Last(); useSnapshots && untilSeq >= first && !atOrAfter(k, first-1) {
				// Retention keeps the snapshot it cut at: with no
				// snapshot from there on, the start was lost, not dropped.
				return l.missingStart(first)
			}
			return l.dropped(fmt.Sprintf("seq %d", untilSeq), first)
		}
		return l.fold(tx, &s, untilSeq, nil)
	})
	if err != nil {
		return events.State{}, err
	}
	return s, nil
}

// atOrAfter says whether k is a sequence key of seq or later.
func atOrAfter(k []byte, seq uint64) bool {
	s, ok := keySeq(k)
	return ok && s >= seq
}

// missingStart is the damage of a ledger whose oldest event is first, with
// no snapshot before it to stand for the events before.
func (l *Log) missingStart(first uint64) *CorruptError {
	return l.corrupt(first-1, fmt.Sprintf("the events before #%d are missing, and no snapshot at or after #%d stands for them (retention keeps one where it cuts)", first, first-1), nil)
}

func (l *Log) dropped(point string, first uint64) error {
	return fmt.Errorf("replay ledger %s to %s: %w: the oldest event kept is seq %d and no snapshot at or after seq %d leads there",
		l.path, point, ErrHistoryDropped, first, first-1)
}

// firstSeqTx is the oldest event's sequence (0 when there is none).
func firstSeqTx(tx *bolt.Tx) uint64 {
	k, _ := tx.Bucket(bucketEvents).Cursor().First()
	seq, _ := keySeq(k)
	return seq
}

// errStopFold ends a fold early without error.
var errStopFold = errors.New("stop")

// fold applies the events after s.Seq up to until to s; stop, when set,
// ends the fold before the first event it returns true for.
//
// Decoding a record costs about three times what applying it does, so a
// long fold runs in two stages: this goroutine walks the cursor, verifies
// and decodes, and hands batches of envelopes to a second goroutine that
// applies them in order. The decoded envelopes share no memory with the
// file, so only the first stage needs the transaction.
func (l *Log) fold(tx *bolt.Tx, s *events.State, until uint64, stop func(events.Envelope) bool) error {
	if until == 0 {
		until = tx.Bucket(bucketEvents).Sequence()
	}
	if until < s.Seq+pipelineMin {
		return l.foldSerial(tx, s, until, stop)
	}
	const batchLen, buffers = 512, 4
	full := make(chan []events.Envelope, buffers)
	free := make(chan []events.Envelope, buffers)
	for range buffers {
		free <- make([]events.Envelope, 0, batchLen)
	}
	applied := make(chan error, 1)
	go func() {
		var err error
		for batch := range full {
			if err == nil {
				err = applyBatch(s, batch)
			}
			clear(batch) // drop the payloads now, not when the buffer is refilled
			free <- batch[:0]
		}
		applied <- err
	}()

	batch := <-free
	err := l.decodeEach(tx, s.Seq+1, until, stop, func(e events.Envelope) {
		if batch = append(batch, e); len(batch) == batchLen {
			full <- batch
			batch = <-free
		}
	})
	full <- batch
	close(full)
	if aerr := <-applied; err == nil {
		err = aerr
	}
	return err
}

// decodeEach decodes the events from..until in order, for a fold, and
// hands each to visit, ending (without error) before the first one stop
// returns true for.
func (l *Log) decodeEach(tx *bolt.Tx, from, until uint64, stop func(events.Envelope) bool, visit func(events.Envelope)) error {
	err := l.scan(tx, from, until, false, func(seq uint64, rec []byte) error {
		e, err := l.decodeForFold(seq, rec)
		if err != nil {
			return err
		}
		if stop != nil && stop(e) {
			return errStopFold
		}
		visit(e)
		return nil
	})
	if err == errStopFold {
		return nil
	}
	return err
}

// pipelineMin is the fold length from which fold runs in two stages.
const pipelineMin = 4096

// applyBatch applies envs to s, reporting a panic of Apply (a bug in the
// events package) as an error rather than taking the process down from
// the second goroutine.
func applyBatch(s *events.State, envs []events.Envelope) (err error) {
	i := 0
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("apply event %d (%s): panic: %v", envs[i].Seq, envs[i].Type, p)
		}
	}()
	for ; i < len(envs); i++ {
		*s = events.Apply(*s, envs[i])
	}
	return nil
}

// foldSerial is fold in one goroutine, for short folds.
func (l *Log) foldSerial(tx *bolt.Tx, s *events.State, until uint64, stop func(events.Envelope) bool) error {
	return l.decodeEach(tx, s.Seq+1, until, stop, func(e events.Envelope) { *s = events.Apply(*s, e) })
}

// ReplayUntilTime returns the state as of wall time t: the events stamped at
// or before t folded in order, starting from the newest snapshot whose state
// is from at or before t. The fold stops at the first event stamped after t;
// the ledger's times follow its order as long as the node's clock does not
// step back. A t before the first event gives the empty state (or
// ErrHistoryDropped when retention dropped the events of that time).
func (l *Log) ReplayUntilTime(t time.Time) (events.State, error) {
	if err := l.enter(); err != nil {
		return events.State{}, err
	}
	defer l.leave()
	s := events.NewState()
	err := l.view(func(tx *bolt.Tx) error {
		evb := tx.Bucket(bucketEvents)
		if evb.Sequence() == 0 {
			return nil
		}
		first := firstSeqTx(tx)
		var skipped error // the newest damaged snapshot passed over
		sc := tx.Bucket(bucketSnapshots).Cursor()
		for k, v := sc.Last(); k != nil; k, v = sc.Prev() {
			seq, _ := keySeq(k)
			if seq+1 < first {
				break // older than the kept events: no way forward from it
			}
			// A snapshot's time is that of its last event: read the event
			// rather than decode the whole state, when it is still there.
			if ek := seqKey(seq); seq >= first {
				if e, err := decodeEvent(ek, evb.Get(ek)); err == nil && e.Time.After(t) {
					continue
				}
			}
			st, ok := l.readSnapshot(seq, k, v, &skipped)
			if !ok || st.Time.After(t) {
				continue
			}
			s = st
			break
		}
		if s.Seq == 0 && first > 1 {
			if skipped != nil {
				return skipped
			}
			return l.dropped(t.UTC().Format(time.RFC3339Nano), first)
		}
		return l.fold(tx, &s, 0, func(e events.Envelope) bool { return e.Time.After(t) })
	})
	if err != nil {
		return events.State{}, err
	}
	return s, nil
}

// Backup writes a consistent copy of the ledger file to w, as it is at the
// call: one read transaction (bbolt's Tx.WriteTo), so appends go on
// meanwhile. It returns the bytes written. A slow w holds the transaction,
// which delays an append that must grow the file: give w a deadline.
//
// A file Open found damaged in the pages bbolt reads past (Damage: a meta
// page, the freelist) is refused with that damage, writing nothing: bbolt's
// copy writes fresh meta pages over what it read, so a copy read through
// an older meta page would look sound and lack the newest transactions.
// Salvage copies every intact event of such a file.
func (l *Log) Backup(w io.Writer) (int64, error) {
	if l.damage != nil {
		return 0, fmt.Errorf("back up ledger %s: %w; a copy would hide it under fresh meta pages, with only what bbolt reads past it", l.path, l.damage)
	}
	if err := l.enter(); err != nil {
		return 0, err
	}
	defer l.leave()
	var n int64
	err := l.view(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("back up ledger %s: %w", l.path, err)
	}
	return n, nil
}
