package events

// The allocation the kubelet reports and the ledger lacks.

// TypeAllocationRecovered is AllocationRecovered's type name.
const TypeAllocationRecovered Type = "AllocationRecovered"

func init() {
	register(TypeAllocationRecovered, 1, map[uint16]func(*reader) Payload{1: decodeAllocationRecovered})
}

// AllocationRecovered records an allocation the kubelet reports (its
// PodResources: the devices of Pool a container holds) that the ledger has
// no live allocation for: one the ledger lost (a torn write, a backup put
// back, a meta page that fell back to an older transaction), or released
// while the container still held the devices. It is a live allocation from
// here on, at its own sequence number, bound to the container, and ends as
// any other: released when the container goes, or superseded by the next
// Allocate of its devices. Reason says what the daemon knew of it.
type AllocationRecovered struct {
	Pool      string   `json:"pool"`
	DeviceIDs []string `json:"device_ids"`
	Namespace string   `json:"namespace"`
	Pod       string   `json:"pod"`
	Container string   `json:"container"`
	Reason    string   `json:"reason"`
}

// EventType implements Payload.
func (AllocationRecovered) EventType() Type { return TypeAllocationRecovered }

// Subject implements Payload.
func (p AllocationRecovered) Subject() string { return p.Pool }

func (p AllocationRecovered) encode(w *writer) {
	w.string(p.Pool)
	w.strings(p.DeviceIDs)
	w.string(p.Namespace)
	w.string(p.Pod)
	w.string(p.Container)
	w.string(p.Reason)
}

func decodeAllocationRecovered(r *reader) Payload {
	return AllocationRecovered{Pool: r.string(), DeviceIDs: r.strings(), Namespace: r.string(),
		Pod: r.string(), Container: r.string(), Reason: r.string()}
}
