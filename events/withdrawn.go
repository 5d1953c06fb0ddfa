package events

// The pool that stops serving because it has no devices.

// TypePluginWithdrawn is PluginWithdrawn's type name.
const TypePluginWithdrawn Type = "PluginWithdrawn"

func init() {
	register(TypePluginWithdrawn, 1, map[uint16]func(*reader) Payload{1: decodePluginWithdrawn})
}

// PluginWithdrawn records that a pool stopped serving while the daemon
// runs on: its last device left (and the pool does not advertiseEmpty),
// so its socket is removed and the kubelet drops the resource. The pool
// serves again, with a PluginServing, when a device joins it.
type PluginWithdrawn struct {
	Pool   string `json:"pool"`
	Socket string `json:"socket,omitempty"`
	Reason string `json:"reason"`
}

// EventType implements Payload.
func (PluginWithdrawn) EventType() Type { return TypePluginWithdrawn }

// Subject implements Payload.
func (p PluginWithdrawn) Subject() string { return p.Pool }

func (p PluginWithdrawn) encode(w *writer) {
	w.string(p.Pool)
	w.string(p.Socket)
	w.string(p.Reason)
}

func decodePluginWithdrawn(r *reader) Payload {
	return PluginWithdrawn{Pool: r.string(), Socket: r.string(), Reason: r.string()}
}
