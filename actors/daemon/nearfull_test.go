package daemon

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// On a nearly full disk that takes the events and refuses the
// snapshots (the largest writes), a snapshot due is tried less and less
// often, each try a fold of the ledger, and its failure is logged once
// at error, not at every check. Once there is room it is taken.
func TestASnapshotRefusedAgainAndAgainBacksOff(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.SnapshotCheck = 5 * time.Millisecond
	n.opts.SnapshotEvery = 1
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(logs).Level(zerolog.InfoLevel)
	d := n.start(t)
	ctx := waitCtx(t)
	waitLedger(ctx, t, d, "the pool registered", func(s events.State) bool { return s.Pools[vfioPool].Registration.Registered })

	var tries atomic.Int32
	snapshots := func(appended []events.Envelope) bool { // and retention passes
		if appended == nil {
			tries.Add(1)
			return true
		}
		return false
	}
	room := storetest.RefuseSomeWrites(t, d.rec.Log(), snapshots)
	// An event, so that a snapshot is due.
	if _, err := d.rec.Record(ctx, events.DeviceHealthChanged{Address: "0000:af:00.0", Healthy: true, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && tries.Load() < 100 {
		time.Sleep(10 * time.Millisecond)
	}
	// A check every 5ms: up to 200 tries in a second if each check
	// tries; doubling the checks skipped, about 8.
	if n := tries.Load(); n == 0 || n > 20 {
		t.Errorf("%d snapshots tried in a second, want between 1 and 20", n)
	}
	if n := logs.Count("error", "snapshot failed"); n != 1 {
		t.Errorf("%d lines at error that the snapshot failed, want 1", n)
	}
	room()
	snapped := d.rec.Log().LastSeq()
	waitFor(ctx, t, "a snapshot once there is room", func() bool {
		last, _ := d.rec.Log().LatestSnapshotSeq(0)
		return last >= snapped
	})

	// The snapshot taken ends the run: the disk's next refusal is the
	// first of another, logged at error and tried again soon.
	tries.Store(0)
	storetest.RefuseSomeWrites(t, d.rec.Log(), snapshots)
	if _, err := d.rec.Record(ctx, events.DeviceHealthChanged{Address: "0000:af:00.0", Healthy: false, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	// A check logs its try's failure before the next check tries; one
	// of the writes refused may be the retention pass after the last
	// snapshot.
	waitFor(ctx, t, "tries of the next snapshot", func() bool { return tries.Load() >= 3 })
	if n := logs.Count("error", "snapshot failed"); n != 2 {
		t.Errorf("%d lines at error that the snapshot failed, want 2: one for each run of refusals\n%s", n, logs)
	}
}

// A disk that refuses snapshots for days: the checks let pass between
// tries double up to the bound and stay there, the day after as the
// first hours. Not, past the 63rd refusal, a wait with no end.
func TestASnapshotRefusedForDaysIsStillTried(t *testing.T) {
	for _, tc := range []struct{ refusals, skip int }{
		{1, 0}, {2, 1}, {3, 3}, {6, 31}, {7, 31}, {63, 31}, {64, 31}, {65, 31}, {1000, 31},
	} {
		t.Run(fmt.Sprint(tc.refusals, " refusals"), func(t *testing.T) {
			if got := snapshotSkip(tc.refusals); got != tc.skip {
				t.Errorf("after %d refusals in a row, %d checks let pass, want %d", tc.refusals, got, tc.skip)
			}
		})
	}
}

// On a nearly full disk, refusals and records in turn: the daemon is not
// ready from the warning that the ledger refuses some writes, though the
// last record went through (the next Allocate may be refused), where
// /readyz followed each append and flipped with it.
func TestADaemonOnADiskThatTakesOnlySomeWritesIsNotReady(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	waitFor(ctx, t, "the daemon ready", func() bool { return d.Ready(ctx) })

	var refuse atomic.Bool
	room := storetest.RefuseSomeWrites(t, d.rec.Log(), func([]events.Envelope) bool { return refuse.Load() })
	for i, refused := range []bool{true, false, true, false} {
		refuse.Store(refused)
		_, err := d.rec.Record(ctx, events.DeviceHealthChanged{Address: "0000:af:00.0", Healthy: true, Reason: fmt.Sprint("test ", i)})
		if (err != nil) != refused {
			t.Fatalf("record %d: %v, want refused %v", i, err, refused)
		}
	}
	if err := d.notReady(ctx); err == nil || !strings.Contains(err.Error(), "the ledger refuses some writes and takes others") {
		t.Errorf("after refusals and records in turn, the last recorded: not ready %v, want the ledger refusing some writes", err)
	}
	room()
}
