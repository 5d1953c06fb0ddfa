package e2e

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// The suite's topology tests run the kubelet's real topology manager (see
// kubeletOptions.topologyPolicy) over the device manager and the daemon, as
// platform teams run SR-IOV DPDK pods: CPU manager static, Topology Manager
// single-numa-node or restricted. The device plugin's NUMA hints then
// decide admission. What they check is what the kubelet and the SR-IOV
// network device plugin (pkg/devices/api.go NewAPIDeviceImpl: a device
// whose NUMA node is below 0, or of a pool with excludeTopology, has no
// Topology) do together.

// Topology Manager policies (pkg/kubelet/cm/topologymanager).
const (
	policySingleNUMANode = topologymanager.PolicySingleNumaNode
	policyRestricted     = topologymanager.PolicyRestricted
	policyBestEffort     = topologymanager.PolicyBestEffort
)

// allVFIOConfig pools every vfio-pci VF of the sriov node: 0000:3b:01.2
// and .3 on NUMA node 0, 0000:af:01.1, .2 and .3 on NUMA node 1.
const allVFIOConfig = `resourceList:
  - resourceName: intel_sriov_dpdk
    selectors:
      - vendors: ["8086"]
        devices: ["1889"]
        drivers: [vfio-pci]
`

// allVFIONUMA is the NUMA node of each device of allVFIOConfig's pool.
var allVFIONUMA = map[string]int{"0000:3b:01.2": 0, "0000:3b:01.3": 0, "0000:af:01.1": 1, "0000:af:01.2": 1, "0000:af:01.3": 1}

// excludeTopologyConfig is sriov.yaml's DPDK pool (0000:3b:01.2 on NUMA
// node 0, 0000:af:01.1 and .2 on node 1) with excludeTopology set.
const excludeTopologyConfig = `resourceList:
  - resourceName: intel_sriov_dpdk
    excludeTopology: true
    selectors:
      - vendors: ["8086"]
        devices: ["1889"]
        drivers: [vfio-pci]
        pfNames: ["ens785f0#0-2", "ens801f0#1-2"]
`

