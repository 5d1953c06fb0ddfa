package pool

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

func testPool() *allocator {
	res := &config.Resource{Prefix: "example.com", Name: "vf"}
	members := map[string]*allocation.Member{}
	for _, a := range []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"} {
		members[a] = &allocation.Member{Device: sysfs.Device{Address: a}, Healthy: true}
	}
	return &allocator{name: res.FullName(), cfg: &Config{Resource: res}, members: members}
}

func request(containers ...[]string) *pluginapi.AllocateRequest {
	req := &pluginapi.AllocateRequest{}
	for _, ids := range containers {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
	}
	return req
}

// A grant holds the devices of each container, with their facts; a request
// that names no container, a container with no device, a device that is
// not a member, or a device twice (in one container or two) is refused as
// invalid, naming what is wrong.
func TestGrantChecksTheRequest(t *testing.T) {
	p := testPool()
	devices, devs, err := p.grant(request([]string{"0000:3b:02.1"}, []string{"0000:3b:02.0", "0000:3b:02.2"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"0000:3b:02.1"}, {"0000:3b:02.0", "0000:3b:02.2"}}; !slices.EqualFunc(devices, want, slices.Equal) {
		t.Errorf("granted %v, want %v", devices, want)
	}
	if len(devs) != 2 || devs[1][1].Address != "0000:3b:02.2" {
		t.Errorf("granted device facts %+v", devs)
	}

	for _, tc := range []struct {
		name string
		req  *pluginapi.AllocateRequest
		want string
	}{
		{"no container", request(), "Allocate for example.com/vf has no container requests"},
		{"an empty container", request([]string{"0000:3b:02.0"}, nil), "container request 1 names no device"},
		{"a stranger", request([]string{"0000:3b:02.0", "0000:af:00.1"}), `device "0000:af:00.1" is not in the pool`},
		{"a device twice in a container", request([]string{"0000:3b:02.0", "0000:3b:02.0"}), `container request 0 asks for device "0000:3b:02.0", which the request names already`},
		{"a device in two containers", request([]string{"0000:3b:02.1"}, []string{"0000:3b:02.0", "0000:3b:02.1"}), `container request 1 asks for device "0000:3b:02.1", which the request names already`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := p.grant(tc.req)
			if !errors.Is(err, grpcapi.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("grant: %v, want an invalid request saying %q", err, tc.want)
			}
		})
	}
}

// allocateVia sends an Allocate of ids to the pool as its backend does and
// returns the channel its answer comes on.
func allocateVia(f *actortest.Family, ctx context.Context, ids ...string) chan allocateReply {
	reply := make(chan allocateReply, 1)
	f.Sys.Root.Send(f.Child, &allocateReq{ctx: ctx, req: request(ids), reply: reply})
	return reply
}

func awaitReply(t *testing.T, reply chan allocateReply) allocateReply {
	t.Helper()
	select {
	case r := <-reply:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the pool never answered the Allocate")
		return allocateReply{}
	}
}

// An Allocate pending when the pool crashes is answered by the next
// incarnation (same mailbox), and so is one that comes during the restart.
func TestAllocatePendingOverARestartIsAnswered(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	during := allocateVia(f, context.Background(), y)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("the Allocate pending over the restart: %v", err)
	}
	if r := awaitReply(t, during); r.err != nil || len(r.resp.ContainerResponses) != 1 {
		t.Fatalf("the Allocate sent during the restart: %+v", r)
	}
	var recorded []string
	for len(recorded) < 2 {
		switch m := actortest.Next[any](t, f).(type) {
		case *AllocationRecorded:
			recorded = append(recorded, m.Event.Payload.(events.DevicesAllocated).DeviceIDs...)
		case *Serving, *NeedMembers:
		default:
			t.Fatalf("parent heard %#v", m)
		}
	}
	if slices.Sort(recorded); !slices.Equal(recorded, []string{x, y}) {
		t.Errorf("AllocationRecorded for %v, want %s and %s", recorded, x, y)
	}
	// The next incarnation replayed the first allocation from the ledger
	// before its answer came: held once, no conflict with itself.
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if held := res.(*Status).Held; len(held[x]) != 1 || len(held[y]) != 1 {
		t.Errorf("held %v, want each device by one allocation", held)
	}
}

