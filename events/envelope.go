package events

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
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

// The instants the codec can write: nanoseconds since the Unix epoch must fit
// an int64. The zero time is written as 0, so the Unix epoch itself reads back
// as the zero time; no clock of a running daemon says 1970-01-01T00:00:00Z to
// the nanosecond.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// Marshal encodes an envelope into its ledger record (without the store's
// checksum). Type, Subject and Version are taken from the payload and the
// catalog, whatever the envelope says: the payload is encoded at its type's
// current schema version. It fails for a missing payload and for a time
// outside the years 1678 to 2262.
func Marshal(e Envelope) ([]byte, error) {
	return AppendMarshal(nil, e)
}

// AppendMarshal is Marshal appending to buf, for callers that reuse buffers.
// On error it returns buf unchanged.
func AppendMarshal(buf []byte, e Envelope) ([]byte, error) {
	p := payloadValue(e.Payload)
	if p == nil {
		return buf, fmt.Errorf("marshal event %d: no payload", e.Seq)
	}
	t := p.EventType()
	k, ok := catalog[t]
	if !ok {
		return buf, fmt.Errorf("marshal event %d: %w %q", e.Seq, ErrUnknownType, t)
	}
	if !e.Time.IsZero() && (e.Time.Before(minTime) || e.Time.After(maxTime)) {
		return buf, fmt.Errorf("marshal event %d: time %s out of range", e.Seq, e.Time)
	}
	w := writer{buf: buf}
	w.buf = append(w.buf, codecV1)
	w.uvarint(e.Seq)
	w.time(e.Time)
	w.string(string(t))
	w.uvarint(uint64(k.version))
	w.string(e.BootID)
	w.string(p.Subject())
	p.encode(&w)
	return w.buf, nil
}

// Unmarshal decodes a record written by Marshal, upcasting a payload of an
// older schema version to the current type. The returned envelope's Version
// is the version that was on disk. It never panics; a bad record yields an
// error wrapping ErrCorrupt, ErrUnknownType or ErrUnknownVersion. The
// envelope shares no memory with rec. The strings of its payload share one
// copy of the record's payload bytes, which is cheaper to decode than a copy
// each: a string kept (in a State, say) keeps that copy alive.
func Unmarshal(rec []byte) (Envelope, error) { return unmarshal(rec, false) }

// UnmarshalForFold is Unmarshal for a fold: the envelope holds all that
// Apply reads and leaves out what it does not (the container response of
// DevicesAllocated), though that part is checked as strictly, so it
// refuses what Unmarshal refuses. Short strings (pool names, PCI
// addresses) come from a small process-wide cache, so a folded state keeps
// no copy of them per event. Replay and the ledger's check decode each
// record with it; an envelope from it is for Apply, not for showing.
func UnmarshalForFold(rec []byte) (Envelope, error) { return unmarshal(rec, true) }

// PeekType reads the type a record says it is, from its header alone: for
// a damaged record, what it was. ok is false when the header does not
// read, or names no type of the catalog.
func PeekType(rec []byte) (t Type, ok bool) {
	if len(rec) == 0 || rec[0] != codecV1 {
		return "", false
	}
	r := reader{buf: rec, off: 1}
	r.uvarint()
	r.time()
	typ := r.rawBytes()
	if r.err != nil {
		return "", false
	}
	k, ok := catalog[Type(typ)]
	return k.name, ok
}

