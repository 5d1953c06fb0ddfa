package pool

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
)

// On a nearly full disk the ledger takes small records (here others')
// and refuses the pool's PluginServing, so that it records again
// between the pool's tries. The pool's wait keeps doubling all the
// same while its record is refused: it does not try, each time with a
// full replay, at once or every RetryInitial. Once there is room it
// records the socket it serves on, logged once.
func TestAPoolsWaitGrowsOnADiskThatTakesOnlySomeRecords(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	if _, err := l.Append(ctx, events.New(events.ConfigApplied{Path: "config.json", SHA256: "ab",
		Pools: []events.PoolSpec{{Resource: "example.com/vf", DeviceType: string(config.GenericPCI)}}}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}
	logs := &actortest.Log{}
	rec := ledger.NewRecorder(l, "boot-1", nil)
	f := actortest.Spawn(t, Props(Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI},
		Members:  []allocation.Member{member(x)}, Recorder: rec, Replayed: &events.State{},
		SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, Log: zerolog.New(logs).Level(zerolog.InfoLevel),
		RetryInitial: 10 * time.Millisecond, RetryMax: 10 * time.Second,
	}))
	actortest.Next[*Serving](t, f)

	var tries atomic.Int32
	room := storetest.RefuseSomeWrites(t, l, func(appended []events.Envelope) bool {
		for _, e := range appended {
			if _, ok := e.Payload.(events.PluginServing); ok {
				tries.Add(1)
				return true
			}
		}
		return false
	})
	// Others' small records, which the disk takes (in the daemon, among
	// them the snapshot check's, which tries the disk).
	defer storetest.RecordOthers(t, func(ctx context.Context, p events.Payload) error { _, err := rec.Record(ctx, p); return err }, "0000:af:00.0")()

	f.Sys.Root.Send(f.Child, &Reserve{})
	second := actortest.Next[*Serving](t, f).Socket
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && tries.Load() < 40 {
		time.Sleep(10 * time.Millisecond)
	}
	// Doubling from 10ms, a second holds at most the first try and
	// seven more; a wait that starts over at every record the ledger
	// takes holds one every 10-20ms, or none at all.
	if n := tries.Load(); n > 10 {
		t.Errorf("%d tries in a second to record PluginServing, want at most 10: the wait does not grow", n)
	}
	room()
	if !ledgerServes(t, rec, second) {
		t.Fatalf("once there is room, the ledger does not have the pool serving on %s (%d tries)", second, tries.Load())
	}
	if n := logs.Count("info", "pool serving, recorded late"); n != 1 {
		t.Errorf("%d lines saying the serving was recorded late, want 1:\n%s", n, logs)
	}
}

// On a nearly full disk that refuses every other Allocate's record,
// each refused Allocate is answered Unavailable, saying the ledger could
// not record it, and each answered one is in the ledger, superseding
// the one answered before it, not one refused.
func TestAllocatesOnADiskThatTakesOnlySomeRecords(t *testing.T) {
	f, l, _ := servingPool(t, t.TempDir(), member(x))
	var n int
	storetest.RefuseSomeWrites(t, l, func(appended []events.Envelope) bool {
		for _, e := range appended {
			if _, ok := e.Payload.(events.DevicesAllocated); ok {
				n++
				return n%2 == 0
			}
		}
		return false
	})
	var answered []uint64
	for i := range 10 {
		r := awaitReply(t, allocateVia(f, context.Background(), x))
		if i%2 == 1 {
			if !errors.Is(r.err, grpcapi.ErrUnavailable) || !strings.Contains(r.err.Error(), "the ledger could not record the allocation") {
				t.Fatalf("Allocate %d, its record refused: %v, want Unavailable saying the ledger could not record it", i, r.err)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("Allocate %d, its record taken: %v", i, r.err)
		}
		answered = append(answered, actortest.Next[*AllocationRecorded](t, f).Event.Seq)
	}
	f.NothingFor(t, 50*time.Millisecond)
	var inLedger []uint64
	var supersedes [][]uint64
	if err := l.Read(0, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DevicesAllocated); ok {
			inLedger = append(inLedger, e.Seq)
			supersedes = append(supersedes, p.Supersedes)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inLedger, answered) {
		t.Fatalf("the ledger has allocations %v, the pool answered %v", inLedger, answered)
	}
	for i := 1; i < len(answered); i++ {
		if !slices.Equal(supersedes[i], answered[i-1:i]) {
			t.Errorf("allocation #%d supersedes %v, want #%d, the one answered before it", answered[i], supersedes[i], answered[i-1])
		}
	}
}

// A disk with room for small records and none for a snapshot, on a
// quiet node: no other record lands to say the ledger records again
// (the daemon's snapshot retry is refused, being the largest write).
// The pool's record is small: it tries it at the end of each wait, and
// lands it, rather than wait on another's record that never comes.
func TestAPoolRecordsLateOnAQuietNodeWithRoomForSmallRecords(t *testing.T) {
	f, l, _ := servingPool(t, t.TempDir(), member(x))
	ctx := context.Background()
	if _, err := l.Append(ctx, events.New(events.ConfigApplied{Path: "config.json", SHA256: "ab",
		Pools: []events.PoolSpec{{Resource: "example.com/vf", DeviceType: string(config.GenericPCI)}}}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}
	storetest.RefuseWrites(t, l)
	f.Sys.Root.Send(f.Child, &Reserve{})
	serves := actortest.Next[*Serving](t, f).Socket
	if err := l.Sync(ctx); err != nil || l.AppendFault() == nil {
		t.Fatalf("the new socket's record not refused (%v)", err)
	}
	// Some room: small records fit, snapshots (and retention) do not.
	storetest.RefuseSomeWrites(t, l, func(appended []events.Envelope) bool { return appended == nil })
	if _, err := l.SaveSnapshot(ctx, events.NewState(), "test"); err == nil {
		t.Fatal("a snapshot taken on a disk with no room for one")
	}
	if !ledgerServes(t, ledger.NewRecorder(l, "boot-1", nil), serves) {
		t.Fatalf("the ledger still lacks the socket the pool serves on, %s", serves)
	}
}

// ledgerServes waits, up to 5 s, for the ledger to have the pool
// example.com/vf serving on socket, and says whether it came to.
func ledgerServes(t *testing.T, rec *ledger.Recorder, socket string) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := rec.Replay()
		if err != nil {
			t.Fatal(err)
		}
		if reg := st.Pools["example.com/vf"].Registration; reg.Serving && reg.Socket == socket {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling the ledger
	}
}