// A pool stopped for good (a reload removed it, the daemon stops) answers
// the Allocates pending first, and its parent hears of each allocation: an
// allocation the ledger holds is not reported as failed (unless the ledger
// takes longer than a call may: see the next test).
func TestStoppingPoolAnswersItsPendingAllocates(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	stopped := make(chan struct{})
	go func() {
		f.Sys.Root.PoisonFuture(f.Child).Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("the pool stopped with an Allocate pending")
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("the Allocate pending as the pool stopped: %v", err)
	}
	<-stopped
	if m := actortest.Next[*AllocationRecorded](t, f); !slices.Equal(m.Event.Payload.(events.DevicesAllocated).DeviceIDs, []string{x}) {
		t.Errorf("AllocationRecorded %+v, want %s", *m, x)
	}
}

// An Allocate the pool takes after its deadline is refused and writes
// nothing.
func TestAllocateAfterItsDeadlineIsRefused(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := awaitReply(t, allocateVia(f, ctx, y))
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("an Allocate past its deadline: %+v, want it refused", r)
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	actortest.Next[*AllocationRecorded](t, f)
	f.Silent(t)
}

// A pool stopped for good while the ledger does not answer waits for it no
// longer than a call may: the kubelet hears Unavailable, and should the
// allocation land after all, the parent still hears of it, and of its
// release: the kubelet was told the call failed.
func TestStoppingPoolDoesNotWaitForeverForTheLedger(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.CallTimeout = 100 * time.Millisecond })
	stopped := make(chan struct{})
	go func() {
		f.Sys.Root.PoisonFuture(f.Child).Wait()
		close(stopped)
	}()
	select {
	case err := <-allocated:
		if !strings.Contains(err.Error(), "stopped before the ledger answered") {
			t.Errorf("the Allocate pending as the pool stopped: %v, want Unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Allocate was never answered")
	}
	<-stopped
	g.release()
	m := actortest.Next[*AllocationRecorded](t, f)
	if !slices.Equal(m.Event.Payload.(events.DevicesAllocated).DeviceIDs, []string{x}) {
		t.Errorf("AllocationRecorded %+v, want %s", *m, x)
	}
	if r, ok := actortest.Next[*AllocationAbandoned](t, f).Event.Payload.(events.DevicesReleased); !ok || r.AllocationSeq != m.Event.Seq {
		t.Errorf("the parent heard %+v, want the release of #%d", r, m.Event.Seq)
	}
}

// A pool restarted after a crash answers with the resource of the last
// reload (SetResource), not with the one it was spawned with.
func TestRestartedPoolAnswersWithTheReloadedResource(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.CDISpecDir = t.TempDir() })
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	cdi := &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI,
		CDI: config.CDI{Enabled: true, Kind: "example.com/vf"}}
	f.Sys.Root.Send(f.Child, &SetResource{Resource: cdi})
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	r := awaitReply(t, allocateVia(f, context.Background(), y))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if names := r.resp.ContainerResponses[0].CdiDevices; len(names) != 1 || names[0].Name != "example.com/vf="+y {
		t.Errorf("CDI devices %v after the restart, want the reloaded resource's %s=%s", names, "example.com/vf", y)
	}
}

// A CDI pool whose spec cannot be written again (here a reload makes it
// an auxNetDevice pool, which has none) removes the one it wrote: that
// one names devices that may have left for another pool, and a runtime
// resolves a name two specs define in neither.
func TestAPoolWhoseSpecCannotBeWrittenRemovesItsOldOne(t *testing.T) {
	dir := t.TempDir()
	cdi := func(typ config.DeviceType) *config.Resource {
		return &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: typ, CDI: config.CDI{Enabled: true, Kind: "example.com/vf"}}
	}
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.Resource, c.CDISpecDir = cdi(config.GenericPCI), dir })
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	path := allocation.CDISpecPath(dir, cdi(config.GenericPCI))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no spec: %v", err)
	}
	f.Sys.Root.Send(f.Child, &SetResource{Resource: cdi(config.AuxNetDevice)})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the spec the pool can no longer write is still there: %v", err)
		}
	}
}

// With no CDI spec dir (--cdi-spec-dir -), a CDI pool's Allocate is
// refused: the names it would answer with resolve nowhere.
func TestACDIPoolWithNoSpecDirRefusesAllocate(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &SetResource{Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI,
		CDI: config.CDI{Enabled: true, Kind: "example.com/vf"}}})
	r := awaitReply(t, allocateVia(f, context.Background(), y))
	if !errors.Is(r.err, grpcapi.ErrUnavailable) || !strings.Contains(r.err.Error(), "--cdi-spec-dir") {
		t.Errorf("Allocate: %v, want Unavailable naming --cdi-spec-dir", r.err)
	}
}

