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

// backend implements grpcapi.PoolBackend by messages to the pool actor.
type backend struct {
	root    *actor.RootContext
	pid     *actor.PID
	timeout time.Duration
	pool    string
	observe func(pool string, took time.Duration, err error)
}

var watchIDs atomic.Uint64

// ask sends a request and waits for the reply within ctx's deadline (or the
// backend's timeout).
func (b *backend) ask(ctx context.Context, msg any) (any, error) {
	timeout := b.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	res, err := b.root.RequestFuture(b.pid, msg, timeout).Result()
	if err != nil {
		if err == actor.ErrTimeout {
			return nil, fmt.Errorf("%w (pool did not answer within %s)", context.DeadlineExceeded, timeout)
		}
		return nil, fmt.Errorf("%w: %v", grpcapi.ErrUnavailable, err)
	}
	return res, nil
}

// WatchDevices implements grpcapi.PoolBackend.
func (b *backend) WatchDevices(ctx context.Context) (<-chan []*pluginapi.Device, error) {
	id := watchIDs.Add(1)
	ch := make(chan []*pluginapi.Device, 1)
	if _, err := b.ask(ctx, &watchReq{id: id, ch: ch}); err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		b.root.Send(b.pid, &unwatchReq{id: id})
	}()
	return ch, nil
}

// Allocate implements grpcapi.PoolBackend.
func (b *backend) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (resp *pluginapi.AllocateResponse, err error) {
	if b.observe != nil {
		start := time.Now()
		defer func() { b.observe(b.pool, time.Since(start), err) }()
	}
	res, err := b.ask(ctx, &allocateReq{req: req})
	if err != nil {
		return nil, err
	}
	r := res.(*allocateReply)
	return r.resp, r.err
}

// PreferredAllocation implements grpcapi.PoolBackend.
func (b *backend) PreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	res, err := b.ask(ctx, &preferredReq{req: req})
	if err != nil {
		return nil, err
	}
	r := res.(*preferredReply)
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
