package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// State is the node as the ledger knows it after some prefix of the log.
// Maps are keyed by pool resource name, PCI address or allocation sequence.
// The zero State is not ready for Apply; start from NewState.
type State struct {
	// Seq is the sequence of the last event applied.
	Seq uint64 `json:"seq"`
	// Time is the time of the last event applied.
	Time time.Time `json:"time"`

	Daemon  DaemonState  `json:"daemon"`
	Config  ConfigState  `json:"config"`
	Kubelet KubeletState `json:"kubelet"`
	// Attribution says whether PodResources could be read, since when.
	Attribution AttributionState `json:"attribution"`

	Pools       map[string]Pool       `json:"pools"`
	Devices     map[string]Device     `json:"devices"`
	Allocations map[uint64]Allocation `json:"allocations"`
	// Holders maps a device address to the live allocations that hold it
	// (more than one only after a conflict).
	Holders map[string][]uint64 `json:"holders"`
	// Ledger is the damage recorded in the ledger itself.
	Ledger LedgerState `json:"ledger,omitzero"`
}

// DaemonState is what the ledger knows of the daemon runs.
type DaemonState struct {
	BootID    string    `json:"boot_id,omitempty"`
	Version   string    `json:"version,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// Running is true between a DaemonStarted and its DaemonStopped. A
	// replayed state that says running after a crash is how the next start
	// knows the last run did not stop cleanly.
	Running bool `json:"running"`
	Starts  int  `json:"starts"`
	// StoppedAt is when the last run stopped, while none runs: its
	// DaemonStopped, or for a crash the last moment it was known alive
	// (DaemonCrashed). Crashes counts the runs that did not stop.
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	Crashes   int       `json:"crashes,omitempty"`
	// LastSeq and LastAt are the last event the run (BootID) recorded: a
	// crash's bounds, whatever else wrote to the ledger since (an offline
	// `ledger acknowledge`).
	LastSeq uint64    `json:"last_seq,omitempty"`
	LastAt  time.Time `json:"last_at,omitzero"`
	// KernelBootID is the kernel's boot id the last run started under: a
	// start under another one follows a node reboot, counted in Reboots
	// (between starts that could read the id).
	KernelBootID string `json:"kernel_boot_id,omitempty"`
	Reboots      int    `json:"reboots,omitempty"`
}

// RebootedBefore says whether the start p follows a node reboot since the
// run d knows of: both could read the kernel's boot id, and they differ.
// It is the one rule the fold counts Reboots by; what shows a reboot
// (the history page, the start's log) asks it too.
func (d DaemonState) RebootedBefore(p DaemonStarted) bool {
	return d.KernelBootID != "" && p.KernelBootID != "" && d.KernelBootID != p.KernelBootID
}

// ConfigState is the configuration in force.
type ConfigState struct {
	Path       string    `json:"path,omitempty"`
	SHA256     string    `json:"sha256,omitempty"`
	AppliedAt  time.Time `json:"applied_at"`
	Rejections int       `json:"rejections"`
	LastError  []string  `json:"last_error,omitempty"`
}

// KubeletState counts kubelet restarts seen, and the outages recorded.
type KubeletState struct {
	Restarts    int       `json:"restarts"`
	LastRestart time.Time `json:"last_restart"`
	// Down is true from a KubeletStopped to the next KubeletRestarted;
	// DownSince is the stop's time.
	Down      bool      `json:"down,omitempty"`
	DownSince time.Time `json:"down_since,omitzero"`
	// Outages counts the recorded stops that ended, Downtime their
	// length (none for one whose end is stamped before its start: the
	// clock stepped back); LastOutage is the last that ended, as stamped.
	Outages    int           `json:"outages,omitempty"`
	Downtime   time.Duration `json:"downtime,omitempty"`
	LastOutage Span          `json:"last_outage,omitzero"`
}

// Span is a stretch of time.
type Span struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// AttributionState is whether the kubelet's PodResources service answers.
// The zero value (Since zero) means nothing was recorded: assumed available.
type AttributionState struct {
	Available bool      `json:"available"`
	Reason    string    `json:"reason,omitempty"`
	Since     time.Time `json:"since"`
}

// Pool is a resource pool: its spec, its members, its registration.
type Pool struct {
	Spec PoolSpec `json:"spec"`
	// Members are the PCI addresses in the pool, sorted.
	Members      []string     `json:"members"`
	Registration Registration `json:"registration"`
}

// Registration is the pool's standing with the kubelet.
type Registration struct {
	Socket string `json:"socket,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// Serving is true while the pool's gRPC server listens on Socket.
	Serving bool `json:"serving"`
	// Registered is true once the kubelet acknowledged the pool, until the
	// socket is lost, the kubelet restarts, or the daemon stops.
	Registered   bool      `json:"registered"`
	RegisteredAt time.Time `json:"registered_at"`
	Failures     int       `json:"failures"`
	LastError    string    `json:"last_error,omitempty"`
}