// servingPool opens a ledger in dir and spawns a genericPCI pool of
// members on it; it returns once the pool serves, with its socket.
func servingPool(t *testing.T, dir string, members ...allocation.Member) (f *actortest.Family, l *store.Log, socket string) {
	t.Helper()
	return servingPoolIn(t, dir, grpcapi.ModeLegacy, zerolog.Nop(), members...)
}

// servingPoolIn is servingPool registering in mode, logging to log.
func servingPoolIn(t *testing.T, dir string, mode grpcapi.RegistrationMode, log zerolog.Logger, members ...allocation.Member) (f *actortest.Family, l *store.Log, socket string) {
	t.Helper()
	l, err := store.Open(filepath.Join(dir, "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	f = actortest.Spawn(t, Props(Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI},
		Members:  members, Recorder: ledger.NewRecorder(l, "boot-1", nil), Replayed: &events.State{},
		SocketDir: kubelettest.ShortTempDir(t), Mode: mode, Log: log,
	}))
	return f, l, actortest.Next[*Serving](t, f).Socket
}

// An Allocate records what the pool knows of its devices in the one
// transaction that acknowledges it: the allocation of the pool that held a
// device (superseded: the kubelet hands out only free devices), another
// pool's allocation holding one (a conflict) and a device listed unhealthy.
// Nothing is appended after the answer.
func TestAllocateIsOneCommit(t *testing.T) {
	elsewhere := member(y)
	elsewhere.Healthy = false
	elsewhere.HeldElsewhere = []allocation.Hold{{Pool: "example.com/other", Seq: 7}, {Pool: "example.com/leaving"}}
	f, l, _ := servingPool(t, t.TempDir(), member(x), elsewhere)

	// settle returns once the pool has recorded all it will of what it
	// was told: a round in which it handled its mailbox and the ledger
	// committed what was queued added no event. (Not a quiet spell: on a
	// slow disk one commit outlasts any.)
	settle := func() {
		t.Helper()
		for {
			seq := l.LastSeq()
			f.Drain(t)
			if err := l.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if l.LastSeq() == seq {
				return
			}
		}
	}
	allocate := func(ids ...string) events.Envelope {
		t.Helper()
		f.Silent(t)
		settle() // what the pool records as it starts lands first
		before := l.Commits()
		if r := awaitReply(t, allocateVia(f, context.Background(), ids...)); r.err != nil {
			t.Fatal(r.err)
		}
		if m := actortest.Next[*AllocationRecorded](t, f); !slices.Equal(m.Event.Payload.(events.DevicesAllocated).DeviceIDs, ids) {
			t.Fatalf("parent heard of %v, want %v", m.Event.Payload.(events.DevicesAllocated).DeviceIDs, ids)
		}
		f.NothingFor(t, 100*time.Millisecond)
		settle()
		if n := l.Commits() - before; n != 1 {
			t.Errorf("Allocate of %v took %d commits, want 1", ids, n)
		}
		last := l.LastSeq()
		var e events.Envelope
		if err := l.Read(last, func(got events.Envelope) error { e = got; return nil }); err != nil {
			t.Fatal(err)
		}
		return e
	}
	first := allocate(x)
	if p := first.Payload.(events.DevicesAllocated); p.Supersedes != nil || p.HeldElsewhere != nil || p.Unhealthy != nil {
		t.Errorf("first allocation: %+v", p)
	}
	second := allocate(x, y)
	p, ok := second.Payload.(events.DevicesAllocated)
	if !ok || !slices.Equal(p.Supersedes, []uint64{first.Seq}) || !slices.Equal(p.HeldElsewhere, []uint64{7}) || !slices.Equal(p.Unhealthy, []string{y}) {
		t.Errorf("second allocation: %+v, want it to supersede #%d, held elsewhere by #7, %s unhealthy", second.Payload, first.Seq, y)
	}
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if held := res.(*Status).Held; !slices.Equal(held[x], []uint64{second.Seq}) {
		t.Errorf("%s held by %v, want only #%d", x, held[x], second.Seq)
	}
}

