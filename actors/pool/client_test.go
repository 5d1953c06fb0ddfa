package pool

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Calls from an odd or hostile client of a pool's socket: anything root
// on the node can dial it, and kubelets have bugs.

// dial connects to a pool's socket as a client of its own.
func dial(t *testing.T, socket string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// A GetPreferredAllocation whose must-include list is a message's worth
// of IDs that are no members is refused as invalid, as any must-include
// list longer than its size is, within the pool's call timeout: counting
// them costs the pool no more than reading them did (counted pairwise,
// they held its mailbox for minutes), and its next call is answered.
func TestManyStrayMustIncludesAreRefused(t *testing.T) {
	_, _, socket := servingPool(t, t.TempDir(), member(x), member(y))
	c := dial(t, socket)
	strays := make([]string, 200_000)
	for i := range strays {
		strays[i] = fmt.Sprintf("%07d", i)
	}
	_, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{x, y}, MustIncludeDeviceIDs: strays, AllocationSize: 1}}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "200000 must-include devices for size 1") {
		t.Errorf("GetPreferredAllocation of %d stray must-include IDs: %v, want InvalidArgument counting them", len(strays), err)
	}
	resp, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{y, x}, AllocationSize: 1}}})
	if err != nil || len(resp.ContainerResponses) != 1 || len(resp.ContainerResponses[0].DeviceIDs) != 1 {
		t.Errorf("the next GetPreferredAllocation: %v, %v", resp, err)
	}
}
