package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/sysfs"
)

// An Allocate (allocateReq) is checked, its answer built and its
// DevicesAllocated queued with the store; the mailbox moves on. Once they
// are durable (landed), the pool applies them, tells its parent and
// answers the kubelet. Until then its devices are in flight: a device the
// pool lost is not let go while an Allocate of it may still be recorded.

// lifetime is what a pool keeps across its incarnations (protoactor
// restarts an actor in place: same PID, same mailbox, a new allocator).
// All of it but gone and draining belongs to the actor's goroutine.
type lifetime struct {
	// gone closes when the pool stops for good: waiting calls get Unavailable.
	gone chan struct{}
	// placed is the last SetMembers taken (nil: none), which a restarted
	// pool places, and gen the newest applied; leaving are the devices
	// placed out of the pool and not let go yet.
	placed       *SetMembers
	gen          uint64
	leaving      map[string]bool
	refusals     int // membership changes refused in a row
	unserved     int // records of the socket served refused in a row
	incarnations uint64
	// pending are the Allocates the store has not answered yet, by id: the
	// answer may come to a later incarnation.
	pending map[uint64]*flight
	nextID  uint64
	// waiting are the calls held while placements apply, in the order
	// they came (see place): those a crash interrupts go first.
	waiting []any
	// draining counts the servers of stopped incarnations finishing their
	// calls, which a pool stopped for good waits for.
	draining sync.WaitGroup
	// unread are the replies of Allocates answered as granted that their
	// backends had not read when last looked at. A backend that gives up
	// tells the pool (abandoned), but a pool stopped for good never reads
	// that message: once its servers are done, it releases what is still
	// unread here.
	unread []chan allocateReply
}

func newLifetime() *lifetime {
	return &lifetime{gone: make(chan struct{}), leaving: map[string]bool{}, pending: map[uint64]*flight{}}
}

// flying says whether an Allocate of device id is pending.
func (l *lifetime) flying(id string) bool {
	for _, f := range l.pending {
		if slices.Contains(f.ids, id) {
			return true
		}
	}
	return false
}

// superseding are the allocations that the pending Allocates' events end.
func (l *lifetime) superseding() map[uint64]bool {
	out := map[uint64]bool{}
	for _, f := range l.pending {
		for _, seq := range f.supersedes {
			out[seq] = true
		}
	}
	return out
}

// flight is an Allocate whose events are queued with the store.
type flight struct {
	ids        []string // every container's devices
	supersedes []uint64 // the allocations its events end
	resp       *pluginapi.AllocateResponse
	reply      chan allocateReply
	// abandoned says the backend gave up waiting (see abandon): the
	// kubelet was told the call failed.
	abandoned bool
	// landed receives the store's answer, once; the actor reads it when
	// the landed message comes, or waits on it when it stops.
	landed chan landing
}

// landing is the store's answer to an Allocate's events.
type landing struct {
	envs []events.Envelope
	err  error
}

// allocate records a kubelet's Allocate (see the top of this file), or
// returns the error to refuse it with at once.
func (p *allocator) allocate(ctx actor.Context, m *allocateReq) error {
	if err := m.ctx.Err(); err != nil {
		return fmt.Errorf("%w (pool %s did not take the Allocate of %s in time)", err, p.name, requested(m.req))
	}
	devices, devs, err := p.grant(m.req)
	if err != nil {
		return err
	}
	// A device another Allocate has in flight is refused: its event
	// could name neither holder right (the other's seq is not known).
	ids := slices.Concat(devices...)
	for _, id := range ids {
		if p.life.flying(id) {
			return fmt.Errorf("%w: Allocate for %s: device %s is being allocated by another call", grpcapi.ErrUnavailable, p.name, id)
		}
	}
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(devs))}
	payloads := make([]events.Payload, 0, len(devs))
	// An allocation is superseded once: by the first container that
	// takes one of its devices, or by an Allocate under way (should that
	// one fail, it stays live until the reconciler finds it released).
	ended := p.life.superseding()
	var supersedes []uint64
	for i, ds := range devs {
		answer, err := allocation.Respond(p.cfg.Resource, ds, p.cfg.Env)
		if err != nil {
			// The request names members, each once (grant): what Respond
			// refuses is the node's or the pool's fault (Internal), not
			// the kubelet's.
			return fmt.Errorf("Allocate for %s: %w", p.name, err)
		}
		e := p.allocated(devices[i], i, answer, ended)
		payloads = append(payloads, e)
		supersedes = append(supersedes, e.Supersedes...)
		resp.ContainerResponses = append(resp.ContainerResponses, toPlugin(answer))
	}
	if p.cfg.DevinfoDir != "" && p.cfg.Resource.DeviceType == config.NetDevice {
		for _, d := range slices.Concat(devs...) {
			if err := allocation.WriteDeviceInfo(p.cfg.DevinfoDir, p.name, allocation.ForDeviceInfo(p.cfg.Resource, d)); err != nil {
				return fmt.Errorf("%w: %s: write device-info for %s: %v", grpcapi.ErrUnavailable, p.name, d.Address, err)
			}
		}
	}
	if err := p.ensureCDISpec(slices.Concat(devs...)); err != nil {
		return fmt.Errorf("%w: %s: the CDI spec its names resolve through: %v", grpcapi.ErrUnavailable, p.name, err)
	}
	l := p.life
	l.nextID++
	id := l.nextID
	f := &flight{ids: ids, supersedes: supersedes, resp: resp, reply: m.reply, landed: make(chan landing, 1)}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if err := p.cfg.Recorder.RecordAsync(m.ctx, nil, payloads, func(envs []events.Envelope, err error) {
		f.landed <- landing{envs: envs, err: err}
		root.Send(self, &landed{id: id})
	}); err != nil {
		return fmt.Errorf("%w: %s: the ledger could not record the allocation: %v", grpcapi.ErrUnavailable, p.name, err)
	}
	l.pending[id] = f
	return nil
}