// A device still arriving from a pool that may give it out is listed
// unhealthy, and an Allocate of it (the kubelet had not caught up) records
// it so: no allocation holds it elsewhere yet, so it is no conflict.
func TestAnArrivingDeviceIsRecordedAsListedUnhealthy(t *testing.T) {
	arriving := member(y)
	arriving.HeldElsewhere = []allocation.Hold{{Pool: "example.com/leaving"}}
	if d := allocation.ListDevice(&config.Resource{}, arriving); d.Health != pluginapi.Unhealthy {
		t.Fatalf("an arriving device listed %s", d.Health)
	}
	f, _, _ := servingPool(t, t.TempDir(), member(x), arriving)
	if r := awaitReply(t, allocateVia(f, context.Background(), x, y)); r.err != nil {
		t.Fatal(r.err)
	}
	p := actortest.Next[*AllocationRecorded](t, f).Event.Payload.(events.DevicesAllocated)
	if !slices.Equal(p.Unhealthy, []string{y}) || p.HeldElsewhere != nil {
		t.Errorf("Allocate of %s and arriving %s recorded unhealthy %v, held elsewhere %v; want %s unhealthy alone", x, y, p.Unhealthy, p.HeldElsewhere, y)
	}
}

// An Allocate the ledger fails to record (a full disk) is answered
// Unavailable, naming why: the kubelet must not start a container on an
// allocation no one can replay. The parent hears nothing of it and the
// pool does not hold its devices, so the next Allocate of them, once the
// disk has room, supersedes only the allocation that was recorded.
func TestAnAllocateTheLedgerFailsToRecordIsRefused(t *testing.T) {
	disk := storetest.NewFullDisk(t, 1<<20)
	f, _, _ := servingPool(t, disk.Dir, member(x))
	recorded := func() uint64 {
		t.Helper()
		m := actortest.Next[*AllocationRecorded](t, f)
		return m.Event.Seq
	}
	if r := awaitReply(t, allocateVia(f, context.Background(), x)); r.err != nil {
		t.Fatal(r.err)
	}
	held := recorded()
	// bbolt writes into pages the file has until it needs more.
	disk.Fill(t)
	var refused error
	for i := 0; i < 2000 && refused == nil; i++ {
		if refused = awaitReply(t, allocateVia(f, context.Background(), x)).err; refused == nil {
			held = recorded()
		}
	}
	if !errors.Is(refused, grpcapi.ErrUnavailable) || !strings.Contains(refused.Error(), "the ledger could not record the allocation") {
		t.Fatalf("Allocate with the disk full: %v, want Unavailable saying the ledger could not record it", refused)
	}
	f.NothingFor(t, 100*time.Millisecond)

	disk.Free(t)
	if r := awaitReply(t, allocateVia(f, context.Background(), x)); r.err != nil {
		t.Fatalf("Allocate once the disk has room: %v", r.err)
	}
	m := actortest.Next[*AllocationRecorded](t, f)
	if p := m.Event.Payload.(events.DevicesAllocated); !slices.Equal(p.Supersedes, []uint64{held}) {
		t.Errorf("the Allocate after the refused one supersedes %v, want only #%d, the last recorded", p.Supersedes, held)
	}
}

// An Allocate of a device another Allocate has in flight is refused: its
// event could not name the holder it supersedes. Other devices are served.
func TestAllocateOfADeviceInFlightIsRefused(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	r := awaitReply(t, allocateVia(f, context.Background(), x))
	if !errors.Is(r.err, grpcapi.ErrUnavailable) || !strings.Contains(r.err.Error(), "device "+x+" is being allocated by another call") {
		t.Errorf("second Allocate of %s: %v", x, r.err)
	}
	other := allocateVia(f, context.Background(), y)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	if r := awaitReply(t, other); r.err != nil {
		t.Errorf("Allocate of %s: %v", y, r.err)
	}
}

