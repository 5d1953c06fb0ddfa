package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Retention says which old events Retain drops. A zero limit is no limit.
type Retention struct {
	// MaxAge drops events stamped more than MaxAge before Now.
	MaxAge time.Duration
	// MaxBytes drops the oldest events while the events kept take more than
	// MaxBytes: the stored size of their records (checksum included), not
	// the size of the file, which never shrinks. Like MaxAge, it drops only
	// up to a snapshot (see Retain).
	MaxBytes int64
	// Now is the time MaxAge counts back from, and the time of the
	// EventsDropped event; zero means time.Now().
	Now time.Time
	// MaxDrop is about the most events one call drops, in one write
	// transaction that every append waits behind: the cut is the newest
	// readable snapshot at most MaxDrop events in, or, when none there
	// can be read, the first readable one past them. Far more to drop (a
	// bound lowered by much) then takes several calls, each with its
	// EventsDropped. Zero means no limit.
	MaxDrop int
}

// Retain drops the oldest events that are too old or over the size budget,
// and appends an EventsDropped event saying which, in one transaction. It
// returns that event's payload, and false (writing nothing) when nothing
// was to be dropped.
//
// Events are dropped from the oldest on, up to and including the newest
// snapshot this build can read that the limits reach: replay starts from
// that snapshot afterwards, so the state the ledger rebuilds is unchanged,
// every event kept can still be replayed to, and the ledger stays gap-free
// from FirstSeq. The cut falls at a snapshot, so up to one snapshot
// interval of events past the limits stays until the next one. A snapshot
// that cannot be read (damaged, or of a format newer than this build) is
// never the cut; without a readable one nothing is dropped. Older
// snapshots are deleted with the events; the history before FirstSeq can
// no longer be replayed (ErrHistoryDropped).
//
// The file does not shrink: bbolt reuses the freed pages for new events.
// Returning the space to the file system takes a compacted copy
// (CompactTo) put in place of the file while no daemon holds it.
func (l *Log) Retain(ctx context.Context, r Retention) (events.EventsDropped, bool, error) {
	var d events.EventsDropped
	if l.readOnly {
		return d, false, l.errReadOnly("retain")
	}
	if err := l.enter(); err != nil {
		return d, false, err
	}
	defer l.leave()
	if r.MaxAge <= 0 && r.MaxBytes <= 0 {
		return d, false, nil
	}
	now := r.Now
	if now.IsZero() {
		now = l.now()
	}
	r.Now = now
	// The size bound needs every record's size: the last pass's count
	// goes on with what was appended since, in a read transaction, which
	// the writer (an Allocate's commit) need not wait for; the write
	// transaction adds what came meanwhile.
	var counted bytesCounted
	if r.MaxBytes > 0 {
		l.writeMu.Lock()
		counted = l.sized
		l.writeMu.Unlock()
		if err := l.view(func(tx *bolt.Tx) error { return counted.update(ctx, tx) }); err != nil {
			return d, false, fmt.Errorf("retain ledger %s: %w", l.path, err)
		}
	}
	return l.retain(ctx, r, counted)
}

