package events

import "slices"

// The events of damage the daemon found in its own ledger, and of an
// operator taking note of it.

// TypeLedgerDamaged is LedgerDamaged's type name.
const TypeLedgerDamaged Type = "LedgerDamaged"

// TypeDamageAcknowledged is DamageAcknowledged's type name.
const TypeDamageAcknowledged Type = "DamageAcknowledged"

func init() {
	register(TypeLedgerDamaged, 1, map[uint16]func(*reader) Payload{1: decodeLedgerDamaged})
	register(TypeDamageAcknowledged, 1, map[uint16]func(*reader) Payload{1: decodeDamageAcknowledged})
}

// LedgerDamaged records damage the daemon found in its ledger file: at
// start (a meta page, a snapshot that cannot be read) or in the check it
// runs after start (the page graph, every record's checksum). Problem
// names the damage as the store does: the sequence, or the page and what
// it means. Served says what the daemon did about it ("served from the
// snapshot at seq 4000", "the newest transactions may be missing"). It is
// unacknowledged, and /readyz false, until a DamageAcknowledged.
type LedgerDamaged struct {
	Problem string `json:"problem"`
	Seq     uint64 `json:"seq,omitempty"`
	Served  string `json:"served,omitempty"`
}

// EventType implements Payload.
func (LedgerDamaged) EventType() Type { return TypeLedgerDamaged }

// Subject implements Payload.
func (LedgerDamaged) Subject() string { return SubjectLedger }

func (p LedgerDamaged) encode(w *writer) {
	w.string(p.Problem)
	w.uvarint(p.Seq)
	w.string(p.Served)
}

func decodeLedgerDamaged(r *reader) Payload {
	return LedgerDamaged{Problem: r.string(), Seq: r.uvarint(), Served: r.string()}
}

// DamageAcknowledged records that an operator took note of the damage
// Problems names (`devledger ledger acknowledge`: what was unacknowledged
// when they looked; damage recorded after that stays unacknowledged): the
// daemon is ready again once none is left, and the same damage found at a
// later start is not recorded again.
type DamageAcknowledged struct {
	Problems []string `json:"problems"`
	Note     string   `json:"note,omitempty"`
}

// EventType implements Payload.
func (DamageAcknowledged) EventType() Type { return TypeDamageAcknowledged }

// Subject implements Payload.
func (DamageAcknowledged) Subject() string { return SubjectLedger }

func (p DamageAcknowledged) encode(w *writer) {
	w.strings(p.Problems)
	w.string(p.Note)
}

func decodeDamageAcknowledged(r *reader) Payload {
	return DamageAcknowledged{Problems: r.strings(), Note: r.string()}
}

// LedgerState is the damage recorded in the ledger: Damage the problems
// not acknowledged yet, Acknowledged the last ones acknowledged (at most
// KeepAcknowledged), both oldest first.
type LedgerState struct {
	Damage       []string `json:"damage,omitempty"`
	Acknowledged []string `json:"acknowledged,omitempty"`
}

// KeepAcknowledged bounds LedgerState.Acknowledged. A problem that falls
// out is recorded again when a check finds it, so the bound is well past
// what a ledger still worth keeping (rather than salvaging) has: the
// daemon's check records at most 32 new problems at each start.
const KeepAcknowledged = 1024

// Known says whether problem was recorded already, acknowledged or not.
func (l LedgerState) Known(problem string) bool {
	return slices.Contains(l.Damage, problem) || slices.Contains(l.Acknowledged, problem)
}

// ApplyLedger folds a ledger event into l (events.Apply's part of it); any
// other payload leaves l as it is. l is not modified: the result is new.
func ApplyLedger(l LedgerState, p Payload) LedgerState {
	switch p := p.(type) {
	case LedgerDamaged:
		if !slices.Contains(l.Damage, p.Problem) {
			l.Damage = append(slices.Clone(l.Damage), p.Problem)
		}
	case DamageAcknowledged:
		now := slices.DeleteFunc(slices.Clone(p.Problems), func(s string) bool { return !slices.Contains(l.Damage, s) })
		acked := slices.DeleteFunc(slices.Clone(l.Acknowledged), func(s string) bool { return slices.Contains(now, s) })
		acked = append(acked, now...)
		if len(acked) > KeepAcknowledged {
			acked = acked[len(acked)-KeepAcknowledged:]
		}
		l.Damage = slices.DeleteFunc(slices.Clone(l.Damage), func(s string) bool { return slices.Contains(now, s) })
		l.Acknowledged = acked
		if len(l.Damage) == 0 {
			l.Damage = nil
		}
	}
	return l
}