// allocated is the event of one container's devices, with what the pool
// knows of them now. It supersedes this pool's holds on them (the kubelet
// hands out only devices it holds free: those containers are gone) but
// those ended already, which it adds to; another pool's hold is a
// conflict the kubelet cannot see.
func (p *allocator) allocated(ids []string, index int, answer events.ContainerAllocation, ended map[uint64]bool) events.DevicesAllocated {
	e := events.DevicesAllocated{Pool: p.name, DeviceIDs: ids, ContainerIndex: index, Response: answer}
	for _, id := range ids {
		for _, seq := range p.holds.Holders[id] {
			if !ended[seq] {
				ended[seq] = true
				e.Supersedes = append(e.Supersedes, seq)
			}
		}
		m := p.members[id]
		arriving, conflict := false, false
		for _, h := range m.HeldElsewhere {
			if h.Leaving() {
				arriving = true
			} else {
				conflict = true
				e.HeldElsewhere = append(e.HeldElsewhere, h.Seq)
			}
		}
		// Listed unhealthy by its verdict, as leaving (going), or as still
		// arriving from a pool that may give it out; another pool's
		// allocation is a conflict.
		if !m.Healthy || p.going[id] || (arriving && !conflict) {
			e.Unhealthy = append(e.Unhealthy, id)
		}
	}
	slices.Sort(e.Supersedes)
	e.HeldElsewhere = slices.Compact(slices.Sorted(slices.Values(e.HeldElsewhere)))
	return e
}

// grant checks req against the members and returns each container's
// device IDs and facts. A device named twice is refused: the kubelet never
// does it, and two holders of one device in one pod are no answer.
func (p *allocator) grant(req *pluginapi.AllocateRequest) ([][]string, [][]sysfs.Device, error) {
	if len(req.ContainerRequests) == 0 {
		return nil, nil, fmt.Errorf("%w: Allocate for %s has no container requests", grpcapi.ErrInvalidRequest, p.name)
	}
	devices := make([][]string, 0, len(req.ContainerRequests))
	devs := make([][]sysfs.Device, 0, len(req.ContainerRequests))
	named := map[string]bool{}
	for i, cr := range req.ContainerRequests {
		if len(cr.DevicesIds) == 0 {
			return nil, nil, fmt.Errorf("%w: Allocate for %s: container request %d names no device", grpcapi.ErrInvalidRequest, p.name, i)
		}
		ds := make([]sysfs.Device, 0, len(cr.DevicesIds))
		for _, id := range cr.DevicesIds {
			m, ok := p.members[id]
			if !ok {
				return nil, nil, fmt.Errorf("%w: Allocate for %s: device %s is not in the pool", grpcapi.ErrInvalidRequest, p.name, grpcapi.QuoteID(id))
			}
			if named[id] {
				return nil, nil, fmt.Errorf("%w: Allocate for %s: container request %d asks for device %q, which the request names already", grpcapi.ErrInvalidRequest, p.name, i, id)
			}
			named[id] = true
			ds = append(ds, m.Device)
		}
		devices = append(devices, slices.Clone(cr.DevicesIds))
		devs = append(devs, ds)
	}
	return devices, devs, nil
}

