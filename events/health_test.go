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