// topologyNode is a fresh fake node of the named scenario with the given
// pool config (a file name under testdata/config/scan/, or, when it holds
// a newline, the config's text).
func topologyNode(t testing.TB, scenario, config string) *node {
	t.Helper()
	requireSuite(t)
	if !strings.Contains(config, "\n") {
		return newNode(t, scenario, config)
	}
	n := newNode(t, scenario, "sriov.yaml")
	n.config = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(n.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// setNUMA writes numa node into the numa_node file of each function, as
// the kernel shows it ("-1" for none).
func setNUMA(t testing.TB, n *node, numa int, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		p := filepath.Join(n.sysfs, "bus", "pci", "devices", a, "numa_node")
		if err := os.WriteFile(p, []byte(strconv.Itoa(numa)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startTopologyRig starts a kubelet with a real topology manager of the
// given policy on a fresh kubelet root, then the daemon (legacy
// registration) on n, and waits until the kubelet has want.
func startTopologyRig(t testing.TB, policy string, n *node, want counts) *rig {
	t.Helper()
	resetKubeletRoot(t)
	logKubeletTo(t)
	r := &rig{node: n, pods: &podList{}, mode: "legacy", kopt: kubeletOptions{topologyPolicy: policy}}
	r.k = startKubelet(t, r.pods, r.kopt)
	r.d = startDaemon(t, n, "legacy")
	r.registered = r.k.waitAllocatable(t, r.d.started, want)
	return r
}

// admitN admits a pod of n DPDK VFs and fails the test if the kubelet
// refuses it.
func admitN(t testing.TB, r *rig, n int64) (*v1.Pod, admission) {
	t.Helper()
	pod := r.pods.newPod(resDPDK, n)
	a, err := r.k.admit(t, pod)
	if err != nil {
		t.Fatalf("kubelet (%s): admit a pod of %d x %s: %v", r.kopt.topologyPolicy, n, resDPDK, err)
	}
	return pod, a
}

// refuseN admits a pod of n DPDK VFs, which the topology manager must
// refuse with a TopologyAffinityError, the kubelet then holding nothing
// for the pod.
func refuseN(t testing.TB, r *rig, n int64) {
	t.Helper()
	pod := r.pods.newPod(resDPDK, n)
	a, err := r.k.admit(t, pod)
	var rej *rejection
	if !errors.As(err, &rej) || rej.Reason != topologymanager.ErrorTopologyAffinity {
		t.Fatalf("kubelet (%s): admit a pod of %d x %s: got devices %v, err %v; want a %s rejection", r.kopt.topologyPolicy, n, resDPDK, a.devices, err, topologymanager.ErrorTopologyAffinity)
	}
	if got := r.k.allocated(pod); len(got) != 0 {
		t.Errorf("kubelet: the refused pod holds %v, want nothing", got)
	}
}

// onOneNode checks that the devices of a all sit on the one NUMA node of
// the pod's affinity, and returns that node.
func onOneNode(t testing.TB, r *rig, pod *v1.Pod, a admission, numa map[string]int) int {
	t.Helper()
	aff := r.k.affinity(pod)
	if len(aff) != 1 {
		t.Fatalf("topology manager affinity for %s = %v, want one NUMA node", pod.Name, aff)
	}
	for _, id := range a.devices[resDPDK] {
		if numa[id] != aff[0] {
			t.Errorf("pod %s got %s on NUMA node %d, want all on its affinity %v (devices %v)", pod.Name, id, numa[id], aff, a.devices[resDPDK])
		}
	}
	return aff[0]
}

// ledgerAllocations is the ledger's DPDK allocations, each sorted, the
// list sorted.
func ledgerAllocations(t testing.TB, r *rig) [][]string {
	t.Helper()
	got := replay(t, r.node.stateDir).allocated(resDPDK)
	slices.SortFunc(got, slices.Compare)
	return got
}

// sortedSets sorts each set's copy and the list of them.
func sortedSets(sets ...[]string) [][]string {
	out := make([][]string, 0, len(sets))
	for _, s := range sets {
		s = slices.Clone(s)
		slices.Sort(s)
		out = append(out, s)
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

// topologyOf is the kubelet's view of each device's NUMA nodes for a
// resource: nil for a device with no Topology.
func topologyOf(k *kubelet, res string) map[string][]int64 {
	out := map[string][]int64{}
	for id, d := range k.devices(res) {
		var nodes []int64
		if d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				nodes = append(nodes, n.ID)
			}
		}
		out[id] = nodes
	}
	return out
}

// checkSRIOVNUMA checks the kubelet's view of every pooled device's NUMA
// node on the sriov node (sriovNUMA).
func checkSRIOVNUMA(t testing.TB, k *kubelet) {
	t.Helper()
	for res, numa := range sriovNUMA {
		want := map[string][]int64{}
		for id, n := range numa {
			want[id] = []int64{n}
		}
		if got := topologyOf(k, res); !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("kubelet: %s topology = %v, want %v", res, got, want)
		}
	}
}

// (a) single-numa-node with the sriov node's DPDK pool: only NUMA node 1
// has two VFs, so a pod of two gets both there; a pod of one then gets
// NUMA node 0's. The ledger holds what the kubelet gave.
func TestTopologySingleNUMANodeAdmitsOnOneNode(t *testing.T) {
	r := startTopologyRig(t, policySingleNUMANode, topologyNode(t, "sriov", "sriov.yaml"), sriovPools)
	checkTopology(t, r.k, r.pods)

	pod, a := admitDPDK(t, r)
	if aff := r.k.affinity(pod); !slices.Equal(aff, []int{1}) {
		t.Errorf("topology manager affinity = %v, want NUMA [1]", aff)
	}
	podB, b := admitN(t, r, 1)
	if !slices.Equal(b.devices[resDPDK], []string{freeVF}) || !slices.Equal(r.k.affinity(podB), []int{0}) {
		t.Errorf("pod of 1 got %v with affinity %v, want [%s] on NUMA [0]", b.devices[resDPDK], r.k.affinity(podB), freeVF)
	}
	if got, want := ledgerAllocations(t, r), sortedSets(a.devices[resDPDK], b.devices[resDPDK]); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ledger: %s allocations = %v, want %v", resDPDK, got, want)
	}
}

// (a) single-numa-node where both NUMA nodes have enough (2 VFs on node 0,
// 3 on node 1): each pod of two is admitted on one node, the kubelet asking
// the daemon's GetPreferredAllocation within the node when it has more than
// needed; a third pod of two finds one VF left and is refused, and a pod of
// one takes it.
func TestTopologySingleNUMANodeBothNodesEnough(t *testing.T) {
	r := startTopologyRig(t, policySingleNUMANode, topologyNode(t, "sriov", allVFIOConfig), counts{resDPDK: 5})
	podA, a := admitN(t, r, 2)
	nodeA := onOneNode(t, r, podA, a, allVFIONUMA)
	podB, b := admitN(t, r, 2)
	nodeB := onOneNode(t, r, podB, b, allVFIONUMA)
	if nodeA == nodeB {
		t.Errorf("both pods of two on NUMA node %d, which has %d VFs", nodeA, 3-nodeA)
	}
	t.Logf("pod A: %v on NUMA %d; pod B: %v on NUMA %d", a.devices[resDPDK], nodeA, b.devices[resDPDK], nodeB)
	// Node 1 has three for pod B's two: the kubelet asked the daemon, whose
	// pool (no allocatePolicy) prefers the lowest addresses.
	if want := []string{"0000:af:01.1", "0000:af:01.2"}; nodeB == 1 && !slices.Equal(b.devices[resDPDK], want) {
		t.Errorf("pod B got %v, want the daemon's preferred %v", b.devices[resDPDK], want)
	}
	refuseN(t, r, 2)
	podC, c := admitN(t, r, 1)
	onOneNode(t, r, podC, c, allVFIONUMA)
	if got, want := ledgerAllocations(t, r), sortedSets(a.devices[resDPDK], b.devices[resDPDK], c.devices[resDPDK]); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ledger: %s allocations = %v, want %v", resDPDK, got, want)
	}
}

// (b) a pod of three DPDK VFs when no NUMA node has three:
// single-numa-node refuses it with a TopologyAffinityError before any
// Allocate reaches the daemon, so the ledger records nothing, and a pod of
// two is then admitted as if the refused pod had never come. restricted
// and best-effort admit the three across both nodes: two nodes are the
// narrowest mask that holds three, so that hint is preferred
// (topology_hints.go generateDeviceTopologyHints, minAffinitySize).
func TestTopologyNoNodeHasEnough(t *testing.T) {
	for _, policy := range []string{policySingleNUMANode, policyRestricted, policyBestEffort} {
		t.Run(policy, func(t *testing.T) {
			r := startTopologyRig(t, policy, topologyNode(t, "sriov", "sriov.yaml"), sriovPools)
			if policy != policySingleNUMANode {
				pod, a := admitN(t, r, 3)
				if want := []string{"0000:3b:01.2", "0000:af:01.1", "0000:af:01.2"}; !slices.Equal(a.devices[resDPDK], want) {
					t.Errorf("pod of 3 got %v, want %v", a.devices[resDPDK], want)
				}
				if aff := r.k.affinity(pod); !slices.Equal(aff, []int{0, 1}) {
					t.Errorf("topology manager affinity = %v, want NUMA [0 1]", aff)
				}
				return
			}
			refuseN(t, r, 3)
			if s := replay(t, r.node.stateDir); len(s.Allocations) != 0 {
				t.Errorf("ledger: allocations %+v after a refused pod, want none", s.Allocations)
			}
			_, a := admitDPDK(t, r)
			refuseN(t, r, 2) // NUMA node 0 has one VF left
			if got, want := ledgerAllocations(t, r), sortedSets(a.devices[resDPDK]); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("ledger: %s allocations = %v, want %v", resDPDK, got, want)
			}
		})
	}
}

// (c) excludeTopology: the kubelet sees no NUMA node on the pool's devices
// (as the SR-IOV plugin's NewHostDeviceImpl gives NewAPIDeviceImpl node -1),
// has no hint for them, and single-numa-node admits a pod of three across
// both nodes.
func TestTopologyExcludeTopologyAdmittedAcrossNodes(t *testing.T) {
	r := startTopologyRig(t, policySingleNUMANode, topologyNode(t, "sriov", excludeTopologyConfig), counts{resDPDK: 3})
	for id, nodes := range topologyOf(r.k, resDPDK) {
		if nodes != nil {
			t.Errorf("kubelet: excludeTopology device %s has NUMA nodes %v, want no topology", id, nodes)
		}
	}
	if h, ok := r.k.hints(r.pods.newPod(resDPDK, 3))[resDPDK]; !ok || h != nil {
		t.Errorf("kubelet: hints for 3 x %s = %v (present %v), want nil (no preference)", resDPDK, h, ok)
	}
	pod, a := admitN(t, r, 3)
	if aff := r.k.affinity(pod); aff != nil {
		t.Errorf("topology manager affinity = %v, want none", aff)
	}
	want := []string{"0000:3b:01.2", "0000:af:01.1", "0000:af:01.2"}
	if !slices.Equal(a.devices[resDPDK], want) {
		t.Errorf("pod of 3 got %v, want %v", a.devices[resDPDK], want)
	}
	checkVFIOAdmission(t, a, sriovGroups)
	if got := ledgerAllocations(t, r); !slices.EqualFunc(got, [][]string{want}, slices.Equal) {
		t.Errorf("ledger: %s allocations = %v, want [%v]", resDPDK, got, want)
	}
}

// (d) functions whose numa_node is -1 (a VM; firmware that gives a root
// port no proximity domain): the SR-IOV plugin reports no Topology for
// them, and so must we. With every device so, the kubelet has no
// preference and single-numa-node admits. With some devices on a node and
// others on none, the kubelet counts only those with a node: a pod of two
// is refused though three are free, and a pod of one gets the one with a
// node; the next pod of one is refused too.
func TestTopologyNoNUMANode(t *testing.T) {
	t.Run("all", func(t *testing.T) {
		r := startTopologyRig(t, policySingleNUMANode, topologyNode(t, "noiommu", "noiommu.json"), counts{resDPDK: 2})
		for id, nodes := range topologyOf(r.k, resDPDK) {
			if nodes != nil {
				t.Errorf("kubelet: device %s (numa_node -1) has NUMA nodes %v, want no topology", id, nodes)
			}
		}
		pod, a := admitN(t, r, 2)
		if aff := r.k.affinity(pod); aff != nil {
			t.Errorf("topology manager affinity = %v, want none", aff)
		}
		if got := ledgerAllocations(t, r); !slices.EqualFunc(got, sortedSets(a.devices[resDPDK]), slices.Equal) {
			t.Errorf("ledger: %s allocations = %v, want [%v]", resDPDK, got, a.devices[resDPDK])
		}
	})
	t.Run("some", func(t *testing.T) {
		n := topologyNode(t, "sriov", "sriov.yaml")
		setNUMA(t, n, -1, "0000:af:00.0", "0000:af:01.0", "0000:af:01.1", "0000:af:01.2", "0000:af:01.3")
		r := startTopologyRig(t, policySingleNUMANode, n, sriovPools)
		want := map[string][]int64{"0000:3b:01.2": {0}, "0000:af:01.1": nil, "0000:af:01.2": nil}
		if got := topologyOf(r.k, resDPDK); !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("kubelet: %s topology = %v, want %v", resDPDK, got, want)
		}
		refuseN(t, r, 2)
		pod, a := admitN(t, r, 1)
		if !slices.Equal(a.devices[resDPDK], []string{freeVF}) || !slices.Equal(r.k.affinity(pod), []int{0}) {
			t.Errorf("pod of 1 got %v with affinity %v, want [%s] on NUMA [0]", a.devices[resDPDK], r.k.affinity(pod), freeVF)
		}
		refuseN(t, r, 1)
		if got := ledgerAllocations(t, r); !slices.EqualFunc(got, [][]string{{freeVF}}, slices.Equal) {
			t.Errorf("ledger: %s allocations = %v, want [[%s]]", resDPDK, got, freeVF)
		}
	})
}