// Device is one PCI function as the ledger knows it.
type Device struct {
	Facts DeviceFacts `json:"facts"`
	// Present is false once the device was removed; its history stays.
	Present bool `json:"present"`
	// Healthy is the last verdict; a discovered device is healthy until a
	// DeviceHealthChanged says otherwise.
	Healthy      bool   `json:"healthy"`
	HealthReason string `json:"health_reason,omitempty"`
	// HealthSeq is the sequence number of the event that set Healthy (a
	// verdict, the device's discovery or removal): of two verdicts on a
	// device, the one with the higher HealthSeq is the newer. A snapshot
	// written before the field existed has 0: older than any event after
	// the snapshot.
	HealthSeq uint64 `json:"health_seq,omitempty"`
	// Pool is the pool the device is a member of, "" for none. While two
	// pools list it (one has recorded its join, the other not yet its
	// leave) it is the one that joined last; once one of them leaves, the
	// other (see listing).
	Pool string `json:"pool,omitempty"`
}

// Allocation is a live allocation: allocated and not yet released.
type Allocation struct {
	Seq       uint64    `json:"seq"`
	Pool      string    `json:"pool"`
	DeviceIDs []string  `json:"device_ids"`
	At        time.Time `json:"at"`
	// Binding is set once PodResources attributed the allocation.
	Binding *Binding `json:"binding,omitempty"`
	// Lost is true when one of its devices was removed while it was live.
	Lost bool `json:"lost,omitempty"`
	// LeakSuspected is true once no container claimed it for the grace
	// period.
	LeakSuspected bool `json:"leak_suspected,omitempty"`
	// Recovered is true for an allocation the kubelet reported and the
	// ledger lacked (AllocationRecovered).
	Recovered bool `json:"recovered,omitempty"`
}

// Binding is the container that holds an allocation.
type Binding struct {
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       string    `json:"uid,omitempty"`
	Container string    `json:"container"`
	At        time.Time `json:"at"`
}

// NewState returns the empty state, before any event.
func NewState() State {
	return State{
		Pools:       map[string]Pool{},
		Devices:     map[string]Device{},
		Allocations: map[uint64]Allocation{},
		Holders:     map[string][]uint64{},
	}
}

