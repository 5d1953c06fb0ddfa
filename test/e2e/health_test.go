package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// healthConfig is sriov.yaml's DPDK pool (0000:3b:01.2 on NUMA node 0,
// 0000:af:01.1 and .2 on node 1) probed every 50ms, a recovered device
// offered again after 100ms.
const healthConfig = `resourceList:
  - resourceName: intel_sriov_dpdk
    selectors:
      - vendors: ["8086"]
        devices: ["1889"]
        drivers: [vfio-pci]
        pfNames: ["ens785f0#0-2", "ens801f0#1-2"]
    health:
      probeInterval: 50ms
      holdDown: 100ms
`

// TestLegacyDeviceHealth takes one VF's VFIO group node away while the
// daemon and the kubelet run, then puts it back. The daemon's verdict must
// reach the kubelet through ListAndWatch: the VF stays in capacity but
// leaves allocatable, the kubelet gives it to no pod, and once it is back
// it is allocatable and given out again.
func TestLegacyDeviceHealth(t *testing.T) {
	n := topologyNode(t, "sriov", healthConfig)
	resetKubeletRoot(t)
	logKubeletTo(t)
	r := &rig{node: n, pods: &podList{}, mode: "legacy"}
	r.k = startKubelet(t, r.pods, r.kopt)
	r.d = startDaemon(t, n, r.mode)
	r.k.waitAllocatable(t, r.d.started, counts{resDPDK: 3})

	const sick = "0000:af:01.1"
	node := filepath.Join(n.dev, "vfio", sriovGroups[sick])
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	took := r.k.waitCapacity(t, sick+" unhealthy: capacity 3, allocatable 2", removed, 30*time.Second, func(c, a counts) bool {
		return equalCounts(c, counts{resDPDK: 3}) && equalCounts(a, counts{resDPDK: 2})
	})
	logFigure(t, r.mode, "unhealthy-in-kubelet-after-vfio-node-removed", took)
	if _, ok := r.k.devices(resDPDK)[sick]; ok {
		t.Errorf("kubelet: %s still among the allocatable %s devices", sick, resDPDK)
	}
	// The two healthy VFs go to a pod; the unhealthy one to none.
	a, err := r.k.admit(t, r.pods.newPod(resDPDK, 2))
	if err != nil {
		t.Fatalf("kubelet: admit a pod of 2 x %s with %s unhealthy: %v", resDPDK, sick, err)
	}
	if want := []string{"0000:3b:01.2", "0000:af:01.2"}; !slices.Equal(a.devices[resDPDK], want) {
		t.Errorf("kubelet allocated %v with %s unhealthy, want %v", a.devices[resDPDK], sick, want)
	}
	_, err = r.k.admit(t, r.pods.newPod(resDPDK, 1))
	if err == nil || !strings.Contains(err.Error(), "requested number of devices unavailable") {
		t.Errorf("kubelet: admit 1 x %s with only %s left, unhealthy: err = %v, want the kubelet's 'requested number of devices unavailable'", resDPDK, sick, err)
	}

	if err := os.WriteFile(node, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.k.waitCapacity(t, sick+" healthy again: capacity = allocatable = 3", time.Now(), 30*time.Second, func(c, a counts) bool {
		_, ok := r.k.devices(resDPDK)[sick]
		return ok && equalCounts(c, counts{resDPDK: 3}) && equalCounts(a, counts{resDPDK: 3})
	})
	b, err := r.k.admit(t, r.pods.newPod(resDPDK, 1))
	if err != nil {
		t.Fatalf("kubelet: admit a pod of 1 x %s with %s healthy again: %v", resDPDK, sick, err)
	}
	if want := []string{sick}; !slices.Equal(b.devices[resDPDK], want) {
		t.Errorf("kubelet allocated %v once %s was healthy again, want %v", b.devices[resDPDK], sick, want)
	}
}
