package pool

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
	"github.com/devledger/devledger/sysfs"
)

// gate holds every Record that appends a DevicesAllocated, once it is
// durable, until it is opened: an Allocate under way, for as long as the
// test needs.
type gate struct {
	once     sync.Once
	held     chan struct{} // closed when the first Allocate's Record is held
	open     chan struct{}
	openOnce sync.Once
	// conn is poolWithAllocateHeld's connection to the pool's socket,
	// and log the pool's ledger.
	conn *grpc.ClientConn
	log  *store.Log
}

// release lets the held Records go on.
func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

func (g *gate) observe(envs []events.Envelope) {
	for _, e := range envs {
		if e.Type == events.TypeDevicesAllocated {
			g.once.Do(func() { close(g.held) })
			<-g.open
			return
		}
	}
}

// A device leaves a pool (SetMembers without it) while an Allocate of it
// is under way there: the pool lets it go (LetGo) only once the ledger has
// the allocation and then the membership change, and the parent heard of
// the allocation (AllocationRecorded), so that the pool the device moved to
// lists it as held from the first moment it may give it out. Each LetGo
// names the newest SetMembers applied.

const x, y = "0000:3b:02.0", "0000:3b:02.1"

func member(addr string) allocation.Member {
	return allocation.Member{Device: sysfs.Device{Address: addr, NUMANode: -1}, Healthy: true}
}

// poolWithAllocateHeld starts a pool of x and y under a recording parent,
// and an Allocate of x over its socket whose append is held, durable but
// not returned, until g.release: an Allocate under way. allocated has its
// outcome.
func poolWithAllocateHeld(t *testing.T, tweaks ...func(*Config)) (f *actortest.Family, g *gate, allocated chan error) {
	t.Helper()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	g = &gate{held: make(chan struct{}), open: make(chan struct{}), log: l}
	t.Cleanup(g.release)
	rec := ledger.NewRecorder(l, "boot-1", nil)
	rec.Observe(g.observe)
	cfg := Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI},
		Members:  []allocation.Member{member(x), member(y)}, Recorder: rec, Replayed: &events.State{},
		SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, Log: zerolog.Nop(),
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	f = actortest.Spawn(t, Props(cfg))
	socket := actortest.Next[*Serving](t, f).Socket

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g.conn = conn
	allocated = make(chan error, 1)
	go func() {
		_, err := pluginapi.NewDevicePluginClient(conn).Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{x}}}})
		allocated <- err
	}()
	select {
	case <-g.held:
	case err := <-allocated:
		t.Fatalf("Allocate returned %v before its append was held", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the Allocate never reached the ledger")
	}
	return f, g, allocated
}

func TestLetGoWaitsForTheAllocatesUnderWay(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)

	// A member is never let go, even when the parent names it.
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x), member(y)}, Reason: "test", Gen: 6, Leaving: []string{x}})
	f.Silent(t)
	// x leaves while its Allocate is under way, then y: neither is let
	// go while the ledger has neither change (the Allocate holds the
	// store).
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(y)}, Reason: "test", Gen: 7, Leaving: []string{x}})
	f.Sys.Root.Send(f.Child, &SetMembers{Members: nil, Reason: "test", Gen: 8})
	f.Silent(t)

	// The Allocate ends: the parent hears of it, then x is let go, then y,
	// each as its change is applied.
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if m := actortest.Next[*AllocationRecorded](t, f); !slices.Equal(m.Event.Payload.(events.DevicesAllocated).DeviceIDs, []string{x}) {
		t.Errorf("AllocationRecorded %+v, want %s", *m, x)
	}
	if m := actortest.Next[*LetGo](t, f); !slices.Equal(m.Devices, []string{x}) || m.Gen != 7 || !m.From.Equal(f.Child) || m.Pool != "example.com/vf" {
		t.Errorf("LetGo %+v, want %s in gen 7 from the pool", *m, x)
	}
	if m := actortest.Next[*LetGo](t, f); !slices.Equal(m.Devices, []string{y}) || m.Gen != 8 {
		t.Errorf("LetGo %+v, want %s in gen 8", *m, y)
	}
	f.Silent(t)

	// The parent names a device it placed out of the pool that the pool
	// never let go of (a crash lost the members that brought it): let go
	// at once, with no change to record.
	const z = "0000:3b:02.7"
	f.Sys.Root.Send(f.Child, &SetMembers{Members: nil, Reason: "test", Gen: 9, Leaving: []string{z}})
	if m := actortest.Next[*LetGo](t, f); !slices.Equal(m.Devices, []string{z}) || m.Gen != 9 {
		t.Errorf("LetGo %+v, want %s in gen 9", *m, z)
	}
	f.Silent(t)
}