// Apply returns the state after event e. It is pure: no I/O, no clock; the
// time it records is the event's. It reuses s's maps (write s = Apply(s, e))
// but keeps no reference to e's slices. Events that do not change the fold
// (ConfigRejected still counts) only move Seq and Time; so does the release of
// an allocation the fold does not know, or a lost socket or failed
// registration of a pool it does not know, which never creates it. A verdict
// on an unknown device creates it, present, and a membership change naming
// an unknown pool or device creates them. A payload may be a catalog value or
// a pointer to one.
func Apply(s State, e Envelope) State {
	s.Seq = e.Seq
	s.Time = e.Time
	switch p := payloadValue(e.Payload).(type) {
	case DaemonStarted:
		reboots := s.Daemon.Reboots
		if s.Daemon.RebootedBefore(p) {
			reboots++
		}
		s.Daemon = DaemonState{BootID: e.BootID, Version: p.Version, StartedAt: e.Time, Running: true, Starts: s.Daemon.Starts + 1,
			Crashes: s.Daemon.Crashes, KernelBootID: p.KernelBootID, Reboots: reboots}
		// A new daemon has no server and no registration yet, whatever the
		// last run left behind.
		for name, pool := range s.Pools {
			pool.Registration.Serving = false
			pool.Registration.Registered = false
			s.Pools[name] = pool
		}
	case DaemonCrashed:
		s.Daemon.Running = false
		s.Daemon.StoppedAt = p.LastAlive
		s.Daemon.Crashes++
		for name, pool := range s.Pools {
			pool.Registration.Serving = false
			pool.Registration.Registered = false
			s.Pools[name] = pool
		}
	case DaemonStopped:
		s.Daemon.Running = false
		s.Daemon.StoppedAt = e.Time
		for name, pool := range s.Pools {
			pool.Registration.Serving = false
			pool.Registration.Registered = false
			s.Pools[name] = pool
		}
	case ConfigApplied:
		s.Config = ConfigState{Path: p.Path, SHA256: p.SHA256, AppliedAt: e.Time, Rejections: s.Config.Rejections}
		keep := make(map[string]bool, len(p.Pools))
		for _, spec := range p.Pools {
			keep[spec.Resource] = true
			pool := s.Pools[spec.Resource]
			pool.Spec = spec
			s.Pools[spec.Resource] = pool
		}
		dropped := map[string][]string{} // their members
		for name, pool := range s.Pools {
			if !keep[name] {
				dropped[name] = pool.Members
				delete(s.Pools, name)
			}
		}
		for name, members := range dropped {
			for _, addr := range members {
				if d, ok := s.Devices[addr]; ok && d.Pool == name {
					d.Pool = s.listing(addr, "")
					s.Devices[addr] = d
				}
			}
		}
	case ConfigRejected:
		s.Config.Rejections++
		s.Config.LastError = slices.Clone(p.Errors)
	case DeviceDiscovered:
		d := s.Devices[p.Device.Address]
		d.Facts = p.Device.clone()
		d.Present = true
		d.setVerdict(Verdict{Healthy: true, Seq: e.Seq})
		s.Devices[p.Device.Address] = d
	case DeviceChanged:
		d := s.Devices[p.Device.Address]
		// A change of a device the fold has as absent (or never saw) means
		// it is there after all: it counts as discovered, healthy until a
		// verdict says otherwise, not as still "removed".
		if !d.Present {
			d.setVerdict(Verdict{Healthy: true, Seq: e.Seq})
		}
		d.Facts = p.Device.clone()
		d.Present = true
		s.Devices[p.Device.Address] = d
	case DeviceRemoved:
		d, ok := s.Devices[p.Address]
		if !ok {
			d.Facts.Address = p.Address
		}
		d.Present = false
		v := Verdict{Reason: "removed", Seq: e.Seq}
		if p.Reason != "" {
			v.Reason = "removed: " + p.Reason
		}
		d.setVerdict(v)
		s.Devices[p.Address] = d
		for _, seq := range s.Holders[p.Address] {
			if a, ok := s.Allocations[seq]; ok {
				a.Lost = true
				s.Allocations[seq] = a
			}
		}
	case DeviceHealthChanged:
		d, ok := s.Devices[p.Address]
		if !ok {
			d.Facts.Address = p.Address
			d.Present = true
		}
		d.setVerdict(Verdict{Healthy: p.Healthy, Reason: p.Reason, Seq: e.Seq})
		s.Devices[p.Address] = d
	case PoolMembershipChanged:
		pool, known := s.Pools[p.Pool]
		pool.Spec.Resource = p.Pool
		members := pool.Members
		for _, addr := range p.Removed {
			if i, found := slices.BinarySearch(members, addr); found {
				members = slices.Delete(members, i, i+1)
			}
			if d, ok := s.Devices[addr]; ok && d.Pool == p.Pool {
				d.Pool = s.listing(addr, p.Pool)
				s.Devices[addr] = d
			}
		}
		for _, addr := range p.Added {
			if i, found := slices.BinarySearch(members, addr); !found {
				members = slices.Insert(members, i, addr)
			}
			d, ok := s.Devices[addr]
			if !ok {
				d.Facts.Address = addr
				d.Present = true
				d.Healthy = true
			}
			d.Pool = p.Pool
			s.Devices[addr] = d
		}
		pool.Members = members
		// Devices leaving a pool that is gone (a config dropped it first)
		// must not bring it back.
		if known || len(members) > 0 {
			s.Pools[p.Pool] = pool
		}
	case PluginServing:
		// A pool the config dropped may still serve, or be registered,
		// until it has stopped: that must not bring it back either.
		pool, ok := s.Pools[p.Pool]
		if !ok {
			break
		}
		pool.Spec.Resource = p.Pool
		pool.Registration.Socket = p.Socket
		pool.Registration.Mode = p.Mode
		pool.Registration.Serving = true
		pool.Registration.Registered = false
		s.Pools[p.Pool] = pool
	case PluginRegistered:
		// The kubelet's answer may come after the pool stopped serving on
		// that socket (dropped, withdrawn, or on a new socket since): it
		// registers nothing then.
		pool, ok := s.Pools[p.Pool]
		if !ok || !pool.Registration.Serving || pool.Registration.Socket != p.Socket {
			break
		}
		pool.Registration.Mode = p.Mode
		pool.Registration.Registered = true
		pool.Registration.RegisteredAt = e.Time
		pool.Registration.LastError = ""
		s.Pools[p.Pool] = pool
	case RegistrationFailed:
		pool, ok := s.Pools[p.Pool]
		if !ok {
			break
		}
		pool.Registration.Registered = false
		pool.Registration.Failures++
		pool.Registration.LastError = p.Error
		s.Pools[p.Pool] = pool
	case KubeletStopped:
		if !s.Kubelet.Down {
			s.Kubelet.Down, s.Kubelet.DownSince = true, e.Time
		}
		for name, pool := range s.Pools {
			pool.Registration.Registered = false
			s.Pools[name] = pool
		}
	case KubeletRestarted:
		s.Kubelet.Restarts++
		s.Kubelet.LastRestart = e.Time
		if k := &s.Kubelet; k.Down {
			// Only a recorded stop makes an outage: a ledger of a build
			// that recorded none folds as before.
			k.Outages++
			// A restart stamped before its stop (a node rebooted with
			// its clock behind) lasted no time the ledger can tell.
			k.Downtime += max(e.Time.Sub(k.DownSince), 0)
			k.LastOutage = Span{From: k.DownSince, To: e.Time}
			k.Down, k.DownSince = false, time.Time{}
		}
		for name, pool := range s.Pools {
			pool.Registration.Registered = false
			s.Pools[name] = pool
		}
	case SocketLost, PluginWithdrawn:
		name := e.Pool()
		if pool, ok := s.Pools[name]; ok {
			pool.Registration.Serving = false
			pool.Registration.Registered = false
			s.Pools[name] = pool
		}
	case DevicesAllocated:
		ids := slices.Clone(p.DeviceIDs)
		for _, seq := range p.Supersedes {
			s.release(seq)
		}
		s.Allocations[e.Seq] = Allocation{Seq: e.Seq, Pool: p.Pool, DeviceIDs: ids, At: e.Time}
		hold(s.Holders, e.Seq, ids)
	case AllocationRecovered:
		ids := slices.Clone(p.DeviceIDs)
		s.Allocations[e.Seq] = Allocation{Seq: e.Seq, Pool: p.Pool, DeviceIDs: ids, At: e.Time, Recovered: true,
			Binding: &Binding{Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, At: e.Time}}
		hold(s.Holders, e.Seq, ids)
	case AllocationConflict:
		// Recorded for the history; the claims it names are already in the
		// fold through their own events.
	case AllocationBound:
		if a, ok := s.Allocations[p.AllocationSeq]; ok {
			a.Binding = &Binding{Namespace: p.Namespace, Pod: p.Pod, UID: p.UID, Container: p.Container, At: e.Time}
			s.Allocations[p.AllocationSeq] = a
		}
	case DevicesReleased:
		s.release(p.AllocationSeq)
	case AllocationLeakSuspected:
		if a, ok := s.Allocations[p.AllocationSeq]; ok {
			a.LeakSuspected = true
			s.Allocations[p.AllocationSeq] = a
		}
	case AttributionChanged:
		s.Attribution = AttributionState{Available: p.Available, Reason: p.Reason, Since: e.Time}
	case LedgerDamaged, DamageAcknowledged:
		s.Ledger = ApplyLedger(s.Ledger, p)
	case SnapshotTaken, EventsDropped, EventLost:
		// Facts about the ledger itself; the fold is unchanged.
	}
	if e.BootID != "" && e.BootID == s.Daemon.BootID {
		s.Daemon.LastSeq, s.Daemon.LastAt = e.Seq, e.Time
	}
	return s
}

