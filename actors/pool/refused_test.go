package pool

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/sysfs"
)

// A membership change the ledger refuses (a full disk, an I/O error) is
// not applied: the pool keeps its members, answers the calls that waited
// for the change, and does not crash. A moment later it places its
// members again, against what the ledger has then, and they are applied.
// Here the store's answer to the change is forged as a refusal while the
// real append waits behind an Allocate the test holds.
func TestARefusedMembershipChangeIsPlacedAgain(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	members := func() int {
		t.Helper()
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res.(*Status).Members
	}
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 2})
	// The ids of the start's membership change (1) and the Allocate (2)
	// come before this change's.
	asked := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second)
	f.Sys.Root.Send(f.Child, &placed{id: 3, err: errors.New("no space left on device")})
	res, err := asked.Result()
	if err != nil {
		t.Fatalf("a Query that waited for a refused change: %v", err)
	}
	if n := res.(*Status).Members; n != 2 {
		t.Fatalf("%d members after the ledger refused the change, want 2", n)
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for members() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the members were never placed again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	actortest.Next[*AllocationRecorded](t, f)
	if m := actortest.Next[*LetGo](t, f); len(m.Devices) != 1 || m.Devices[0] != y || m.Gen != 2 {
		t.Errorf("LetGo %+v, want %s in gen 2", *m, y)
	}
	f.Silent(t) // no restart: no NeedMembers, no second Serving
}

