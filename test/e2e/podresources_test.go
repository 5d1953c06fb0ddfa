package e2e

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

// podResourcesDir is where the kubelet serves PodResources, on
// podResourcesSocket.
var (
	podResourcesDir    = filepath.Join(kubeletRoot, "pod-resources")
	podResourcesSocket = filepath.Join(podResourcesDir, podresources.Socket+".sock")
)

// podResourcesServer is the kubelet's own PodResources v1 server
// (pkg/kubelet/apis/podresources) over a device manager and the node's
// pods, on pod-resources/kubelet.sock, as the kubelet serves it.
type podResourcesServer struct {
	srv *grpc.Server
	// lists counts the List calls answered.
	lists atomic.Int64
}

// servePodResources serves the kubelet's PodResources service for this
// kubelet life. Devices come from the device manager as the kubelet's
// container manager hands them over; the pods are the active ones (the
// KubeletPodResourcesListUseActivePods gate is on by default in 1.37);
// the node has no CPU, memory or DRA manager to report.
func servePodResources(t testing.TB, m *devicemanager.ManagerImpl, pods *podList) *podResourcesServer {
	t.Helper()
	if err := os.MkdirAll(podResourcesDir, 0o750); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(podResourcesSocket)
	ln, err := net.Listen("unix", podResourcesSocket)
	if err != nil {
		t.Fatalf("kubelet: serve pod resources: %v", err)
	}
	s := &podResourcesServer{}
	api := podresources.NewV1PodResourcesServer(klog.NewContext(context.Background(), klog.Background()), podresources.PodResourcesProviders{
		Pods:             podsProvider{pods},
		Devices:          devicesProvider{m},
		Cpus:             noResources{},
		Memory:           noResources{},
		DynamicResources: noResources{},
	})
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if _, ok := req.(*podresourcesapi.ListPodResourcesRequest); ok && err == nil {
			s.lists.Add(1)
		}
		return resp, err
	}))
	podresourcesapi.RegisterPodResourcesListerServer(s.srv, api)
	go func() { _ = s.srv.Serve(ln) }()
	return s
}

// listPodResources asks the kubelet's PodResources service, as the daemon
// does, which devices the containers of pod hold, by container and
// resource, each list sorted.
func listPodResources(t testing.TB, pod *v1.Pod) map[string]map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialUnix(ctx, podResourcesSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("kubelet: PodResources List: %v", err)
	}
	out := map[string]map[string][]string{}
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != pod.Namespace || p.GetName() != pod.Name {
			continue
		}
		for _, c := range p.GetContainers() {
			byRes := map[string][]string{}
			for _, d := range c.GetDevices() {
				byRes[d.GetResourceName()] = append(byRes[d.GetResourceName()], d.GetDeviceIds()...)
			}
			for _, ids := range byRes {
				slices.Sort(ids)
			}
			out[c.GetName()] = byRes
		}
	}
	return out
}

// stop stops serving and removes the socket.
func (s *podResourcesServer) stop() { s.srv.Stop() }

// podsProvider gives the PodResources server the node's pods: those the
// kubelet admitted and did not reject.
type podsProvider struct{ pods *podList }

func (p podsProvider) GetActivePods() []*v1.Pod { return p.pods.active() }
func (p podsProvider) GetPods() []*v1.Pod       { return p.pods.active() }

func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.pods.active() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

// devicesProvider is what the kubelet's container manager gives the
// PodResources server of its device manager.
type devicesProvider struct{ m *devicemanager.ManagerImpl }

func (d devicesProvider) UpdateAllocatedDevices(logger klog.Logger) {
	d.m.UpdateAllocatedDevices(logger)
}

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.m.GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.m.GetAllocatableDevices(logger))
}

// containerDevices is the kubelet's containerDevicesFromResourceDeviceInstances
// (pkg/kubelet/cm/container_manager.go): one entry per device and NUMA node.
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for res, byID := range devs {
		for id, dev := range byID {
			nodes := dev.GetTopology().GetNodes()
			if len(nodes) == 0 {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id},
					Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: n.GetID()}}}})
			}
		}
	}
	return out
}

// noResources stands for the CPU, memory and DRA managers: none assigns
// anything on this node.
type noResources struct{}

func (noResources) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (noResources) GetPodCPUs(string) []int64              { return nil }
func (noResources) GetAllocatableCPUs() []int64            { return nil }

func (noResources) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}

func (noResources) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }

func (noResources) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory { return nil }