// The NUMA nodes the kubelet knows survive both restarts: after a daemon
// SIGKILL the replayed pools list the same topology, and after a kubelet
// restart the topology manager regenerates the running pod's hint from its
// devices (GetTopologyHints' allocated path) while new pods still align.
func TestTopologyAcrossRestarts(t *testing.T) {
	r := startTopologyRig(t, policySingleNUMANode, topologyNode(t, "sriov", "sriov.yaml"), sriovPools)
	podA, a := admitDPDK(t, r)

	r.d.signal(t, syscall.SIGKILL, 30*time.Second)
	r.k.waitCapacity(t, "allocatable zero after SIGKILL", r.d.stopped, 30*time.Second, func(_, a counts) bool {
		return equalCounts(a, noneAllocatable)
	})
	r.d = startDaemon(t, r.node, r.mode)
	r.k.waitAllocatable(t, r.d.started, sriovPools)
	checkSRIOVNUMA(t, r.k)
	refuseN(t, r, 2) // NUMA node 1's two are podA's

	r.k = r.k.restart(t, r.kopt)
	r.k.waitAllocatable(t, r.k.started, sriovPools)
	checkSRIOVNUMA(t, r.k)
	var preferred [][]int
	for _, h := range r.k.hints(podA)[resDPDK] {
		if h.Preferred {
			preferred = append(preferred, h.NUMANodeAffinity.GetBits())
		}
	}
	if !slices.EqualFunc(preferred, [][]int{{1}}, slices.Equal) {
		t.Errorf("kubelet: regenerated hints for the running pod = %v, want NUMA [1] preferred", preferred)
	}
	podB, b := admitN(t, r, 1)
	if !slices.Equal(b.devices[resDPDK], []string{freeVF}) || !slices.Equal(r.k.affinity(podB), []int{0}) {
		t.Errorf("pod of 1 got %v with affinity %v, want [%s] on NUMA [0]", b.devices[resDPDK], r.k.affinity(podB), freeVF)
	}
	if got, want := ledgerAllocations(t, r), sortedSets(a.devices[resDPDK], b.devices[resDPDK]); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ledger: %s allocations = %v, want %v", resDPDK, got, want)
	}
}

