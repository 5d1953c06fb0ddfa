package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
)

const vfio = "intel.com/sriov_vfio"

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

func pod(ns, name, container, resource string, ids ...string) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesapi.ContainerResources{{
		Name:    container,
		Devices: []*podresourcesapi.ContainerDevices{{ResourceName: resource, DeviceIds: ids}},
	}}}
}

// describe renders payloads as one line each, for comparison.
func describe(ps []events.Payload) []string {
	var out []string
	for _, p := range ps {
		switch v := p.(type) {
		case events.AllocationBound:
			out = append(out, fmt.Sprintf("bound #%d %s/%s/%s", v.AllocationSeq, v.Namespace, v.Pod, v.Container))
		case events.DevicesReleased:
			out = append(out, fmt.Sprintf("released #%d after %s: %s", v.AllocationSeq, v.HeldFor, v.Reason))
		case events.AllocationLeakSuspected:
			out = append(out, fmt.Sprintf("leak #%d: %s", v.AllocationSeq, v.Reason))
		case events.AllocationConflict:
			out = append(out, fmt.Sprintf("conflict %s: %s", v.Device, v.Reason))
		case events.AllocationRecovered:
			out = append(out, fmt.Sprintf("recovered %v %s/%s/%s: %s", v.DeviceIDs, v.Namespace, v.Pod, v.Container, v.Reason))
		default:
			out = append(out, fmt.Sprintf("%T", p))
		}
	}
	return out
}

