package events

// The event a salvaged ledger keeps in place of one it could not read.

// TypeEventLost is EventLost's type name.
const TypeEventLost Type = "EventLost"

func init() {
	register(TypeEventLost, 1, map[uint16]func(*reader) Payload{1: decodeEventLost})
}

// EventLost stands, in a ledger made by `devledger ledger salvage`, at the
// sequence of an event that could not be read from the damaged file: the
// sequence keeps its place, so the events that name it (an allocation's
// binding and release) still name the right one, and the loss is in the
// history for anyone who reads it. Type is the lost event's type when a
// damaged copy of its record still said it, "" when nothing of it was
// found. The fold is unchanged by it: what the lost event did is lost.
type EventLost struct {
	Type   string `json:"type,omitempty"`
	Reason string `json:"reason"`
}

// EventType implements Payload.
func (EventLost) EventType() Type { return TypeEventLost }

// Subject implements Payload.
func (EventLost) Subject() string { return SubjectLedger }

func (p EventLost) encode(w *writer) {
	w.string(p.Type)
	w.string(p.Reason)
}

func decodeEventLost(r *reader) Payload {
	return EventLost{Type: r.string(), Reason: r.string()}
}
