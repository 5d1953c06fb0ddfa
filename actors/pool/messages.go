package pool

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
)

// Messages a pool allocator receives.

// SetMembers gives the pool every device that belongs to it now, with
// fresh facts, after a scan or a config change. The pool records the
// difference (PoolMembershipChanged, with Reason) and tells the kubelet.
type SetMembers struct {
	Members []allocation.Member
	Reason  string
	// Gen is the parent's placement these members come from; the pool
	// names the newest it applied when it lets devices go (LetGo).
	Gen uint64
	// Leaving are devices the parent placed out of the pool and has not
	// heard it let go: the pool lets go of each non-member (see LetGo).
	Leaving []string
	// Moves names the other pool of each device moving in or out, so the
	// membership change records both ends of a move.
	Moves map[string]string
	// Seq is the ledger's last sequence as the parent placed the members:
	// if a config recorded after it drops the pool, no change is recorded.
	Seq uint64
}

// SetResource gives the pool its new definition (same name) after a
// config change; the kubelet gets the device list again if it lists
// anything anew (see broadcast).
type SetResource struct{ Resource *config.Resource }

// SetHealths are new verdicts for several members, applied together: the
// kubelet gets one device list for all of them.
type SetHealths struct{ Changes []SetHealth }

// SetHealth is one member's new verdict, recorded by the health checker.
type SetHealth struct {
	Address string
	Healthy bool
	Reason  string
	// Seq is the sequence number of the verdict's DeviceHealthChanged; a
	// verdict older than one the pool has is ignored.
	Seq uint64
}

// Reserve asks the pool to serve on a new socket in place of Socket, if it
// still serves there ("": wherever it serves, lost if its file is gone),
// and to announce it (Serving). Lost says Socket
// vanished (a kubelet restart empties device-plugins/): SocketLost is
// recorded with the new PluginServing. Seq is as in SetMembers.
type Reserve struct {
	Socket string
	Lost   bool
	Seq    uint64
}

// Reconciled is a DevicesReleased or an AllocationRecovered of the pool's
// that the reconciler recorded: the pool folds it into its holds, so a
// released device is free for GetPreferredAllocation, and a recovered one
// held until an Allocate of it supersedes the allocation.
type Reconciled struct{ Event events.Envelope }

// Withdraw tells the pool that it stops serving because it has no devices
// (its parent stops it right after): it records PluginWithdrawn.
type Withdraw struct{ Reason string }

// Query asks for a *Status, once the members taken are durable and applied.
type Query struct{}

// Status is the reply to Query.
type Status struct {
	Resource string
	Socket   string
	Members  int
	// Healthy counts the members the kubelet is told are healthy: healthy
	// by their verdict, held by no other pool, and not dropped by a
	// change the ledger has not taken yet.
	Healthy int
	// Allocated counts the members a live allocation holds, Free those
	// it can give out now (healthy, unheld, not being allocated).
	Allocated, Free int
	// Pending counts the Allocates whose events are queued with the
	// store, not yet answered by it.
	Pending int
	// Held maps a device to the live allocations holding it.
	Held map[string][]uint64
	// Health is each member's health verdict (whatever holds it).
	Health map[string]bool
}

// Crash makes the pool panic: fault injection for tests of supervision.
type Crash struct{ Reason string }

// Messages a pool allocator sends to its parent.

// Serving says the pool's server listens on Socket, a path never served
// before (recorded as PluginServing): the registrar may register it.
type Serving struct {
	Pool string
	// From is the pool actor: one a reload removed may still announce a
	// socket as it stops, which is not the pool's any more.
	From   *actor.PID
	Socket string
}

// AllocationRecorded tells the parent an allocation is durable, before
// the kubelet is answered, so the reconciler can look for its pod and the
// node knows what holds the device.
type AllocationRecorded struct {
	Pool string
	// Event is the DevicesAllocated, for the node and reconciler to fold.
	Event events.Envelope
}

// AllocationAbandoned tells the parent the pool released an allocation
// whose Allocate the kubelet was told had failed (its events landed after
// the call gave up, as on a disk that stalls). Event is the
// DevicesReleased, for the node to fold as it folds the reconciler's.
type AllocationAbandoned struct{ Event events.Envelope }

// LetGo tells the parent the pool no longer lists Devices and has no
// Allocate of them under way: a pool they moved to may give them out. Gen
// is the newest SetMembers applied; From the pool's PID (new if re-added).
type LetGo struct {
	Pool    string
	From    *actor.PID
	Gen     uint64
	Devices []string
}

// NeedMembers asks the parent for a restarted pool's current members; the
// parent answers with SetMembers.
type NeedMembers struct{ Pool string }

// Internal messages between the gRPC backend and the actor. A request
// carries a reply channel buffered for its one answer: the actor never
// blocks, and the call waits with its own deadline (no future, no timer).

// A watcher is named by its channel.
type watchReq struct {
	ch    chan []*pluginapi.Device
	reply chan struct{}
	// incarnation made the server the stream came in on, socket is the
	// socket it came in on.
	incarnation uint64
	socket      string
}

type unwatchReq struct{ ch chan []*pluginapi.Device }

type preferredReq struct {
	req   *pluginapi.PreferredAllocationRequest
	reply chan preferredReply
}

type preferredReply struct {
	resp *pluginapi.PreferredAllocationResponse
	err  error
}

// allocateReq is a kubelet's Allocate. ctx is the call's: an Allocate the
// actor takes after its deadline is refused, and one whose events have not
// begun to be committed by then writes nothing.
type allocateReq struct {
	ctx   context.Context
	req   *pluginapi.AllocateRequest
	reply chan allocateReply
}

type allocateReply struct {
	resp *pluginapi.AllocateResponse
	err  error
	// envs are the events of an answer given, for abandon.
	envs []events.Envelope
}

// abandoned says the backend gave up waiting for the Allocate it sent with
// reply, and told the kubelet the call failed (see allocator.abandon).
type abandoned struct{ reply chan allocateReply }

// landed says the store answered flight id (see flight.landed).
type landed struct{ id uint64 }

// replace asks the pool to place its last members again (see refused).
type replace struct{}

// serveAgain asks the pool to record that it serves on socket, once the
// ledger refused that record (see allocator.serveAgain); refused is the
// ledger's error if it refused the last try.
type serveAgain struct {
	socket  string
	refused error
}

// servedLate says serveAgain's record landed: the next refusal waits
// from RetryInitial again.
type servedLate struct{}

// queryReq is a Query, with whom to answer.
type queryReq struct{ from *actor.PID }

// placed says the store answered the membership change id.
type placed struct {
	id  uint64
	err error
}