// release ends the live allocation seq, if it is one: its devices are free
// of it.
func (s State) release(seq uint64) {
	if a, ok := s.Allocations[seq]; ok {
		unhold(s.Holders, seq, a.DeviceIDs)
		delete(s.Allocations, seq)
	}
}

// Clone returns a deep copy of s that shares nothing with it.
func (s State) Clone() State {
	c := s
	c.Config.LastError = slices.Clone(s.Config.LastError)
	c.Pools = make(map[string]Pool, len(s.Pools))
	for k, p := range s.Pools {
		p.Members = slices.Clone(p.Members)
		c.Pools[k] = p
	}
	c.Devices = make(map[string]Device, len(s.Devices))
	for k, d := range s.Devices {
		d.Facts = d.Facts.clone()
		c.Devices[k] = d
	}
	c.Allocations = make(map[uint64]Allocation, len(s.Allocations))
	for k, a := range s.Allocations {
		a.DeviceIDs = slices.Clone(a.DeviceIDs)
		if a.Binding != nil {
			b := *a.Binding
			a.Binding = &b
		}
		c.Allocations[k] = a
	}
	c.Holders = make(map[string][]uint64, len(s.Holders))
	for k, h := range s.Holders {
		c.Holders[k] = slices.Clone(h)
	}
	c.Ledger.Damage, c.Ledger.Acknowledged = slices.Clone(s.Ledger.Damage), slices.Clone(s.Ledger.Acknowledged)
	return c
}