// A pool that crashes with a membership change queued in the ledger, not
// yet written, does not record it again: the next incarnation replays
// once what the last one queued is written, and finds the change there.
func TestARestartDoesNotRecordAQueuedChangeTwice(t *testing.T) {
	const z = "0000:3b:02.2"
	f, g, allocated := poolWithAllocateHeld(t)
	// The writer is held on the Allocate's batch: the change, queued
	// before the crash (the mailbox keeps their order), waits behind it.
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x), member(y), member(z)}, Reason: "test", Gen: 1})
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	time.Sleep(100 * time.Millisecond) // the next incarnation starts meanwhile
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	var added int
	if err := g.log.Read(0, func(e events.Envelope) error {
		if c, ok := e.Payload.(events.PoolMembershipChanged); ok && slices.Contains(c.Added, z) {
			added++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if added != 1 {
		t.Errorf("%s recorded as added %d times, want once", z, added)
	}
}

// An Allocate names each allocation it supersedes once: an allocation of
// two devices given out again to two containers of one request, or to two
// Allocates under way at once, is ended by the first and not named again.
func TestAnAllocationIsSupersededOnce(t *testing.T) {
	const z, w = "0000:3b:02.2", "0000:3b:02.3"
	// The ledger has x and y held by #100, z and w by #101 (above the
	// sequences this test records).
	st := events.NewState()
	for seq, ids := range map[uint64][]string{100: {x, y}, 101: {z, w}} {
		st = events.Apply(st, events.Envelope{Seq: seq, Payload: events.DevicesAllocated{Pool: "example.com/vf", DeviceIDs: ids}})
	}
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) {
		c.Members = append(c.Members, member(z), member(w))
		c.Replayed = &st
	})
	// The Allocate of x, under way, ends #100: the one of y does not.
	concurrent := allocateVia(f, context.Background(), y)
	twoContainers := make(chan allocateReply, 1)
	f.Sys.Root.Send(f.Child, &allocateReq{ctx: context.Background(), req: request([]string{z}, []string{w}), reply: twoContainers})
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	for _, reply := range []chan allocateReply{concurrent, twoContainers} {
		if r := awaitReply(t, reply); r.err != nil {
			t.Fatal(r.err)
		}
	}
	supersedes := map[string][]uint64{}
	if err := g.log.Read(1, func(e events.Envelope) error {
		if a, ok := e.Payload.(events.DevicesAllocated); ok {
			supersedes[strings.Join(a.DeviceIDs, ",")] = a.Supersedes
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for ids, want := range map[string][]uint64{x: {100}, y: nil, z: {101}, w: nil} {
		if got, ok := supersedes[ids]; !ok || !slices.Equal(got, want) {
			t.Errorf("the allocation of %s supersedes %v (recorded: %v), want %v", ids, got, ok, want)
		}
	}
}

// An Allocate that fails for want of time names its devices, in the
// kubelet's error and in the pool's log line: the kubelet logs the error
// with the pod, and an operator matches the two by the devices.
func TestAFailedAllocateNamesItsDevices(t *testing.T) {
	logs := &actortest.Log{}
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) {
		c.CallTimeout = 100 * time.Millisecond
		c.Log = zerolog.New(logs)
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := awaitReply(t, allocateVia(f, ctx, y)); r.err == nil || !strings.Contains(r.err.Error(), y) {
		t.Errorf("an Allocate of %s past its deadline: %v, want an error naming %s", y, r.err, y)
	}

	stopped := make(chan struct{})
	go func() {
		f.Sys.Root.PoisonFuture(f.Child).Wait()
		close(stopped)
	}()
	select {
	case err := <-allocated:
		if err == nil || !strings.Contains(err.Error(), x) {
			t.Errorf("the Allocate of %s pending as the pool stopped: %v, want an error naming %s", x, err, x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Allocate was never answered")
	}
	<-stopped
	g.release()
	if n := logs.Count("error", x); n != 1 {
		t.Errorf("%d error lines name %s, want 1:\n%s", n, x, logs)
	}
}

// An Allocate whose answer the pool cannot build from its device's facts
// (a vfio-bound device with no IOMMU group has no /dev/vfio node) is
// refused Internal: the kubelet asked for a member, and the fault is the
// node's, not its request's. Nothing is recorded.
func TestAnAnswerTheNodeCannotGiveIsInternal(t *testing.T) {
	bound := member(x)
	bound.Device.Driver = "vfio-pci"
	_, l, socket := servingPool(t, t.TempDir(), bound)
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{x}}}}
	_, err := dial(t, socket).Allocate(context.Background(), req)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "no IOMMU group") || strings.Contains(err.Error(), "invalid request") {
		t.Errorf("Allocate of a vfio-bound device with no IOMMU group: %v, want Internal naming the missing group", err)
	}
	if err := l.Read(0, func(e events.Envelope) error {
		if e.Type == events.TypeDevicesAllocated {
			t.Errorf("#%d %s recorded for a refused Allocate", e.Seq, e.Type)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A device an Allocate has in flight is not counted free: the pool gives
// it out to no other call, so the metrics do not offer it either.
func TestADeviceInFlightIsNotFree(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if st := res.(*Status); st.Free != 1 || st.Allocated != 0 {
		t.Errorf("with an Allocate of %s in flight: %d free, %d allocated; want 1 free (%s), 0 allocated", x, st.Free, st.Allocated, y)
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
}

// A disk that stalls past a call's grace while an Allocate's events
// commit: the kubelet is told the Allocate failed, keeps the devices free
// and fails the pod, and the events land later. No container will claim
// that allocation, so the pool releases it, saying why, and its parent
// hears of the release (and tells the pool, which then holds nothing). So too for one answered just as
// the backend gave up, an answer the backend never read.
func TestAnAllocateTheKubeletGaveUpOnIsReleased(t *testing.T) {
	released := func(t *testing.T, f *actortest.Family, l *store.Log, seq uint64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := l.Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			if _, live := st.Allocations[seq]; !live {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("allocation #%d, whose Allocate the kubelet gave up on, stays live in the ledger", seq)
			}
		}
		m := actortest.Next[*AllocationAbandoned](t, f)
		if r, ok := m.Event.Payload.(events.DevicesReleased); !ok || r.AllocationSeq != seq || !strings.Contains(r.Reason, "gave up") || r.HeldFor <= 0 {
			t.Fatalf("the parent heard %+v, want the release of #%d, held for the time since it was stamped", m.Event.Payload, seq)
		}
		f.Sys.Root.Send(f.Child, &Reconciled{Event: m.Event}) // as the node does
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if held := res.(*Status).Held; len(held) != 0 {
			t.Errorf("the pool holds %v, want nothing", held)
		}
	}
	t.Run("pending", func(t *testing.T) {
		f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.CallTimeout = 100 * time.Millisecond })
		if err := <-allocated; status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("an Allocate held past its grace: %v, want DeadlineExceeded", err)
		}
		g.release()
		m := actortest.Next[*AllocationRecorded](t, f)
		released(t, f, g.log, m.Event.Seq)
	})
	t.Run("answered unread", func(t *testing.T) {
		f, l, _ := servingPool(t, t.TempDir(), member(x))
		reply := allocateVia(f, context.Background(), x)
		m := actortest.Next[*AllocationRecorded](t, f)
		f.Sys.Root.Send(f.Child, &abandoned{reply: reply})
		released(t, f, l, m.Event.Seq)
	})
}

// A pool stopped for good after an Allocate's deadline, while its events
// commit on a disk that stalls: the backend gives up as the pool waits
// for them (its abandoned message reaches a mailbox that is going), the
// kubelet hears DeadlineExceeded, and the allocation lands before the
// wait ends. The pool answers it, but no one reads that answer: it must
// be released all the same, or the ledger keeps it live though the
// kubelet keeps the devices free.
func TestAStoppingPoolReleasesWhatLandsAfterTheKubeletGaveUp(t *testing.T) {
	const timeout = 600 * time.Millisecond
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.CallTimeout = timeout })
	// The call's deadline is one timeout after it came and the backend
	// gives up one more after that: the pool stops between the two, and
	// waits one timeout for the Allocate, past the backend's giving up.
	time.Sleep(3 * timeout / 2)
	go f.Sys.Root.PoisonFuture(f.Child).Wait()
	select {
	case err := <-allocated:
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("the Allocate the backend gave up on as the pool stopped: %v, want DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Allocate was never answered")
	}
	g.release()
	m := actortest.Next[*AllocationRecorded](t, f)
	if r, ok := actortest.Next[*AllocationAbandoned](t, f).Event.Payload.(events.DevicesReleased); !ok || r.AllocationSeq != m.Event.Seq {
		t.Errorf("the parent heard %+v, want the release of #%d", r, m.Event.Seq)
	}
	st, err := g.log.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, live := st.Allocations[m.Event.Seq]; live {
		t.Errorf("allocation #%d, whose Allocate the kubelet was told failed, is live in the ledger", m.Event.Seq)
	}
}

