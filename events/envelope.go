package events

import (
	"errors"
	"fmt"
	"time"
)

// Type names an event type, in the past tense ("DevicesAllocated"). It is the
// name written to the ledger and shown by dump; it never changes once shipped.
type Type string

// Payload is one fact of the catalog. Only the types of this package
// implement it (the interface has unexported methods), so the catalog is
// closed and every payload has an encoder, a decoder and a place in Apply.
type Payload interface {
	// EventType is the type the payload is recorded as.
	EventType() Type
	// Subject names what the event concerns (a pool, a PCI address, a socket
	// path, "daemon"), so tools filter without folding.
	Subject() string

	encode(w *writer)
}

// Envelope is one recorded event: the payload plus where it sits in the
// ledger. Seq is assigned by the store when the event is appended, starting
// at 1 and without gaps; everything else is set by whoever builds the event.
type Envelope struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Type    Type      `json:"type"`
	Version uint16    `json:"version"`
	BootID  string    `json:"boot_id"`
	Subject string    `json:"subject"`
	Payload Payload   `json:"payload"`
}

// New wraps a payload in an envelope stamped with the time, the daemon's boot
// id, the payload's type, subject and current schema version. Seq is left 0
// for the store to assign.
func New(p Payload, at time.Time, bootID string) Envelope {
	return Envelope{
		Time:    at.UTC(),
		Type:    p.EventType(),
		Version: CurrentVersion(p.EventType()),
		BootID:  bootID,
		Subject: p.Subject(),
		Payload: p,
	}
}

// ErrUnknownType is returned (wrapped) for an event type this build does not
// know, as written by a newer devledger.
var ErrUnknownType = errors.New("unknown event type")

// ErrUnknownVersion is returned (wrapped) for a schema version newer than the
// one this build writes for that type.
var ErrUnknownVersion = errors.New("unknown schema version")

// codecV1 is the first byte of every record written by this codec. A record
// starting with anything else was written by another codec.
const codecV1 byte = 1

// Marshal encodes an envelope into its ledger record (without the store's
// checksum). The payload is encoded at its type's current schema version,
// whatever Version says.
func Marshal(e Envelope) ([]byte, error) {
	return AppendMarshal(nil, e)
}

// AppendMarshal is Marshal appending to buf, for callers that reuse buffers.
func AppendMarshal(buf []byte, e Envelope) ([]byte, error) {
	if e.Payload == nil {
		return nil, fmt.Errorf("marshal event %d: no payload", e.Seq)
	}
	t := e.Payload.EventType()
	k, ok := catalog[t]
	if !ok {
		return nil, fmt.Errorf("marshal event %d: %w %q", e.Seq, ErrUnknownType, t)
	}
	w := writer{buf: buf}
	w.buf = append(w.buf, codecV1)
	w.uvarint(e.Seq)
	w.time(e.Time)
	w.string(string(t))
	w.uvarint(uint64(k.version))
	w.string(e.BootID)
	w.string(e.Payload.Subject())
	e.Payload.encode(&w)
	return w.buf, nil
}

// Unmarshal decodes a record written by Marshal, upcasting a payload of an
// older schema version to the current type. The returned envelope's Version
// is the version that was on disk. It never panics; a bad record yields an
// error wrapping ErrCorrupt, ErrUnknownType or ErrUnknownVersion.
func Unmarshal(rec []byte) (Envelope, error) {
	var e Envelope
	if len(rec) == 0 {
		return e, fmt.Errorf("%w: empty record", ErrCorrupt)
	}
	if rec[0] != codecV1 {
		return e, fmt.Errorf("%w: codec byte %d, want %d", ErrCorrupt, rec[0], codecV1)
	}
	r := reader{buf: rec, off: 1}
	e.Seq = r.uvarint()
	e.Time = r.time()
	e.Type = Type(r.string())
	e.Version = r.uint16()
	e.BootID = r.string()
	e.Subject = r.string()
	if r.err != nil {
		return e, r.err
	}
	k, ok := catalog[e.Type]
	if !ok {
		return e, fmt.Errorf("event %d: %w %q", e.Seq, ErrUnknownType, e.Type)
	}
	dec, ok := k.decoders[e.Version]
	if !ok {
		return e, fmt.Errorf("event %d: %s: %w %d (this build reads up to %d)", e.Seq, e.Type, ErrUnknownVersion, e.Version, k.version)
	}
	e.Payload = dec(&r)
	r.end()
	if r.err != nil {
		return e, fmt.Errorf("event %d (%s): %w", e.Seq, e.Type, r.err)
	}
	return e, nil
}

// kind is the codec entry of one event type: its current schema version and
// a decoder for every version ever written, older ones upcasting.
type kind struct {
	version  uint16
	decoders map[uint16]func(*reader) Payload
}

// catalog maps every event type to its codec entry; see catalog.go.
var catalog = map[Type]kind{}

// register adds a type to the catalog; decoders[version] must exist.
func register(t Type, version uint16, decoders map[uint16]func(*reader) Payload) {
	if _, dup := catalog[t]; dup {
		panic("events: type registered twice: " + string(t))
	}
	if decoders[version] == nil {
		panic("events: no decoder for the current version of " + string(t))
	}
	catalog[t] = kind{version: version, decoders: decoders}
}

// CurrentVersion is the schema version this build writes for t, 0 when t is
// not in the catalog.
func CurrentVersion(t Type) uint16 { return catalog[t].version }

// Types lists every event type of the catalog, sorted.
func Types() []Type {
	ts := make([]Type, 0, len(catalog))
	for t := range catalog {
		ts = append(ts, t)
	}
	sortTypes(ts)
	return ts
}

// ParseType returns the catalog type named s, or an error listing the
// accepted names.
func ParseType(s string) (Type, error) {
	if _, ok := catalog[Type(s)]; ok {
		return Type(s), nil
	}
	return "", fmt.Errorf("%w %q (known: %s)", ErrUnknownType, s, joinTypes(Types()))
}
