package pool

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/internal/actortest"
)

// listAndWatch opens a ListAndWatch stream on socket, as the kubelet does.
func listAndWatch(t *testing.T, socket string) pluginapi.DevicePlugin_ListAndWatchClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := dial(t, socket).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// settled returns once the pool has applied what it was sent (a Query is
// answered after the members taken are applied).
func settled(t *testing.T, f *actortest.Family) {
	t.Helper()
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
}

// The kubelet gets a list only when what it lists changed: members with
// new facts it is not shown (a rescan, a reload, a retold hold that ends
// as it began) and a new definition that lists them the same send nothing,
// as each list makes the kubelet write its checkpoint again. A health
// change is the next list it gets.
func TestListAndWatchSendsOnlyChangedLists(t *testing.T) {
	f, _, socket := servingPool(t, t.TempDir(), member(x), member(y))
	stream := listAndWatch(t, socket)
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h := healths(first.Devices); len(h) != 2 || h[x] != pluginapi.Healthy || h[y] != pluginapi.Healthy {
		t.Fatalf("first list %v, want %s and %s healthy", h, x, y)
	}

	rebound := member(x)
	rebound.Device.Driver = "vfio-pci"
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{rebound, member(y)}, Reason: "scan: driver changed"})
	settled(t, f)
	f.Sys.Root.Send(f.Child, &SetResource{Resource: &config.Resource{Prefix: "example.com", Name: "vf", DeviceType: config.GenericPCI, AllocatePolicy: config.PolicyPacked}})
	settled(t, f)
	f.Sys.Root.Send(f.Child, &SetHealths{Changes: []SetHealth{{Address: y, Healthy: false, Reason: "link down", Seq: 1 << 40}}})
	settled(t, f)

	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h := healths(next.Devices); len(h) != 2 || h[x] != pluginapi.Healthy || h[y] != pluginapi.Unhealthy {
		t.Errorf("the list after %s failed is %v: the kubelet was sent a list that changed nothing first", y, h)
	}
}

// The kubelet hears of a membership change as soon as it applies: a
// device that joins is the next list's, and one that leaves is not.
func TestListAndWatchFollowsTheMembers(t *testing.T) {
	f, _, socket := servingPool(t, t.TempDir(), member(x))
	stream := listAndWatch(t, socket)
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h := healths(first.Devices); len(h) != 1 || h[x] != pluginapi.Healthy {
		t.Fatalf("first list %v, want %s healthy", h, x)
	}
	for _, tc := range []struct {
		name    string
		members []allocation.Member
		want    []string
	}{
		{"a device joins", []allocation.Member{member(x), member(y)}, []string{x, y}},
		{"a device leaves", []allocation.Member{member(y)}, []string{y}},
	} {
		f.Sys.Root.Send(f.Child, &SetMembers{Members: tc.members, Reason: "test: " + tc.name})
		next, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: no list came: %v", tc.name, err)
		}
		h := healths(next.Devices)
		if len(h) != len(tc.want) {
			t.Errorf("%s: list %v, want %v healthy", tc.name, h, tc.want)
		}
		for _, addr := range tc.want {
			if h[addr] != pluginapi.Healthy {
				t.Errorf("%s: list %v, want %v healthy", tc.name, h, tc.want)
			}
		}
	}
}

// Verdicts that come together are applied together: the kubelet's next
// list has every one of them.
func TestListAndWatchTakesEveryVerdictOfABatch(t *testing.T) {
	f, _, socket := servingPool(t, t.TempDir(), member(x), member(y))
	stream := listAndWatch(t, socket)
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &SetHealths{Changes: []SetHealth{
		{Address: x, Healthy: false, Reason: "link down", Seq: 1 << 40},
		{Address: y, Healthy: false, Reason: "link down", Seq: 1<<40 + 1},
	}})
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h := healths(next.Devices); len(h) != 2 || h[x] != pluginapi.Unhealthy || h[y] != pluginapi.Unhealthy {
		t.Errorf("the list after %s and %s failed together is %v, want both unhealthy", x, y, h)
	}
}

// A ListAndWatch that reaches a restarted pool through its predecessor's
// server is ended at once, with no list: the kubelet then takes the
// registration of the server the pool serves on now.
func TestAStreamOfAnEarlierIncarnationIsEnded(t *testing.T) {
	f, _, first := servingPool(t, t.TempDir(), member(x))
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	for {
		if _, ok := actortest.Next[any](t, f).(*Serving); ok {
			break
		}
	}
	ch, reply := make(chan []*pluginapi.Device, 1), make(chan struct{}, 1)
	f.Sys.Root.Send(f.Child, &watchReq{ch: ch, reply: reply, incarnation: 1, socket: first})
	select {
	case <-reply:
	case <-time.After(10 * time.Second):
		t.Fatal("the pool never answered the stream")
	}
	if list, open := <-ch; open {
		t.Errorf("a stream of the first incarnation was handed %v and kept open, want it ended", healths(list))
	}
}