// Equal reports whether two states hold the same facts. Nil and empty slices
// and maps are equal; times compare by instant.
func (s State) Equal(o State) bool {
	a, errA := MarshalState(s)
	b, errB := MarshalState(o)
	return errA == nil && errB == nil && string(a) == string(b)
}

// snapshotFormat is the version of the snapshot encoding written by
// MarshalState. UnmarshalState reads it and every older one. Format 2
// added Device.HealthSeq; a format-1 snapshot has none (0). Format 3 added
// DaemonState.StoppedAt, which the fold takes from DaemonStopped; a
// format-2 snapshot has none until the next stop. Format 4 is the first
// whose number names one shape: builds that wrote format 3 added, without
// a new number, DaemonState's LastSeq, LastAt, KernelBootID and Reboots
// and KubeletState's Down, DownSince, Outages, Downtime and LastOutage, so
// a format-3 snapshot may lack any of them. Any change to the fields of
// State takes a new format (TestSnapshotFieldsHaveTheirFormat), so that a
// build never reads a newer shape as its own: UnmarshalSnapshot refuses a
// field it does not know, as a newer format. So does a change of what the
// fold keeps: format 5 keeps the last 1,024 acknowledged problems
// (LedgerState.Acknowledged) where the builds before kept 32.
const snapshotFormat = 5

