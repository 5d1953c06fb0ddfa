package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/grpcapi"
)

// backend implements grpcapi.PoolBackend and grpcapi.RegistrationObserver
// by messages to the pool actor.
type backend struct {
	root    *actor.RootContext
	pid     *actor.PID
	timeout time.Duration
	pool    string
	// life outlives this backend's incarnation (see lifetime.gone).
	life *lifetime
	// incarnation made this backend's server; a later one refuses the
	// streams opened on it (see call).
	incarnation uint64
	// observe, if set, hears each Allocate's duration and the outcome the
	// kubelet got (Config.ObserveAllocate).
	observe func(pool string, took time.Duration, err error)
}

// await waits for the pool's answer on reply, within ctx's deadline (or
// the backend's timeout). A restart keeps the mailbox, so the next
// incarnation answers; a stop for good ends the wait at once (gone).
func await[T any](ctx context.Context, b *backend, reply <-chan T) (T, error) {
	var zero T
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	select {
	case r := <-reply:
		return r, nil
	case <-b.life.gone:
		return zero, fmt.Errorf("%w: pool %s has stopped", grpcapi.ErrUnavailable, b.pool)
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			return zero, fmt.Errorf("%w (pool %s did not answer in time)", context.DeadlineExceeded, b.pool)
		}
		return zero, ctx.Err()
	}
}

// WatchDevices implements grpcapi.PoolBackend.
func (b *backend) WatchDevices(ctx context.Context) (<-chan []*pluginapi.Device, error) {
	ch := make(chan []*pluginapi.Device, 1)
	reply := make(chan struct{}, 1)
	b.root.Send(b.pid, &watchReq{ch: ch, reply: reply, incarnation: b.incarnation, socket: grpcapi.SocketOf(ctx)})
	if _, err := await(ctx, b, reply); err != nil {
		// The request may still reach the actor: take the watcher back.
		b.root.Send(b.pid, &unwatchReq{ch: ch})
		return nil, err
	}
	go func() {
		<-ctx.Done()
		b.root.Send(b.pid, &unwatchReq{ch: ch})
	}()
	return ch, nil
}

// Allocate implements grpcapi.PoolBackend: the pool answers once the
// allocation is durable, or refuses it. Past the call's deadline the
// events may be committing, so it waits one timeout more (the store
// answers within a commit) rather than fail an allocation the ledger holds;
// past that (a disk that stalls) the kubelet is told the call failed, and
// the pool releases the allocation should it land. Each call is observed
// here, once, with what the kubelet gets, when it gets it.
func (b *backend) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	started := time.Now()
	resp, err := b.allocate(ctx, req)
	if b.observe != nil {
		b.observe(b.pool, time.Since(started), err)
	}
	return resp, err
}

func (b *backend) allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	reply := make(chan allocateReply, 1)
	b.root.Send(b.pid, &allocateReq{ctx: ctx, req: req, reply: reply})
	// An answer read once the kubelet's call has ended (it went away or
	// gave up, or the pool's server, stopping, cut the call short: the
	// kubelet heard it failed) reaches no one: it is put back, unread,
	// for the pool to release what it allocates (see abandon).
	answer := func(r allocateReply) (*pluginapi.AllocateResponse, error) {
		if r.err != nil || !grpcapi.CallEnded(ctx) {
			return r.resp, r.err
		}
		reply <- r
		b.root.Send(b.pid, &abandoned{reply: reply})
		return nil, fmt.Errorf("%w: the call to pool %s ended before the Allocate of %s was answered", context.Canceled, b.pool, requested(req))
	}
	// A pool stopped for good answered what it had taken before it went:
	// an answer waiting beats "stopped".
	stopped := func() (*pluginapi.AllocateResponse, error) {
		select {
		case r := <-reply:
			return answer(r)
		default:
			return nil, fmt.Errorf("%w: pool %s has stopped", grpcapi.ErrUnavailable, b.pool)
		}
	}
	select {
	case r := <-reply:
		return answer(r)
	case <-b.life.gone:
		return stopped()
	case <-ctx.Done():
	}
	grace := time.NewTimer(b.timeout)
	defer grace.Stop()
	select {
	case r := <-reply:
		return answer(r)
	case <-b.life.gone:
		return stopped()
	case <-grace.C:
		// The kubelet is told the call failed: what it allocates, should
		// it land, is the pool's to release.
		b.root.Send(b.pid, &abandoned{reply: reply})
		return nil, fmt.Errorf("%w (pool %s did not answer the Allocate of %s in time)", ctx.Err(), b.pool, requested(req))
	}
}

// KeepsDeadlines implements grpcapi.DeadlineKeeper (see Allocate).
func (*backend) KeepsDeadlines() {}

// PreferredAllocation implements grpcapi.PoolBackend.
func (b *backend) PreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	reply := make(chan preferredReply, 1)
	b.root.Send(b.pid, &preferredReq{req: req, reply: reply})
	r, err := await(ctx, b, reply)
	if err != nil {
		return nil, err
	}
	return r.resp, r.err
}

// InfoRequested implements grpcapi.RegistrationObserver.
func (b *backend) InfoRequested(resource, socket string) {
	b.root.Send(b.pid, &registrar.KubeletReported{Pool: b.pool, Socket: socket, InfoRequested: true})
}

// RegistrationStatus implements grpcapi.RegistrationObserver.
func (b *backend) RegistrationStatus(resource, socket string, registered bool, reason string) {
	b.root.Send(b.pid, &registrar.KubeletReported{Pool: b.pool, Socket: socket, Registered: registered, Reason: reason, At: time.Now()})
}