// Turning excludeTopology on in a running daemon's config (a ConfigMap
// update) takes the NUMA nodes off the pool's devices in the kubelet, and
// turning it off puts them back: the SR-IOV plugin reads its config only
// at start, but what the kubelet sees must be the config in force.
func TestTopologyExcludeTopologyReload(t *testing.T) {
	n := topologyNode(t, "sriov", excludeTopologyConfig)
	r := startTopologyRig(t, policySingleNUMANode, n, counts{resDPDK: 3})
	withTopology := map[string][]int64{"0000:3b:01.2": {0}, "0000:af:01.1": {1}, "0000:af:01.2": {1}}
	without := map[string][]int64{"0000:3b:01.2": nil, "0000:af:01.1": nil, "0000:af:01.2": nil}
	for _, step := range []struct {
		config string
		want   map[string][]int64
	}{
		{strings.Replace(excludeTopologyConfig, "excludeTopology: true", "excludeTopology: false", 1), withTopology},
		{excludeTopologyConfig, without},
	} {
		tmp := n.config + ".new"
		if err := os.WriteFile(tmp, []byte(step.config), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, n.config); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for got := topologyOf(r.k, resDPDK); !maps.EqualFunc(got, step.want, slices.Equal); got = topologyOf(r.k, resDPDK) {
			if time.Now().After(deadline) {
				t.Fatalf("kubelet: %s topology = %v 30s after the config change, want %v", resDPDK, got, step.want)
			}
			time.Sleep(pollEvery)
		}
	}
}

