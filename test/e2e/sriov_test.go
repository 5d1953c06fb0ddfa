package e2e

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The sriov scenario with testdata/config/scan/sriov.yaml: four pools, what
// `devledger scan` prints for them.
const (
	resDPDK      = "intel.com/intel_sriov_dpdk"       // vfio-pci VFs 0000:3b:01.2 (NUMA 0), 0000:af:01.1 and .2 (NUMA 1)
	resNetdevice = "intel.com/intel_sriov_netdevice"  // iavf VFs 0000:3b:01.0 and .1 (NUMA 0), 0000:af:01.0 (NUMA 1)
	resDPDKExtra = "intel.com/intel_sriov_dpdk_extra" // vfio-pci VF 0000:af:01.3 (NUMA 1)
	resPF        = "intel.com/intel_pf"               // the PF 0000:3b:00.1 (NUMA 0)
)

// sriovPools is the capacity the kubelet should report for the sriov node.
var sriovPools = counts{resDPDK: 3, resNetdevice: 3, resDPDKExtra: 1, resPF: 1}

// noneAllocatable is the kubelet's allocatable for the sriov node once the
// daemon is gone: every pool still known, none of its devices healthy.
var noneAllocatable = counts{resDPDK: 0, resNetdevice: 0, resDPDKExtra: 0, resPF: 0}

// sriovNUMA is the NUMA node of every pooled device of the sriov node.
var sriovNUMA = map[string]map[string]int64{
	resDPDK:      {"0000:3b:01.2": 0, "0000:af:01.1": 1, "0000:af:01.2": 1},
	resNetdevice: {"0000:3b:01.0": 0, "0000:3b:01.1": 0, "0000:af:01.0": 1},
	resDPDKExtra: {"0000:af:01.3": 1},
	resPF:        {"0000:3b:00.1": 0},
}

// rig is one node under test: the fake machine, the kubelet on it and the
// daemon.
type rig struct {
	node *node
	pods *podList
	k    *kubelet
	d    *daemon
	mode string
	kopt kubeletOptions
	// registered is how long the first registration took, from the daemon's
	// start to every pool at full capacity in the kubelet.
	registered time.Duration
}

// socketDir is where the daemon serves its pools in the rig's mode.
func (r *rig) socketDir() string {
	if r.mode == "watcher" {
		return pluginsRegistryDir
	}
	return devicePluginsDir
}

// startRig starts a kubelet on a fresh kubelet root, then the daemon in the
// given registration mode, and waits until the kubelet sees every pool.
func startRig(t testing.TB, mode string) *rig {
	t.Helper()
	requireSuite(t)
	resetKubeletRoot(t)
	logKubeletTo(t)
	r := &rig{node: newNode(t, "sriov", "sriov.yaml"), pods: &podList{}, mode: mode}
	r.kopt = kubeletOptions{watcher: mode == "watcher"}
	r.k = startKubelet(t, r.pods, r.kopt)
	r.d = startDaemon(t, r.node, mode)
	r.registered = r.k.waitAllocatable(t, r.d.started, sriovPools)
	return r
}

// checkTopology checks the kubelet's view of every device's NUMA node and
// the topology hints it would give the topology manager for two DPDK VFs:
// only NUMA node 1 has two, so that is the one preferred hint.
func checkTopology(t testing.TB, k *kubelet, pods *podList) {
	t.Helper()
	for res, want := range sriovNUMA {
		got := map[string]int64{}
		for id, d := range k.devices(res) {
			if d.Topology == nil || len(d.Topology.Nodes) != 1 {
				t.Errorf("kubelet: %s device %s has topology %v, want one NUMA node", res, id, d.Topology)
				continue
			}
			got[id] = d.Topology.Nodes[0].ID
		}
		if !maps.Equal(got, want) {
			t.Errorf("kubelet: %s devices by NUMA node = %v, want %v", res, got, want)
		}
	}
	hints := k.hints(pods.newPod(resDPDK, 2))[resDPDK]
	var preferred [][]int
	for _, h := range hints {
		if h.Preferred {
			preferred = append(preferred, h.NUMANodeAffinity.GetBits())
		}
	}
	if !slices.EqualFunc(preferred, [][]int{{1}}, slices.Equal) {
		t.Errorf("kubelet: preferred topology hints for 2 x %s = %v (all: %v), want NUMA [1] only", resDPDK, preferred, hints)
	}
}