func TestFold(t *testing.T) {
	bound := func(ns, p, c string) *events.Binding {
		return &events.Binding{Namespace: ns, Pod: p, Container: c}
	}
	tests := []struct {
		name     string
		allocs   map[uint64]events.Allocation
		pods     []*podresourcesapi.PodResources
		seen     map[string]bool
		settling bool
		want     []string
	}{
		{
			name:   "a container holds a fresh allocation: bound",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0}},
			pods:   []*podresourcesapi.PodResources{pod("telco", "dpdk-0", "app", vfio, "a")},
			want:   []string{"bound #10 telco/dpdk-0/app"},
		},
		{
			name:   "steady state: nothing",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0, Binding: bound("telco", "dpdk-0", "app")}},
			pods:   []*podresourcesapi.PodResources{pod("telco", "dpdk-0", "app", vfio, "a")},
		},
		{
			name:   "the pod went: released with how long it was held",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-3*time.Hour - 12*time.Minute), Binding: bound("telco", "dpdk-0", "app")}},
			want:   []string{"released #10 after 3h12m0s: telco/dpdk-0/app no longer holds it"},
		},
		{
			name:     "a kubelet just started lists no pod: a bound one is not gone yet",
			allocs:   map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("telco", "dpdk-0", "app")}},
			pods:     []*podresourcesapi.PodResources{pod("other", "p", "c", vfio, "b")},
			settling: true,
		},
		{
			name:     "but one it lists without the device let go of it",
			allocs:   map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("telco", "dpdk-0", "app")}},
			pods:     []*podresourcesapi.PodResources{pod("telco", "dpdk-0", "app", vfio)},
			settling: true,
			want:     []string{"released #10 after 1h0m0s: telco/dpdk-0/app no longer holds it"},
		},
		{
			name:     "a kubelet just started lists no pod: one not claimed past the grace is no leak suspect yet",
			allocs:   map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-10 * time.Minute)}},
			settling: true,
		},
		{
			name:   "not claimed yet, within the grace: nothing",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Minute)}},
		},
		{
			name:   "not claimed past the grace: a leak suspect, once",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-6 * time.Minute)}, 11: {Pool: vfio, DeviceIDs: []string{"b"}, At: t0.Add(-7 * time.Minute), LeakSuspected: true}},
			want:   []string{"leak #10: no container has claimed it for 6m0s"},
		},
		{
			name: "allocated again: the older allocation is superseded, the newer bound",
			allocs: map[uint64]events.Allocation{
				10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("telco", "old", "app")},
				20: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Minute)},
			},
			pods: []*podresourcesapi.PodResources{pod("telco", "new", "app", vfio, "a")},
			want: []string{"released #10 after 1h0m0s: superseded by allocation #20", "bound #20 telco/new/app"},
		},
		{
			name: "allocated again in part: the older allocation stays while its container holds the rest",
			allocs: map[uint64]events.Allocation{
				10: {Pool: vfio, DeviceIDs: []string{"a", "b"}, At: t0.Add(-time.Hour), Binding: bound("telco", "old", "app")},
				20: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Minute), Binding: bound("telco", "new", "app")},
			},
			pods: []*podresourcesapi.PodResources{pod("telco", "old", "app", vfio, "b"), pod("telco", "new", "app", vfio, "a")},
		},
		{
			// PodResources names a pod by namespace and name: a StatefulSet's
			// pod made again while the old one still terminates is listed twice.
			name: "a pod made again under its name, the old one still listed: each allocation bound to it",
			allocs: map[uint64]events.Allocation{
				10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("db", "db-0", "main")},
				20: {Pool: vfio, DeviceIDs: []string{"b"}, At: t0.Add(-time.Minute)},
			},
			pods: []*podresourcesapi.PodResources{pod("db", "db-0", "main", vfio, "a"), pod("db", "db-0", "main", vfio, "b")},
			want: []string{"bound #20 db/db-0/main"},
		},
		{
			name: "and the old one gone: its allocation released, though a kubelet just started lists the name",
			allocs: map[uint64]events.Allocation{
				10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("db", "db-0", "main")},
				20: {Pool: vfio, DeviceIDs: []string{"b"}, At: t0.Add(-time.Minute), Binding: bound("db", "db-0", "main")},
			},
			pods:     []*podresourcesapi.PodResources{pod("db", "db-0", "main", vfio, "b")},
			settling: true,
			want:     []string{"released #10 after 1h0m0s: db/db-0/main no longer holds it"},
		},
		{
			name:   "bound to a container that reports a device of it, though another alone reports another: it stays bound",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a", "b"}, At: t0, Binding: bound("n", "x", "c")}},
			pods:   []*podresourcesapi.PodResources{pod("n", "y", "c", vfio, "a"), pod("n", "x", "c", vfio, "b")},
		},
		{
			name:   "a device in a container and in no live allocation, first seen: nothing yet (its allocation may be on its way)",
			allocs: map[uint64]events.Allocation{},
			pods:   []*podresourcesapi.PodResources{pod("ml", "p", "c", vfio, "z")},
		},
		{
			name:   "the kubelet reports devices the ledger lost, a second time: one allocation recovered per container",
			allocs: map[uint64]events.Allocation{},
			pods: []*podresourcesapi.PodResources{pod("ml", "old-plugin-pod", "c", vfio, "z", "y"),
				pod("ml", "other", "c", vfio, "x")},
			seen: map[string]bool{"lost|" + vfio + "|x|ml/other/c": true, "lost|" + vfio + "|y|ml/old-plugin-pod/c": true,
				"lost|" + vfio + "|z|ml/old-plugin-pod/c": true},
			want: []string{"recovered [x] ml/other/c: the kubelet reports ml/other/c holding it, and the ledger has no live allocation of it",
				"recovered [y z] ml/old-plugin-pod/c: the kubelet reports ml/old-plugin-pod/c holding them, and the ledger has no live allocation of them"},
		},
		{
			name:   "a device the ledger holds is not recovered, the others of the container are",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0, Binding: bound("n", "p", "c")}},
			pods:   []*podresourcesapi.PodResources{pod("n", "p", "c", vfio, "a", "b")},
			seen:   map[string]bool{"lost|" + vfio + "|b|n/p/c": true},
			want:   []string{"recovered [b] n/p/c: the kubelet reports n/p/c holding it, and the ledger has no live allocation of it"},
		},
		{
			name:   "a device in two containers",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0, Binding: bound("n", "p1", "c")}},
			pods:   []*podresourcesapi.PodResources{pod("n", "p1", "c", vfio, "a"), pod("n", "p2", "c", vfio, "a")},
			want:   []string{"conflict a: the kubelet reports the device in 2 containers: n/p1/c, n/p2/c"},
		},
		{
			name:   "a fresh allocation in two containers: a conflict, bound to neither, and no leak",
			allocs: map[uint64]events.Allocation{22: {Pool: vfio, DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour)}},
			pods:   []*podresourcesapi.PodResources{pod("ml", "trainer-1", "main", vfio, "a"), pod("ml", "trainer-0", "main", vfio, "a")},
			want:   []string{"conflict a: the kubelet reports the device in 2 containers: ml/trainer-0/main, ml/trainer-1/main"},
		},
		{
			name:   "devices of other resources are not ours",
			allocs: map[uint64]events.Allocation{},
			pods:   []*podresourcesapi.PodResources{pod("n", "p", "c", "nvidia.com/gpu", "GPU-1")},
		},
		{
			name:   "a live allocation of a pool no longer configured stays while its container holds it",
			allocs: map[uint64]events.Allocation{10: {Pool: "intel.com/gone", DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("telco", "dpdk-0", "app")}},
			pods:   []*podresourcesapi.PodResources{pod("telco", "dpdk-0", "app", "intel.com/gone", "a")},
		},
		{
			name:   "and is released when its container goes",
			allocs: map[uint64]events.Allocation{10: {Pool: "intel.com/gone", DeviceIDs: []string{"a"}, At: t0.Add(-time.Hour), Binding: bound("telco", "dpdk-0", "app")}},
			want:   []string{"released #10 after 1h0m0s: telco/dpdk-0/app no longer holds it"},
		},
		{
			name:   "one device reported on two NUMA nodes is one holder",
			allocs: map[uint64]events.Allocation{10: {Pool: vfio, DeviceIDs: []string{"a", "b"}, At: t0}},
			pods: []*podresourcesapi.PodResources{{Namespace: "n", Name: "p", Containers: []*podresourcesapi.ContainerResources{{Name: "c",
				Devices: []*podresourcesapi.ContainerDevices{{ResourceName: vfio, DeviceIds: []string{"a"}}, {ResourceName: vfio, DeviceIds: []string{"a", "b"}}}}}}},
			want: []string{"bound #10 n/p/c"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seq, a := range tc.allocs {
				a.Seq = seq
				tc.allocs[seq] = a
			}
			seen := tc.seen
			if seen == nil {
				seen = map[string]bool{}
			}
			res := fold(foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: tc.allocs, now: t0, grace: 5 * time.Minute, seen: seen, settling: tc.settling}, tc.pods)
			got := describe(res.payloads)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// bigNode is 1,000 pods holding 2,000 devices, every allocation already
// bound: the steady state of a busy node.
func bigNode() (map[uint64]events.Allocation, []*podresourcesapi.PodResources) {
	allocs := map[uint64]events.Allocation{}
	var pods []*podresourcesapi.PodResources
	for i := range 1000 {
		ids := []string{fmt.Sprintf("0000:%02x:%02x.0", i/256, i%256), fmt.Sprintf("0000:%02x:%02x.1", i/256, i%256)}
		ns, name := "ns"+fmt.Sprint(i%20), fmt.Sprintf("pod-%d", i)
		allocs[uint64(i+1)] = events.Allocation{Seq: uint64(i + 1), Pool: vfio, DeviceIDs: ids, At: t0.Add(-time.Hour),
			Binding: &events.Binding{Namespace: ns, Pod: name, Container: "app"}}
		pods = append(pods, pod(ns, name, "app", vfio, ids...))
	}
	return allocs, pods
}

func TestFoldSteadyStateOfABusyNodeWritesNothing(t *testing.T) {
	allocs, pods := bigNode()
	res := fold(foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}, pods)
	if len(res.payloads) != 0 {
		t.Fatalf("steady state produced %d events: %v", len(res.payloads), describe(res.payloads)[:1])
	}
}