func (noResources) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

// TestLegacyPodDeletedReleases deletes a running pod: the kubelet drops
// it from its active pods, so its PodResources no longer lists it, and
// the ledger must end the pod's allocation as released by the container
// that held it (not leave it live, nor end it only when another pod is
// given the devices). The kubelet then gives the same VFs to a new pod,
// whose allocation the ledger binds to it.
func TestLegacyPodDeletedReleases(t *testing.T) {
	r, pod, a := startRebootRig(t)
	seq := waitBound(t, r, pod, 10*time.Second)
	r.pods.remove(pod)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, live := replay(t, r.node.stateDir).Allocations[uintKey(seq)]; !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger: allocation #%d of the deleted pod %s still live after 30s", seq, pod.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	released := 0
	for _, e := range allocationHistory(t, r.node.stateDir) {
		if e.Type != "DevicesReleased" {
			continue
		}
		released++
		ids := slices.Sorted(slices.Values(e.Payload.DeviceIDs))
		want := pod.Namespace + "/" + pod.Name + "/" + pod.Spec.Containers[0].Name + " no longer holds it"
		if e.Payload.AllocationSeq != seq || e.Payload.Reason != want || !slices.Equal(ids, a.devices[resDPDK]) {
			t.Errorf("ledger #%d: DevicesReleased %+v, want allocation #%d of %v released as %q", e.Seq, e.Payload, seq, a.devices[resDPDK], want)
		}
	}
	if released != 1 {
		t.Errorf("ledger: %d DevicesReleased, want 1", released)
	}

	repl, b := admitDPDK(t, r)
	newSeq := waitBound(t, r, repl, 10*time.Second)
	if newSeq == seq {
		t.Errorf("ledger: the new pod %s is bound to the deleted pod's allocation #%d", repl.Name, seq)
	}
	t.Logf("the deleted pod held %v; the new pod got %v", a.devices[resDPDK], b.devices[resDPDK])
}

// TestLegacyBindingCarriesThePodUID: the kubelet's device manager writes
// its checkpoint (kubelet_internal_checkpoint, in device-plugins/) as it
// allocates, and the daemon reads each bound pod's UID there, which
// PodResources does not give. A pod deleted and made again under its
// name, as a StatefulSet's is, gets the same devices and is bound with
// its new UID; dump --pod UID tells the two apart.
func TestLegacyBindingCarriesThePodUID(t *testing.T) {
	r, pod, a := startRebootRig(t)
	seq := waitBound(t, r, pod, 10*time.Second)
	if b := replay(t, r.node.stateDir).Allocations[uintKey(seq)].Binding; b == nil || b.UID != string(pod.UID) {
		t.Errorf("ledger: allocation #%d bound to %+v, want pod %s with UID %s", seq, b, pod.Name, pod.UID)
	}

	r.pods.remove(pod)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, live := replay(t, r.node.stateDir).Allocations[uintKey(seq)]; !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger: allocation #%d of the deleted pod %s still live after 30s", seq, pod.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	again := pod.DeepCopy()
	again.UID = types.UID("00000000-0000-4000-9000-000000000001")
	b, err := r.k.admit(t, again)
	if err != nil {
		t.Fatalf("kubelet: admit %s again: %v", pod.Name, err)
	}
	if !slices.Equal(b.devices[resDPDK], a.devices[resDPDK]) {
		t.Logf("the pod made again got %v, the first %v", b.devices[resDPDK], a.devices[resDPDK])
	}
	newSeq := waitBound(t, r, again, 10*time.Second)
	if b := replay(t, r.node.stateDir).Allocations[uintKey(newSeq)].Binding; b == nil || b.UID != string(again.UID) {
		t.Errorf("ledger: allocation #%d bound to %+v, want pod %s with its new UID %s", newSeq, b, again.Name, again.UID)
	}

	for uid, want := range map[types.UID]uint64{pod.UID: seq, again.UID: newSeq} {
		out := devledger(t, "dump", "--state-dir", r.node.stateDir, "--pod", string(uid), "--format", "jsonl")
		var bound []uint64
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var e allocationEvent
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("dump --format jsonl: %v: %s", err, line)
			}
			if e.Type == "AllocationBound" {
				bound = append(bound, e.Payload.AllocationSeq)
			}
		}
		if !slices.Equal(bound, []uint64{want}) {
			t.Errorf("dump --pod %s: bindings of %v, want #%d's alone", uid, bound, want)
		}
	}
}
