package events

import "time"

// Events of the PodResources reconciler that the first catalog lacked.

// Event type names.
const (
	TypeAllocationLeakSuspected Type = "AllocationLeakSuspected"
	TypeAttributionChanged      Type = "AttributionChanged"
)

// SubjectKubelet is the subject of events about the kubelet's PodResources
// service.
const SubjectKubelet = "kubelet"

func init() {
	register(TypeAllocationLeakSuspected, 1, map[uint16]func(*reader) Payload{1: decodeAllocationLeakSuspected})
	register(TypeAttributionChanged, 1, map[uint16]func(*reader) Payload{1: decodeAttributionChanged})
}

// AllocationLeakSuspected records an allocation that no container has
// claimed for Age: the kubelet asked for the devices, and no pod holds them.
// The allocation stays live (the kubelet may still start the container); the
// suspicion is for the operator.
type AllocationLeakSuspected struct {
	AllocationSeq uint64        `json:"allocation_seq"`
	Pool          string        `json:"pool"`
	DeviceIDs     []string      `json:"device_ids"`
	Age           time.Duration `json:"age"`
	Reason        string        `json:"reason,omitempty"`
}

// AttributionChanged records that the kubelet's PodResources service became
// unavailable (old kubelet, feature off, socket absent, errors) or available
// again. While it is unavailable, devices are served but not attributed to
// pods.
type AttributionChanged struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// EventType implements Payload.
func (AllocationLeakSuspected) EventType() Type { return TypeAllocationLeakSuspected }

// Subject implements Payload.
func (p AllocationLeakSuspected) Subject() string { return p.Pool }

func (p AllocationLeakSuspected) encode(w *writer) {
	w.uvarint(p.AllocationSeq)
	w.string(p.Pool)
	w.strings(p.DeviceIDs)
	w.duration(p.Age)
	w.string(p.Reason)
}

func decodeAllocationLeakSuspected(r *reader) Payload {
	return AllocationLeakSuspected{AllocationSeq: r.uvarint(), Pool: r.string(), DeviceIDs: r.strings(),
		Age: r.duration(), Reason: r.string()}
}

// EventType implements Payload.
func (AttributionChanged) EventType() Type { return TypeAttributionChanged }

// Subject implements Payload.
func (AttributionChanged) Subject() string { return SubjectKubelet }

func (p AttributionChanged) encode(w *writer) {
	w.bool(p.Available)
	w.string(p.Reason)
}

func decodeAttributionChanged(r *reader) Payload {
	return AttributionChanged{Available: r.bool(), Reason: r.string()}
}
