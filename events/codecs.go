package events

// Per-type codecs, current schema versions, and the catalog registration.
// A decoder reads exactly the fields its version wrote, in order.

func init() {
	register(TypeDaemonStarted, 2, map[uint16]func(*reader) Payload{1: decodeDaemonStartedV1, 2: decodeDaemonStarted})
	register(TypeDaemonStopped, 1, map[uint16]func(*reader) Payload{1: decodeDaemonStopped})
	register(TypeConfigApplied, 2, map[uint16]func(*reader) Payload{1: decodeConfigAppliedV1, 2: decodeConfigApplied})
	register(TypeConfigRejected, 1, map[uint16]func(*reader) Payload{1: decodeConfigRejected})
	register(TypeDeviceDiscovered, 1, map[uint16]func(*reader) Payload{1: decodeDeviceDiscovered})
	register(TypeDeviceChanged, 1, map[uint16]func(*reader) Payload{1: decodeDeviceChanged})
	register(TypeDeviceRemoved, 1, map[uint16]func(*reader) Payload{1: decodeDeviceRemoved})
	register(TypeDeviceHealthChanged, 1, map[uint16]func(*reader) Payload{1: decodeDeviceHealthChanged})
	register(TypePoolMembershipChanged, 1, map[uint16]func(*reader) Payload{1: decodePoolMembershipChanged})
	register(TypePluginServing, 1, map[uint16]func(*reader) Payload{1: decodePluginServing})
	register(TypePluginRegistered, 1, map[uint16]func(*reader) Payload{1: decodePluginRegistered})
	register(TypeRegistrationFailed, 2, map[uint16]func(*reader) Payload{1: decodeRegistrationFailedV1, 2: decodeRegistrationFailed})
	register(TypeKubeletRestarted, 2, map[uint16]func(*reader) Payload{1: decodeKubeletRestartedV1, 2: decodeKubeletRestarted})
	register(TypeSocketLost, 1, map[uint16]func(*reader) Payload{1: decodeSocketLost})
	register(TypeDevicesAllocated, 2, map[uint16]func(*reader) Payload{1: decodeDevicesAllocatedV1, 2: decodeDevicesAllocated})
	register(TypeAllocationConflict, 1, map[uint16]func(*reader) Payload{1: decodeAllocationConflict})
	register(TypeAllocationBound, 1, map[uint16]func(*reader) Payload{1: decodeAllocationBound})
	register(TypeDevicesReleased, 1, map[uint16]func(*reader) Payload{1: decodeDevicesReleased})
	register(TypeSnapshotTaken, 1, map[uint16]func(*reader) Payload{1: decodeSnapshotTaken})
	register(TypeEventsDropped, 1, map[uint16]func(*reader) Payload{1: decodeEventsDropped})
}

// EventType implements Payload.
func (DaemonStarted) EventType() Type { return TypeDaemonStarted }

// Subject implements Payload.
func (DaemonStarted) Subject() string { return SubjectDaemon }

func (p DaemonStarted) encode(w *writer) {
	w.string(p.Version)
	w.string(p.Node)
	w.int(p.PID)
	w.string(p.ConfigPath)
	w.string(p.SysfsRoot)
	w.string(p.KubeletDir)
	w.string(p.Registration)
	w.string(p.KernelBootID)
}

func decodeDaemonStarted(r *reader) Payload {
	p := decodeDaemonStartedV1(r).(DaemonStarted)
	p.KernelBootID = r.string()
	return p
}

// decodeDaemonStartedV1 reads a record written before starts noted the
// kernel's boot id.
func decodeDaemonStartedV1(r *reader) Payload {
	return DaemonStarted{Version: r.string(), Node: r.string(), PID: r.int(), ConfigPath: r.string(),
		SysfsRoot: r.string(), KubeletDir: r.string(), Registration: r.string()}
}

// EventType implements Payload.
func (DaemonStopped) EventType() Type { return TypeDaemonStopped }

