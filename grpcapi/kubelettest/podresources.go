package kubelettest

import (
	"context"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResourcesServer is the v1 PodResourcesLister on
// pod-resources/kubelet.sock, answering from what the test set.
type podResourcesServer struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	k *Kubelet
}

// List answers the pods of the latest SetPods.
func (s *podResourcesServer) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	k := s.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.podErr != nil {
		return nil, k.podErr
	}
	return &podresourcesapi.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// Get answers one pod of the latest SetPods, with the kubelet's error text
// when there is none of that name.
func (s *podResourcesServer) Get(_ context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	k := s.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.podErr != nil {
		return nil, k.podErr
	}
	for _, p := range k.pods {
		if p.GetName() == req.GetPodName() && p.GetNamespace() == req.GetPodNamespace() {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

// GetAllocatableResources answers SetAllocatable's devices if set, else, as the
// device manager does, one entry per healthy device of every registered
// resource with its NUMA topology.
func (s *podResourcesServer) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	k := s.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.podErr != nil {
		return nil, k.podErr
	}
	if k.allocatable != nil {
		return &podresourcesapi.AllocatableResourcesResponse{Devices: k.allocatable}, nil
	}
	resources := make([]string, 0, len(k.devices))
	for r := range k.devices {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	var out []*podresourcesapi.ContainerDevices
	for _, r := range resources {
		for _, d := range k.devices[r] {
			if d.GetHealth() != pluginapi.Healthy {
				continue
			}
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: r, DeviceIds: []string{d.GetID()}, Topology: topologyOf(d)})
		}
	}
	return &podresourcesapi.AllocatableResourcesResponse{Devices: out}, nil
}

func topologyOf(d *pluginapi.Device) *podresourcesapi.TopologyInfo {
	if d.GetTopology() == nil {
		return nil
	}
	t := &podresourcesapi.TopologyInfo{}
	for _, n := range d.GetTopology().GetNodes() {
		t.Nodes = append(t.Nodes, &podresourcesapi.NUMANode{ID: n.GetID()})
	}
	return t
}

// SetPods sets what List (and Get) answer from now on, as if these pods, and
// only these, ran on the node. Pods are copied. They survive Restart: a
// restarted kubelet still sees the running containers.
func (k *Kubelet) SetPods(pods []*podresourcesapi.PodResources) {
	cp := make([]*podresourcesapi.PodResources, len(pods))
	for i, p := range pods {
		cp[i] = proto.Clone(p).(*podresourcesapi.PodResources)
	}
	k.mu.Lock()
	k.pods = cp
	k.mu.Unlock()
}

// SetAllocatable overrides what GetAllocatableResources answers; nil goes back
// to deriving it from the plugins' device lists.
func (k *Kubelet) SetAllocatable(devices []*podresourcesapi.ContainerDevices) {
	var cp []*podresourcesapi.ContainerDevices
	if devices != nil {
		cp = make([]*podresourcesapi.ContainerDevices, len(devices))
		for i, d := range devices {
			cp[i] = proto.Clone(d).(*podresourcesapi.ContainerDevices)
		}
	}
	k.mu.Lock()
	k.allocatable = cp
	k.mu.Unlock()
}

// FailPodResources makes every PodResources call answer err (a
// google.golang.org/grpc/status error keeps its code) until called with nil.
func (k *Kubelet) FailPodResources(err error) {
	k.mu.Lock()
	k.podErr = err
	k.mu.Unlock()
}

// PodHolding is a pod with one container holding ids of resource: the common
// case of a SetPods argument.
func PodHolding(namespace, pod, container, resource string, ids ...string) *podresourcesapi.PodResources {
	return Pod(namespace, pod, Container(container, DevicesOf(resource, ids...)))
}

// Pod builds a PodResources entry.
func Pod(namespace, name string, containers ...*podresourcesapi.ContainerResources) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Namespace: namespace, Name: name, Containers: containers}
}

// Container builds a container holding the given devices.
func Container(name string, devices ...*podresourcesapi.ContainerDevices) *podresourcesapi.ContainerResources {
	return &podresourcesapi.ContainerResources{Name: name, Devices: devices}
}

// DevicesOf is device IDs of one resource as a container holds them. The
// PodResources v1 API carries no pod UID; a pod is its namespace and name.
func DevicesOf(resource string, ids ...string) *podresourcesapi.ContainerDevices {
	return &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

// OnNUMA returns d with its topology set to the given NUMA nodes.
func OnNUMA(d *podresourcesapi.ContainerDevices, nodes ...int64) *podresourcesapi.ContainerDevices {
	t := &podresourcesapi.TopologyInfo{}
	for _, n := range nodes {
		t.Nodes = append(t.Nodes, &podresourcesapi.NUMANode{ID: n})
	}
	d.Topology = t
	return d
}
