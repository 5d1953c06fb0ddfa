package allocation

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/devledger/devledger/config"
)

// BenchmarkPreferred: GetPreferredAllocation's ranking of one device out of
// a pool of 504 VFs (8 PFs of 63, on two NUMA nodes) of which 100 are held,
// as the kubelet asks it: every free device available, size 1, on an
// Index built once and marked with the held devices, as the pool keeps it
// between calls, with no Allocate pending. Baseline:
// what a plugin that ranks nothing does, the first available members of
// the pool (the bare plugin of test/e2e's device-manager benchmark).
//
//	x-baseline  ours ns/op / the bare pick's, per policy, and with the
//	            caches cold (none-cold)
func BenchmarkPreferred(b *testing.B) {
	members := map[string]*Member{}
	held := map[string][]uint64{} // as events.Holds.Holders
	var available []string
	for p := range 8 {
		pf := fmt.Sprintf("0000:%02x:00.0", 0x17+p*0x10)
		for v := range 63 {
			addr := fmt.Sprintf("0000:%02x:%02x.%d", 0x17+p*0x10, 2+v/8, v%8)
			members[addr] = &Member{Device: vf(addr, pf, v, "iavf", "", p/4), Healthy: true}
			if len(held) < 100 && v%5 == 0 {
				held[addr] = []uint64{uint64(len(held) + 1)}
				continue
			}
			available = append(available, addr)
		}
	}
	bare := func(available []string, size int) []string {
		out := make([]string, 0, size)
		for _, id := range available {
			if len(out) == size {
				break
			}
			if _, ok := members[id]; ok {
				out = append(out, id)
			}
		}
		return out
	}
	// In the daemon the pool's memory is cold when the kubelet asks (it
	// did other work since the last pod), and the request is warm, just
	// decoded: "cold" evicts the caches, by writing over 64 MiB, and then
	// copies the request before each of the two picks it times.
	var junk []byte
	request := func() []string {
		for i := 0; i < len(junk); i += 64 {
			junk[i]++
		}
		if junk == nil {
			return available
		}
		req := make([]string, len(available))
		for i, id := range available {
			req[i] = string([]byte(id))
		}
		return req
	}
	noPending := func(func(string) bool) {}
	for _, tc := range []struct {
		name   string
		policy config.AllocatePolicy
		cold   bool
	}{{"none", config.PolicyNone, false}, {"packed", config.PolicyPacked, false}, {"none-cold", config.PolicyNone, true}} {
		b.Run(tc.name, func(b *testing.B) {
			res := pool("intel.com", "sriov", config.NetDevice)
			res.AllocatePolicy = tc.policy
			x := NewIndex(members)
			x.Mark(maps.Keys(held))
			if tc.cold {
				junk = make([]byte, 64<<20)
			}
			var ours, base time.Duration
			for b.Loop() {
				req := request()
				start := time.Now()
				if _, err := x.Preferred(res, noPending, req, nil, 1); err != nil {
					b.Fatal(err)
				}
				ours += time.Since(start)
				req = request()
				start = time.Now()
				if len(bare(req, 1)) != 1 {
					b.Fatal("bare pick found nothing")
				}
				base += time.Since(start)
			}
			b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ours-ns")
			b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "bare-ns")
			b.ReportMetric(float64(ours)/float64(base), "x-baseline")
		})
	}
}
