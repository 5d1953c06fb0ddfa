package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

func TestGrowMakesASoundLedgerWithSnapshots(t *testing.T) {
	ctx := context.Background()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pools := map[string][]string{}
	setup := []events.Payload{events.DaemonStarted{Version: "test", Node: "node"}}
	for p, name := range []string{"example.com/a", "example.com/b"} {
		for i := range 40 {
			pools[name] = append(pools[name], fmt.Sprintf("0000:%02x:00.%d", 0x10+p*8+i/8, i%8))
		}
		setup = append(setup, events.PoolMembershipChanged{Pool: name, Added: pools[name], Reason: "config applied"})
	}
	var envs []events.Envelope
	for _, p := range setup {
		envs = append(envs, events.New(p, time.Now(), "boot"))
	}
	if _, err := l.Append(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(pool string, ids []string) events.ContainerAllocation {
		return events.ContainerAllocation{Envs: map[string]string{"PCIDEVICE_X": fmt.Sprint(ids)}}
	}
	h := NewPodHistory(1, pools, answer, "boot", st.Time)
	const total = 5_000
	grown, err := Grow(ctx, l, st, h, total, GrowOptions{Batch: 700, SnapshotEvery: 1_000, Tail: 100})
	if err != nil {
		t.Fatal(err)
	}
	if l.LastSeq() != total || grown.Seq != total {
		t.Fatalf("ledger at seq %d, state at %d; want %d", l.LastSeq(), grown.Seq, total)
	}
	rep, err := l.Check(ctx)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check: %v %v", err, rep.Problems)
	}
	if rep.Snapshots != 5 {
		t.Errorf("%d snapshots, want 5 (at 1,000-event steps, the last 100 events before the end)", rep.Snapshots)
	}
	snap, ok, err := l.LatestSnapshot(0)
	if err != nil || !ok || snap.Seq != total-101 {
		t.Errorf("latest snapshot at %d (found %v, %v), want %d", snap.Seq, ok, err, total-101)
	}
	replayed, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if !replayed.Equal(grown) {
		t.Errorf("the replayed ledger differs from the state Grow returned")
	}
	if len(grown.Allocations) == 0 || len(grown.Allocations) > 200 {
		t.Errorf("%d live allocations, want some and at most 200", len(grown.Allocations))
	}
}
