package events

// Verdict is a device's health as an event of the ledger set it: Seq is
// that event's sequence number (0: none known).
type Verdict struct {
	Healthy bool
	Reason  string
	Seq     uint64
}

// Newer is devledger's one rule for "the newest verdict wins": of two
// verdicts on a device, the one the later event made. The fold applies
// events in order, so every verdict it meets is newer than the device's;
// an actor that hears verdicts from more than one sender (the health
// checker directly, the node with its placements, a scan) keeps them in a
// Health and so by this rule, not by one of its own.
func (v Verdict) Newer(than Verdict) bool { return v.Seq > than.Seq }

// Health is the newest verdict per device address: the projection of the
// fold's Device.Healthy, HealthReason and HealthSeq that actors keep.
type Health map[string]Verdict

// Learn takes v as addr's verdict unless the one known is as new, and says
// whether it did.
func (h Health) Learn(addr string, v Verdict) bool {
	if cur, ok := h[addr]; ok && !v.Newer(cur) {
		return false
	}
	h[addr] = v
	return true
}

// Verdict is the device's health in the fold.
func (d Device) Verdict() Verdict {
	return Verdict{Healthy: d.Healthy, Reason: d.HealthReason, Seq: d.HealthSeq}
}

// setVerdict makes v the device's health if it is the newer: every event
// that judges a device's health sets it here. Events fold in order, so
// it always is; the rule is the one Health keeps.
func (d *Device) setVerdict(v Verdict) {
	if v.Newer(d.Verdict()) {
		d.Healthy, d.HealthReason, d.HealthSeq = v.Healthy, v.Reason, v.Seq
	}
}

// Health is every device's verdict in the fold.
func (s *State) Health() Health {
	h := make(Health, len(s.Devices))
	for addr, d := range s.Devices {
		h[addr] = d.Verdict()
	}
	return h
}