// unmarshal is Unmarshal; forFold leaves out what Apply does not read.
func unmarshal(rec []byte, forFold bool) (Envelope, error) {
	var e Envelope
	if len(rec) == 0 {
		return e, fmt.Errorf("%w: empty record", ErrCorrupt)
	}
	if rec[0] != codecV1 {
		return e, fmt.Errorf("%w: codec byte %d, want %d", ErrCorrupt, rec[0], codecV1)
	}
	// The decoders are called through function values, so a reader on the
	// stack would escape to the heap: an allocation per record, saved here.
	r := readers.Get().(*reader)
	*r = reader{buf: rec, off: 1, forFold: forFold}
	defer func() {
		*r = reader{}
		readers.Put(r)
	}()
	e.Seq = r.uvarint()
	e.Time = r.time()
	typ := r.rawBytes()
	e.Version = r.uint16()
	e.BootID = r.bootID()
	subject := r.rawBytes()
	if r.err != nil {
		return e, r.err
	}
	// Indexing with the converted bytes does not allocate; the type name is
	// taken from the catalog, so every envelope of a type shares one string.
	k, ok := catalog[Type(typ)]
	if !ok {
		e.Type = Type(typ)
		return e, fmt.Errorf("event %d: %w %q", e.Seq, ErrUnknownType, e.Type)
	}
	e.Type = k.name
	var dec func(*reader) Payload
	if int(e.Version) < len(k.decoders) {
		dec = k.decoders[e.Version]
	}
	if dec == nil {
		if e.Version > k.version {
			return e, fmt.Errorf("event %d: %s: %w %d (this build reads up to %d)", e.Seq, e.Type, ErrUnknownVersion, e.Version, k.version)
		}
		return e, fmt.Errorf("%w: event %d: %s: schema version %d was never written", ErrCorrupt, e.Seq, e.Type, e.Version)
	}
	r.shareText()
	p := dec(r)
	r.end()
	if r.err != nil {
		return e, fmt.Errorf("event %d (%s): %w", e.Seq, e.Type, r.err)
	}
	// The subject is derived from the payload; one that disagrees was not
	// written by Marshal. Taking the payload's string shares its memory.
	if string(subject) != p.Subject() {
		return e, fmt.Errorf("%w: event %d (%s): subject %q, payload says %q", ErrCorrupt, e.Seq, e.Type, subject, p.Subject())
	}
	e.Subject = p.Subject()
	e.Payload = p
	return e, nil
}

// Devices returns the PCI addresses the event concerns: the subject of a
// device event, the device IDs of an allocation event, the added then the
// removed members of a membership change, the contested device of a
// conflict, the devices a config moves; nil for any other event. The slice is the caller's to keep.
func (e Envelope) Devices() []string {
	switch p := payloadValue(e.Payload).(type) {
	case DeviceDiscovered:
		return []string{p.Device.Address}
	case DeviceChanged:
		return []string{p.Device.Address}
	case DeviceRemoved:
		return []string{p.Address}
	case DeviceHealthChanged:
		return []string{p.Address}
	case PoolMembershipChanged:
		return slices.Concat(p.Added, p.Removed)
	case DevicesAllocated:
		return slices.Clone(p.DeviceIDs)
	case AllocationBound:
		return slices.Clone(p.DeviceIDs)
	case AllocationRecovered:
		return slices.Clone(p.DeviceIDs)
	case DevicesReleased:
		return slices.Clone(p.DeviceIDs)
	case AllocationLeakSuspected:
		return slices.Clone(p.DeviceIDs)
	case AllocationConflict:
		return []string{p.Device}
	case ConfigApplied:
		// The devices it moves, once each.
		var out []string
		for _, c := range p.Changes {
			for _, addr := range slices.Concat(c.Joined, c.Left) {
				if !slices.Contains(out, addr) {
					out = append(out, addr)
				}
			}
		}
		return out
	}
	return nil
}

// Pool returns the resource name of the pool the event concerns, "" for an
// event about no single pool (device facts, the daemon, the config, the
// kubelet, the ledger).
func (e Envelope) Pool() string {
	switch p := payloadValue(e.Payload).(type) {
	case PoolMembershipChanged:
		return p.Pool
	case PluginServing:
		return p.Pool
	case PluginRegistered:
		return p.Pool
	case RegistrationFailed:
		return p.Pool
	case SocketLost:
		return p.Pool
	case PluginWithdrawn:
		return p.Pool
	case DevicesAllocated:
		return p.Pool
	case AllocationConflict:
		return p.Pool
	case AllocationBound:
		return p.Pool
	case AllocationRecovered:
		return p.Pool
	case DevicesReleased:
		return p.Pool
	case AllocationLeakSuspected:
		return p.Pool
	}
	return ""
}

var readers = sync.Pool{New: func() any { return new(reader) }}

// kind is the codec entry of one event type: its current schema version and
// a decoder for every version ever written, older ones upcasting.
type kind struct {
	name    Type
	version uint16
	// decoders is indexed by version; nil where none was ever written.
	decoders []func(*reader) Payload
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
	k := kind{name: t, version: version, decoders: make([]func(*reader) Payload, version+1)}
	for v, dec := range decoders {
		if v == 0 || v > version {
			panic(fmt.Sprintf("events: %s: decoder for version %d, current is %d", t, v, version))
		}
		k.decoders[v] = dec
	}
	catalog[t] = k
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