// Subject implements Payload.
func (DaemonStopped) Subject() string { return SubjectDaemon }

func (p DaemonStopped) encode(w *writer) {
	w.string(p.Reason)
	w.bool(p.Clean)
}

func decodeDaemonStopped(r *reader) Payload {
	return DaemonStopped{Reason: r.string(), Clean: r.bool()}
}

// EventType implements Payload.
func (ConfigApplied) EventType() Type { return TypeConfigApplied }

// Subject implements Payload.
func (ConfigApplied) Subject() string { return SubjectConfig }

func (p ConfigApplied) encode(w *writer) {
	w.string(p.Path)
	w.string(p.SHA256)
	w.uvarint(uint64(len(p.Pools)))
	for _, s := range p.Pools {
		w.string(s.Resource)
		w.string(s.DeviceType)
		w.bool(s.ExcludeTopology)
		w.string(s.AllocatePolicy)
		w.string(s.Definition)
	}
	w.uvarint(uint64(len(p.Changes)))
	for _, c := range p.Changes {
		w.string(c.Pool)
		w.string(c.Change)
		w.strings(c.Fields)
		w.strings(c.Joined)
		w.strings(c.Left)
	}
}

func decodeConfigApplied(r *reader) Payload {
	p := decodeConfigAppliedV1(r).(ConfigApplied)
	if n := r.length(5); n > 0 {
		p.Changes = make([]PoolChange, n)
		for i := range p.Changes {
			p.Changes[i] = PoolChange{Pool: r.string(), Change: r.string(), Fields: r.strings(), Joined: r.strings(), Left: r.strings()}
		}
	}
	return p
}

// decodeConfigAppliedV1 reads a record written before a config's changes
// were recorded: it names none.
func decodeConfigAppliedV1(r *reader) Payload {
	p := ConfigApplied{Path: r.string(), SHA256: r.string()}
	if n := r.length(5); n > 0 {
		p.Pools = make([]PoolSpec, n)
		for i := range p.Pools {
			p.Pools[i] = PoolSpec{Resource: r.string(), DeviceType: r.string(), ExcludeTopology: r.bool(),
				AllocatePolicy: r.string(), Definition: r.string()}
		}
	}
	return p
}

// EventType implements Payload.
func (ConfigRejected) EventType() Type { return TypeConfigRejected }

// Subject implements Payload.
func (ConfigRejected) Subject() string { return SubjectConfig }

func (p ConfigRejected) encode(w *writer) {
	w.string(p.Path)
	w.string(p.SHA256)
	w.strings(p.Errors)
}

func decodeConfigRejected(r *reader) Payload {
	return ConfigRejected{Path: r.string(), SHA256: r.string(), Errors: r.strings()}
}

// EventType implements Payload.
func (DeviceDiscovered) EventType() Type { return TypeDeviceDiscovered }

// Subject implements Payload.
func (p DeviceDiscovered) Subject() string { return p.Device.Address }

func (p DeviceDiscovered) encode(w *writer) { p.Device.encode(w) }

func decodeDeviceDiscovered(r *reader) Payload {
	var p DeviceDiscovered
	p.Device.decode(r)
	return p
}

// EventType implements Payload.
func (DeviceChanged) EventType() Type { return TypeDeviceChanged }

// Subject implements Payload.
func (p DeviceChanged) Subject() string { return p.Device.Address }

func (p DeviceChanged) encode(w *writer) {
	p.Device.encode(w)
	w.strings(p.Changed)
}

func decodeDeviceChanged(r *reader) Payload {
	var p DeviceChanged
	p.Device.decode(r)
	p.Changed = r.strings()
	return p
}

// EventType implements Payload.
func (DeviceRemoved) EventType() Type { return TypeDeviceRemoved }

// Subject implements Payload.
func (p DeviceRemoved) Subject() string { return p.Address }

func (p DeviceRemoved) encode(w *writer) {
	w.string(p.Address)
	w.string(p.Reason)
}