// env returns the value of the named variable in the container options.
func env(a admission, name string) (string, bool) {
	for _, e := range a.opts.Envs {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// checkVFIOAdmission checks what the container runtime gets for a pod of DPDK
// VFs (vfio-pci): the SR-IOV plugin's PCIDEVICE_ variable naming exactly the
// devices the kubelet allocated, its _INFO twin, KubeVirt's PCI_RESOURCE_
// variable with the same value, and /dev/vfio/vfio plus the group node of
// each VF, read-write.
func checkVFIOAdmission(t testing.TB, a admission, groups map[string]string) {
	t.Helper()
	ids := a.devices[resDPDK]
	const name = "PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK"
	v, ok := env(a, name)
	if !ok {
		t.Fatalf("container env has no %s: %+v", name, a.opts.Envs)
	}
	got := strings.Split(v, ",")
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("%s = %q, want the devices the kubelet allocated %v", name, v, ids)
	}
	const kubeVirt = "PCI_RESOURCE_INTEL_COM_INTEL_SRIOV_DPDK"
	if kv, ok := env(a, kubeVirt); !ok || kv != v {
		t.Errorf("%s = %q (set %v), want %s's %q", kubeVirt, kv, ok, name, v)
	}
	info, ok := env(a, name+"_INFO")
	if !ok {
		t.Errorf("container env has no %s_INFO", name)
	} else {
		var byID map[string]map[string]map[string]string
		if err := json.Unmarshal([]byte(info), &byID); err != nil {
			t.Errorf("%s_INFO is not JSON: %v: %s", name, err, info)
		}
		for _, id := range ids {
			if byID[id]["generic"]["deviceID"] != id || byID[id]["vfio"]["dev-mount"] != "/dev/vfio/"+groups[id] {
				t.Errorf("%s_INFO[%s] = %v, want generic.deviceID %s and vfio.dev-mount /dev/vfio/%s", name, id, byID[id], id, groups[id])
			}
		}
	}
	want := []string{"/dev/vfio/vfio"}
	for _, id := range ids {
		want = append(want, "/dev/vfio/"+groups[id])
	}
	var devs []string
	for _, d := range a.opts.Devices {
		if d.PathOnHost != d.PathInContainer || d.Permissions != "rw" {
			t.Errorf("device for the runtime %+v: want the same path on host and in the container, rw", d)
		}
		devs = append(devs, d.PathInContainer)
	}
	slices.Sort(want)
	slices.Sort(devs)
	if !slices.Equal(devs, want) {
		t.Errorf("devices for the runtime = %v, want %v", devs, want)
	}
}

// sriovGroups is the IOMMU group of each vfio-bound VF of the sriov node.
var sriovGroups = map[string]string{"0000:3b:01.2": "102", "0000:af:01.1": "111", "0000:af:01.2": "112", "0000:af:01.3": "113"}

// admitDPDK admits a pod of two DPDK VFs and checks the answer; the daemon
// prefers one NUMA node, and only NUMA node 1 has two.
func admitDPDK(t testing.TB, r *rig) (*v1.Pod, admission) {
	t.Helper()
	pod := r.pods.newPod(resDPDK, 2)
	a, err := r.k.admit(t, pod)
	if err != nil {
		t.Fatalf("kubelet: admit a pod of 2 x %s: %v", resDPDK, err)
	}
	if want := []string{"0000:af:01.1", "0000:af:01.2"}; !slices.Equal(a.devices[resDPDK], want) {
		t.Errorf("kubelet allocated %v, want %v (the daemon's preferred allocation: one NUMA node)", a.devices[resDPDK], want)
	}
	checkVFIOAdmission(t, a, sriovGroups)
	return pod, a
}

// freeVF is the DPDK VF left after admitDPDK took NUMA node 1's two.
const freeVF = "0000:3b:01.2"

// admitFreeVF admits a pod of one DPDK VF, which must be freeVF: the
// kubelet's record of what is taken and the daemon's agree.
func admitFreeVF(t testing.TB, r *rig, after string) admission {
	t.Helper()
	b, err := r.k.admit(t, r.pods.newPod(resDPDK, 1))
	if err != nil {
		t.Fatalf("kubelet: admit a pod of 1 x %s after %s: %v", resDPDK, after, err)
	}
	if want := []string{freeVF}; !slices.Equal(b.devices[resDPDK], want) {
		t.Errorf("after %s the kubelet allocated %v, want the free VF %v", after, b.devices[resDPDK], want)
	}
	checkVFIOAdmission(t, b, sriovGroups)
	return b
}

// restartKubelet admits a pod, restarts the kubelet and waits for the daemon
// to be registered with the new one. The running pod keeps its devices (the
// kubelet has them from its checkpoint, without asking the daemon), and a
// new pod is admitted through the new connection.
func restartKubelet(t testing.TB, r *rig) {
	t.Helper()
	podA, a := admitDPDK(t, r)
	r.k = r.k.restart(t, r.kopt)
	took := r.k.waitAllocatable(t, r.k.started, sriovPools)
	logFigure(t, r.mode, "reregistration-after-kubelet-restart", took)
	if got := r.k.allocated(podA); !slices.Equal(got[resDPDK], a.devices[resDPDK]) {
		t.Errorf("after the kubelet restart the pod holds %v, want %v", got[resDPDK], a.devices[resDPDK])
	}
	admitFreeVF(t, r, "the kubelet restart")
	if s := replay(t, r.node.stateDir); s.Kubelet.Restarts < 1 {
		t.Errorf("ledger: kubelet restarts = %d, want at least 1", s.Kubelet.Restarts)
	}
}

// killDaemon admits a pod, kills the daemon with SIGKILL (the kubelet must
// see every device go unhealthy), starts a new one on the same state dir and
// waits for it to be registered again. The free VF then goes to a new pod,
// and the ledger holds both allocations: the one made before the crash was
// replayed.
func killDaemon(t testing.TB, r *rig) {
	t.Helper()
	_, a := admitDPDK(t, r)
	r.d.signal(t, syscall.SIGKILL, 30*time.Second)
	r.k.waitCapacity(t, "allocatable zero after SIGKILL", r.d.stopped, 30*time.Second, func(_, a counts) bool {
		return equalCounts(a, noneAllocatable)
	})
	r.d = startDaemon(t, r.node, r.mode)
	took := r.k.waitAllocatable(t, r.d.started, sriovPools)
	logFigure(t, r.mode, "reregistration-after-daemon-sigkill", took)
	b := admitFreeVF(t, r, "the daemon restart")

	r.d.signal(t, syscall.SIGTERM, 30*time.Second)
	s := replay(t, r.node.stateDir)
	got := s.allocated(resDPDK)
	want := [][]string{a.devices[resDPDK], b.devices[resDPDK]}
	slices.SortFunc(got, slices.Compare)
	slices.SortFunc(want, slices.Compare)
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ledger: %s allocations = %v, want %v (one before the SIGKILL, one after)", resDPDK, got, want)
	}
	if s.Daemon.Starts != 2 {
		t.Errorf("ledger: daemon starts = %d, want 2", s.Daemon.Starts)
	}
}