// retain is Retain's write transaction, r.Now set; counted is the size of
// the records when the count began.
func (l *Log) retain(ctx context.Context, r Retention, counted bytesCounted) (events.EventsDropped, bool, error) {
	var d events.EventsDropped
	now := r.Now
	cutoff := now.Add(-r.MaxAge)
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := ctx.Err(); err != nil {
		return d, false, err
	}
	var (
		stored           events.Envelope
		byAge, bySize    bool
		snapshotsDropped int
	)
	err := l.update(func(tx *bolt.Tx) error {
		evb, snb := tx.Bucket(bucketEvents), tx.Bucket(bucketSnapshots)
		sk, _ := snb.Cursor().Last()
		if sk == nil {
			return nil
		}
		newest, _ := keySeq(sk)
		if r.MaxBytes > 0 {
			if err := counted.update(ctx, tx); err != nil {
				return err
			}
		}
		first := firstSeqTx(tx)
		// The events the limits reach, oldest first, up to the newest
		// snapshot, or up to the first snapshot at or past stop;
		// firstOld and firstOver say where each limit began.
		var reach, firstOld, firstOver uint64
		total := counted.bytes
		c := evb.Cursor()
		k, v := c.First()
		// walk goes on from where it stopped, to the limits or to the
		// first snapshot at or past stop.
		walk := func(stop uint64) (cutShort bool, err error) {
			for ; k != nil; k, v = c.Next() {
				seq, ok := keySeq(k)
				if !ok || seq > newest {
					break
				}
				over := r.MaxBytes > 0 && total > r.MaxBytes
				old := false
				if r.MaxAge > 0 {
					e, err := decodeEvent(k, v)
					if errors.Is(err, events.ErrUnknownType) || errors.Is(err, events.ErrUnknownVersion) {
						// A newer devledger's (a rollback): no damage, and
						// not known to be old. It stays, and all after it.
						break
					}
					if err != nil {
						return false, l.corrupt(seq, err.Error(), err)
					}
					old = e.Time.Before(cutoff)
				}
				if !old && !over {
					break
				}
				if old && firstOld == 0 {
					firstOld = seq
				}
				if over && firstOver == 0 {
					firstOver = seq
				}
				reach = seq
				total -= int64(len(v))
				if err := ctx.Err(); err != nil {
					return false, err
				}
				if seq >= stop && snb.Get(k) != nil {
					k, v = c.Next()
					return true, nil
				}
			}
			return false, nil
		}
		stop := uint64(math.MaxUint64)
		if r.MaxDrop > 0 {
			stop = first + uint64(r.MaxDrop) - 1
		}
		cutShort, err := walk(stop)
		if err != nil || reach == 0 {
			return err
		}
		// A snapshot before first cannot be the cut: no event before it
		// is left to drop.
		base, ok, _, err := l.latestSnapshot(tx, min(stop, reach), first)
		for err == nil && !ok && cutShort {
			// None readable within MaxDrop: the first readable one past,
			// the walk stopping at each.
			if base, ok, _, err = l.latestSnapshot(tx, reach, reach); err == nil && !ok {
				cutShort, err = walk(reach + 1)
			}
		}
		if err != nil || !ok {
			return err // no readable snapshot the limits reach: keep all
		}
		cut := base.Seq
		byAge, bySize = firstOld != 0 && firstOld <= cut, firstOver != 0 && firstOver <= cut
		d.FromSeq = first
		for k, v := c.Seek(seqKey(first)); k != nil; k, v = c.Next() {
			seq, _ := keySeq(k)
			if seq > cut {
				break
			}
			if seq != first+d.Count {
				return l.corrupt(first+d.Count, fmt.Sprintf("record missing (the next one is seq %d)", seq), nil)
			}
			d.ToSeq = seq
			d.Count++
			d.Bytes += int64(len(v))
		}
		for seq := d.FromSeq; seq <= d.ToSeq; seq++ {
			if err := evb.Delete(seqKey(seq)); err != nil {
				return err
			}
		}
		// A snapshot before the cut has no events after it any more; the
		// one at the cut is where replay now starts.
		var stale [][]byte
		sc := snb.Cursor()
		for k, _ := sc.First(); k != nil; k, _ = sc.Next() {
			if seq, _ := keySeq(k); seq >= cut {
				break
			}
			stale = append(stale, k)
		}
		for _, k := range stale {
			if err := snb.Delete(k); err != nil {
				return err
			}
		}
		snapshotsDropped = len(stale)
		d.SnapshotSeq = cut
		d.Reason = retentionReason(r, byAge, bySize, snapshotsDropped)
		stored, err = l.appendInTx(tx, events.New(d, now, l.bootID))
		return err
	})
	if err != nil {
		return events.EventsDropped{}, false, fmt.Errorf("retain ledger %s: %w", l.path, err)
	}
	if r.MaxBytes > 0 {
		if d.Count > 0 {
			counted.first, counted.bytes = d.ToSeq+1, counted.bytes-d.Bytes
		}
		l.sized = counted
	}
	if d.Count == 0 {
		return events.EventsDropped{}, false, nil
	}
	l.firstSeq.Store(d.ToSeq + 1)
	l.advance(stored.Seq, stored.Seq)
	l.log.Info().Str("path", l.path).Uint64("from_seq", d.FromSeq).Uint64("to_seq", d.ToSeq).
		Uint64("count", d.Count).Int64("bytes", d.Bytes).Uint64("snapshot_seq", d.SnapshotSeq).
		Int("snapshots_dropped", snapshotsDropped).Uint64("seq", stored.Seq).Msg("ledger retention dropped events")
	return d, true, nil
}

// bytesCounted is the stored size of the event records from first to
// last.
type bytesCounted struct {
	first, last uint64
	bytes       int64
}

// update brings b to the end of tx's records: it adds those after b.last,
// or counts all anew when the records no longer start at b.first (a drop
// since) or b counted none.
func (b *bytesCounted) update(ctx context.Context, tx *bolt.Tx) error {
	from := b.last + 1
	if firstSeqTx(tx) != b.first || b.last == 0 {
		*b, from = bytesCounted{}, 0
	}
	return b.count(ctx, tx, from)
}

// count adds the records from seq from on; it stops at ctx's end.
func (b *bytesCounted) count(ctx context.Context, tx *bolt.Tx, from uint64) error {
	if from == 0 {
		b.first = firstSeqTx(tx)
	}
	c := tx.Bucket(bucketEvents).Cursor()
	var last []byte
	total, n := b.bytes, 0
	for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
		total += int64(len(v))
		last = k
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	b.bytes = total
	if seq, ok := keySeq(last); ok {
		b.last = seq
	}
	return nil
}

func retentionReason(r Retention, byAge, bySize bool, snapshots int) string {
	var parts []string
	if byAge {
		parts = append(parts, fmt.Sprintf("older than %s", r.MaxAge))
	}
	if bySize {
		parts = append(parts, fmt.Sprintf("events over %d bytes", r.MaxBytes))
	}
	reason := strings.Join(parts, "; ")
	if snapshots > 0 {
		reason += fmt.Sprintf(" (%d older snapshots removed)", snapshots)
	}
	return reason
}
