package reconciler

import (
	"time"

	"github.com/devledger/devledger/events"
)

// Messages the reconciler receives.

// Allocated tells the reconciler that the allocation Seq is durable, and
// that its pool and the node hold it: the reconciler reads it from the
// ledger, attributes it from now on, and looks for the pod that holds it
// shortly after (the pod is being created).
type Allocated struct{ Seq uint64 }

// Reconcile asks for a round now.
type Reconcile struct{}

// SetPools replaces the resources whose devices the reconciler attributes
// (after a config change).
type SetPools struct{ Pools []string }

// Query asks for the reconciler's status; the reply is a *Status.
type Query struct{}

// Crash makes the reconciler panic: fault injection for tests of
// supervision.
type Crash struct{ Reason string }

// Status is the reply to Query.
type Status struct {
	// Allocations are the live allocations, each with the container it
	// is bound to ("namespace/pod/container", "" when none yet), and
	// Suspects those suspected leaked.
	Allocations map[uint64]string
	Suspects    []uint64
	// Available is false while PodResources cannot be read.
	Available bool
	// Rounds counts completed rounds.
	Rounds int
}

// Messages the reconciler sends to its parent.

// NeedTold asks the parent, as a restarted reconciler starts, to tell it
// (Allocated) of every live allocation the parent holds: those it was
// told of before are gone with its last incarnation.
type NeedTold struct{}

// Released says a live allocation ended (it is recorded): its pool frees the
// devices.
type Released struct {
	Pool          string
	AllocationSeq uint64
	// Event is the DevicesReleased recorded.
	Event events.Envelope
}

// Recovered says the reconciler recorded an allocation the kubelet reports
// and the ledger lacked (events.AllocationRecovered): it is live, and its
// pool holds its devices.
type Recovered struct {
	Pool          string
	AllocationSeq uint64
	DeviceIDs     []string
	At            time.Time
	// Event is the AllocationRecovered recorded.
	Event events.Envelope
}

// ClaimChanged says a live allocation came to be claimed by no container
// (Claimed false: recorded as a leak suspect) or, after that, by one again
// (Claimed true). An unclaimed allocation still holds its devices in the
// ledger, but no container uses them.
type ClaimChanged struct {
	Pool          string
	AllocationSeq uint64
	DeviceIDs     []string
	Claimed       bool
	// Event is what was recorded: the AllocationLeakSuspected, or the
	// AllocationBound that claims it again.
	Event events.Envelope
}

// internal

type tick struct{}

type listed struct {
	resp any
	err  error
}