// land applies an Allocate's outcome: the parent hears of it (see
// AllocationRecorded), the pool holds its devices, and only then is the
// kubelet answered. A device the pool lost meanwhile is let go now.
func (p *allocator) land(ctx actor.Context, id uint64, f *flight, l landing) {
	delete(p.life.pending, id)
	err := l.err
	switch {
	case err == nil:
		for _, m := range recorded(p.name, l.envs) {
			ctx.Send(ctx.Parent(), m)
		}
		// An incarnation whose start failed may land as it stops.
		if p.holds.Devices == nil {
			p.holds = events.NewHolds()
		}
		for _, e := range l.envs {
			p.holds.Apply(p.name, e)
		}
		p.marked = false
		// One the backend gave up on has no reader (the backend counted
		// it as the kubelet's DeadlineExceeded): it is released below.
		if !f.abandoned {
			p.answer(f.reply, allocateReply{resp: f.resp, envs: l.envs})
			p.life.unread = append(slices.DeleteFunc(p.life.unread, func(r chan allocateReply) bool { return len(r) == 0 }), f.reply)
		}
		// Logging comes after the answer.
		for _, e := range l.envs {
			a := e.Payload.(events.DevicesAllocated)
			ev := p.cfg.Log.Info()
			if len(a.HeldElsewhere) > 0 || len(a.Unhealthy) > 0 {
				ev = p.cfg.Log.Warn().Uints64("held_elsewhere", a.HeldElsewhere).Strs("unhealthy", a.Unhealthy)
			}
			if len(a.Supersedes) > 0 {
				ev = ev.Uints64("supersedes", a.Supersedes)
			}
			ev.Str("pool", p.name).Strs("devices", a.DeviceIDs).Uint64("seq", e.Seq).Msg("devices allocated")
		}
		if f.abandoned {
			p.releaser(ctx)(l.envs)
		}
		// Marked now, with the kubelet answered, not when it asks next.
		if p.rank != nil {
			p.ranking()
		}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		err = fmt.Errorf("%s: the allocation of %s was not recorded before the call's deadline: %w", p.name, strings.Join(f.ids, ","), err)
	default:
		err = fmt.Errorf("%w: %s: the ledger could not record the allocation of %s: %v", grpcapi.ErrUnavailable, p.name, strings.Join(f.ids, ","), err)
	}
	if err != nil { // the pool's server logs the failed call, with err
		p.answer(f.reply, allocateReply{err: err})
	}
	p.letGo(ctx, f.ids)
}

// drainPending lands each pending Allocate as the pool stops for good, so
// the kubelet gets every answer and the parent hears of every allocation
// before the pool is gone. The call timeout bounds the whole wait (a hung
// disk): one still pending then is answered Unavailable, and should it
// land after all, the parent still hears of it and of its release. One
// that lands in time after its backend gave up is released once the
// pool's servers are done (Stopped), its answer unread.
func (p *allocator) drainPending(ctx actor.Context) {
	wait, cancel := context.WithTimeout(context.Background(), p.cfg.CallTimeout)
	defer cancel()
	// A backend that gives up meanwhile tells a mailbox that is going:
	// what is answered here, Stopped looks at again (see unread).
	for _, id := range slices.Sorted(maps.Keys(p.life.pending)) {
		f := p.life.pending[id]
		select {
		case l := <-f.landed:
			p.land(ctx, id, f, l)
			continue
		case <-wait.Done():
		}
		// Past the deadline: land only what has landed already.
		select {
		case l := <-f.landed:
			p.land(ctx, id, f, l)
			continue
		default:
		}
		delete(p.life.pending, id)
		p.cfg.Log.Error().Str("pool", p.name).Strs("devices", f.ids).Msg("the ledger did not answer an Allocate as the pool stopped")
		p.answer(f.reply, allocateReply{err: fmt.Errorf("%w: pool %s stopped before the ledger answered the Allocate of %s", grpcapi.ErrUnavailable, p.name, strings.Join(f.ids, ","))})
		// A goroutine, as the mailbox dies with the pool: it relays the
		// late answer to the parent and releases what it allocates (the
		// kubelet was told the call failed), touching no pool state.
		root, parent, name, release := ctx.ActorSystem().Root, ctx.Parent(), p.name, p.releaser(ctx)
		go func() {
			envs := (<-f.landed).envs
			for _, m := range recorded(name, envs) {
				root.Send(parent, m)
			}
			if len(envs) > 0 {
				release(envs)
			}
		}()
	}
}

// requested names the devices of req, for errors that would otherwise
// not say which Allocate failed: "0000:3b:02.0,0000:3b:02.1".
func requested(req *pluginapi.AllocateRequest) string {
	var ids []string
	for _, cr := range req.ContainerRequests {
		ids = append(ids, cr.DevicesIds...)
	}
	return grpcapi.IDList(ids)
}

