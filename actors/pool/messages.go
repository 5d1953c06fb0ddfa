package pool

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
)

// Messages a pool allocator receives.

// SetMembers gives the pool its members after a scan or a config change:
// every device that belongs to it now, with fresh facts. The pool records
// the difference as PoolMembershipChanged (with Reason) and tells the
// kubelet through ListAndWatch.
type SetMembers struct {
	Members []allocation.Member
	Reason  string
	// Gen is the parent's placement these members come from; the pool
	// names the newest it applied when it lets devices go (LetGo).
	Gen uint64
	// Leaving are the devices the parent placed out of the pool that it
	// has not heard the pool let go of: the pool lets go of each that is
	// not a member once no Allocate of it is under way.
	Leaving []string
	// Moves names, for a member that comes from another pool, that pool,
	// and for a device that leaves for another pool, that pool: the
	// membership change records both ends of a move.
	Moves map[string]string
	// Seq is the ledger's last sequence as the parent placed the members:
	// a config recorded after it that drops the pool makes them stale,
	// and the pool records no change of them.
	Seq uint64
}

// SetResource gives the pool its new definition after a config change (its
// name is unchanged): policy, topology, CDI and the answers to come follow
// it; the kubelet gets the device list again.
type SetResource struct{ Resource *config.Resource }

// SetHealths are new verdicts for several members, applied together: the
// kubelet gets one device list for all of them.
type SetHealths struct{ Changes []SetHealth }

// SetHealth is a new health verdict for one member, already recorded by the
// health checker (sent in a SetHealths).
type SetHealth struct {
	Address string
	Healthy bool
	Reason  string
	// Seq is the sequence number of the verdict's DeviceHealthChanged; a
	// verdict older than one the pool has is ignored.
	Seq uint64
}

// Reserve asks the pool to serve under a new socket name in place of
// Socket, and to announce it (Serving). Lost says Socket vanished (a
// kubelet restart empties device-plugins/), recorded as SocketLost in the
// same append as the new PluginServing. A Reserve about a socket the pool
// no longer serves on is ignored. Seq is the ledger's last sequence as
// the parent sent it, the pool in the config in force then.
type Reserve struct {
	Socket string
	Lost   bool
	Seq    uint64
}

// Released tells the pool that a live allocation ended (recorded by the
// reconciler), so its devices are free for GetPreferredAllocation.
type Released struct{ AllocationSeq uint64 }

// Recovered tells the pool of a live allocation the reconciler recovered
// from the kubelet (events.AllocationRecovered): the pool holds its
// devices, and the next Allocate of one supersedes it.
type Recovered struct {
	AllocationSeq uint64
	DeviceIDs     []string
}

// Withdraw tells the pool that it stops serving because it has no devices
// (its parent stops it right after): it records PluginWithdrawn.
type Withdraw struct{ Reason string }

// Query asks for the pool's status; the reply is a *Status, once the
// members the pool has taken are durable and applied.
type Query struct{}

// Status is the reply to Query.
type Status struct {
	Resource string
	Socket   string
	Members  int
	Healthy  int
	// Allocated counts the members a live allocation of the pool holds,
	// Free those it can give out now (healthy, held by none, none being
	// allocated).
	Allocated, Free int
	// Held maps a device to the live allocations holding it.
	Held map[string][]uint64
	// Health is each member's health verdict (whatever holds it).
	Health map[string]bool
}

// Crash makes the pool panic: fault injection for tests of supervision.
type Crash struct{ Reason string }

// Messages a pool allocator sends to its parent.

// Serving says the pool's gRPC server listens on Socket, a path it has
// never served on before (recorded as PluginServing): the registrar may
// register it.
type Serving struct {
	Pool string
	// From is the pool actor: one a reload removed may still announce a
	// socket as it stops, which is not the pool's any more.
	From   *actor.PID
	Socket string
}

// KubeletReported relays what the kubelet told the pool's socket in
// plugin-watcher mode: GetInfo was called (InfoRequested), or the outcome of
// the registration.
type KubeletReported struct {
	Pool          string
	Socket        string
	InfoRequested bool
	Registered    bool
	Reason        string
}

// WatchEnded tells the parent a ListAndWatch stream on the pool's socket
// ended: the kubelet's, most often because the kubelet went away.
type WatchEnded struct{ Pool string }

// AllocationRecorded tells the parent an allocation is durable, so the
// reconciler can look for the pod that holds it and the node knows what
// holds the device. The pool sends it as the allocation lands, before it
// answers the kubelet (a pool stopped for good lands its pending Allocates
// first).
type AllocationRecorded struct {
	Pool      string
	Seq       uint64
	DeviceIDs []string
	At        time.Time
	// Supersedes are the allocations it ended (events.DevicesAllocated).
	Supersedes []uint64
	// Event is the DevicesAllocated recorded, which the node and the
	// reconciler fold.
	Event events.Envelope
}

// LetGo tells the parent that the pool no longer lists Devices, and that
// no Allocate of them is under way: a pool they moved to may give them
// out now. Gen is the newest SetMembers the pool applied; From is the
// pool's PID (a pool removed and added again has a new one).
type LetGo struct {
	Pool    string
	From    *actor.PID
	Gen     uint64
	Devices []string
}

// NeedMembers asks the parent for the pool's current members (a restarted
// pool's members may be newer than those it was spawned with); the parent
// answers with SetMembers.
type NeedMembers struct{ Pool string }

// Internal messages between the gRPC backend and the actor. A request
// carries its own reply channel, buffered for the one answer, so the actor
// answers without blocking, and the kubelet's call waits on it with its
// own deadline: no future, no timer per call.

type watchReq struct {
	id    uint64
	ch    chan []*pluginapi.Device
	reply chan struct{}
	// incarnation made the server the stream came in on.
	incarnation uint64
}

type unwatchReq struct{ id uint64 }

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
	ctx     context.Context
	req     *pluginapi.AllocateRequest
	reply   chan allocateReply
	started time.Time
}

type allocateReply struct {
	resp *pluginapi.AllocateResponse
	err  error
}

// landed says the store answered the pending Allocate id (its answer is in
// the flight's landed channel).
type landed struct{ id uint64 }

// replace asks the pool to place its last members again, after the
// ledger refused them.
type replace struct{}

// queryReq is a Query, with whom to answer.
type queryReq struct{ from *actor.PID }

// placed says the store answered the membership change id.
type placed struct {
	id  uint64
	err error
}

type kubeletSaid struct{ report KubeletReported }
