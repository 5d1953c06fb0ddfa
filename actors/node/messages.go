package node

import "github.com/asynkron/protoactor-go/actor"

// Messages the node coordinator receives from outside its tree.

// Rescan asks for a scan now (and, through it, a fresh pool selection).
// Removed are the PCI functions the kernel said it removed (scanner.Rescan).
type Rescan struct {
	Reason  string
	Removed []string
}

// ProbeHealth asks the health checker to probe now the devices in Addresses
// and those whose interface (or PF's) is in Interfaces; all if both are empty.
type ProbeHealth struct {
	Addresses  []string
	Interfaces []string
	// Down are the interfaces the kernel reported down (health.Probe).
	Down []string
}

// Children asks for the PIDs of the node's actors; the reply is a *ChildPIDs.
type Children struct{}

// ChildPIDs is the reply to Children.
type ChildPIDs struct {
	Scanner    *actor.PID
	Registrar  *actor.PID
	Health     *actor.PID
	Sockets    *actor.PID
	Reconciler *actor.PID
	// ConfigWatch is nil when the config file is not watched.
	ConfigWatch *actor.PID
	// Pools maps each running pool's name to its allocator. Configured names
	// the config's pools, sorted, running or not (a pool runs after the first
	// scan, while it has devices or advertises empty). Placed: the first scan
	// placed the devices, so a configured pool not running has none.
	Pools      map[string]*actor.PID
	Configured []string
	Placed     bool
}

// ReloadConfig asks the node to read its config file again (the file
// changed, or SIGHUP). A request gets a *ReloadResult.
type ReloadConfig struct{ Reason string }

// ReloadResult says what a reload did.
type ReloadResult struct {
	// Applied is true when a new valid config is now in force.
	Applied bool
	// Unchanged is true when the file holds the config in force.
	Unchanged bool
	// Rejected holds the errors of an invalid config, which stays out.
	Rejected []string
	// Err is set when the file could not be read or the ledger not written.
	Err error
}

// Crash makes the node coordinator panic, to test supervision: its
// children stop with it and start again from the ledger.
type Crash struct{ Reason string }

// Query asks for the node's view of the ledger's state; the reply is a *Status.
type Query struct{}

// Status is the reply to Query.
type Status struct {
	// Holds are the live allocations holding each device, as the node
	// tells pools of other pools' holds (leak suspects hold none).
	Holds map[string][]uint64
	// Health is the newest verdict the node knows of each device.
	Health map[string]bool
}
