package registrar

import "time"

// Desire says a pool serves on Socket and should be registered with the
// kubelet. A new socket replaces the pool's old one and is registered; the
// same socket again changes nothing.
type Desire struct {
	Pool   string
	Socket string
}

// Undesire says a pool no longer serves: any registration of it is void.
type Undesire struct {
	Pool string
}

// KubeletAppeared says a kubelet registration socket was created: a new
// kubelet. Every registration before it is void.
type KubeletAppeared struct{ Socket string }

// CheckKubelet says the kubelet may have gone (Why: its socket was
// removed; a Listing that ends checks too): its socket is dialled, and
// KubeletStopped recorded when nothing answers.
type CheckKubelet struct{ Why string }

// Listing says the kubelet opened (Open) or ended a ListAndWatch stream of
// Pool on Socket. A stream ended while the kubelet is up means it dropped
// that socket's endpoint: the kubelet is checked (as CheckKubelet), and a
// registered pool it lists on no stream registers anew (see unlisted).
type Listing struct {
	Pool   string
	Socket string
	Open   bool
}

// KubeletReported relays what the kubelet told a pool's socket in
// plugin-watcher mode, and when the pool's server heard it (At): it may
// reach the registrar late, after a pool's mailbox held it.
type KubeletReported struct {
	Pool          string
	Socket        string
	InfoRequested bool
	Registered    bool
	Reason        string
	At            time.Time
}

// NeedDesires is sent to the parent by a registrar restarted after a crash:
// it knows no pool. Every pool serves on a new socket (pool.Reserve), and
// its Serving brings a Desire.
type NeedDesires struct{}

// Unrecorded says a pool's standing with the kubelet may be lacking in
// the ledger: the pool's PluginServing was refused (the disk full) and
// is recorded late, so a registration recorded before it was void.
// Once the ledger records again, the registrar records what it lacks
// (see recordAgain).
type Unrecorded struct {
	Pool  string
	Event string
}

// Reconcile asks for a reconcile now: the socket watcher's watch is in
// place, or a socket was removed.
type Reconcile struct{}

// Query asks for the registrations; the reply is a *Status.
type Query struct{}

// Status is the reply to Query: per pool, whether the kubelet acknowledged
// it, and the last reason it gave for refusing.
type Status struct {
	Pools           map[string]PoolStatus
	KubeletRestarts int // new kubelets seen by this registrar
}

// PoolStatus is one pool's registration.
type PoolStatus struct {
	Socket     string
	Registered bool
	Failures   int
	LastError  string
}

type registerResult struct {
	pool, socket string
	kubelet      kubeletID // the Register's target, as seen before it
	err          error
}

type retry struct{ pool string }

// unlisted says a ListGrace passed with no stream on the pool's socket;
// checked, that the kubelet was checked since.
type unlisted struct {
	pool, socket string
	checked      bool
}

// refusedGrace says a grace passed since the plugin watcher refused the
// pool's socket, in watcher mode; kubelet is the one that refused.
type refusedGrace struct {
	pool, socket string
	kubelet      kubeletID
}

// recordAgain is the wait's end after a record the ledger refused (see
// lacking).
type recordAgain struct{}

type recheck struct{ n int } // dial a kubelet recorded gone, if n is the newest timer

type stopRecorded struct{ at time.Time } // the KubeletStopped is durable, at its time

// lackRecorded says recordAgain's records are durable: the next refusal
// waits from RetryInitial again.
type lackRecorded struct{}

// probed is the outcome of a dial of the kubelet's socket.
type probed struct {
	why     string
	recheck bool      // it dialled a kubelet recorded gone
	kubelet kubeletID // as known when the probe began
	err     error
}

// Crash makes the registrar panic (fault injection for tests).
type Crash struct{ Reason string }