type snapshotDoc struct {
	Format int   `json:"format"`
	State  State `json:"state"`
}

// MarshalState encodes a state for a snapshot: canonical JSON (sorted map
// keys, UTC times), with a format version. Equal states encode to equal bytes.
func MarshalState(s State) ([]byte, error) {
	n := normalize(s)
	b, err := json.Marshal(snapshotDoc{Format: snapshotFormat, State: n})
	if err != nil {
		return nil, fmt.Errorf("encode state at seq %d: %w", s.Seq, err)
	}
	return b, nil
}

// ErrSnapshotFormat is returned (wrapped) for a snapshot of a format newer
// than this build reads.
var ErrSnapshotFormat = fmt.Errorf("unsupported snapshot format")

// UnmarshalState decodes a snapshot written by MarshalState. The result is
// ready for Apply.
func UnmarshalState(b []byte) (State, error) {
	s, _, err := UnmarshalSnapshot(b)
	return s, err
}

// UnmarshalSnapshot is UnmarshalState, and says which format the snapshot
// was written in.
func UnmarshalSnapshot(b []byte) (State, int, error) {
	var doc snapshotDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return State{}, 0, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, err)
	}
	if doc.Format < 1 || doc.Format > snapshotFormat {
		return State{}, 0, fmt.Errorf("%w %d (this build reads 1 to %d)", ErrSnapshotFormat, doc.Format, snapshotFormat)
	}
	// It decodes: what a strict decode refuses is a field this build does
	// not know. Its number is one this build reads, its shape is not: a
	// newer build that kept the number (format 3) wrote it.
	strict := json.NewDecoder(bytes.NewReader(b))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&snapshotDoc{}); err != nil {
		return State{}, 0, fmt.Errorf("%w %d of a shape this build does not know (%v): a newer devledger wrote it", ErrSnapshotFormat, doc.Format, err)
	}
	s := doc.State
	if s.Pools == nil {
		s.Pools = map[string]Pool{}
	}
	if s.Devices == nil {
		s.Devices = map[string]Device{}
	}
	if s.Allocations == nil {
		s.Allocations = map[uint64]Allocation{}
	}
	if s.Holders == nil {
		s.Holders = map[string][]uint64{}
	}
	return normalize(s), doc.Format, nil
}

// SnapshotMatches says whether snap, a snapshot of the given format read
// back, holds what fold, the fold of the log up to it, holds, as a build of
// that format folds it. A format-1 snapshot predates Device.HealthSeq, so
// that is left out for it; and so on.
func SnapshotMatches(fold, snap State, format int) bool {
	if format < 2 {
		fold = fold.Clone()
		for addr, d := range fold.Devices {
			d.HealthSeq = 0
			fold.Devices[addr] = d
		}
	}
	if format < 3 {
		fold.Daemon.StoppedAt, snap.Daemon.StoppedAt = time.Time{}, time.Time{}
	}
	if format < 4 {
		// Written, perhaps, before these were folded: neither side has
		// them to compare.
		for _, s := range []*State{&fold, &snap} {
			s.Daemon.LastSeq, s.Daemon.LastAt, s.Daemon.KernelBootID, s.Daemon.Reboots = 0, time.Time{}, "", 0
			k := &s.Kubelet
			k.Down, k.DownSince, k.Outages, k.Downtime, k.LastOutage = false, time.Time{}, 0, 0, Span{}
		}
	}
	if acked := fold.Ledger.Acknowledged; format < 5 && len(acked) > 32 {
		// Its fold kept the last 32; they are the last 32 of this one.
		fold.Ledger.Acknowledged = acked[len(acked)-32:]
	}
	if format <= 5 && snap.Kubelet.Downtime < fold.Kubelet.Downtime {
		// Builds that wrote format 5 or older took an outage whose end
		// the clock stamped before its start from the downtime.
		fold.Kubelet.Downtime = snap.Kubelet.Downtime
	}
	if format < 5 {
		fold, snap = fold.Clone(), snap.Clone()
		// Builds that wrote format 4 or older cleared a device's pool when
		// it left one, though another pool still listed it.
		for addr, d := range fold.Devices {
			if s, ok := snap.Devices[addr]; ok && s.Pool == "" && d.Pool != "" {
				if _, listed := slices.BinarySearch(fold.Pools[d.Pool].Members, addr); listed {
					d.Pool = ""
					fold.Devices[addr] = d
				}
			}
		}
	}
	if format < 4 {
		// Some builds that wrote format 3 let a late PluginServing or
		// PluginRegistered set a pool's registration for a socket it no
		// longer served, and bring back, by its name alone, a pool the
		// config had dropped.
		for name, p := range snap.Pools {
			if _, ok := fold.Pools[name]; !ok && p.Spec == (PoolSpec{Resource: name}) && len(p.Members) == 0 {
				delete(snap.Pools, name)
			}
		}
		for _, s := range []*State{&fold, &snap} {
			for name, p := range s.Pools {
				p.Registration = Registration{}
				s.Pools[name] = p
			}
		}
	}
	return fold.Equal(snap)
}