// BenchmarkReconcile folds a PodResources answer of 1,000 pods / 2,000
// devices into the ledger's view when nothing changed (the steady state: no
// events written). Target: under 10 ms per round. The baseline is the least
// any reconciler does with the answer: index every device of our resources
// by (resource, ID) to the container holding it; x-baseline says what
// comparing with the ledger adds to that.
func BenchmarkReconcile(b *testing.B) {
	allocs, pods := bigNode()
	pools := map[string]bool{vfio: true}
	var base, ours time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		index := make(map[key]holderRef)
		for _, p := range pods {
			for _, c := range p.GetContainers() {
				for _, d := range c.GetDevices() {
					if pools[d.GetResourceName()] {
						for _, id := range d.GetDeviceIds() {
							index[key{d.GetResourceName(), id}] = holderRef{p.GetNamespace(), p.GetName(), c.GetName()}
						}
					}
				}
			}
		}
		base += time.Since(start)
		start = time.Now()
		res := fold(foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}, pods)
		ours += time.Since(start)
		if len(res.payloads) != 0 || len(index) != 2000 {
			b.Fatalf("steady state wrote %d events", len(res.payloads))
		}
		n++
	}
	b.ReportMetric(float64(ours.Nanoseconds())/float64(n)/1e6, "ms/round")
	b.ReportMetric(float64(base.Nanoseconds())/float64(n)/1e6, "baseline-ms/round")
	b.ReportMetric(float64(ours)/float64(base), "x-baseline")
	b.ReportMetric(0, "events/round")
}

