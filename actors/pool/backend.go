package pool

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/grpcapi"
)

// backend implements grpcapi.PoolBackend by messages to the pool actor,
// each carrying its reply channel.
type backend struct {
	root    *actor.RootContext
	pid     *actor.PID
	timeout time.Duration
	pool    string
	// life outlives the incarnation that made this backend: life.gone is
	// closed when the pool has stopped for good (a request still in its
	// mailbox then will never be answered).
	life *lifetime
	// incarnation is the one whose server this backend serves: a stream
	// that server opens is refused by a later incarnation (the server is
	// stopping, and its streams go with it).
	incarnation uint64
}

var watchIDs atomic.Uint64

// await waits for the pool's answer on reply, within ctx's deadline (or
// the backend's timeout when ctx has none). Requests waiting in the mailbox
// across a restart are answered by the next incarnation (same PID, same
// mailbox); after a stop for good, gone ends the wait at once.
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
	id := watchIDs.Add(1)
	ch := make(chan []*pluginapi.Device, 1)
	reply := make(chan struct{}, 1)
	b.root.Send(b.pid, &watchReq{id: id, ch: ch, reply: reply, incarnation: b.incarnation})
	if _, err := await(ctx, b, reply); err != nil {
		// The request may still reach the actor: take the watcher back.
		b.root.Send(b.pid, &unwatchReq{id: id})
		return nil, err
	}
	go func() {
		<-ctx.Done()
		b.root.Send(b.pid, &unwatchReq{id: id})
	}()
	return ch, nil
}

// Allocate implements grpcapi.PoolBackend. The pool answers once the
// allocation is durable, or refuses it; when the call's deadline comes
// first, the events may be being committed already: the answer is then
// waited for a little longer (the store answers within a commit), so that
// an allocation the ledger holds is not reported as failed.
func (b *backend) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	reply := make(chan allocateReply, 1)
	b.root.Send(b.pid, &allocateReq{ctx: ctx, req: req, reply: reply, started: time.Now()})
	// A pool stopped for good answered what it had taken before it went:
	// an answer waiting beats "stopped".
	stopped := func() (*pluginapi.AllocateResponse, error) {
		select {
		case r := <-reply:
			return r.resp, r.err
		default:
			return nil, fmt.Errorf("%w: pool %s has stopped", grpcapi.ErrUnavailable, b.pool)
		}
	}
	select {
	case r := <-reply:
		return r.resp, r.err
	case <-b.life.gone:
		return stopped()
	case <-ctx.Done():
	}
	grace := time.NewTimer(b.timeout)
	defer grace.Stop()
	select {
	case r := <-reply:
		return r.resp, r.err
	case <-b.life.gone:
		return stopped()
	case <-grace.C:
		return nil, fmt.Errorf("%w (pool %s did not answer in time)", ctx.Err(), b.pool)
	}
}

// KeepsDeadlines implements grpcapi.DeadlineKeeper: an Allocate is answered
// by its deadline, or, when its events were being committed then, once the
// store has answered.
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

// observer relays plugin-watcher callbacks into the actor.
type observer struct {
	root *actor.RootContext
	pid  *actor.PID
	pool string
}

// InfoRequested implements grpcapi.RegistrationObserver.
func (o observer) InfoRequested(resource, socket string) {
	o.root.Send(o.pid, &kubeletSaid{report: KubeletReported{Pool: o.pool, Socket: socket, InfoRequested: true}})
}

// RegistrationStatus implements grpcapi.RegistrationObserver.
func (o observer) RegistrationStatus(resource, socket string, registered bool, reason string) {
	o.root.Send(o.pid, &kubeletSaid{report: KubeletReported{Pool: o.pool, Socket: socket, Registered: registered, Reason: reason}})
}
