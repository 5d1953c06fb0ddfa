package registrar

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store/storetest"
)

// On a nearly full disk the ledger takes small records (here those
// that are not the registrar's) and refuses others (the registrar's),
// so that it records again between the registrar's tries. The
// registrar's wait keeps doubling all the same while its records are
// refused: it does not try, each time with a full replay, every
// RetryInitial; nor does it log each try at info. Once there is room
// it records the registration.
func TestTheRegistrarsWaitGrowsOnADiskThatTakesOnlySomeRecords(t *testing.T) {
	logs := &actortest.Log{}
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		c.RetryInitial, c.RetryMax = 10*time.Millisecond, 10*time.Second
		c.Log = zerolog.New(logs).Level(zerolog.DebugLevel)
	})
	_, sock := r.serve(t, gpu)
	if _, err := r.cfg.Recorder.Record(context.Background(),
		events.ConfigApplied{Path: "config.json", SHA256: "1", Pools: []events.PoolSpec{{Resource: gpu, DeviceType: "accelerator"}}},
		events.PluginServing{Pool: gpu, Socket: sock, Mode: "legacy"}); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	room := storetest.RefuseSomeWrites(t, r.log, func(appended []events.Envelope) bool {
		for _, e := range appended {
			if _, ok := e.Payload.(events.PluginRegistered); ok {
				tries.Add(1)
				return true
			}
		}
		return false
	})
	// Others' small records, which the disk takes (in the daemon, among
	// them the snapshot check's, which tries the disk).
	defer storetest.RecordOthers(t, func(ctx context.Context, p events.Payload) error { _, err := r.cfg.Recorder.Record(ctx, p); return err }, "0000:3b:02.1")()

	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && tries.Load() < 40 {
		time.Sleep(10 * time.Millisecond)
	}
	// Doubling from 10ms, a second holds at most the first try and
	// seven more; a wait that starts over at every record the ledger
	// takes holds one every 10-20ms.
	if n := tries.Load(); n > 10 {
		t.Errorf("%d tries in a second to record the registration, want at most 10: the wait does not grow", n)
	}
	if n := logs.Count("info", "cannot record the registrations the ledger lacks"); n > 0 {
		t.Errorf("%d info lines for the tries, want none (the store logs the disk, the registrar the refusal):\n%s", n, logs)
	}
	room()
	want := events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"}
	ctx := ctxFor(t)
	for {
		if slices.Contains(r.recorded(t), events.Payload(want)) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("once there is room, the ledger still lacks %+v (%d tries):\n%s", want, tries.Load(), logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A nearly full disk took the registrar's PluginRegistered and refused
// the KubeletRestarted before it: the ledger has the kubelet down and
// a pool registered. Once the ledger records again, the registrar
// records the restart and, as the restart ends every registration in
// the fold, the pool's registration after it; not that of a pool whose
// Register is still under way.
func TestTheRegistrarRecordsLateWhatARestartRecordedLateUndoes(t *testing.T) {
	const nic = "example.com/nic"
	connecting, release := make(chan struct{}), make(chan struct{})
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{BeforeConnect: func(resource, _ string) {
		if resource == nic {
			close(connecting)
			<-release
		}
	}}, func(c *Config) { c.RegisterTimeout = time.Minute })
	t.Cleanup(func() { close(release) }) // before the kubelet's, which waits for it
	_, gpuSock := r.serve(t, gpu)
	_, nicSock := r.serve(t, nic)
	ctx := context.Background()
	if _, err := r.cfg.Recorder.Record(ctx,
		events.ConfigApplied{Path: "config.json", SHA256: "1", Pools: []events.PoolSpec{
			{Resource: gpu, DeviceType: "accelerator"}, {Resource: nic, DeviceType: "netDevice"}}},
		events.PluginServing{Pool: gpu, Socket: gpuSock, Mode: "legacy"},
		events.PluginServing{Pool: nic, Socket: nicSock, Mode: "legacy"}); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: gpuSock})
	r.await(t, "registered the pool", registered(gpu))
	r.awaitRecorded(t, 4) // its PluginRegistered
	r.Sys.Root.Send(r.Child, &Desire{Pool: nic, Socket: nicSock})
	select {
	case <-connecting:
	case <-ctxFor(t).Done():
		t.Fatalf("the kubelet never connects to %s", nic)
	}
	// What the disk took of a kubelet restart: the stop, and the
	// registration after the restart it refused.
	if _, err := r.cfg.Recorder.Record(ctx,
		events.KubeletStopped{Socket: r.cfg.KubeletSocket, Reason: "test"},
		events.PluginRegistered{Pool: gpu, Socket: gpuSock, Mode: "legacy"}); err != nil {
		t.Fatal(err)
	}

	r.Sys.Root.Send(r.Child, &Unrecorded{Event: string(events.TypeKubeletRestarted)})
	st, ok := r.awaitFold(t, func(st events.State) bool { return !st.Kubelet.Down })
	if !ok {
		t.Fatalf("the ledger still has the kubelet down: %+v", r.recorded(t))
	}
	if !st.Pools[gpu].Registration.Registered {
		t.Errorf("the ledger has %s unregistered after the restart recorded late: %+v", gpu, r.recorded(t))
	}
	if st.Pools[nic].Registration.Registered {
		t.Errorf("the ledger has %s registered while its Register is under way: %+v", nic, r.recorded(t))
	}
}