func decodeDeviceRemoved(r *reader) Payload {
	return DeviceRemoved{Address: r.string(), Reason: r.string()}
}

// EventType implements Payload.
func (DeviceHealthChanged) EventType() Type { return TypeDeviceHealthChanged }

// Subject implements Payload.
func (p DeviceHealthChanged) Subject() string { return p.Address }

func (p DeviceHealthChanged) encode(w *writer) {
	w.string(p.Address)
	w.bool(p.Healthy)
	w.string(p.Reason)
}

func decodeDeviceHealthChanged(r *reader) Payload {
	return DeviceHealthChanged{Address: r.string(), Healthy: r.bool(), Reason: r.string()}
}

// EventType implements Payload.
func (PoolMembershipChanged) EventType() Type { return TypePoolMembershipChanged }

// Subject implements Payload.
func (p PoolMembershipChanged) Subject() string { return p.Pool }

func (p PoolMembershipChanged) encode(w *writer) {
	w.string(p.Pool)
	w.strings(p.Added)
	w.strings(p.Removed)
	w.string(p.Reason)
}

func decodePoolMembershipChanged(r *reader) Payload {
	return PoolMembershipChanged{Pool: r.string(), Added: r.strings(), Removed: r.strings(), Reason: r.string()}
}

// EventType implements Payload.
func (PluginServing) EventType() Type { return TypePluginServing }

// Subject implements Payload.
func (p PluginServing) Subject() string { return p.Pool }

func (p PluginServing) encode(w *writer) {
	w.string(p.Pool)
	w.string(p.Socket)
	w.string(p.Mode)
}

func decodePluginServing(r *reader) Payload {
	return PluginServing{Pool: r.string(), Socket: r.string(), Mode: r.string()}
}

// EventType implements Payload.
func (PluginRegistered) EventType() Type { return TypePluginRegistered }

// Subject implements Payload.
func (p PluginRegistered) Subject() string { return p.Pool }

func (p PluginRegistered) encode(w *writer) {
	w.string(p.Pool)
	w.string(p.Socket)
	w.string(p.Mode)
}

func decodePluginRegistered(r *reader) Payload {
	return PluginRegistered{Pool: r.string(), Socket: r.string(), Mode: r.string()}
}

// EventType implements Payload.
func (RegistrationFailed) EventType() Type { return TypeRegistrationFailed }

// Subject implements Payload.
func (p RegistrationFailed) Subject() string { return p.Pool }

func (p RegistrationFailed) encode(w *writer) {
	w.string(p.Pool)
	w.string(p.Socket)
	w.string(p.Mode)
	w.string(p.Error)
	w.int(p.Attempt)
	w.string(p.KubeletHolds)
	w.string(p.Action)
}

func decodeRegistrationFailed(r *reader) Payload {
	return RegistrationFailed{Pool: r.string(), Socket: r.string(), Mode: r.string(), Error: r.string(), Attempt: r.int(),
		KubeletHolds: r.string(), Action: r.string()}
}

// decodeRegistrationFailedV1 reads a record written before KubeletHolds and
// Action: the daemon then only retried.
func decodeRegistrationFailedV1(r *reader) Payload {
	return RegistrationFailed{Pool: r.string(), Socket: r.string(), Mode: r.string(), Error: r.string(), Attempt: r.int()}
}

// EventType implements Payload.
func (KubeletRestarted) EventType() Type { return TypeKubeletRestarted }

// Subject implements Payload.
func (p KubeletRestarted) Subject() string { return p.Socket }

func (p KubeletRestarted) encode(w *writer) {
	w.string(p.Socket)
	w.time(p.StoppedAt)
}

func decodeKubeletRestarted(r *reader) Payload {
	return KubeletRestarted{Socket: r.string(), StoppedAt: r.time()}
}

