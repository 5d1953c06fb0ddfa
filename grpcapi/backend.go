package grpcapi

import (
	"context"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// PoolBackend answers one pool's kubelet calls. The pool allocator actor
// implements it by messages; the server only translates, bounds every call
// with a deadline, and turns errors into gRPC status codes.
//
// Errors: a backend returns errors wrapping ErrInvalidRequest (the request
// names an unknown device, a device of another pool, or no container: the
// kubelet gets InvalidArgument), ErrUnavailable (the ledger cannot record
// the allocation, or the pool is stopping: Unavailable), or
// context.DeadlineExceeded (DeadlineExceeded). Anything else is Internal.
type PoolBackend interface {
	// WatchDevices returns a channel that receives the pool's full device
	// list at once and again after every health or membership change. Only
	// the latest list matters: a slow reader may miss intermediate lists
	// but always gets the newest. The channel is closed when ctx ends or
	// the pool stops serving. A list, and each Device in it, is never
	// modified once sent: a device that changes is a new Device in a new
	// list (the server reuses the encoding of the entries it sent before).
	WatchDevices(ctx context.Context) (<-chan []*pluginapi.Device, error)
	// Allocate answers the kubelet's Allocate once the allocation is
	// durable in the ledger.
	Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	// PreferredAllocation answers GetPreferredAllocation.
	PreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
}

// DeadlineKeeper is implemented by a PoolBackend whose calls return by
// their context's deadline (with an error wrapping context.DeadlineExceeded
// when they run out of time), or shortly after it only to finish work
// already under way (a ledger commit), whose answer is then final: the
// kubelet gets it if it still waits. The server calls such a backend on the
// kubelet call's own goroutine, one hand-off fewer per call; any other
// backend is called on a goroutine of its own, so that the kubelet gets its
// DeadlineExceeded on time even from a backend that ignores its context.
type DeadlineKeeper interface {
	KeepsDeadlines()
}

// callKey keys the kubelet call (a kubeletCall) in the context a backend gets.
type callKey struct{}

// kubeletCall is the kubelet call's own context and the channel its server
// closes as it cuts its calls short (PoolServer.cut).
type kubeletCall struct {
	ctx context.Context
	cut <-chan struct{}
}

// CallEnded says whether the kubelet call behind ctx, a context a
// PoolServer handed its backend, has ended: the kubelet went away or gave
// up at its own deadline, or a server stopping cut the call short. An
// answer given after it reaches no one. The server's own deadline does
// not end the call (a DeadlineKeeper's late answer still reaches a
// kubelet that waits). A context of no call never ends.
func CallEnded(ctx context.Context) bool {
	c, ok := ctx.Value(callKey{}).(kubeletCall)
	if !ok {
		return false
	}
	select {
	case <-c.cut:
		return true
	default:
		return c.ctx.Err() != nil
	}
}

// RegistrationObserver hears what the kubelet says about a pool in
// plugin-watcher mode: GetInfo was called (the kubelet found the socket), and
// NotifyRegistrationStatus reported the outcome, with the reason given for
// a refusal cut to MaxReason bytes (and its length noted): anything root
// on the node can call it.
type RegistrationObserver interface {
	InfoRequested(resource, socket string)
	RegistrationStatus(resource, socket string, registered bool, reason string)
}