// Persist, then apply: members leave a pool only once the ledger says
// so, and the kubelet's calls and a Query that come meanwhile wait for
// it. An Allocate of a device whose removal is not durable yet is answered
// after it, and refused: the ledger never has an allocation of a device
// after the change that took it out of the pool.
func TestCallsWaitForTheMembersToBeDurable(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 2})

	client := pluginapi.NewDevicePluginClient(g.conn)
	late := make(chan error, 1)
	go func() {
		_, err := client.Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{y}}}})
		late <- err
	}()
	asked := f.Sys.Root.RequestFuture(f.Child, &Query{}, 30*time.Second)
	select {
	case err := <-late:
		t.Fatalf("an Allocate of a device leaving the pool was answered (%v) before the ledger had the change", err)
	case <-time.After(300 * time.Millisecond):
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate of x: %v", err)
	}
	if err := <-late; status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not in the pool") {
		t.Errorf("Allocate of %s after its removal: %v, want InvalidArgument, not in the pool", y, err)
	}
	res, err := asked.Result()
	if err != nil {
		t.Fatal(err)
	}
	if st := res.(*Status); st.Members != 1 || st.Health[y] {
		t.Errorf("status after the change: %+v, want x alone", st)
	}
}

// Calls held for a membership change run in the order they came, each
// against the newest members taken, even when a second change comes
// between them or the pool crashes (the next incarnation takes the held
// ones first, not behind its mailbox). The ledger records their
// allocations in that order.
func TestHeldCallsKeepTheirOrder(t *testing.T) {
	const z, w = "0000:3b:02.2", "0000:3b:02.3"
	for _, tc := range []struct {
		name    string
		between any
	}{
		{"a second membership change", &SetMembers{Members: []allocation.Member{member(x), member(y), member(z), member(w)}, Reason: "test", Gen: 3}},
		{"a crash", &Crash{Reason: "test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, g, allocated := poolWithAllocateHeld(t)
			f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x), member(y), member(z)}, Reason: "test", Gen: 2})
			first := allocateVia(f, context.Background(), y)
			f.Sys.Root.Send(f.Child, tc.between)
			second := allocateVia(f, context.Background(), z)
			g.release()
			if err := <-allocated; err != nil {
				t.Fatalf("Allocate of x: %v", err)
			}
			for _, r := range []allocateReply{awaitReply(t, first), awaitReply(t, second)} {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			if order, want := allocatedInOrder(t, g.log), []string{x, y, z}; !slices.Equal(order, want) {
				t.Errorf("allocations recorded in the order %v, want %v", order, want)
			}
		})
	}
}

// allocatedInOrder lists the devices of every DevicesAllocated in log, in
// the ledger's order.
func allocatedInOrder(t *testing.T, log *store.Log) []string {
	t.Helper()
	var order []string
	if err := log.Read(1, func(e events.Envelope) error {
		if a, ok := e.Payload.(events.DevicesAllocated); ok {
			order = append(order, a.DeviceIDs...)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return order
}

// A pool that crashes while a device it lost has an Allocate under way
// still lets it go once that Allocate ends: what is pending and what is
// not let go yet outlive the incarnation, and the next one lands it.
func TestLetGoOutlivesARestart(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(y)}, Reason: "test", Gen: 3})
	f.Silent(t)
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	recorded := false
	for {
		switch m := actortest.Next[any](t, f).(type) {
		case *Serving, *NeedMembers:
			continue // the restart
		case *AllocationRecorded:
			recorded = true
			continue
		case *LetGo:
			if !recorded {
				t.Errorf("LetGo before the parent heard of the allocation")
			}
			if !slices.Equal(m.Devices, []string{x}) || m.Gen != 3 {
				t.Errorf("LetGo %+v, want %s in gen 3", *m, x)
			}
		default:
			t.Fatalf("parent heard %#v, want the restart, then LetGo", m)
		}
		break
	}
}

// A device that leaves, comes back and leaves again while the changes are
// pending is let go once, as the last one is applied, in its generation:
// not as the first is, when a change still to come lists it again.
func TestLetGoWaitsForTheLastPlacement(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 2})
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x), member(y)}, Reason: "test", Gen: 3})
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(x)}, Reason: "test", Gen: 4})
	f.Silent(t)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	actortest.Next[*AllocationRecorded](t, f)
	if m := actortest.Next[*LetGo](t, f); !slices.Equal(m.Devices, []string{y}) || m.Gen != 4 {
		t.Errorf("LetGo %+v, want %s in gen 4", *m, y)
	}
	f.Silent(t)
}

// A device that leaves while an Allocate of it is under way is still held
// when the ledger records the change, right after the allocation: the
// change says so, as it does of a live allocation, so that the ledger
// never reads as if the device left free.
func TestAChangeNamesTheAllocateUnderWayOfADeviceLeaving(t *testing.T) {
	f, g, allocated := poolWithAllocateHeld(t)
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{member(y)}, Reason: "test", Gen: 7, Leaving: []string{x}})
	f.Silent(t)
	g.release()
	if err := <-allocated; err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	actortest.Next[*AllocationRecorded](t, f)
	actortest.Next[*LetGo](t, f)
	var reason string
	err := g.log.Read(1, func(e events.Envelope) error {
		if c, ok := e.Payload.(events.PoolMembershipChanged); ok && slices.Equal(c.Removed, []string{x}) {
			reason = c.Reason
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "still held: " + x + " by an Allocate under way"; !strings.HasSuffix(reason, want) {
		t.Errorf("the change that took %s out records %q, want it to end %q", x, reason, want)
	}
}