// In watcher mode a pool that moves to a new socket ends the kubelet's
// streams on the one it leaves at once, and tells its parent so. The
// kubelets before kubernetes#135437 (1.34 to 1.36) keep one client per
// resource, and their plugin watcher unregisters the old socket and
// registers the new one side by side in one pass: when the old client is
// still theirs then, the unregistration may disconnect the new client, or
// drop it from their books while it streams on, so that they never mark
// the pool's devices unhealthy when the daemon stops. A client whose
// stream ended is gone from their books before that pass.
func TestAWatcherPoolEndsTheStreamsOfTheSocketItLeaves(t *testing.T) {
	f, _, old := servingPoolIn(t, t.TempDir(), grpcapi.ModeWatcher, zerolog.Nop(), member(x))
	stream := watchOpened(t, f, old)
	f.Sys.Root.Send(f.Child, &Reserve{Socket: old})
	var ended *registrar.Listing
	var serving string
	for ended == nil {
		switch m := actortest.Next[any](t, f).(type) {
		case *registrar.Listing:
			ended = m
		case *Serving:
			if m.Socket == old {
				t.Fatalf("served on %s again, want a new socket", old)
			}
			serving = m.Socket
		}
	}
	if ended.Open || ended.Socket != old {
		t.Errorf("parent heard %+v, want the stream on %s ended", ended, old)
	}
	// The stream's deadline is far off: only the pool ends it sooner.
	if list, err := stream.Recv(); err == nil || status.Code(err) == codes.DeadlineExceeded {
		t.Errorf("the stream on the socket left got %v, %v; want it ended by the pool", healths(list.GetDevices()), err)
	}
	// The pool serves on: the kubelet's stream on the new socket hears
	// the next verdict, and the stream it ended is not ended again.
	stream = watchOpened(t, f, serving)
	f.Sys.Root.Send(f.Child, &SetHealths{Changes: []SetHealth{{Address: x, Healthy: false, Reason: "link down", Seq: 1 << 40}}})
	next, err := stream.Recv()
	if err != nil {
		t.Fatalf("the stream on the new socket %s: %v, want the list after %s failed", serving, err, x)
	}
	if h := healths(next.Devices); h[x] != pluginapi.Unhealthy {
		t.Errorf("the list after %s failed is %v, want it unhealthy", x, h)
	}
	f.Silent(t)
}

// watchOpened opens a ListAndWatch stream on socket, reads its first
// list, and has the pool's parent hear that it opened.
func watchOpened(t *testing.T, f *actortest.Family, socket string) pluginapi.DevicePlugin_ListAndWatchClient {
	t.Helper()
	stream := listAndWatch(t, socket)
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if l := actortest.Next[*registrar.Listing](t, f); !l.Open || l.Socket != socket {
		t.Fatalf("parent heard %+v, want the stream on %s open", l, socket)
	}
	return stream
}

// In legacy mode the kubelet's streams on the socket a pool leaves go on
// until the kubelet drops them: no plugin watcher unregisters the old
// socket, and a stream ended before the new one is registered would have
// the kubelet mark the pool's devices unhealthy meanwhile.
func TestALegacyPoolKeepsTheStreamsOfTheSocketItLeaves(t *testing.T) {
	f, _, old := servingPoolIn(t, t.TempDir(), grpcapi.ModeLegacy, zerolog.Nop(), member(x))
	stream := watchOpened(t, f, old)
	f.Sys.Root.Send(f.Child, &Reserve{Socket: old})
	if s := actortest.Next[*Serving](t, f); s.Socket == old {
		t.Fatalf("served on %s again, want a new socket", old)
	}
	f.Sys.Root.Send(f.Child, &SetHealths{Changes: []SetHealth{{Address: x, Healthy: false, Reason: "link down", Seq: 1 << 40}}})
	next, err := stream.Recv()
	if err != nil {
		t.Fatalf("the stream on the socket left: %v, want the list after %s failed", err, x)
	}
	if h := healths(next.Devices); h[x] != pluginapi.Unhealthy {
		t.Errorf("the list after %s failed is %v, want it unhealthy", x, h)
	}
	f.Silent(t)
}
