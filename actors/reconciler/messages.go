package reconciler

import (
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
)

// Messages the reconciler receives.

// Allocated says the allocation Seq is durable and its pool and the node
// hold it: the reconciler attributes it from now on, starting shortly.
type Allocated struct{ Seq uint64 }

// Reconcile asks for a round now. KubeletBack says a kubelet has just
// started (its socket appeared): see Config.KubeletSettle.
type Reconcile struct{ KubeletBack bool }

// Query asks for the reconciler's status; the reply is a *Status.
type Query struct{}

// Crash makes the reconciler panic (fault injection for tests).
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
	// Told counts the allocations the reconciler keeps as told of (see
	// Allocated): live ones, and ones it has not read in the ledger yet.
	Told int
}

// Messages the reconciler sends to its parent.

// NeedTold asks the parent to send Allocated for every live allocation
// it holds: a restarted reconciler forgot what it was told.
type NeedTold struct{}

// Recorded is a change to a live allocation that the reconciler recorded:
// an AllocationBound, DevicesReleased, AllocationLeakSuspected or
// AllocationRecovered. The parent folds it and tells the pools.
type Recorded struct{ Event events.Envelope }

// listed is the answer to a round's List, filled by the goroutine that
// lists and then sent (see reconciler.listing).
type listed struct {
	resp *podresourcesapi.ListPodResourcesResponse
	err  error
}