// A pool the config dropped after its members were placed records no
// change of them: the node recorded the pool's last membership with the
// config, and a change after it would bring the pool back in the ledger.
// Here the config is queued with the store before the pool's change.
func TestADroppedPoolRecordsNoMembershipChange(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	l := g.log
	placed := l.LastSeq()
	if err := l.AppendAsync(context.Background(), []events.Envelope{events.New(events.ConfigApplied{Path: "config.json", SHA256: "ab"}, time.Now(), "boot-1")},
		func([]events.Envelope, error) {}); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 2, Seq: placed})
	asked := f.Sys.Root.RequestFuture(f.Child, &Query{}, 10*time.Second)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	res, err := asked.Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := res.(*Status).Members; n != 2 {
		t.Errorf("%d members after a change the config made stale, want 2", n)
	}
	dropped := false
	err = l.Read(0, func(e events.Envelope) error {
		switch e.Payload.(type) {
		case events.ConfigApplied:
			dropped = true
		case events.PoolMembershipChanged:
			if dropped {
				t.Errorf("#%d %s after the config that dropped the pool", e.Seq, e.Type)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !dropped {
		t.Fatal("the config never landed")
	}
}

// A pool that starts (or starts again) from a ledger whose config lacks
// it was dropped by a reload: it records no membership, nor that it serves.
func TestAPoolTheConfigDroppedRecordsNothingAtStart(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	st := events.NewState()
	st.Config.SHA256 = "ab" // a config without the pool
	f := actortest.Spawn(t, Props(Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI},
		Members:  []allocation.Member{member(x)}, Recorder: ledger.NewRecorder(l, "boot-1", nil), Replayed: &st,
		SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, Log: zerolog.Nop(),
	}))
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := res.(*Status).Members; n != 0 {
		t.Errorf("%d members, want none", n)
	}
	// The writer commits in order: once a later append is durable, what
	// the pool queued at its start is decided.
	if _, err := l.Append(context.Background(), events.New(events.KubeletRestarted{Socket: "marker"}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}
	err = l.Read(0, func(e events.Envelope) error {
		switch e.Payload.(type) {
		case events.PoolMembershipChanged, events.PluginServing:
			t.Errorf("#%d %s recorded by a pool the config dropped", e.Seq, e.Type)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A pool asked for a new socket after the config dropped it records no
// PluginServing: the fold would list the dropped pool as serving again.
// Asked before the drop, it records one.
func TestADroppedPoolRecordsNoServing(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	actortest.Next[*AllocationRecorded](t, f)
	l := g.log
	reserve := func(seq uint64) {
		t.Helper()
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		f.Sys.Root.Send(f.Child, &Reserve{Socket: res.(*Status).Socket, Lost: true, Seq: seq})
		actortest.Next[*Serving](t, f)
		// The writer commits in order: once a later append is durable,
		// the pool's record is decided.
		if _, err := l.Append(context.Background(), events.New(events.KubeletRestarted{Socket: "marker"}, time.Now(), "boot-1")); err != nil {
			t.Fatal(err)
		}
	}
	serving := func() (before, after int) {
		t.Helper()
		dropped := false
		if err := l.Read(0, func(e events.Envelope) error {
			switch e.Payload.(type) {
			case events.ConfigApplied:
				dropped = true
			case events.PluginServing, events.SocketLost:
				if dropped {
					after++
				} else {
					before++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return before, after
	}
	start, _ := serving()
	reserve(l.LastSeq())
	if n, _ := serving(); n != start+2 {
		t.Fatalf("%d SocketLost and PluginServing records after a Reserve, want %d", n, start+2)
	}
	inForce := l.LastSeq()
	if _, err := l.Append(context.Background(), events.New(events.ConfigApplied{Path: "config.json", SHA256: "ab"}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}
	reserve(inForce)
	if _, n := serving(); n != 0 {
		t.Errorf("%d SocketLost and PluginServing records after the config that dropped the pool, want 0", n)
	}
}

// While the ledger keeps refusing a membership change, the pool keeps its
// members with the facts it has of them: each retry replays the ledger,
// which still lists the device leaving, and must not stand an address
// alone in for it (no driver, no IOMMU group, unhealthy), or an Allocate
// of it once the disk has room would answer without its vfio nodes.
func TestARefusedChangeKeepsTheFactsOfItsMembers(t *testing.T) {
	vfio := func(addr, group string) allocation.Member {
		return allocation.Member{Device: sysfs.Device{Address: addr, Driver: "vfio-pci", IOMMUGroup: group, NUMANode: 0}, Healthy: true}
	}
	disk, l := fullDiskLedger(t, store.Options{})
	logs := &actortest.Log{}
	f := actortest.Spawn(t, Props(Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI},
		Members:  []allocation.Member{vfio(x, "12"), vfio(y, "13")}, Recorder: ledger.NewRecorder(l, "boot-1", nil),
		Replayed: &events.State{}, SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy,
		// Retries at 1 s and 3 s, the next at 7 s: room for the Allocate
		// below to come before it, however slow the machine.
		RetryInitial: time.Second,
		Log:          zerolog.New(logs).Level(zerolog.DebugLevel),
	}))
	actortest.Next[*Serving](t, f)
	fillLedger(t, disk, l)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{vfio(x, "12")}, Reason: "test", Gen: 1})
	// Refused, then refused again at two retries (each replays the ledger).
	for deadline := time.Now().Add(10 * time.Second); logs.Count("", "cannot record a membership change") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the change was not refused three times:\n%s", logs)
		}
	}
	// The disk has room again; the kubelet, to which y is still a member
	// (to the ledger too), allocates it.
	disk.Free(t)
	r := awaitReply(t, allocateVia(f, context.Background(), y))
	if r.err != nil {
		t.Fatalf("Allocate of %s: %v", y, r.err)
	}
	var nodes []string
	for _, d := range r.resp.ContainerResponses[0].Devices {
		nodes = append(nodes, d.HostPath)
	}
	if !slices.Equal(nodes, []string{"/dev/vfio/vfio", "/dev/vfio/13"}) {
		t.Errorf("Allocate of vfio-bound %s answered device nodes %v, want /dev/vfio/vfio and /dev/vfio/13", y, nodes)
	}
}

// fullDiskLedger opens a ledger, with opts, on a 1 MiB tmpfs of its own
// that fillLedger can fill.
func fullDiskLedger(t *testing.T, opts store.Options) (*storetest.FullDisk, *store.Log) {
	t.Helper()
	disk := storetest.NewFullDisk(t, 1<<20)
	opts.LockTimeout = time.Second
	l, err := store.Open(filepath.Join(disk.Dir, "ledger.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return disk, l
}

// fillLedger fills the disk under l, and then the pages bbolt has free:
// the next append that needs a page is refused.
func fillLedger(t *testing.T, disk *storetest.FullDisk, l *store.Log) {
	t.Helper()
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	disk.Fill(t)
	for i := 0; ; i++ {
		e := events.New(events.DeviceHealthChanged{Address: "0000:00:01.0", Healthy: i%2 == 0, Reason: "filler"}, time.Now(), "boot-1")
		if _, err := l.Append(context.Background(), e); err != nil {
			break
		}
		if i > 5000 {
			t.Fatal("the ledger never filled")
		}
	}
}

// Each retry of a refused change gives the members the ledger lists the
// facts the change brought (see listed), whether or not the ledger takes
// it this time: the kubelet is shown them at once, and the device-info
// file of a netDevice member follows them, as it would had the change been
// recorded at the first try.
func TestARetryShowsTheNewFactsOfItsMembers(t *testing.T) {
	disk, l := fullDiskLedger(t, store.Options{})
	logs := &actortest.Log{}
	res := &config.Resource{Prefix: "example.com", Name: "net", DeviceType: config.NetDevice}
	devinfo := t.TempDir()
	f := actortest.Spawn(t, Props(Config{
		Resource: res, Members: []allocation.Member{member(x), member(y)}, Recorder: ledger.NewRecorder(l, "boot-1", nil),
		Replayed: &events.State{}, SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, DevinfoDir: devinfo,
		Log: zerolog.New(logs).Level(zerolog.DebugLevel),
	}))
	stream := listAndWatch(t, actortest.Next[*Serving](t, f).Socket)
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	fillLedger(t, disk, l)

	// y leaves; x is seen on NUMA node 1, as a VF of a PF.
	changed := member(x)
	changed.Device.NUMANode, changed.Device.PF = 1, "0000:3b:00.0"
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{changed}, Reason: "test", Gen: 1})
	for deadline := time.Now().Add(10 * time.Second); logs.Count("", "cannot record a membership change") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the change was not refused twice:\n%s", logs)
		}
	}
	// The first refusal lists y unhealthy, with the facts x had; a retry
	// lists x's new ones.
	lists := make(chan *pluginapi.ListAndWatchResponse, 8)
	go func() {
		defer close(lists)
		for {
			next, err := stream.Recv()
			if err != nil {
				return
			}
			lists <- next
		}
	}()
	timeout := time.After(10 * time.Second)
	for shown := false; !shown; {
		select {
		case <-timeout:
			t.Fatalf("no list after a retry gave %s new facts", x)
		case next, ok := <-lists:
			if !ok {
				t.Fatal("the stream ended")
			}
			numa := map[string][]int64{}
			for _, d := range next.Devices {
				for _, n := range d.GetTopology().GetNodes() {
					numa[d.ID] = append(numa[d.ID], n.ID)
				}
			}
			if shown = slices.Equal(numa[x], []int64{1}); shown && len(next.Devices) != 2 {
				t.Errorf("the list after a refused retry has %d devices; want %s and %s", len(next.Devices), x, y)
			}
		}
	}

	// The disk has room again: the change is recorded (the next retry
	// may be a minute away).
	disk.Free(t)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if res.(*Status).Members == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the change was never recorded")
		}
	}
	b, err := os.ReadFile(allocation.DeviceInfoPath(devinfo, res.FullName(), x))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"pf-pci-address":"0000:3b:00.0"`) {
		t.Errorf("%s's device-info file after its new facts were placed: %s", x, b)
	}
}

// A change the ledger refuses does not fail those queued behind it, each
// a diff on the one before: the ledger may take a later one once the
// disk has room, and then lists neither the members the pool had nor
// those it placed. The pool takes what the ledger lists and places its
// members again at once, not at a retry that may be a minute away; a
// change that comes next is a diff on what the ledger lists. Here x and
// y are members; the change that drops y is refused, the next, which
// adds z, recorded.
func TestAChangeRecordedAfterARefusedOneIsTakenAtOnce(t *testing.T) {
	const z = "0000:3b:02.2"
	// The test's append of three events, between the pool's two, commits
	// in a batch of its own.
	disk, l := fullDiskLedger(t, store.Options{MaxBatch: 3})
	rec := ledger.NewRecorder(l, "boot-1", nil)
	res := &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI}
	f := actortest.Spawn(t, Props(Config{
		Resource: res, Members: []allocation.Member{member(x), member(y)}, Recorder: rec,
		Replayed: &events.State{}, SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, Log: zerolog.Nop(),
		RetryInitial: time.Hour, RetryMax: time.Hour, // no retry while the test runs
	}))
	actortest.Next[*Serving](t, f)
	fillLedger(t, disk, l)

	// The store's writer waits in the answer to an append of the test's
	// while the pool queues both changes, with another append of the
	// test's between them, in whose answer the writer waits while the
	// test makes room on the disk.
	type gate struct {
		reached, open chan struct{}
		release       func()
	}
	newGate := func() *gate {
		g := &gate{reached: make(chan struct{}), open: make(chan struct{})}
		g.release = sync.OnceFunc(func() { close(g.open) })
		t.Cleanup(g.release)
		return g
	}
	await := func(g *gate) {
		t.Helper()
		select {
		case <-g.reached:
		case <-time.After(10 * time.Second):
			t.Fatal("the store's writer never answered the test's append")
		}
	}
	appendHeld := func(n int, g *gate) {
		t.Helper()
		envs := make([]events.Envelope, n)
		for i := range envs {
			envs[i] = events.New(events.KubeletRestarted{Socket: "marker"}, time.Now(), "boot-1")
		}
		if err := l.AppendAsync(context.Background(), envs, func([]events.Envelope, error) { close(g.reached); <-g.open }); err != nil {
			t.Fatal(err)
		}
	}
	held := newGate()
	appendHeld(1, held)
	await(held)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 1})
	f.Drain(t)
	full := newGate()
	appendHeld(3, full)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x), member(z)}, Reason: "test", Gen: 2})
	f.Drain(t)
	held.release()
	await(full)
	disk.Free(t)
	full.release()

	agree := func(want ...string) {
		t.Helper()
		// Sync: the store answered what the pool queued; a Query waits
		// for the members the pool places.
		if err := l.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		r, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		members := slices.Sorted(maps.Keys(r.(*Status).Health))
		st, err := rec.Replay()
		if err != nil {
			t.Fatal(err)
		}
		listed := st.Pools[res.FullName()].Members
		if !slices.Equal(members, listed) || !slices.Equal(members, want) {
			t.Errorf("the pool has members %v, the ledger lists %v; want %v", members, listed, want)
		}
	}
	agree(x, z)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 3})
	agree(x)
}

// While the ledger refuses a change that drops a member (a device gone
// from sysfs), the pool keeps it, as the ledger does, but lists it
// unhealthy: the node tells the verdicts of a device it placed in no
// pool to none, so the kubelet would otherwise give out a device that is
// gone. Nothing is recorded of it; an Allocate of it that the kubelet
// made before it heard says it gave out a device it listed unhealthy.
func TestARefusedChangeListsTheMembersItDropsUnhealthy(t *testing.T) {
	disk, l := fullDiskLedger(t, store.Options{})
	logs := &actortest.Log{}
	f := actortest.Spawn(t, Props(Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI},
		Members:  []allocation.Member{member(x), member(y)}, Recorder: ledger.NewRecorder(l, "boot-1", nil),
		Replayed: &events.State{}, SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy,
		RetryInitial: time.Hour, RetryMax: time.Hour, // no retry while the test runs
		Log: zerolog.New(logs).Level(zerolog.DebugLevel),
	}))
	socket := actortest.Next[*Serving](t, f).Socket
	stream := listAndWatch(t, socket)
	if first, err := stream.Recv(); err != nil {
		t.Fatal(err)
	} else if h := healths(first.Devices); h[y] != pluginapi.Healthy {
		t.Fatalf("first list %v, want %s healthy", h, y)
	}
	fillLedger(t, disk, l)

	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "scan: y removed", Gen: 1})
	for deadline := time.Now().Add(10 * time.Second); logs.Count("", "cannot record a membership change") < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the change was not refused:\n%s", logs)
		}
	}
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if st := res.(*Status); st.Members != 2 || st.Healthy != 1 {
		t.Errorf("after the refusal: %d members, %d healthy; want 2 members (the ledger's), 1 healthy", st.Members, st.Healthy)
	}
	want := map[string]string{x: pluginapi.Healthy, y: pluginapi.Unhealthy}
	fresh, err := listAndWatch(t, socket).Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h := healths(fresh.Devices); !maps.Equal(h, want) {
		t.Errorf("a stream opened after the refusal lists %v, want %v", h, want)
	}
	lists := make(chan *pluginapi.ListAndWatchResponse, 1)
	go func() {
		next, _ := stream.Recv()
		lists <- next
	}()
	select {
	case <-time.After(10 * time.Second):
		t.Errorf("the open stream was not told that %s is going", y)
	case next := <-lists:
		if h := healths(next.GetDevices()); !maps.Equal(h, want) {
			t.Errorf("the open stream lists %v after the refusal, want %v", h, want)
		}
	}

	disk.Free(t)
	if r := awaitReply(t, allocateVia(f, context.Background(), y)); r.err != nil {
		t.Fatalf("Allocate of %s: %v", y, r.err)
	}
	var unhealthy []string
	if err := l.Read(0, func(e events.Envelope) error {
		if a, ok := e.Payload.(events.DevicesAllocated); ok {
			unhealthy = a.Unhealthy
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unhealthy, []string{y}) {
		t.Errorf("the Allocate of %s recorded unhealthy %v, want %s", y, unhealthy, y)
	}
}

// A pool whose PluginServing a full disk refused, and that a reload
// dropped before the disk had room, records no PluginServing late: its
// parent stops it next, and the ledger would name a dropped pool
// serving after the config that dropped it.
func TestAPoolDroppedWhileItsServingWaitsRecordsNoneLate(t *testing.T) {
	f, l, _ := servingPool(t, t.TempDir(), member(x))
	ctx := context.Background()
	apply := func(pools ...events.PoolSpec) {
		t.Helper()
		if _, err := l.Append(ctx, events.New(events.ConfigApplied{Path: "config.json", SHA256: "ab", Pools: pools}, time.Now(), "boot-1")); err != nil {
			t.Fatal(err)
		}
	}
	apply(events.PoolSpec{Resource: "example.com/vf", DeviceType: string(config.GenericPCI)})

	room := storetest.RefuseWrites(t, l)
	f.Sys.Root.Send(f.Child, &Reserve{})
	second := actortest.Next[*Serving](t, f).Socket
	// The pool queued the new socket's record before it said so.
	if err := l.Sync(ctx); err != nil || l.AppendFault() == nil {
		t.Fatalf("the new socket's record not refused (%v)", err)
	}
	room()
	apply() // drops the pool
	dropped := l.LastSeq()

	// However soon the pool's wait ends, a serveAgain now finds the
	// ledger as it will be; once the Query is answered it has run.
	f.Sys.Root.Send(f.Child, &serveAgain{socket: second})
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Read(dropped+1, func(e events.Envelope) error {
		t.Errorf("#%d %s %+v recorded after the config that dropped the pool", e.Seq, e.Type, e.Payload)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A pool that a full disk kept from recording two sockets in a row
// records, once there is room, only the one it serves on: the wait
// for the first socket, ending late, records nothing. Else the ledger
// would name the pool serving on a socket it left, after the one it
// serves on if that wait ended last.
func TestAPoolRecordsLateOnlyTheSocketItServesOn(t *testing.T) {
	f, l, _ := servingPool(t, t.TempDir(), member(x))
	ctx := context.Background()
	if _, err := l.Append(ctx, events.New(events.ConfigApplied{Path: "config.json", SHA256: "ab",
		Pools: []events.PoolSpec{{Resource: "example.com/vf", DeviceType: string(config.GenericPCI)}}}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}
	room := storetest.RefuseWrites(t, l)
	f.Sys.Root.Send(f.Child, &Reserve{})
	left := actortest.Next[*Serving](t, f).Socket
	f.Sys.Root.Send(f.Child, &Reserve{})
	serves := actortest.Next[*Serving](t, f).Socket
	// The pool queued each socket's record before it said so.
	if err := l.Sync(ctx); err != nil || l.AppendFault() == nil {
		t.Fatalf("the new sockets' records not refused (%v)", err)
	}
	room()
	// Another's record, which says the ledger records again (in the
	// daemon, the snapshot check's retry does).
	if _, err := l.Append(ctx, events.New(events.DeviceHealthChanged{Address: "0000:af:00.0", Healthy: true, Reason: "test"}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}

	// However soon the first socket's wait ends, a serveAgain for it now
	// finds the ledger recording; once the Query is answered it has run.
	f.Sys.Root.Send(f.Child, &serveAgain{socket: left})
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for recorded := false; !recorded; {
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Read(0, func(e events.Envelope) error {
			if s, ok := e.Payload.(events.PluginServing); ok {
				switch s.Socket {
				case left:
					t.Fatalf("#%d PluginServing of %s, a socket the pool left before the ledger recorded it", e.Seq, left)
				case serves:
					recorded = true
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-waitCtx.Done():
			if !recorded {
				t.Fatalf("once there is room, no PluginServing of %s, the socket the pool serves on", serves)
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
}