// A device the kubelet reports and no live allocation holds is recovered
// on the second round that finds it so, not the first: an Allocate the
// kubelet was answered may not have reached the reconciler yet. One that
// an allocation holds by the second round is not recovered.
func TestRecoveryNeedsTwoSightings(t *testing.T) {
	pods := []*podresourcesapi.PodResources{pod("ml", "p", "c", vfio, "z")}
	in := foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: map[uint64]events.Allocation{}, now: t0, grace: time.Minute, seen: map[string]bool{}}
	first := fold(in, pods)
	if len(first.payloads) != 0 {
		t.Fatalf("first sight recorded %v", describe(first.payloads))
	}
	in.seen = first.seen
	if got := describe(fold(in, pods).payloads); len(got) != 1 || !strings.HasPrefix(got[0], "recovered [z] ml/p/c") {
		t.Errorf("second sight: %v, want z recovered", got)
	}
	in.allocs = map[uint64]events.Allocation{7: {Pool: vfio, DeviceIDs: []string{"z"}, At: t0}}
	for _, p := range describe(fold(in, pods).payloads) {
		if strings.HasPrefix(p, "recovered") {
			t.Errorf("recovered %s although allocation #7 holds it now", p)
		}
	}
}

// A kubelet that has just started lists the pods of a standing conflict
// only once it has synced them: the conflict is still the one recorded,
// not a new one.
func TestAStandingConflictIsNotRecordedAgainAfterTheKubeletSettles(t *testing.T) {
	pods := []*podresourcesapi.PodResources{pod("ml", "trainer-0", "main", vfio, "x"), pod("ml", "trainer-1", "main", vfio, "x")}
	allocs := map[uint64]events.Allocation{22: {Seq: 22, Pool: vfio, DeviceIDs: []string{"x"}, At: t0.Add(-time.Hour),
		Binding: &events.Binding{Namespace: "ml", Pod: "trainer-1", Container: "main"}}}
	in := foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}
	first := fold(in, pods)
	if len(first.payloads) != 1 {
		t.Fatalf("first round recorded %q, want the conflict alone", describe(first.payloads))
	}
	in.seen, in.settling = first.seen, true
	restarted := fold(in, nil) // the kubelet restarts and lists no pod yet
	if len(restarted.payloads) != 0 {
		t.Fatalf("a kubelet that lists no pod yet recorded %q", describe(restarted.payloads))
	}
	in.seen, in.settling = restarted.seen, false
	if got := describe(fold(in, pods).payloads); len(got) != 0 {
		t.Errorf("the same conflict, listed again once the kubelet has its pods, recorded %q", got)
	}
}

// The kubelet lists pods in a map's order, new at every List. A standing
// conflict is recorded once, whatever the order, names the allocation
// only as the claim of the container it is bound to, and moves no
// binding.
func TestAConflictReadsTheSameInAnyOrder(t *testing.T) {
	a, b := pod("ml", "trainer-0", "main", vfio, "x"), pod("ml", "trainer-1", "main", vfio, "x")
	allocs := map[uint64]events.Allocation{22: {Seq: 22, Pool: vfio, DeviceIDs: []string{"x"}, At: t0.Add(-time.Hour),
		Binding: &events.Binding{Namespace: "ml", Pod: "trainer-1", Container: "main"}}}
	seen := map[string]bool{}
	for round, pods := range [][]*podresourcesapi.PodResources{{a, b}, {b, a}, {a, b}} {
		res := fold(foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: seen}, pods)
		seen = res.seen
		if round > 0 {
			if len(res.payloads) > 0 {
				t.Errorf("round %d, the same pods listed in another order, recorded %q", round+1, describe(res.payloads))
			}
			continue
		}
		if len(res.payloads) != 1 {
			t.Fatalf("round 1 recorded %q, want the conflict alone", describe(res.payloads))
		}
		c := res.payloads[0].(events.AllocationConflict)
		for _, cl := range c.Claims {
			if want := map[string]uint64{"trainer-1": 22}[cl.Pod]; cl.AllocationSeq != want {
				t.Errorf("claim of %s names allocation #%d, want #%d", cl.Pod, cl.AllocationSeq, want)
			}
		}
	}
}

