package events

import "time"

// The run before that did not stop.

// TypeDaemonCrashed is DaemonCrashed's type name.
const TypeDaemonCrashed Type = "DaemonCrashed"

func init() {
	register(TypeDaemonCrashed, 1, map[uint16]func(*reader) Payload{1: decodeDaemonCrashed})
}

// DaemonCrashed records, at a start, that the run before it (BootID) ended
// without a DaemonStopped: killed, or the node went down. LastSeq is its
// last event. LastAlive is the last moment it is known to have run: the
// later of its last event's time and its liveness mark (the pid file it
// touches every few seconds); it crashed between LastAlive and the start
// that records this.
type DaemonCrashed struct {
	BootID    string    `json:"boot_id"`
	LastSeq   uint64    `json:"last_seq"`
	LastAlive time.Time `json:"last_alive"`
}

// EventType implements Payload.
func (DaemonCrashed) EventType() Type { return TypeDaemonCrashed }

// Subject implements Payload.
func (DaemonCrashed) Subject() string { return SubjectDaemon }

func (p DaemonCrashed) encode(w *writer) {
	w.string(p.BootID)
	w.uvarint(p.LastSeq)
	w.time(p.LastAlive)
}

func decodeDaemonCrashed(r *reader) Payload {
	return DaemonCrashed{BootID: r.string(), LastSeq: r.uvarint(), LastAlive: r.time()}
}
