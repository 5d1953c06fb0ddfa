package store

import (
	"context"
	"fmt"
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
	// the size of the file, which never shrinks.
	MaxBytes int64
	// Now is the time MaxAge counts back from, and the time of the
	// EventsDropped event; zero means time.Now().
	Now time.Time
}

// Retain drops the oldest events that are too old or over the size budget,
// and appends an EventsDropped event saying which, in one transaction. It
// returns that event's payload, and false (writing nothing) when nothing
// was to be dropped.
//
// Only events the newest snapshot already holds are dropped (those at or
// before its sequence), so the state the ledger rebuilds is unchanged:
// without a snapshot nothing is dropped. Events go from the oldest on and
// the ledger stays gap-free from FirstSeq. Snapshots older than the oldest
// state still reachable (before the last dropped event) are deleted with
// the events; the history before FirstSeq can no longer be replayed
// (ErrHistoryDropped).
//
// The file does not shrink: bbolt reuses the freed pages for new events.
// Returning the space to the file system needs an offline compaction
// (bbolt.Compact into a new file, then a rename), which the store does not do.
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
		snapSeq, _ := keySeq(sk)
		var total int64
		if r.MaxBytes > 0 {
			c := evb.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				total += int64(len(v))
			}
		}
		c := evb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			seq, ok := keySeq(k)
			if !ok || seq > snapSeq {
				break
			}
			over := r.MaxBytes > 0 && total > r.MaxBytes
			old := false
			if r.MaxAge > 0 {
				e, err := decodeEvent(k, v)
				if err != nil {
					return l.corrupt(seq, err.Error(), err)
				}
				old = e.Time.Before(cutoff)
			}
			if !old && !over {
				break
			}
			byAge, bySize = byAge || old, bySize || over
			if d.Count == 0 {
				d.FromSeq = seq
			} else if seq != d.ToSeq+1 {
				return l.corrupt(d.ToSeq+1, fmt.Sprintf("record missing (the next one is seq %d)", seq), nil)
			}
			d.ToSeq = seq
			d.Count++
			d.Bytes += int64(len(v))
			total -= int64(len(v))
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if d.Count == 0 {
			return nil
		}
		for seq := d.FromSeq; seq <= d.ToSeq; seq++ {
			if err := evb.Delete(seqKey(seq)); err != nil {
				return err
			}
		}
		// A snapshot before the last dropped event has no events after it
		// any more; the one at d.ToSeq, if any, is where replay now starts.
		var stale [][]byte
		sc := snb.Cursor()
		for k, _ := sc.First(); k != nil; k, _ = sc.Next() {
			if seq, _ := keySeq(k); seq >= d.ToSeq {
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
		d.SnapshotSeq = snapSeq
		d.Reason = retentionReason(r, byAge, bySize, snapshotsDropped)
		var err error
		stored, err = l.appendInTx(tx, events.New(d, now, l.bootID))
		return err
	})
	if err != nil {
		return events.EventsDropped{}, false, fmt.Errorf("retain ledger %s: %w", l.path, err)
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
