package store

import (
	"context"
	"fmt"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// SaveSnapshot stores s (events.MarshalState) as the snapshot at s.Seq and
// appends a SnapshotTaken event saying so, in one transaction; it returns the
// SnapshotTaken event's sequence. s must be the fold of this ledger up to
// s.Seq: s.Seq must lie between the oldest event kept (or the snapshot just
// before it) and LastSeq, and s.Time must be the time of event s.Seq. A
// snapshot already stored at s.Seq is replaced. Check verifies that every
// snapshot equals the fold of the log.
func (l *Log) SaveSnapshot(ctx context.Context, s events.State, reason string) (uint64, error) {
	if l.readOnly {
		return 0, l.errReadOnly("save snapshot")
	}
	if err := l.enter(); err != nil {
		return 0, err
	}
	defer l.leave()
	if s.Seq == 0 {
		return 0, fmt.Errorf("save snapshot to ledger %s: the state is at seq 0 (nothing applied)", l.path)
	}
	rec, err := events.MarshalState(s)
	if err != nil {
		return 0, fmt.Errorf("save snapshot to ledger %s: %w", l.path, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var stored events.Envelope
	err = l.update(func(tx *bolt.Tx) error {
		evb := tx.Bucket(bucketEvents)
		last, first := evb.Sequence(), firstSeqTx(tx)
		if s.Seq > last {
			return fmt.Errorf("the state is at seq %d, past the last event (seq %d)", s.Seq, last)
		}
		if s.Seq+1 < first {
			return fmt.Errorf("the state is at seq %d, before the oldest event kept (seq %d)", s.Seq, first)
		}
		if ek := seqKey(s.Seq); evb.Get(ek) != nil {
			e, err := decodeEvent(ek, evb.Get(ek))
			if err != nil {
				return l.corrupt(s.Seq, err.Error(), err)
			}
			if !e.Time.Equal(s.Time) {
				return fmt.Errorf("the state's time %s is not that of event %d (%s): not a fold of this ledger",
					s.Time.UTC().Format(time.RFC3339Nano), s.Seq, e.Time.Format(time.RFC3339Nano))
			}
		}
		if err := tx.Bucket(bucketSnapshots).Put(seqKey(s.Seq), appendValue(nil, s.Seq, rec)); err != nil {
			return err
		}
		var err error
		stored, err = l.appendInTx(tx, events.New(events.SnapshotTaken{Seq: s.Seq, Size: len(rec), Reason: reason}, l.now(), l.bootID))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("save snapshot to ledger %s: %w", l.path, err)
	}
	l.advance(stored.Seq, stored.Seq)
	l.recorded() // its SnapshotTaken is an append that went through
	l.log.Info().Str("path", l.path).Uint64("snapshot_seq", s.Seq).Int("bytes", len(rec)).
		Uint64("seq", stored.Seq).Str("reason", reason).Msg("ledger snapshot saved")
	return stored.Seq, nil
}