// An Allocate is observed once, with what the kubelet got, when it got
// it: one that a stalled disk held past its grace counts as
// DeadlineExceeded while the disk still stalls (an alert on the
// histogram then fires during the stall, not after it), and not again
// when its allocation lands and is released.
func TestAnAllocateIsObservedAsTheKubeletGotIt(t *testing.T) {
	type observed struct {
		pool string
		err  error
	}
	seen := make(chan observed, 4)
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) {
		c.CallTimeout = 100 * time.Millisecond
		c.ObserveAllocate = func(pool string, _ time.Duration, err error) { seen <- observed{pool, err} }
	})
	if err := <-allocated; status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("an Allocate held past its grace: %v, want DeadlineExceeded", err)
	}
	select {
	case o := <-seen:
		if o.pool != "example.com/vf" || grpcapi.Code(o.err) != codes.DeadlineExceeded {
			t.Errorf("observed %s with %v (%s), want example.com/vf with DeadlineExceeded", o.pool, o.err, grpcapi.Code(o.err))
		}
	default:
		t.Fatal("the kubelet was told DeadlineExceeded, and the Allocate is not observed while its append is held")
	}
	g.release()
	m := actortest.Next[*AllocationRecorded](t, f)
	actortest.Next[*AllocationAbandoned](t, f)
	select {
	case o := <-seen:
		t.Errorf("observed again once the allocation #%d landed: %s with %v", m.Event.Seq, o.pool, o.err)
	default:
	}
}

