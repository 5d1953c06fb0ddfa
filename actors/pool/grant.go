package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/sysfs"
)

// poolView is what an Allocate needs of its pool: the members (their
// device facts) and how the pool answers. The actor publishes a new one
// whenever they change and never modifies a published one, so the
// kubelet's calls read it without a round trip to the actor.
type poolView struct {
	name       string
	res        *config.Resource
	env        allocation.Env
	devinfoDir string // "" writes no device-info file
	rec        *ledger.Recorder
	members    map[string]allocation.Member
	// parent hears of every allocation recorded (AllocationRecorded).
	parent *actor.PID
}

// lifetime is what a pool keeps across its incarnations (protoactor
// restarts an actor in place: same PID, same mailbox, a new allocator).
// The kubelet's calls reach the pool through it, whichever incarnation
// created the server they came in on.
type lifetime struct {
	gone chan struct{} // closed when the pool stops for good
	once sync.Once
	view atomic.Pointer[poolView] // the current incarnation's

	mu   sync.Mutex
	gate *allocGate    // the current incarnation's; nil before the first
	next chan struct{} // closed when the next incarnation opens its gate

	// members and gen are the last SetMembers applied (set: one was) and
	// leaving the devices it removed that are not let go yet (the actor's
	// goroutine only): a restarted pool starts from them, not from the
	// members it was spawned with.
	members    []allocation.Member
	membersSet bool
	gen        uint64
	leaving    map[string]bool
	// incarnations counts the incarnations started (the actor's
	// goroutine only).
	incarnations uint64
	// draining counts what a pool stopped for good waits for: the
	// servers of stopped incarnations finishing their calls, conflicts
	// being recorded.
	draining sync.WaitGroup

	// flightMu orders an Allocate's check of its devices against the
	// view (grant) with the publishing of a new view: an Allocate either
	// saw the new members, or counted its devices in inflight before they
	// were published. inflight counts, per device, the Allocates that
	// took it and whose outcome the actor has not heard yet (land).
	flightMu sync.Mutex
	inflight map[string]int
}

func newLifetime() *lifetime {
	return &lifetime{gone: make(chan struct{}), next: make(chan struct{}), inflight: map[string]int{}, leaving: map[string]bool{}}
}

// publish makes v the view Allocates grant from.
func (l *lifetime) publish(v *poolView) {
	l.flightMu.Lock()
	l.view.Store(v)
	l.flightMu.Unlock()
}

// grant checks req against the current view and counts its devices in
// flight, in one step against publish.
func (l *lifetime) grant(req *pluginapi.AllocateRequest) (*grant, error) {
	l.flightMu.Lock()
	defer l.flightMu.Unlock()
	g, err := l.view.Load().grant(req)
	if err != nil {
		return nil, err
	}
	for _, ids := range g.devices {
		for _, id := range ids {
			l.inflight[id]++
		}
	}
	return g, nil
}

// land ends the flight of an Allocate's devices (the actor heard its
// outcome).
func (l *lifetime) land(devices [][]string) {
	l.flightMu.Lock()
	defer l.flightMu.Unlock()
	for _, ids := range devices {
		for _, id := range ids {
			if l.inflight[id]--; l.inflight[id] <= 0 {
				delete(l.inflight, id)
			}
		}
	}
}

// flying returns the devices in flight.
func (l *lifetime) flying() map[string]int {
	l.flightMu.Lock()
	defer l.flightMu.Unlock()
	return maps.Clone(l.inflight)
}

// stop says the pool has stopped for good.
func (l *lifetime) stop() { l.once.Do(func() { close(l.gone) }) }

// open makes g the gate Allocates enter by, once the incarnation that owns
// it has published its view.
func (l *lifetime) open(g *allocGate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gate = g
	close(l.next)
	l.next = make(chan struct{})
}

// admit lets an Allocate in by the current gate, which it returns; the
// Allocate then takes its devices from the current view (grant). A call
// that comes while the pool restarts waits for the next incarnation,
// within ctx; after a stop for good it fails.
func (l *lifetime) admit(ctx context.Context, pool string) (*allocGate, error) {
	for {
		l.mu.Lock()
		g, next := l.gate, l.next
		l.mu.Unlock()
		if g != nil && g.enter() {
			return g, nil
		}
		select {
		case <-next:
		case <-l.gone:
			return nil, fmt.Errorf("%w: pool %s has stopped", grpcapi.ErrUnavailable, pool)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (pool %s did not come back from a restart in time)", ctx.Err(), pool)
		}
	}
}

