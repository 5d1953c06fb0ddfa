package reconciler

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
)

// FuzzFold feeds arbitrary PodResources answers, as the kubelet's socket
// sends them, to fold over a ledger with live allocations, bound and not,
// in two pools. Whatever it makes of an answer must record (each payload
// encodes and decodes again as it was) and settle: an answer that stays
// the same is reconciled within three rounds, and a fourth records
// nothing.
func FuzzFold(f *testing.F) {
	const dpdk = "intel.com/sriov_dpdk"
	for _, pods := range [][]*podresourcesapi.PodResources{
		nil,
		{pod("ml", "p", "c", vfio, "a")},
		{pod("ml", "p", "c", vfio, "a", "b"), pod("ml", "q", "c", vfio, "b")},
		{pod("ml", "p", "c", vfio, "z"), pod("ml", "q", "c", dpdk, "a")},
		{pod("", "", "", vfio, "", "")},
	} {
		b, err := proto.Marshal(&podresourcesapi.ListPodResourcesResponse{PodResources: pods})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		var resp podresourcesapi.ListPodResourcesResponse
		if proto.Unmarshal(answer, &resp) != nil {
			return
		}
		st := events.NewState()
		at := t0.Add(-time.Hour)
		for i, p := range []events.Payload{
			events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{"a", "b"}},
			events.DevicesAllocated{Pool: dpdk, DeviceIDs: []string{"a"}},
			events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{"c"}},
			events.AllocationBound{AllocationSeq: 3, Pool: vfio, DeviceIDs: []string{"c"}, Namespace: "ml", Pod: "p", Container: "c"},
		} {
			e := events.New(p, at, "boot")
			e.Seq = uint64(i + 1)
			st = events.Apply(st, e)
		}
		pools := map[string]events.Pool{vfio: {}, dpdk: {}}
		seen := map[string]bool{}
		pods := resp.GetPodResources()
		for round := 1; round <= 4; round++ {
			res := fold(foldInput{pools: pools, allocs: st.Clone().Allocations, now: t0, grace: 5 * time.Minute, seen: seen}, pods)
			if round == 4 && len(res.payloads) > 0 {
				t.Fatalf("round 4 of the same answer records %q", describe(res.payloads))
			}
			for _, p := range res.payloads {
				e := events.New(p, t0, "boot")
				e.Seq = st.Seq + 1
				rec, err := events.Marshal(e)
				if err != nil {
					t.Fatalf("round %d: %s cannot be recorded: %v", round, describe([]events.Payload{p}), err)
				}
				back, err := events.Unmarshal(rec)
				if err != nil {
					t.Fatalf("round %d: %s recorded is unreadable: %v", round, describe([]events.Payload{p}), err)
				}
				if got, want := fmt.Sprintf("%#v", back.Payload), fmt.Sprintf("%#v", p); got != want {
					t.Fatalf("round %d: recorded\n%s\nreads back as\n%s", round, want, got)
				}
				st = events.Apply(st, e)
			}
			seen = res.seen
		}
	})
}