// A pool that crashes while an Allocate's events commit on a disk that
// stalls: its server stops, waiting one call timeout for the call, then
// cuts it short, and the kubelet hears the call failed. The allocation
// lands in the next incarnation while the backend still waits out its
// grace; the answer it reads then goes nowhere, so the pool must release
// the allocation, as for one the backend gave up on.
func TestAnAllocateCutShortByACrashIsReleased(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.CallTimeout = timeout })
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	select {
	case err := <-allocated:
		if code := status.Code(err); code == codes.OK || code == codes.DeadlineExceeded {
			t.Fatalf("an Allocate whose server stopped under it: %v, want the call cut short", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Allocate was never answered")
	}
	// Within the backend's grace: the call came less than two timeouts
	// ago.
	g.release()
	// The next incarnation asks for its members and serves meanwhile.
	var recorded *AllocationRecorded
	var released *AllocationAbandoned
	for deadline := time.After(10 * time.Second); released == nil; {
		m, ok := f.Heard()
		switch m := m.(type) {
		case *AllocationRecorded:
			recorded = m
		case *AllocationAbandoned:
			released = m
		}
		if ok {
			continue
		}
		select {
		case <-deadline:
			t.Fatalf("the parent heard of no release of the allocation (recorded: %v)", recorded != nil)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if r, ok := released.Event.Payload.(events.DevicesReleased); recorded == nil || !ok || r.AllocationSeq != recorded.Event.Seq {
		t.Fatalf("the parent heard %+v, want the release of the allocation recorded (%+v)", released.Event.Payload, recorded)
	}
	st, err := g.log.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, live := st.Allocations[recorded.Event.Seq]; live {
		t.Errorf("allocation #%d, whose Allocate the kubelet was told failed, is live in the ledger", recorded.Event.Seq)
	}
}

// An Allocate granted whose backend gave up before reading the answer
// (its grace ended as the allocation landed), in a pool then stopped for
// good before it read the backend's abandoned message: the answer is
// still unread once the pool's servers are done, and the pool releases
// the allocation, as it does one its drain answered. So it does each of
// several: a later grant does not drop an earlier one still unread.
func TestAStoppedPoolReleasesAnAnswerNoBackendRead(t *testing.T) {
	f, l, _ := servingPool(t, t.TempDir(), member(x), member(y))
	granted := map[uint64]bool{}
	for _, id := range []string{x, y} {
		allocateVia(f, context.Background(), id) // its reply is never read
		granted[actortest.Next[*AllocationRecorded](t, f).Event.Seq] = true
	}
	if _, err := f.Sys.Root.PoisonFuture(f.Child).Result(); err != nil {
		t.Fatal(err)
	}
	for range len(granted) {
		r, ok := actortest.Next[*AllocationAbandoned](t, f).Event.Payload.(events.DevicesReleased)
		if !ok || !granted[r.AllocationSeq] {
			t.Fatalf("the parent heard %+v, want the release of one of %v", r, granted)
		}
		delete(granted, r.AllocationSeq)
	}
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	for seq := range st.Allocations {
		t.Errorf("allocation #%d, whose answer no one read, is live in the ledger", seq)
	}
}

// The backend hands back an answer it read after the kubelet's call
// ended, and the pool releases that allocation; the kubelet, told the
// call failed, may meanwhile have given the devices to another pod, whose
// Allocate superseded it. The release must then record nothing: the
// ledger would tell of an allocation ended twice.
func TestAReleaseOfAnAllocationEndedMeanwhileRecordsNothing(t *testing.T) {
	f, l, _ := servingPool(t, t.TempDir(), member(x))
	first := allocateVia(f, context.Background(), x)
	ended := actortest.Next[*AllocationRecorded](t, f).Event.Seq
	if r := awaitReply(t, allocateVia(f, context.Background(), x)); r.err != nil {
		t.Fatal(r.err)
	}
	actortest.Next[*AllocationRecorded](t, f)
	f.Sys.Root.Send(f.Child, &abandoned{reply: first})
	// Whatever the pool queued with the store is durable, or refused,
	// once an append queued after it is answered.
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), events.New(events.KubeletRestarted{Socket: "marker"}, time.Now(), "boot-1")); err != nil {
		t.Fatal(err)
	}
	if err := l.Read(ended+1, func(e events.Envelope) error {
		if r, ok := e.Payload.(events.DevicesReleased); ok && r.AllocationSeq == ended {
			t.Errorf("#%d releases allocation #%d, which an Allocate superseded before", e.Seq, ended)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A release of an Allocate the kubelet gave up on is guarded by its own
// allocation: a release of that one recorded first (the reconciler's)
// leaves nothing to record, and a release of another allocation recorded
// meanwhile stops nothing. Either way the ledger then tells of the
// allocation's end once.
func TestAReleaseIsGuardedByItsOwnAllocation(t *testing.T) {
	const pool = "example.com/vf"
	for _, tc := range []struct {
		name string
		// meanwhile is recorded before the pool hears its backend gave
		// up on the Allocate of x, allocation a; the pool serves x and y.
		meanwhile func(t *testing.T, f *actortest.Family, a uint64) events.Payload
	}{
		{"its own release", func(t *testing.T, f *actortest.Family, a uint64) events.Payload {
			return events.DevicesReleased{AllocationSeq: a, Pool: pool, DeviceIDs: []string{x}, Reason: "test"}
		}},
		{"another allocation's release", func(t *testing.T, f *actortest.Family, a uint64) events.Payload {
			if r := awaitReply(t, allocateVia(f, context.Background(), y)); r.err != nil {
				t.Fatal(r.err)
			}
			b := actortest.Next[*AllocationRecorded](t, f).Event.Seq
			return events.DevicesReleased{AllocationSeq: b, Pool: pool, DeviceIDs: []string{y}, Reason: "test"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, l, _ := servingPool(t, t.TempDir(), member(x), member(y))
			unread := allocateVia(f, context.Background(), x)
			a := actortest.Next[*AllocationRecorded](t, f).Event.Seq
			if _, err := l.Append(context.Background(), events.New(tc.meanwhile(t, f, a), time.Now(), "boot-1")); err != nil {
				t.Fatal(err)
			}
			f.Sys.Root.Send(f.Child, &abandoned{reply: unread})
			// Whatever the pool queued with the store is durable, or
			// refused, once an append queued after it is answered.
			if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(context.Background(), events.New(events.KubeletRestarted{Socket: "marker"}, time.Now(), "boot-1")); err != nil {
				t.Fatal(err)
			}
			var ends []uint64
			if err := l.Read(a+1, func(e events.Envelope) error {
				if r, ok := e.Payload.(events.DevicesReleased); ok && r.AllocationSeq == a {
					ends = append(ends, e.Seq)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(ends) != 1 {
				t.Errorf("allocation #%d is released by %v, want once", a, ends)
			}
		})
	}
}

// A Query counts the Allocates whose events the store has not answered
// yet, and none once it has.
func TestAQueryCountsTheAllocatesPending(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	pending := func() int {
		t.Helper()
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res.(*Status).Pending
	}
	if n := pending(); n != 1 {
		t.Errorf("with an Allocate held by the store: %d pending, want 1", n)
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 0 {
		t.Errorf("once the Allocate is answered: %d pending, want 0", n)
	}
}
