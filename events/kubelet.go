package events

// The kubelet going away.

// TypeKubeletStopped is KubeletStopped's type name.
const TypeKubeletStopped Type = "KubeletStopped"

func init() {
	register(TypeKubeletStopped, 1, map[uint16]func(*reader) Payload{1: decodeKubeletStopped})
}

// KubeletStopped records that the kubelet went away: the ListAndWatch
// streams it held ended or never came, a Register did not reach it, or
// its registration socket was removed, and its socket then refused a
// connection, was gone or did not answer. Every registration is void
// from here; the KubeletRestarted of the next kubelet ends the outage.
type KubeletStopped struct {
	Socket string `json:"socket"`
	// Reason says what was seen: "its ListAndWatch streams ended and
	// kubelet.sock refuses connections".
	Reason string `json:"reason"`
}

// EventType implements Payload.
func (KubeletStopped) EventType() Type { return TypeKubeletStopped }

// Subject implements Payload.
func (p KubeletStopped) Subject() string { return p.Socket }

func (p KubeletStopped) encode(w *writer) {
	w.string(p.Socket)
	w.string(p.Reason)
}

func decodeKubeletStopped(r *reader) Payload {
	return KubeletStopped{Socket: r.string(), Reason: r.string()}
}
