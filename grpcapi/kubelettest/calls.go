package kubelettest

import (
	"context"
	"fmt"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Allocate calls the resource's plugin with one ContainerAllocateRequest per
// containers argument, passing the IDs through unchecked. The kubelet sends
// one container per call; several, or none, let a test try what the kubelet
// would not. The kubelet sets no deadline on Allocate; ctx is the caller's.
func (k *Kubelet) Allocate(ctx context.Context, resource string, containers ...[]string) (*pluginapi.AllocateResponse, error) {
	e, err := k.current(resource)
	if err != nil {
		return nil, err
	}
	req := &pluginapi.AllocateRequest{ContainerRequests: make([]*pluginapi.ContainerAllocateRequest, 0, len(containers))}
	for _, ids := range containers {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
	}
	return e.client.Allocate(ctx, req)
}

// GetPreferredAllocation asks the resource's plugin which size devices of
// available it prefers, mustInclude among them, in the one-container request
// the kubelet sends. It fails with ErrCallNotOffered when the plugin's options
// do not set GetPreferredAllocationAvailable: the kubelet skips the call then.
func (k *Kubelet) GetPreferredAllocation(ctx context.Context, resource string, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	e, err := k.current(resource)
	if err != nil {
		return nil, err
	}
	if !e.opts.GetGetPreferredAllocationAvailable() {
		return nil, fmt.Errorf("GetPreferredAllocation for %s: %w", resource, ErrCallNotOffered)
	}
	return e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
}

// PreStartContainer calls the resource's plugin as the kubelet does before a
// container starts. It fails with ErrCallNotOffered when the plugin's options
// do not set PreStartRequired.
func (k *Kubelet) PreStartContainer(ctx context.Context, resource string, deviceIDs []string) (*pluginapi.PreStartContainerResponse, error) {
	e, err := k.current(resource)
	if err != nil {
		return nil, err
	}
	if !e.opts.GetPreStartRequired() {
		return nil, fmt.Errorf("PreStartContainer for %s: %w", resource, ErrCallNotOffered)
	}
	return e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: deviceIDs})
}

// current is the resource's endpoint if it can take calls.
func (k *Kubelet) current(resource string) (*endpoint, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.boot == nil {
		return nil, ErrKubeletDown
	}
	e := k.endpoints[resource]
	if e == nil {
		return nil, fmt.Errorf("%s: %w", resource, ErrNotRegistered)
	}
	if e.stopped {
		return nil, fmt.Errorf("%s at %s: %w", resource, e.socket, ErrEndpointStopped)
	}
	return e, nil
}