// decodeKubeletRestartedV1 reads a record written before kubelet stops
// were recorded: no stop preceded it.
func decodeKubeletRestartedV1(r *reader) Payload { return KubeletRestarted{Socket: r.string()} }

// EventType implements Payload.
func (SocketLost) EventType() Type { return TypeSocketLost }

// Subject implements Payload.
func (p SocketLost) Subject() string { return p.Pool }

func (p SocketLost) encode(w *writer) {
	w.string(p.Pool)
	w.string(p.Socket)
}

func decodeSocketLost(r *reader) Payload { return SocketLost{Pool: r.string(), Socket: r.string()} }

// EventType implements Payload.
func (DevicesAllocated) EventType() Type { return TypeDevicesAllocated }

// Subject implements Payload.
func (p DevicesAllocated) Subject() string { return p.Pool }

func (p DevicesAllocated) encode(w *writer) {
	w.string(p.Pool)
	w.strings(p.DeviceIDs)
	w.int(p.ContainerIndex)
	p.Response.encode(w)
	w.uvarints(p.Supersedes)
	w.uvarints(p.HeldElsewhere)
	w.strings(p.Unhealthy)
}

func decodeDevicesAllocated(r *reader) Payload {
	p := decodeDevicesAllocatedV1(r).(DevicesAllocated)
	p.Supersedes, p.HeldElsewhere, p.Unhealthy = r.uvarints(), r.uvarints(), r.strings()
	return p
}

// decodeDevicesAllocatedV1 reads a record written before Supersedes,
// HeldElsewhere and Unhealthy: an allocation that superseded another then
// left the release to the reconciler, and a conflict had its own event.
func decodeDevicesAllocatedV1(r *reader) Payload {
	p := DevicesAllocated{Pool: r.string(), DeviceIDs: r.strings(), ContainerIndex: r.int()}
	p.Response.decode(r)
	return p
}

// EventType implements Payload.
func (AllocationConflict) EventType() Type { return TypeAllocationConflict }

// Subject implements Payload.
func (p AllocationConflict) Subject() string { return p.Device }

func (p AllocationConflict) encode(w *writer) {
	w.string(p.Pool)
	w.string(p.Device)
	w.uvarint(uint64(len(p.Claims)))
	for _, c := range p.Claims {
		w.uvarint(c.AllocationSeq)
		w.string(c.Namespace)
		w.string(c.Pod)
		w.string(c.Container)
	}
	w.string(p.Reason)
}

func decodeAllocationConflict(r *reader) Payload {
	p := AllocationConflict{Pool: r.string(), Device: r.string()}
	if n := r.length(4); n > 0 {
		p.Claims = make([]Claim, n)
		for i := range p.Claims {
			p.Claims[i] = Claim{AllocationSeq: r.uvarint(), Namespace: r.string(), Pod: r.string(), Container: r.string()}
		}
	}
	p.Reason = r.string()
	return p
}

// EventType implements Payload.
func (AllocationBound) EventType() Type { return TypeAllocationBound }

// Subject implements Payload.
func (p AllocationBound) Subject() string { return p.Pool }

func (p AllocationBound) encode(w *writer) {
	w.uvarint(p.AllocationSeq)
	w.string(p.Pool)
	w.strings(p.DeviceIDs)
	w.string(p.Namespace)
	w.string(p.Pod)
	w.string(p.UID)
	w.string(p.Container)
}

func decodeAllocationBound(r *reader) Payload {
	return AllocationBound{AllocationSeq: r.uvarint(), Pool: r.string(), DeviceIDs: r.strings(),
		Namespace: r.string(), Pod: r.string(), UID: r.string(), Container: r.string()}
}

// EventType implements Payload.
func (DevicesReleased) EventType() Type { return TypeDevicesReleased }

// Subject implements Payload.
func (p DevicesReleased) Subject() string { return p.Pool }

func (p DevicesReleased) encode(w *writer) {
	w.uvarint(p.AllocationSeq)
	w.string(p.Pool)
	w.strings(p.DeviceIDs)
	w.duration(p.HeldFor)
	w.string(p.Reason)
}