// cpuManagerStandIn is a topology hint provider in the CPU manager's
// place: for every container it offers one preferred hint, its NUMA
// nodes, as the static policy does for a Guaranteed pod whose CPUs fit
// only there, and allocates nothing.
type cpuManagerStandIn []int

func (c cpuManagerStandIn) hints() map[string][]topologymanager.TopologyHint {
	mask, err := bitmask.NewBitMask(c...)
	if err != nil {
		panic(err)
	}
	return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): {{NUMANodeAffinity: mask, Preferred: true}}}
}

func (c cpuManagerStandIn) GetTopologyHints(klog.Logger, *v1.Pod, *v1.Container, lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	return c.hints()
}

func (c cpuManagerStandIn) GetPodTopologyHints(klog.Logger, *v1.Pod, lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	return c.hints()
}

func (cpuManagerStandIn) AllocatePod(klog.Logger, *v1.Pod, lifecycle.Operation) error { return nil }

func (cpuManagerStandIn) Allocate(context.Context, *v1.Pod, *v1.Container, lifecycle.Operation) error {
	return nil
}

// With the CPUs on NUMA node 0 and a pod of two DPDK VFs (node 0 has one,
// node 1 two): single-numa-node refuses it; best-effort admits it with
// affinity [0], and the device manager then takes node 0's VF and asks
// the daemon's GetPreferredAllocation for the rest with that VF as
// must-include (devicemanager/manager.go devicesToAllocate): the answer
// must hold it and one of node 1's.
func TestTopologyCPUsOnAnotherNode(t *testing.T) {
	t.Run("single-numa-node", func(t *testing.T) {
		n := topologyNode(t, "sriov", "sriov.yaml")
		resetKubeletRoot(t)
		logKubeletTo(t)
		r := &rig{node: n, pods: &podList{}, mode: "legacy", kopt: kubeletOptions{topologyPolicy: policySingleNUMANode, cpuHints: []int{0}}}
		r.k = startKubelet(t, r.pods, r.kopt)
		r.d = startDaemon(t, n, "legacy")
		r.k.waitAllocatable(t, r.d.started, sriovPools)
		refuseN(t, r, 2)
		if s := replay(t, r.node.stateDir); len(s.Allocations) != 0 {
			t.Errorf("ledger: allocations %+v after a refused pod, want none", s.Allocations)
		}
	})
	t.Run("best-effort", func(t *testing.T) {
		n := topologyNode(t, "sriov", "sriov.yaml")
		resetKubeletRoot(t)
		logKubeletTo(t)
		r := &rig{node: n, pods: &podList{}, mode: "legacy", kopt: kubeletOptions{topologyPolicy: policyBestEffort, cpuHints: []int{0}}}
		r.k = startKubelet(t, r.pods, r.kopt)
		r.d = startDaemon(t, n, "legacy")
		r.k.waitAllocatable(t, r.d.started, sriovPools)
		pod, a := admitN(t, r, 2)
		if aff := r.k.affinity(pod); !slices.Equal(aff, []int{0}) {
			t.Errorf("topology manager affinity = %v, want NUMA [0]", aff)
		}
		if got := a.devices[resDPDK]; len(got) != 2 || !slices.Contains(got, freeVF) {
			t.Errorf("pod of 2 got %v, want %s (node 0's) and one of node 1's", got, freeVF)
		}
		checkVFIOAdmission(t, a, sriovGroups)
		if got := ledgerAllocations(t, r); !slices.EqualFunc(got, sortedSets(a.devices[resDPDK]), slices.Equal) {
			t.Errorf("ledger: %s allocations = %v, want [%v]", resDPDK, got, a.devices[resDPDK])
		}
	})
}