// A disk with room for small records and none for a snapshot, on a
// quiet node: no other record lands to say the ledger records again
// (the daemon's snapshot retry is refused, being the largest write).
// The registrar's records are small: it tries them at the end of each
// wait, and lands them, rather than wait on another's that never comes.
func TestTheRegistrarRecordsLateOnAQuietNodeWithRoomForSmallRecords(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	sock := r.servedAndRecorded(t)
	ctx := context.Background()
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))
	r.awaitRecorded(t, 3) // its PluginRegistered
	// The ledger has the kubelet stopped, the registrar has it up.
	if _, err := r.cfg.Recorder.Record(ctx, events.KubeletStopped{Socket: r.cfg.KubeletSocket, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	storetest.RefuseWrites(t, r.log)
	if _, err := r.cfg.Recorder.Record(ctx, events.DeviceHealthChanged{Address: "0000:3b:02.1", Healthy: true, Reason: "test"}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a record on a full disk: %v", err)
	}
	// Some room: small records fit, snapshots (and retention) do not.
	storetest.RefuseSomeWrites(t, r.log, func(appended []events.Envelope) bool { return appended == nil })

	r.Sys.Root.Send(r.Child, &Unrecorded{Event: string(events.TypeKubeletRestarted)})
	if _, ok := r.awaitFold(t, func(st events.State) bool { return !st.Kubelet.Down && st.Pools[gpu].Registration.Registered }); !ok {
		t.Fatalf("the ledger still has the kubelet down or %s unregistered: %+v", gpu, r.recorded(t))
	}
}

// servedAndRecorded serves gpu in legacy mode and records the config and
// its PluginServing, as a pool does; it returns the pool's socket.
func (r *registrarUnderTest) servedAndRecorded(t *testing.T) string {
	t.Helper()
	_, sock := r.serve(t, gpu)
	if _, err := r.cfg.Recorder.Record(context.Background(),
		events.ConfigApplied{Path: "config.json", SHA256: "1", Pools: []events.PoolSpec{{Resource: gpu, DeviceType: "accelerator"}}},
		events.PluginServing{Pool: gpu, Socket: sock, Mode: "legacy"}); err != nil {
		t.Fatal(err)
	}
	return sock
}

// awaitFold waits, up to 5 s, for the fold of the ledger to satisfy ok,
// and returns it, with whether it came to.
func (r *registrarUnderTest) awaitFold(t *testing.T, ok func(events.State) bool) (events.State, bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := r.cfg.Recorder.Replay()
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) || time.Now().After(deadline) {
			return st, ok(st)
		}
		time.Sleep(10 * time.Millisecond) // polling the ledger
	}
}

// The kubelet goes while the disk is full: the registrar has it down,
// the ledger up with the pool registered. Once the ledger records again
// the registrar records the stop, and no registration after it: the
// ledger must not have the pool registered with a kubelet that is gone.
func TestTheRegistrarRecordsLateAStopAndNoRegistrationAfterIt(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	sock := r.servedAndRecorded(t)
	send := func(m any) { r.Sys.Root.Send(r.Child, m) }
	send(&Desire{Pool: gpu, Socket: sock})
	send(&Listing{Pool: gpu, Socket: sock, Open: true})
	r.await(t, "registered the pool", registered(gpu))
	r.awaitRecorded(t, 3) // its PluginRegistered
	room := storetest.RefuseWrites(t, r.log)
	r.kubeletGone(t, sock)
	r.await(t, "the kubelet down", func(st *Status) bool { return !st.Pools[gpu].Registered })
	room()
	st, ok := r.awaitFold(t, func(st events.State) bool { return st.Kubelet.Down })
	if !ok {
		t.Fatalf("the ledger still has the kubelet up: %+v", r.recorded(t))
	}
	// The stop and what the registrar records with it land together.
	if st.Pools[gpu].Registration.Registered {
		t.Errorf("the ledger has %s registered with the kubelet gone: %+v", gpu, r.recorded(t))
	}
}
