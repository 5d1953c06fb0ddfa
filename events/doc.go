// Package events is the core of devledger: the immutable facts the daemon
// records (the event catalog), the envelope every event travels in, the binary
// codec that writes them to the ledger, and Apply, the fold that turns a
// sequence of events into the state of the node (pools, devices, health,
// allocations, registrations).
//
// The package imports nothing of devledger's. Everything else depends on it.
//
// Codec. An encoded envelope is a compact binary record: a codec byte, the
// envelope fields, then the payload encoded by its event type at the schema
// version written in the envelope. Every event type has a current schema
// version; decoders for older versions upcast to the current type on read, so
// an old ledger is read, never rewritten. Decoding never panics and allocates
// in proportion to the record's own length, whatever the input: no length is
// trusted beyond the bytes that remain. One value has one encoding (map keys
// sorted, the subject derived from the payload), so a record that decodes
// encodes again to a record that decodes to the same envelope.
//
// The encoded form of every type is pinned by testdata/golden; a diff there is
// a format change, which needs a new schema version and an upcast of the old
// one, never an edit of a shipped decoder.
//
// Apply. Apply(state, envelope) returns the state after the event. It does no
// I/O and reads no clock, so replay and the live daemon compute the same
// state. Like append, it may reuse the maps of the state it is given: callers
// write s = Apply(s, e) and keep no other reference to the old value; Clone
// first to keep one. UnmarshalForFold decodes a record for Apply alone,
// leaving out what Apply does not read: replay decodes with it.
//
// Payloads are the value types of the catalog; a pointer to one is accepted
// everywhere and treated as its value.
package events