// normalize makes equal facts look equal: UTC times, empty slices as nil.
func normalize(s State) State {
	s = s.Clone()
	s.Time = utc(s.Time)
	s.Daemon.StartedAt = utc(s.Daemon.StartedAt)
	s.Daemon.StoppedAt = utc(s.Daemon.StoppedAt)
	s.Daemon.LastAt = utc(s.Daemon.LastAt)
	s.Config.AppliedAt = utc(s.Config.AppliedAt)
	s.Kubelet.LastRestart = utc(s.Kubelet.LastRestart)
	s.Kubelet.DownSince = utc(s.Kubelet.DownSince)
	s.Kubelet.LastOutage.From, s.Kubelet.LastOutage.To = utc(s.Kubelet.LastOutage.From), utc(s.Kubelet.LastOutage.To)
	s.Attribution.Since = utc(s.Attribution.Since)
	if len(s.Config.LastError) == 0 {
		s.Config.LastError = nil
	}
	if len(s.Ledger.Damage) == 0 {
		s.Ledger.Damage = nil
	}
	if len(s.Ledger.Acknowledged) == 0 {
		s.Ledger.Acknowledged = nil
	}
	for k, p := range s.Pools {
		p.Registration.RegisteredAt = utc(p.Registration.RegisteredAt)
		if len(p.Members) == 0 {
			p.Members = nil
		}
		s.Pools[k] = p
	}
	for k, d := range s.Devices {
		if len(d.Facts.Interfaces) == 0 {
			d.Facts.Interfaces = nil
		}
		if len(d.Facts.RDMADevices) == 0 {
			d.Facts.RDMADevices = nil
		}
		s.Devices[k] = d
	}
	for k, a := range s.Allocations {
		a.At = utc(a.At)
		if a.Binding != nil {
			a.Binding.At = utc(a.Binding.At)
		}
		if len(a.DeviceIDs) == 0 {
			a.DeviceIDs = nil
		}
		s.Allocations[k] = a
	}
	return s
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// clone returns a copy of d that shares no slice with it.
func (d DeviceFacts) clone() DeviceFacts {
	d.Interfaces = slices.Clone(d.Interfaces)
	d.RDMADevices = slices.Clone(d.RDMADevices)
	return d
}

// listing is the pool, other than except, whose members list addr: the
// first by name, "" if none does. A device that leaves the pool it was
// in may be in another already: two pools record a move each in their
// own time, so in the ledger one pool's join may come before the other's
// leave, or (a move there and back) after it.
func (s *State) listing(addr, except string) string {
	for _, name := range slices.Sorted(maps.Keys(s.Pools)) {
		if _, found := slices.BinarySearch(s.Pools[name].Members, addr); found && name != except {
			return name
		}
	}
	return ""
}