// A device that moved pools while a container held it, and that the new
// pool gave out when nothing there said it was held (the old allocation
// was a leak suspect, claimed again since), is reported by the kubelet
// under both resources: one device in two containers, a conflict,
// recorded once while it stands, named after the pool that gave it out
// last, each allocation the claim of its container.
func TestADeviceClaimedInTwoPoolsIsAConflict(t *testing.T) {
	const dpdk = "intel.com/dpdk"
	pods := []*podresourcesapi.PodResources{pod("telco", "late", "app", vfio, "x"), pod("telco", "new", "app", dpdk, "x")}
	allocs := map[uint64]events.Allocation{
		10: {Seq: 10, Pool: vfio, DeviceIDs: []string{"x"}, At: t0.Add(-time.Hour), LeakSuspected: true,
			Binding: &events.Binding{Namespace: "telco", Pod: "late", Container: "app"}},
		20: {Seq: 20, Pool: dpdk, DeviceIDs: []string{"x"}, At: t0.Add(-time.Minute),
			Binding: &events.Binding{Namespace: "telco", Pod: "new", Container: "app"}},
	}
	in := foldInput{pools: map[string]events.Pool{dpdk: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}
	res := fold(in, pods)
	if len(res.payloads) != 1 {
		t.Fatalf("recorded %q, want the conflict alone", describe(res.payloads))
	}
	c, ok := res.payloads[0].(events.AllocationConflict)
	if !ok || c.Pool != dpdk || c.Device != "x" || len(c.Claims) != 2 {
		t.Fatalf("recorded %+v, want a conflict of x in %s with two claims", res.payloads[0], dpdk)
	}
	for _, cl := range c.Claims {
		if want := map[string]uint64{"late": 10, "new": 20}[cl.Pod]; cl.AllocationSeq != want {
			t.Errorf("claim of %s names allocation #%d, want #%d", cl.Pod, cl.AllocationSeq, want)
		}
	}
	in.seen = res.seen
	if got := describe(fold(in, pods).payloads); len(got) != 0 {
		t.Errorf("the same conflict, listed again, recorded %q", got)
	}
}

// A conflict seen in the round that first attributes its allocations
// names them: each is the claim of the container that alone reports it,
// which the same round binds it to. Here the old pool's allocation was a
// leak suspect when the new pool gave the device out, and neither was
// bound yet.
func TestAConflictNamesTheAllocationsTheRoundBinds(t *testing.T) {
	const dpdk = "intel.com/dpdk"
	pods := []*podresourcesapi.PodResources{pod("telco", "late", "app", vfio, "x"), pod("telco", "new", "app", dpdk, "x")}
	allocs := map[uint64]events.Allocation{
		10: {Seq: 10, Pool: vfio, DeviceIDs: []string{"x"}, At: t0.Add(-time.Hour), LeakSuspected: true},
		20: {Seq: 20, Pool: dpdk, DeviceIDs: []string{"x"}, At: t0.Add(-time.Minute)},
	}
	res := fold(foldInput{pools: map[string]events.Pool{dpdk: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}, pods)
	if got, want := describe(res.payloads)[1:], []string{"bound #10 telco/late/app", "bound #20 telco/new/app"}; !slices.Equal(got, want) {
		t.Errorf("after the conflict, recorded %q, want %q", got, want)
	}
	c, ok := res.payloads[0].(events.AllocationConflict)
	if !ok {
		t.Fatalf("recorded first %+v, want the conflict", res.payloads[0])
	}
	for _, cl := range c.Claims {
		if want := map[string]uint64{"late": 10, "new": 20}[cl.Pod]; cl.AllocationSeq != want {
			t.Errorf("claim of %s names allocation #%d, want #%d", cl.Pod, cl.AllocationSeq, want)
		}
	}
}

// A device two containers report and no live allocation holds is a
// conflict on the second sight, recorded with the recovery of the same
// round: a first sight of it does not hold it back for good.
func TestAConflictOfADeviceNoAllocationHoldsIsRecordedOnTheSecondSight(t *testing.T) {
	pods := []*podresourcesapi.PodResources{pod("telco", "a", "app", vfio, "x"), pod("telco", "b", "app", vfio, "x")}
	in := foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: map[uint64]events.Allocation{},
		now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}
	var rounds [][]string
	for range 2 {
		res := fold(in, pods)
		rounds = append(rounds, describe(res.payloads))
		in.seen = res.seen
	}
	if len(rounds[0]) != 0 {
		t.Errorf("the first sight recorded %q, want nothing", rounds[0])
	}
	if !slices.ContainsFunc(rounds[1], func(d string) bool { return strings.HasPrefix(d, "conflict x: ") }) {
		t.Errorf("the second sight recorded %q, want the conflict of x", rounds[1])
	}
}

// A conflict the kubelet reports before the round has heard of one of
// its allocations (the pool answered the kubelet, which lists the
// container at once, while the node's tell of the grant was still on
// its way) is recorded a round later, as a recovery is: then it names
// the allocation, which the same round binds. Recorded at first sight,
// its claim named none, and the round that heard of the grant recorded
// no conflict again, as the same one stood.
func TestAConflictWaitsARoundForAnAllocationNotHeardOf(t *testing.T) {
	const dpdk = "intel.com/dpdk"
	pods := []*podresourcesapi.PodResources{pod("telco", "old", "app", vfio, "x"), pod("telco", "new", "app", dpdk, "x")}
	recovered := events.Allocation{Seq: 10, Pool: vfio, DeviceIDs: []string{"x"}, At: t0.Add(-time.Minute), Recovered: true,
		Binding: &events.Binding{Namespace: "telco", Pod: "old", Container: "app"}}
	in := foldInput{pools: map[string]events.Pool{dpdk: {}}, allocs: map[uint64]events.Allocation{10: recovered},
		now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}
	var conflicts []events.AllocationConflict
	for round := range 3 {
		if round == 1 { // told of the grant
			in.allocs = map[uint64]events.Allocation{10: recovered, 20: {Seq: 20, Pool: dpdk, DeviceIDs: []string{"x"}, At: t0}}
		}
		res := fold(in, pods)
		for _, p := range res.payloads {
			if c, ok := p.(events.AllocationConflict); ok {
				conflicts = append(conflicts, c)
			}
		}
		in.seen = res.seen
	}
	if len(conflicts) != 1 {
		t.Fatalf("recorded %d conflicts of x, want one", len(conflicts))
	}
	for _, cl := range conflicts[0].Claims {
		if want := map[string]uint64{"old": 10, "new": 20}[cl.Pod]; cl.AllocationSeq != want {
			t.Errorf("claim of %s names allocation #%d, want #%d", cl.Pod, cl.AllocationSeq, want)
		}
	}
}

// A device reported under two pools is a conflict named after the pool
// of its newest live allocation, whichever of the pools' names sorts
// first.
func TestACrossPoolConflictIsNamedAfterTheNewestAllocation(t *testing.T) {
	const dpdk = "intel.com/dpdk" // sorts before vfio
	pods := []*podresourcesapi.PodResources{pod("telco", "old", "app", dpdk, "x"), pod("telco", "new", "app", vfio, "x")}
	allocs := map[uint64]events.Allocation{
		10: {Seq: 10, Pool: dpdk, DeviceIDs: []string{"x"}, At: t0.Add(-time.Hour),
			Binding: &events.Binding{Namespace: "telco", Pod: "old", Container: "app"}},
		20: {Seq: 20, Pool: vfio, DeviceIDs: []string{"x"}, At: t0.Add(-time.Minute),
			Binding: &events.Binding{Namespace: "telco", Pod: "new", Container: "app"}},
	}
	res := fold(foldInput{pools: map[string]events.Pool{vfio: {}}, allocs: allocs, now: t0, grace: 5 * time.Minute, seen: map[string]bool{}}, pods)
	if len(res.payloads) != 1 {
		t.Fatalf("recorded %q, want the conflict alone", describe(res.payloads))
	}
	if c, ok := res.payloads[0].(events.AllocationConflict); !ok || c.Pool != vfio {
		t.Errorf("recorded %+v, want a conflict named after %s, whose allocation #20 is the newest", res.payloads[0], vfio)
	}
}
