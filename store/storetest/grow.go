package storetest

import (
	"context"
	"fmt"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// GrowOptions shape Grow. Zero values mean the defaults.
type GrowOptions struct {
	// Batch is how many events one Append takes (default 20,000): big
	// batches make a million events a matter of seconds.
	Batch int
	// SnapshotEvery is how many events lie between snapshots (default
	// 100,000).
	SnapshotEvery int
	// Tail is how many events follow the last snapshot (default 1,000).
	Tail int
}

// Grow appends events of h to l, which must hold st (its fold, as Replay
// gives it), until l holds total events, saving snapshots on the way as a
// daemon would have: every SnapshotEvery events, and one Tail events before
// the end. It returns the fold of the grown ledger.
func Grow(ctx context.Context, l *store.Log, st events.State, h *PodHistory, total uint64, opts GrowOptions) (events.State, error) {
	if opts.Batch <= 0 {
		opts.Batch = 20_000
	}
	if opts.SnapshotEvery <= 0 {
		opts.SnapshotEvery = 100_000
	}
	if opts.Tail <= 0 {
		opts.Tail = 1_000
	}
	if st.Seq != l.LastSeq() {
		return st, fmt.Errorf("grow ledger: the state is at seq %d, the ledger at %d", st.Seq, l.LastSeq())
	}
	if total < st.Seq+uint64(opts.Tail)+1 {
		return st, fmt.Errorf("grow ledger: %d events asked for, the ledger has %d and the tail is %d", total, st.Seq, opts.Tail)
	}
	last := total - uint64(opts.Tail) - 1 // the last snapshot's seq; its SnapshotTaken follows
	next := min(st.Seq+uint64(opts.SnapshotEvery), last)
	for st.Seq < total {
		stop := total
		if next > 0 {
			stop = next
		}
		out, err := l.Append(ctx, h.Take(int(min(uint64(opts.Batch), stop-st.Seq)), st.Seq+1)...)
		if err != nil {
			return st, err
		}
		for _, e := range out {
			st = events.Apply(st, e)
		}
		if st.Seq != next {
			continue
		}
		if _, err := l.SaveSnapshot(ctx, st, "generated history"); err != nil {
			return st, err
		}
		// Fold the SnapshotTaken that SaveSnapshot appended.
		if err := l.Read(st.Seq+1, func(e events.Envelope) error { st = events.Apply(st, e); return nil }); err != nil {
			return st, err
		}
		if next == last {
			next = 0
		} else {
			next = min(st.Seq+uint64(opts.SnapshotEvery), last)
		}
	}
	return st, nil
}
