package events

import (
	"math/rand/v2"
	"testing"
)

// TestHealthLearnsTheFold: the verdicts the fold makes, heard in any order
// and some more than once (as actors hear them, from the health checker
// and from the node), leave a Health equal to the fold's own.
func TestHealthLearnsTheFold(t *testing.T) {
	for seed := range uint64(20) {
		s := NewState()
		type heard struct {
			addr string
			v    Verdict
		}
		var verdicts []heard
		for _, e := range genStream(seed, streamLength(t)) {
			before := s.Health()
			s = Apply(s, e)
			for addr, d := range s.Devices {
				// A device the fold meets first in a pool is healthy
				// with no verdict (Seq 0): no event judged it.
				if v := d.Verdict(); v != before[addr] && v.Seq > 0 {
					if !v.Newer(before[addr]) {
						t.Fatalf("seed %d: event #%d (%s) made %s's verdict %+v, not newer than %+v", seed, e.Seq, e.Type, addr, v, before[addr])
					}
					verdicts = append(verdicts, heard{addr, v})
				}
			}
		}
		if len(verdicts) == 0 {
			t.Fatalf("seed %d: the stream made no verdict", seed)
		}
		rng := rand.New(rand.NewPCG(seed, 1))
		rng.Shuffle(len(verdicts), func(i, j int) { verdicts[i], verdicts[j] = verdicts[j], verdicts[i] })
		h := Health{}
		for i, v := range verdicts {
			h.Learn(v.addr, v.v)
			if i%3 == 0 { // heard again, later
				if h.Learn(v.addr, v.v) {
					t.Fatalf("seed %d: a verdict heard again was learnt again", seed)
				}
			}
		}
		for addr, d := range s.Devices {
			if d.HealthSeq == 0 {
				continue
			}
			if h[addr] != d.Verdict() {
				t.Errorf("seed %d: %s: learnt %+v, the fold has %+v", seed, addr, h[addr], d.Verdict())
			}
		}
	}
}

// TestHealthLearn: Learn takes a verdict only if it is newer than the
// one known, and says whether it did; a device's Verdict is all of its
// health, reason included.
func TestHealthLearn(t *testing.T) {
	h := Health{}
	for _, tc := range []struct {
		v    Verdict
		want bool
	}{
		{Verdict{Healthy: true, Seq: 5}, true},
		{Verdict{Healthy: false, Reason: "older", Seq: 4}, false},
		{Verdict{Healthy: false, Reason: "as new", Seq: 5}, false},
		{Verdict{Healthy: false, Reason: "link down", Seq: 6}, true},
	} {
		if got := h.Learn("a", tc.v); got != tc.want {
			t.Errorf("learning %+v: %v, want %v", tc.v, got, tc.want)
		}
	}
	want := Verdict{Healthy: false, Reason: "link down", Seq: 6}
	if h["a"] != want {
		t.Errorf("learnt %+v, want %+v", h["a"], want)
	}
	d := Device{Healthy: false, HealthReason: "link down", HealthSeq: 6}
	if d.Verdict() != want {
		t.Errorf("device verdict %+v, want %+v", d.Verdict(), want)
	}
	s := NewState()
	s.Devices["a"] = d
	if got := s.Health()["a"]; got != want {
		t.Errorf("the fold's health of a: %+v, want %+v", got, want)
	}
}
