package pool

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/internal/actortest"
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

// An Allocate naming a device ID no real device has (a megabyte of it) is
// refused as invalid with the ID cut and its length noted, in the error
// the client gets and in the pool's log line: a client's text makes no
// line or status message of its size.
func TestAnOversizedDeviceIDIsQuotedCut(t *testing.T) {
	logs := &actortest.Log{}
	_, _, socket := servingPoolIn(t, t.TempDir(), grpcapi.ModeLegacy, zerolog.New(logs), member(x))
	long := strings.Repeat("0000:3b:02.0", 1<<20/12)
	_, err := dial(t, socket).Allocate(context.Background(), request([]string{x, long}))
	st := status.Convert(err)
	note := fmt.Sprintf("… (%d bytes) is not in the pool", len(long))
	if msg := st.Message(); st.Code() != codes.InvalidArgument || !strings.Contains(msg, note) || len(msg) > 2*grpcapi.MaxQuotedID {
		t.Errorf("Allocate of a %d-byte ID: %v, %d-byte message %.300q; want InvalidArgument saying %q", len(long), st.Code(), len(msg), msg, note)
	}
	var lines int
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "kubelet call failed") {
			lines++
			if !strings.Contains(line, note) || len(line) > 3*grpcapi.MaxQuotedID {
				t.Errorf("%d-byte log line %.300q, want it to say %q", len(line), line, note)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d log lines of the failed call, want 1", lines)
	}
}

// An Allocate refused before its IDs are checked (it reached the pool
// past its deadline) names the first of them, each cut as an unknown ID
// is, and counts the rest.
func TestAnAllocateOfManyIDsNamesTheFirst(t *testing.T) {
	f, _, _ := servingPool(t, t.TempDir(), member(x))
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("%04d", i) + strings.Repeat("f", 1<<10)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := awaitReply(t, allocateVia(f, ctx, ids...)).err
	want := fmt.Sprintf("0000%s… (%d bytes),0001", strings.Repeat("f", grpcapi.MaxQuotedID-4), len(ids[0]))
	if msg := fmt.Sprint(err); !strings.Contains(msg, want) || !strings.Contains(msg, "0015") || strings.Contains(msg, "0016") ||
		!strings.Contains(msg, " and 84 more") || len(msg) > 20*grpcapi.MaxQuotedID {
		t.Errorf("Allocate of %d %d-byte IDs past its deadline: %d-byte error %.600q; want the first 16 cut, and 84 more", len(ids), len(ids[0]), len(msg), msg)
	}
}
