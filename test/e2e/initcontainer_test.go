package e2e

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// TestLegacyInitContainerDevicesReused admits a pod whose init container
// asks for one DPDK VF and whose app container asks for three of the same
// pool (allVFIOConfig: two VFs on NUMA node 0, three on node 1), as the
// kubelet's admission allocates them: the init container first, then the
// app container. The device manager gives the app container the init
// container's VF again (Allocate's devicesToReuse) and asks the daemon's
// GetPreferredAllocation for the rest with that VF as must-include
// (devicesToAllocate, no topology manager: every device unaligned). The
// daemon must answer that VF plus the best others for it: its NUMA
// node's other VF first, then the lowest of node 1. Had it ignored the
// must-include, it would have preferred node 1's three, which alone can
// hold the request, and the kubelet would have taken two of those. The
// ledger must record what the kubelet gave each container.
func TestLegacyInitContainerDevicesReused(t *testing.T) {
	n := topologyNode(t, "sriov", allVFIOConfig)
	resetKubeletRoot(t)
	logKubeletTo(t)
	r := &rig{node: n, pods: &podList{}, mode: "legacy"}
	r.k = startKubelet(t, r.pods, r.kopt)
	r.d = startDaemon(t, n, "legacy")
	r.k.waitAllocatable(t, r.d.started, counts{resDPDK: 5})

	pod := r.pods.newPod(resDPDK, 3)
	init := *pod.Spec.Containers[0].DeepCopy()
	init.Name = "init"
	one := v1.ResourceList{v1.ResourceName(resDPDK): *resource.NewQuantity(1, resource.DecimalSI)}
	init.Resources = v1.ResourceRequirements{Limits: one, Requests: one.DeepCopy()}
	pod.Spec.InitContainers = []v1.Container{init}
	r.pods.add(pod)
	ctx := klog.NewContext(context.Background(), klog.Background())
	for _, c := range []*v1.Container{&pod.Spec.InitContainers[0], &pod.Spec.Containers[0]} {
		if err := r.k.m.Allocate(ctx, pod, c, lifecycle.AddOperation); err != nil {
			t.Fatalf("kubelet: allocate for container %s of a pod of 1 then 3 x %s: %v", c.Name, resDPDK, err)
		}
	}
	held := func(container string) []string {
		var ids []string
		for id := range r.k.m.GetDevices(string(pod.UID), container)[resDPDK] {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids
	}
	initIDs, appIDs := held("init"), held("app")
	if want := []string{"0000:3b:01.2"}; !slices.Equal(initIDs, want) {
		t.Errorf("kubelet: init container got %v, want %v (the daemon's preferred VF: the lowest address)", initIDs, want)
	}
	if want := []string{"0000:3b:01.2", "0000:3b:01.3", "0000:af:01.1"}; !slices.Equal(appIDs, want) {
		t.Errorf("kubelet: app container got %v, want %v (the init container's VF, then the daemon's preferred others for it)", appIDs, want)
	}

	var allocated [][]string
	for _, e := range allocationHistory(t, n.stateDir) {
		if e.Type == "DevicesAllocated" {
			ids := slices.Clone(e.Payload.DeviceIDs)
			slices.Sort(ids)
			allocated = append(allocated, ids)
		}
	}
	if want := [][]string{initIDs, appIDs}; !slices.EqualFunc(allocated, want, slices.Equal) {
		t.Errorf("ledger: DevicesAllocated %v, want the kubelet's %v, in order", allocated, want)
	}
	// The app container's Allocate supersedes the init container's: the
	// VF they share is held once, by the allocation that holds them all.
	if got, want := ledgerAllocations(t, r), [][]string{appIDs}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ledger: %s allocations %v, want the app container's %v only", resDPDK, got, want)
	}
}