// recorded is what the parent hears of an Allocate's events, each a
// DevicesAllocated.
func recorded(pool string, envs []events.Envelope) []*AllocationRecorded {
	out := make([]*AllocationRecorded, len(envs))
	for i, e := range envs {
		out[i] = &AllocationRecorded{Pool: pool, Event: e}
	}
	return out
}

// answer replies to a kubelet's Allocate (the backend observes how long
// it took, and what the kubelet got). The caller's goroutine, woken by the
// reply, waits for this one's processor: yielding it lets the kubelet
// have its answer before the pool logs and goes on (about 25 µs sooner
// through the kubelet's device manager).
func (p *allocator) answer(reply chan<- allocateReply, r allocateReply) {
	reply <- r
	runtime.Gosched()
}

// abandon notes that the backend gave up waiting for the Allocate answered
// on m.reply, as it does when the ledger takes longer than a call may (a
// disk that stalls): the kubelet was told the call failed, keeps the
// devices free and fails the pod, so no container will claim what the
// call's events allocate. One still pending is released once it lands;
// one answered that the backend did not read is released now; one not
// taken yet is refused when it is, its deadline past.
func (p *allocator) abandon(ctx actor.Context, m *abandoned) {
	for _, f := range p.life.pending {
		if f.reply == m.reply {
			f.abandoned = true
			return
		}
	}
	p.releaseUnread(ctx, m.reply)
}

// releaseUnread releases the allocation answered on reply if that answer
// is still there: the backend gave up on the call without reading it.
func (p *allocator) releaseUnread(ctx actor.Context, reply chan allocateReply) {
	select {
	case r := <-reply:
		if r.err == nil {
			p.releaser(ctx)(r.envs)
		}
	default:
	}
}

// releaser returns what records that the allocations of the envs it is
// given, durable after the kubelet was told their Allocate failed, hold
// nothing. The parent hears of each release as of the reconciler's, and
// tells the pool. It touches no pool state: a pool that stops may leave
// it to a goroutine. Each release is guarded: the kubelet, told the call
// failed, may have given the devices to another pod meanwhile, whose
// Allocate ended the allocation already (endedBy).
func (p *allocator) releaser(ctx actor.Context) func(envs []events.Envelope) {
	root, parent, name, rec, plog := ctx.ActorSystem().Root, ctx.Parent(), p.name, p.cfg.Recorder, p.cfg.Log
	return func(envs []events.Envelope) {
		seqs := make([]uint64, 0, len(envs))
		for _, e := range envs {
			seqs = append(seqs, e.Seq)
		}
		log := plog.With().Str("pool", name).Uints64("allocations", seqs).Logger()
		log.Warn().Msg("the kubelet gave up on an Allocate the ledger recorded late; releasing it")
		for _, e := range envs {
			a := e.Payload.(events.DevicesAllocated)
			release := events.DevicesReleased{AllocationSeq: e.Seq, Pool: name, DeviceIDs: slices.Clone(a.DeviceIDs),
				HeldFor: time.Since(e.Time), Reason: "the kubelet gave up on its Allocate before the ledger recorded it"}
			unrecorded := func(err error) {
				if errors.Is(err, errEnded) {
					log.Debug().Err(err).Msg("an Allocate the kubelet gave up on needs no release")
					return
				}
				log.Error().Err(err).Msg("cannot record the release of an Allocate the kubelet gave up on; it stays live until an Allocate of its devices supersedes it")
			}
			// Straight to the parent: a pool that stops meanwhile has
			// nothing to apply, and the node must still hear of it.
			g := store.Guard{After: e.Seq, Check: endedBy(e.Seq)}
			if err := rec.RecordAsync(context.Background(), &g, []events.Payload{release}, func(out []events.Envelope, err error) {
				if err != nil {
					unrecorded(err)
					return
				}
				for _, e := range out {
					root.Send(parent, &AllocationAbandoned{Event: e})
				}
			}); err != nil {
				unrecorded(err)
			}
		}
	}
}

// errEnded refuses a release of an allocation a later event ended.
var errEnded = errors.New("the allocation has ended already")

// endedBy is a guard's check that refuses a record once an event ends the
// allocation seq: its release, or an Allocate that supersedes it.
func endedBy(seq uint64) func(events.Envelope) error {
	return func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.DevicesReleased:
			if p.AllocationSeq == seq {
				return fmt.Errorf("%w (released by #%d)", errEnded, e.Seq)
			}
		case events.DevicesAllocated:
			if slices.Contains(p.Supersedes, seq) {
				return fmt.Errorf("%w (superseded by #%d)", errEnded, e.Seq)
			}
		}
		return nil
	}
}
