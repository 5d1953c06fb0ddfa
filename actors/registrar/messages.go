package registrar

// Messages the registrar receives.

// Desire says a pool serves on Socket and should be registered with the
// kubelet. A Desire for a pool already desired (a re-created socket)
// replaces the old one: the registration must be made again.
type Desire struct {
	Pool   string
	Socket string
	// KubeletWatching says the current kubelet still watches the pool on
	// this socket path: its registration stands and is not made again.
	KubeletWatching bool
	// Recorded, when set, is closed once the pool's PluginServing is in
	// the ledger (or its append failed). Registration does not wait for
	// it; the registrar's events about the pool are written after it, so
	// that the ledger tells them in order.
	Recorded <-chan struct{}
}

// Undesire says a pool no longer serves (its socket was lost, or the pool
// was removed); any registration of it is void.
type Undesire struct {
	Pool   string
	Socket string
	// Lost is true when the socket vanished under us (the pool records
	// SocketLost as it re-creates it), false for an orderly removal.
	Lost bool
}

// KubeletAppeared says a kubelet registration socket was created: a new
// kubelet. Every registration before it is void.
type KubeletAppeared struct{ Socket string }

// KubeletReported relays what the kubelet told a pool's socket in
// plugin-watcher mode.
type KubeletReported struct {
	Pool          string
	Socket        string
	InfoRequested bool
	Registered    bool
	Reason        string
}

// Watched answers CheckWatched: whether the pool's current server has the
// kubelet's ListAndWatch. The fields but Watching are CheckWatched's.
type Watched struct {
	Pool     string
	Socket   string
	Gen      uint64
	Epoch    int
	Watching bool
}

// Reconcile asks for a reconcile now (the socket watcher's watch is in
// place: a kubelet that appeared before it is registered with).
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
	pool  string
	gen   uint64
	epoch int
	err   error
}

type retry struct{ pool string }
