package allocation

import (
	"fmt"
	"slices"
	"testing"

	"github.com/devledger/devledger/config"
)

// FuzzPreferred asks Preferred what the kubelet may ask: any available
// and must-include lists, repeats, strays and all, and any size, over the
// members of preferredMembers with some unhealthy, held, held elsewhere,
// in one IOMMU group or on no known node. Each byte of held, available
// and must names one of twelve members or one of four strays. An answer
// must be what Preferred promises: the distinct must-include IDs first,
// in order, then distinct usable members offered, no more than size, and
// the same answer again.
func FuzzPreferred(f *testing.F) {
	f.Add(uint8(0), uint16(0), []byte{}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte{}, 2)
	f.Add(uint8(1), uint16(1<<12|1<<13), []byte{0, 4}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte{11, 11}, 4)
	f.Add(uint8(2), uint16(0x7fff), []byte{1, 2}, []byte{0, 2, 12, 13}, []byte{13, 3}, 3)
	f.Fuzz(func(t *testing.T, policy uint8, flags uint16, heldB, availB, mustB []byte, size int) {
		members := preferredMembers()
		all := ids(members)
		for i, id := range all {
			m := members[id]
			if flags&(1<<i) != 0 {
				m.Healthy = false
			}
			members[id] = m
		}
		if flags&(1<<12) != 0 {
			iommu(members, "7", all[0], all[1], all[2])
			for _, id := range all[:3] {
				m := members[id]
				m.Device.VFIODevice = true
				members[id] = m
			}
		}
		if flags&(1<<13) != 0 {
			numa(members, -1, all[8:]...)
		}
		if flags&(1<<14) != 0 {
			m := members[all[4]]
			m.HeldElsewhere = []Hold{{Pool: "other", Seq: 3}}
			members[all[4]] = m
		}
		name := func(b byte) string {
			if b%16 < 12 {
				return all[b%16]
			}
			return fmt.Sprintf("0000:ff:00.%d", b%16-12)
		}
		names := func(bs []byte) []string {
			var out []string
			for _, b := range bs {
				out = append(out, name(b))
			}
			return out
		}
		held, available, must := names(heldB), names(availB), names(mustB)
		res := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
		res.AllocatePolicy = []config.AllocatePolicy{config.PolicyNone, config.PolicyPacked, config.PolicySpread, ""}[policy%4]

		got, err := preferred(res, members, held, available, must, size)
		if err != nil {
			return
		}
		again, err := preferred(res, members, held, available, must, size)
		if err != nil || !slices.Equal(got, again) {
			t.Fatalf("asked again: %q, %v; first %q", again, err, got)
		}
		if len(got) > size {
			t.Fatalf("%d IDs for size %d: %q", len(got), size, got)
		}
		seen := map[string]bool{}
		for _, id := range got {
			if seen[id] {
				t.Fatalf("%s twice in %q", id, got)
			}
			seen[id] = true
		}
		var wantMust []string
		for _, id := range must {
			if !slices.Contains(wantMust, id) {
				wantMust = append(wantMust, id)
			}
		}
		// Strays come first, then the members, each in the order given.
		var strays, kept []string
		for _, id := range wantMust {
			if _, ok := members[id]; ok {
				kept = append(kept, id)
			} else {
				strays = append(strays, id)
			}
		}
		wantMust = append(strays, kept...)
		if len(got) < len(wantMust) || !slices.Equal(got[:len(wantMust)], wantMust) {
			t.Fatalf("got %q, want it to start with the must-include %q", got, wantMust)
		}
		for _, id := range got[len(wantMust):] {
			m, ok := members[id]
			if !ok || !m.Usable() || !slices.Contains(available, id) {
				t.Fatalf("got %q: %s is not a usable member offered in %q", got, id, available)
			}
		}
	})
}