func decodeDevicesReleased(r *reader) Payload {
	if r.forFold {
		// Apply reads only the allocation: it frees the devices the fold
		// has for it, not the ones the event names. The pool is the
		// subject, which unmarshal checks.
		p := DevicesReleased{AllocationSeq: r.uvarint(), Pool: r.string()}
		r.skipStrings()
		r.duration()
		r.rawBytes()
		return p
	}
	return DevicesReleased{AllocationSeq: r.uvarint(), Pool: r.string(), DeviceIDs: r.strings(),
		HeldFor: r.duration(), Reason: r.string()}
}

// EventType implements Payload.
func (SnapshotTaken) EventType() Type { return TypeSnapshotTaken }

// Subject implements Payload.
func (SnapshotTaken) Subject() string { return SubjectLedger }

func (p SnapshotTaken) encode(w *writer) {
	w.uvarint(p.Seq)
	w.int(p.Size)
	w.string(p.Reason)
}

func decodeSnapshotTaken(r *reader) Payload {
	return SnapshotTaken{Seq: r.uvarint(), Size: r.int(), Reason: r.string()}
}

// EventType implements Payload.
func (EventsDropped) EventType() Type { return TypeEventsDropped }

// Subject implements Payload.
func (EventsDropped) Subject() string { return SubjectLedger }

func (p EventsDropped) encode(w *writer) {
	w.uvarint(p.FromSeq)
	w.uvarint(p.ToSeq)
	w.uvarint(p.Count)
	w.varint(p.Bytes)
	w.uvarint(p.SnapshotSeq)
	w.string(p.Reason)
}

func decodeEventsDropped(r *reader) Payload {
	return EventsDropped{FromSeq: r.uvarint(), ToSeq: r.uvarint(), Count: r.uvarint(), Bytes: r.varint(),
		SnapshotSeq: r.uvarint(), Reason: r.string()}
}

// payloadValue returns p as the value the codec and Apply switch on. The
// payloads of the catalog are values, but a pointer to one satisfies Payload
// as well; it is dereferenced here so that a live event built around
// &DevicesAllocated{...} folds and encodes exactly like its replayed value.
// A nil pointer yields nil.
func payloadValue(p Payload) Payload {
	switch v := p.(type) {
	case *DaemonStarted:
		return deref(v)
	case *DaemonStopped:
		return deref(v)
	case *ConfigApplied:
		return deref(v)
	case *ConfigRejected:
		return deref(v)
	case *DeviceDiscovered:
		return deref(v)
	case *DeviceChanged:
		return deref(v)
	case *DeviceRemoved:
		return deref(v)
	case *DeviceHealthChanged:
		return deref(v)
	case *PoolMembershipChanged:
		return deref(v)
	case *PluginServing:
		return deref(v)
	case *PluginRegistered:
		return deref(v)
	case *RegistrationFailed:
		return deref(v)
	case *KubeletRestarted:
		return deref(v)
	case *SocketLost:
		return deref(v)
	case *DevicesAllocated:
		return deref(v)
	case *AllocationConflict:
		return deref(v)
	case *AllocationBound:
		return deref(v)
	case *DevicesReleased:
		return deref(v)
	case *SnapshotTaken:
		return deref(v)
	case *EventsDropped:
		return deref(v)
	case *EventLost:
		return deref(v)
	case *AllocationRecovered:
		return deref(v)
	case *PluginWithdrawn:
		return deref(v)
	case *KubeletStopped:
		return deref(v)
	case *LedgerDamaged:
		return deref(v)
	case *DamageAcknowledged:
		return deref(v)
	case *AllocationLeakSuspected:
		return deref(v)
	case *AttributionChanged:
		return deref(v)
	}
	return p
}

func deref[T Payload](v *T) Payload {
	if v == nil {
		return nil
	}
	return *v
}