// allocGate lets a stopping pool wait for the Allocates under way, and
// turns away those that come after.
type allocGate struct {
	mu      sync.RWMutex
	stopped bool
}

// enter admits an Allocate, which calls leave when it is done; false once
// the pool has stopped.
func (g *allocGate) enter() bool {
	g.mu.RLock()
	if g.stopped {
		g.mu.RUnlock()
		return false
	}
	return true
}

func (g *allocGate) leave() { g.mu.RUnlock() }

// close waits for the Allocates under way and turns away the rest.
func (g *allocGate) close() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// grant checks req against the pool's members and returns what the
// Allocate will record and answer. Nothing is recorded yet.
func (v *poolView) grant(req *pluginapi.AllocateRequest) (*grant, error) {
	if len(req.ContainerRequests) == 0 {
		return nil, fmt.Errorf("%w: Allocate for %s has no container requests", grpcapi.ErrInvalidRequest, v.name)
	}
	g := &grant{
		view:    v,
		devices: make([][]string, 0, len(req.ContainerRequests)),
		devs:    make([][]sysfs.Device, 0, len(req.ContainerRequests)),
	}
	for i, cr := range req.ContainerRequests {
		if len(cr.DevicesIds) == 0 {
			return nil, fmt.Errorf("%w: Allocate for %s: container request %d names no device", grpcapi.ErrInvalidRequest, v.name, i)
		}
		ds := make([]sysfs.Device, 0, len(cr.DevicesIds))
		for _, id := range cr.DevicesIds {
			m, ok := v.members[id]
			if !ok {
				return nil, fmt.Errorf("%w: Allocate for %s: device %q is not in the pool", grpcapi.ErrInvalidRequest, v.name, id)
			}
			ds = append(ds, m.Device)
		}
		g.devices = append(g.devices, slices.Clone(cr.DevicesIds))
		g.devs = append(g.devs, ds)
	}
	return g, nil
}

// grant is an Allocate the pool accepted: its devices count as in flight
// (lifetime.grant) until the actor hears the outcome in persisted.
type grant struct {
	view    *poolView
	devices [][]string
	devs    [][]sysfs.Device
}

// run builds the answer, writes the device-info files, and appends the
// DevicesAllocated events within ctx: an append that has not begun when
// ctx ends writes nothing and fails, one under way is waited for. The
// answer is returned only once the ledger holds it. The actor hears the
// outcome (persisted) before the answer goes, so anything asked of the
// pool after the answer arrived sees the allocation.
func (g *grant) run(ctx context.Context, root *actor.RootContext, pool *actor.PID) (*pluginapi.AllocateResponse, error) {
	v := g.view
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(g.devs))}
	payloads := make([]events.Payload, 0, len(g.devs))
	for i, ds := range g.devs {
		answer, err := allocation.Respond(v.res, ds, v.env)
		if err != nil {
			root.Send(pool, &persisted{devices: g.devices, refused: true})
			return nil, fmt.Errorf("%w: Allocate for %s: %v", grpcapi.ErrInvalidRequest, v.name, err)
		}
		payloads = append(payloads, events.DevicesAllocated{Pool: v.name, DeviceIDs: g.devices[i], ContainerIndex: i, Response: answer})
		resp.ContainerResponses = append(resp.ContainerResponses, toPlugin(answer))
	}
	var err error
	if v.devinfoDir != "" {
		for _, d := range slices.Concat(g.devs...) {
			if err = allocation.WriteDeviceInfo(v.devinfoDir, v.name, d); err != nil {
				err = fmt.Errorf("write device-info for %s: %w", d.Address, err)
				break
			}
		}
	}
	var envs []events.Envelope
	if err == nil {
		envs, err = v.rec.Record(ctx, payloads...)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		err = fmt.Errorf("%s: the allocation was not recorded before the call's deadline: %w", v.name, err)
	default:
		err = fmt.Errorf("%w: %s: the ledger could not record the allocation: %v", grpcapi.ErrUnavailable, v.name, err)
	}
	// The parent hears of the allocation from here, not from the actor: a
	// pool being stopped (a config reload removed it) waits for this call,
	// but drops the message it would get after its stop.
	for _, e := range envs {
		if a, ok := e.Payload.(events.DevicesAllocated); ok && v.parent != nil {
			root.Send(v.parent, &AllocationRecorded{Pool: v.name, Seq: e.Seq, DeviceIDs: slices.Clone(a.DeviceIDs), At: e.Time})
		}
	}
	root.Send(pool, &persisted{devices: g.devices, envs: envs, err: err})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
