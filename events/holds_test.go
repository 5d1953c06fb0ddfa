package events

import (
	"reflect"
	"testing"
)

// TestHoldsFollowTheFold: for every pool of random event streams, Holds
// that apply each event (as a pool does with what it records and hears)
// equal the fold's live allocations of that pool, every 7 events and at
// the end.
func TestHoldsFollowTheFold(t *testing.T) {
	held := 0
	for seed := range uint64(20) {
		s := NewState()
		hs := map[string]Holds{}
		for _, pool := range streamPools {
			hs[pool] = NewHolds()
		}
		es := genStream(seed, streamLength(t))
		for i, e := range es {
			s = Apply(s, e)
			for pool, h := range hs {
				h.Apply(pool, e)
				if i%7 != 0 && i != len(es)-1 {
					continue
				}
				if want := s.Holds(pool); !reflect.DeepEqual(h, want) {
					t.Fatalf("seed %d, after event #%d (%s), pool %s:\nholds %v\nfold  %v", seed, e.Seq, e.Type, pool, h, want)
				}
				held += len(h.Devices)
			}
		}
	}
	if held == 0 {
		t.Fatal("the streams held nothing")
	}
}

// TestHoldsHoldOnce: a pool that hears again of an allocation it has (a
// replayed one, then the news of it) holds it once.
func TestHoldsHoldOnce(t *testing.T) {
	h := NewHolds()
	h.Hold(7, []string{"a", "b"})
	h.Hold(3, []string{"b"})
	h.Hold(7, []string{"a", "b"})
	want := Holds{Devices: map[uint64][]string{7: {"a", "b"}, 3: {"b"}}, Holders: map[string][]uint64{"a": {7}, "b": {3, 7}}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %v, want %v", h, want)
	}
	h.Release(7)
	h.Release(9) // not held: nothing changes
	want = Holds{Devices: map[uint64][]string{3: {"b"}}, Holders: map[string][]uint64{"b": {3}}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("after releasing 7: got %v, want %v", h, want)
	}
}

// TestLiveAllocations: the copy holds the live allocations and their
// holders, nothing else, and shares nothing with the state it came from.
func TestLiveAllocations(t *testing.T) {
	s := NewState()
	for _, e := range []Envelope{
		ev(1, DeviceDiscovered{Device: facts("0000:3b:02.0")}),
		ev(2, DevicesAllocated{Pool: "intel.com/a", DeviceIDs: []string{"0000:3b:02.0"}}),
	} {
		s = Apply(s, e)
	}
	live := s.LiveAllocations()
	if len(live.Devices) != 0 || !reflect.DeepEqual(live.Allocations, s.Allocations) || !reflect.DeepEqual(live.Holders, s.Holders) {
		t.Fatalf("live allocations %+v of %+v", live, s)
	}
	live = Apply(live, ev(3, DevicesReleased{AllocationSeq: 2, Pool: "intel.com/a"}))
	if len(live.Allocations) != 0 || len(s.Allocations) != 1 || len(s.Holders["0000:3b:02.0"]) != 1 {
		t.Fatalf("a release in the copy: copy %v, state %v / %v", live.Allocations, s.Allocations, s.Holders)
	}
}

func TestAllocationClaimed(t *testing.T) {
	for _, tc := range []struct {
		a    Allocation
		want bool
	}{
		{Allocation{}, true},
		{Allocation{LeakSuspected: true}, false},
		{Allocation{LeakSuspected: true, Binding: &Binding{Pod: "p"}}, true},
	} {
		if got := tc.a.Claimed(); got != tc.want {
			t.Errorf("%+v claimed: %v, want %v", tc.a, got, tc.want)
		}
	}
}

// TestHoldsFollowRecoveredAllocations: an allocation the kubelet reported
// and the ledger lacked holds its devices in its pool's Holds as in the
// fold, until an allocation that supersedes it; Holds keep their own
// copy of the devices.
func TestHoldsFollowRecoveredAllocations(t *testing.T) {
	s := NewState()
	hs := map[string]Holds{poolA: NewHolds(), poolB: NewHolds()}
	ids := []string{dev1, dev2}
	for _, e := range []Envelope{
		ev(1, AllocationRecovered{Pool: poolA, DeviceIDs: ids, Namespace: "ns", Pod: "p", Container: "c"}),
		ev(2, AllocationRecovered{Pool: poolB, DeviceIDs: []string{dev3}, Namespace: "ns", Pod: "q", Container: "c"}),
		ev(3, DevicesAllocated{Pool: poolB, DeviceIDs: []string{dev3}, Supersedes: []uint64{2}}),
	} {
		s = Apply(s, e)
		for pool, h := range hs {
			h.Apply(pool, e)
			if want := s.Holds(pool); !reflect.DeepEqual(h, want) {
				t.Fatalf("after event #%d (%s), pool %s:\nholds %v\nfold  %v", e.Seq, e.Type, pool, h, want)
			}
		}
	}
	if got := hs[poolA].Devices[1]; len(got) != 2 {
		t.Fatalf("pool A holds %v of the recovered allocation, want its 2 devices", got)
	}
	ids[0] = "changed"
	if got := hs[poolA].Devices[1]; got[0] != dev1 {
		t.Errorf("pool A's holds changed with the event's devices: %v", got)
	}
}
