package registrar

import "time"

// Messages the registrar receives.

// Desire says a pool serves on Socket and should be registered with the
// kubelet. A Desire for a pool already desired on another socket replaces
// the old one: the pool is registered again, on the new socket. A Desire
// repeated for the same socket changes nothing.
type Desire struct {
	Pool   string
	Socket string
}

// Undesire says a pool no longer serves (it was removed): any
// registration of it is void.
type Undesire struct {
	Pool string
}

// KubeletAppeared says a kubelet registration socket was created: a new
// kubelet. Every registration before it is void.
type KubeletAppeared struct{ Socket string }

// CheckKubelet says the kubelet may have gone away (Why): a ListAndWatch
// stream ended, or its socket was removed. The registrar dials the
// kubelet's socket, and records KubeletStopped when nothing answers.
type CheckKubelet struct{ Why string }

// KubeletReported relays what the kubelet told a pool's socket in
// plugin-watcher mode.
type KubeletReported struct {
	Pool          string
	Socket        string
	InfoRequested bool
	Registered    bool
	Reason        string
}

// Reconcile asks for a reconcile now: the socket watcher's watch is in
// place (a kubelet that appeared before it is registered with), or a socket
// was removed (a pool whose socket it was gets a new one).
type Reconcile struct{}

// Query asks for the registrations; the reply is a *Status.
type Query struct{}

// Status is the reply to Query: per pool, whether the kubelet acknowledged
// it, and the last reason it gave for refusing.
type Status struct {
	Pools map[string]PoolStatus
	// KubeletRestarts counts new kubelets seen by this registrar.
	KubeletRestarts int
}

// PoolStatus is one pool's registration.
type PoolStatus struct {
	Socket     string
	Registered bool
	Failures   int
	LastError  string
}

// internal messages

type registerResult struct {
	pool, socket string
	// kubelet is the kubelet the Register was sent to, as seen before it.
	kubelet kubeletID
	err     error
}

type retry struct{ pool string }

// recheck asks to dial a kubelet recorded gone.
type recheck struct{ socket string }

// stopRecorded says the KubeletStopped is durable, at its time.
type stopRecorded struct{ at time.Time }

// probed is the outcome of a dial of the kubelet's socket.
type probed struct {
	why string
	// recheck says it dialled a kubelet recorded gone.
	recheck bool
	// kubelet is the kubelet probed, as known when the probe began.
	kubelet kubeletID
	err     error
}
