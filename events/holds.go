package events

import "slices"

// Holds are live allocations and the devices they hold: the part of the
// fold (the devices of Allocations, and Holders) that a pool keeps of its
// own allocations. Apply is the fold restricted to one pool; the fold
// changes its Holders with the same functions.
type Holds struct {
	// Devices are the devices of each live allocation; Holders the live
	// allocations that hold each device, ascending.
	Devices map[uint64][]string
	Holders map[string][]uint64
}

// NewHolds returns empty Holds.
func NewHolds() Holds {
	return Holds{Devices: map[uint64][]string{}, Holders: map[string][]uint64{}}
}

// Holds are the fold's live allocations of pool.
func (s *State) Holds(pool string) Holds {
	h := NewHolds()
	for seq, a := range s.Allocations {
		if a.Pool == pool {
			h.Hold(seq, a.DeviceIDs)
		}
	}
	return h
}

// Apply is what e changes in the live allocations of pool, as the fold
// changes them: an allocation of pool, recorded or recovered, holds its
// devices; one superseded or released does not.
func (h Holds) Apply(pool string, e Envelope) {
	switch p := payloadValue(e.Payload).(type) {
	case DevicesAllocated:
		for _, seq := range p.Supersedes {
			h.Release(seq)
		}
		if p.Pool == pool {
			h.Hold(e.Seq, p.DeviceIDs)
		}
	case AllocationRecovered:
		if p.Pool == pool {
			h.Hold(e.Seq, p.DeviceIDs)
		}
	case DevicesReleased:
		h.Release(p.AllocationSeq)
	}
}

// Hold notes the live allocation seq of ids; holding it again (a pool
// that replayed an allocation hears of it once more) changes nothing.
func (h Holds) Hold(seq uint64, ids []string) {
	if _, ok := h.Devices[seq]; !ok {
		h.Devices[seq] = slices.Clone(ids)
	}
	hold(h.Holders, seq, ids)
}

// Release ends the live allocation seq, if it is one.
func (h Holds) Release(seq uint64) {
	unhold(h.Holders, seq, h.Devices[seq])
	delete(h.Devices, seq)
}

// hold adds seq to the holders of ids, in order, once.
func hold(holders map[string][]uint64, seq uint64, ids []string) {
	for _, id := range ids {
		if i, found := slices.BinarySearch(holders[id], seq); !found {
			holders[id] = slices.Insert(holders[id], i, seq)
		}
	}
}

// unhold removes seq from the holders of ids.
func unhold(holders map[string][]uint64, seq uint64, ids []string) {
	for _, id := range ids {
		hs := slices.DeleteFunc(holders[id], func(h uint64) bool { return h == seq })
		if len(hs) == 0 {
			delete(holders, id)
		} else {
			holders[id] = hs
		}
	}
}

// LiveAllocations is a State of s's live allocations only (Allocations
// and Holders, copied): what an actor that follows allocations folds on.
func (s *State) LiveAllocations() State {
	c := State{Allocations: s.Allocations, Holders: s.Holders}.Clone()
	out := NewState()
	out.Allocations, out.Holders = c.Allocations, c.Holders
	return out
}

// Claimed says a live allocation uses its devices: it is not a suspected
// leak, or a container claimed it again since.
func (a Allocation) Claimed() bool { return !a.LeakSuspected || a.Binding != nil }
