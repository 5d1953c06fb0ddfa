package grpcapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/devledger/devledger/internal/actortest"
)

func devices(ids ...string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for _, id := range ids {
		out = append(out, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	return out
}

func deviceIDs(resp *pluginapi.ListAndWatchResponse) []string {
	var out []string
	for _, d := range resp.Devices {
		out = append(out, d.ID)
	}
	return out
}

// openWatch opens ListAndWatch on conn and returns its stream.
func openWatch(t *testing.T, conn *grpc.ClientConn) grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse] {
	t.Helper()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(testCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("ListAndWatch: %v", err)
	}
	return stream
}

// sendAndReceive publishes ids on the backend and checks the stream
// delivers exactly them.
func sendAndReceive(t *testing.T, b *fakeBackend, stream grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], ids ...string) {
	t.Helper()
	b.lists <- devices(ids...)
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if got, want := fmt.Sprint(deviceIDs(resp)), fmt.Sprint(ids); got != want {
		t.Fatalf("ListAndWatch sent %s, want %s", got, want)
	}
}

func TestPoolServerOptionsAndPreStart(t *testing.T) {
	_, path := startPool(t, newFakeBackend(), PoolServerOptions{})
	client := pluginapi.NewDevicePluginClient(dialTest(t, path))
	opts, err := client.GetDevicePluginOptions(testCtx(t), &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("GetDevicePluginOptions: %v", err)
	}
	if !opts.GetPreferredAllocationAvailable || opts.PreStartRequired {
		t.Errorf("options = %+v, want GetPreferredAllocationAvailable and no PreStartRequired", opts)
	}
	if _, err := client.PreStartContainer(testCtx(t), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}}); err != nil {
		t.Errorf("PreStartContainer: %v", err)
	}
}

func TestListAndWatchStreamsUntilStop(t *testing.T) {
	b := newFakeBackend()
	s, path := startPool(t, b, PoolServerOptions{})
	stream := openWatch(t, dialTest(t, path))
	sendAndReceive(t, b, stream, "0000:3b:02.0", "0000:3b:02.1")
	sendAndReceive(t, b, stream, "0000:3b:02.1")

	// Stop returns although the stream is open, and ends it.
	stopWithin(t, s, 5*time.Second)
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("Recv after Stop: %v, want Unavailable", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket after Stop: %v, want it removed", err)
	}
	if _, err := os.Lstat(privateDir(path, "")); !os.IsNotExist(err) {
		t.Errorf("private dir after Stop: %v, want it removed", err)
	}
	if err := s.Reserve(path); err == nil {
		t.Error("Reserve after Stop succeeded")
	}
}

// Lists that share entries reach every stream whole, over the wire, as
// the backend published them: a second stream (a restarted kubelet's)
// opened while the first is still open, lists alternating between them,
// entries replaced and moved.
func TestListAndWatchListsSharingEntries(t *testing.T) {
	b := &perStreamBackend{fakeBackend: newFakeBackend(), watches: make(chan chan []*pluginapi.Device, 2)}
	_, path := startPool(t, b, PoolServerOptions{})
	oldStream := openWatch(t, dialTest(t, path))
	oldLists := <-b.watches
	base := devices("0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2")
	base[1].Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 1}}}
	down := append([]*pluginapi.Device(nil), base...)
	down[2] = &pluginapi.Device{ID: "0000:3b:02.2", Health: pluginapi.Unhealthy}
	moved := []*pluginapi.Device{down[2], base[0], {ID: "0000:3b:02.3", Health: pluginapi.Healthy}}

	check := func(stream grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], lists chan []*pluginapi.Device, list []*pluginapi.Device) {
		t.Helper()
		lists <- list
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if want := (&pluginapi.ListAndWatchResponse{Devices: list}); !proto.Equal(resp, want) {
			t.Fatalf("ListAndWatch sent %v, want %v", resp, want)
		}
	}
	check(oldStream, oldLists, base)
	newStream := openWatch(t, dialTest(t, path))
	newLists := <-b.watches
	check(newStream, newLists, base)
	check(oldStream, oldLists, down)
	check(newStream, newLists, moved)
	check(oldStream, oldLists, base)
	check(newStream, newLists, down)
}

// perStreamBackend gives each ListAndWatch a channel of its own, handed
// to the test on watches.
type perStreamBackend struct {
	*fakeBackend
	watches chan chan []*pluginapi.Device
}

func (b *perStreamBackend) WatchDevices(context.Context) (<-chan []*pluginapi.Device, error) {
	ch := make(chan []*pluginapi.Device)
	b.watches <- ch
	return ch, nil
}

// Whatever a previous run or someone else left at a socket's private
// directory, the socket is created in a directory of ours, 0700.
func TestPrivateDirIsReclaimed(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, priv string)
	}{
		{"left open", func(t *testing.T, priv string) {
			if err := os.Mkdir(priv, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(priv, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"a link elsewhere", func(t *testing.T, priv string) {
			if err := os.Symlink(t.TempDir(), priv); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file", func(t *testing.T, priv string) {
			if err := os.WriteFile(priv, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a stale socket inside", func(t *testing.T, priv string) {
			if err := os.Mkdir(priv, 0o700); err != nil {
				t.Fatal(err)
			}
			staleSocket(t, filepath.Join(priv, privateSocketName))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(shortDir(t), "p.sock")
			tc.plant(t, privateDir(path, ""))
			s := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{})
			if err := s.Serve(path); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopWithin(t, s, 5*time.Second) })
			checkPrivateSocket(t, path)
		})
	}
}

// A new socket in legacy mode is made in the directory the last one was
// (device-plugins/ is not watched, and a mkdir and rmdir cost more on some
// disks than the rest); in watcher mode, in one made anew, which the
// kubelet's plugin watcher never watches.
func TestPrivateDirIsMadeAnewOnlyInWatcherMode(t *testing.T) {
	for _, mode := range []RegistrationMode{ModeLegacy, ModeWatcher} {
		t.Run(string(mode), func(t *testing.T) {
			dir := shortDir(t)
			s := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{Mode: mode, PrivateDirKey: "pool"})
			if err := s.Serve(filepath.Join(dir, "p.1.sock")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopWithin(t, s, 5*time.Second) })
			// A mark in the directory outlives it only if it is kept.
			mark := filepath.Join(privateDir(filepath.Join(dir, "p.1.sock"), "pool"), "mark")
			for i := 2; i <= 3; i++ {
				if err := os.WriteFile(mark, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, fmt.Sprintf("p.%d.sock", i))
				if err := s.Reserve(path); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
					t.Fatalf("socket %d: %v, %v; want a 0600 socket", i, fi, err)
				}
				_, err := os.Lstat(mark)
				if kept := err == nil; kept != (mode == ModeLegacy) {
					t.Errorf("socket %d: directory kept %v, want %v", i, kept, mode == ModeLegacy)
				}
			}
		})
	}
}

func TestListAndWatchEndsWhenBackendCloses(t *testing.T) {
	b := newFakeBackend()
	_, path := startPool(t, b, PoolServerOptions{})
	stream := openWatch(t, dialTest(t, path))
	sendAndReceive(t, b, stream, "a")
	close(b.lists)
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("Recv after the backend closed: %v, want Unavailable", err)
	}
}

func TestListAndWatchWatchError(t *testing.T) {
	b := newFakeBackend()
	b.watchErr = fmt.Errorf("pool stopping: %w", ErrUnavailable)
	_, path := startPool(t, b, PoolServerOptions{})
	_, err := openWatch(t, dialTest(t, path)).Recv()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Recv: %v, want Unavailable", err)
	}
}

func TestAllocateAndPreferredErrors(t *testing.T) {
	answer := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{
		{Envs: map[string]string{"PCIDEVICE_EXAMPLE_COM_NIC": "0000:3b:02.0"}},
	}}
	tests := []struct {
		name     string
		allocate func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
		code     codes.Code
		message  string
	}{
		{"answer", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return answer, nil
		}, codes.OK, ""},
		{"invalid", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, fmt.Errorf("device 0000:ff:00.0 is not in the pool: %w", ErrInvalidRequest)
		}, codes.InvalidArgument, "device 0000:ff:00.0 is not in the pool: invalid request"},
		{"unavailable", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, fmt.Errorf("ledger: disk full: %w", ErrUnavailable)
		}, codes.Unavailable, "ledger: disk full: unavailable"},
		{"deadline from backend", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, fmt.Errorf("ask pool: %w", context.DeadlineExceeded)
		}, codes.DeadlineExceeded, "ask pool: context deadline exceeded"},
		{"canceled from backend", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, fmt.Errorf("ask pool: %w", context.Canceled)
		}, codes.Canceled, "ask pool: context canceled"},
		{"backend honours the deadline", func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, codes.DeadlineExceeded, "context deadline exceeded"},
		{"backend ignores the deadline", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			time.Sleep(2 * time.Second) // a stuck backend: the server must not wait for it
			return answer, nil
		}, codes.DeadlineExceeded, "pool example.com/nic did not answer Allocate: context deadline exceeded"},
		{"other", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, errors.New("boom")
		}, codes.Internal, "boom"},
		{"no answer", func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, nil
		}, codes.Internal, "pool example.com/nic answered Allocate with nothing"},
	}
	b := newFakeBackend()
	_, path := startPool(t, b, PoolServerOptions{CallTimeout: 200 * time.Millisecond})
	client := pluginapi.NewDevicePluginClient(dialTest(t, path))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b.setAllocate(tc.allocate)
			resp, err := client.Allocate(testCtx(t), &pluginapi.AllocateRequest{
				ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0000:3b:02.0"}}},
			})
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.message) {
				t.Fatalf("Allocate error = %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.message)
			}
			if tc.code == codes.OK && !proto.Equal(resp, answer) {
				t.Errorf("Allocate = %v, want %v", resp, answer)
			}
		})
	}

	t.Run("preferred", func(t *testing.T) {
		want := &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: []string{"b"}}}}
		b.setPreferred(func(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
			if len(req.ContainerRequests) != 1 || req.ContainerRequests[0].AllocationSize != 1 {
				return nil, fmt.Errorf("request %v: %w", req, ErrInvalidRequest)
			}
			return want, nil
		})
		got, err := client.GetPreferredAllocation(testCtx(t), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"a", "b"}, AllocationSize: 1}},
		})
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("GetPreferredAllocation = %v, %v; want %v", got, err, want)
		}
		_, err = client.GetPreferredAllocation(testCtx(t), &pluginapi.PreferredAllocationRequest{})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("GetPreferredAllocation of nothing: %v, want InvalidArgument", err)
		}
	})
}

// keeper is a fake backend that declares it keeps deadlines.
type keeper struct{ *fakeBackend }

func (keeper) KeepsDeadlines() {}

// A backend that keeps deadlines is trusted with them: its answer is the
// kubelet's, even one that comes after the server's deadline (an Allocate
// the ledger already holds), and its own DeadlineExceeded is passed on.
func TestDeadlineKeeperAnswersAreFinal(t *testing.T) {
	answer := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{
		{Envs: map[string]string{"PCIDEVICE_EXAMPLE_COM_NIC": "0000:3b:02.0"}},
	}}
	b := keeper{newFakeBackend()}
	_, path := startPool(t, b, PoolServerOptions{CallTimeout: 100 * time.Millisecond})
	client := pluginapi.NewDevicePluginClient(dialTest(t, path))
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0000:3b:02.0"}}}}

	b.setAllocate(func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // the commit under way when time ran out
		return answer, nil
	})
	resp, err := client.Allocate(testCtx(t), req)
	if err != nil || !proto.Equal(resp, answer) {
		t.Errorf("Allocate = %v, %v; want the late answer %v", resp, err, answer)
	}

	b.setAllocate(func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("pool did not answer in time: %w", ctx.Err())
	})
	if _, err := client.Allocate(testCtx(t), req); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Allocate = %v, want DeadlineExceeded", err)
	}
}

func TestWatcherModeRegistration(t *testing.T) {
	obs := &fakeObserver{}
	_, path := startPool(t, newFakeBackend(), PoolServerOptions{Mode: ModeWatcher, Observer: obs})
	conn := dialTest(t, path)
	reg := registerapi.NewRegistrationClient(conn)

	info, err := reg.GetInfo(testCtx(t), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	want := &registerapi.PluginInfo{Type: "DevicePlugin", Name: testResource, SupportedVersions: []string{"v1beta1"}}
	if !proto.Equal(info, want) {
		t.Errorf("GetInfo = %v, want %v", info, want)
	}
	for _, st := range []*registerapi.RegistrationStatus{
		{PluginRegistered: false, Error: "plugin validation failed"},
		{PluginRegistered: true},
	} {
		if _, err := reg.NotifyRegistrationStatus(testCtx(t), st); err != nil {
			t.Fatalf("NotifyRegistrationStatus: %v", err)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []string{testResource + " " + path}; fmt.Sprint(obs.infos) != fmt.Sprint(want) {
		t.Errorf("InfoRequested heard %q, want %q", obs.infos, want)
	}
	wantStatus := []observedStatus{
		{testResource, path, false, "plugin validation failed"},
		{testResource, path, true, ""},
	}
	if fmt.Sprint(obs.status) != fmt.Sprint(wantStatus) {
		t.Errorf("RegistrationStatus heard %+v, want %+v", obs.status, wantStatus)
	}

	// The DevicePlugin service answers on the same socket.
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(testCtx(t), &pluginapi.Empty{}); err != nil {
		t.Errorf("GetDevicePluginOptions on the watcher socket: %v", err)
	}
}

// A server that serves under a new name (Reserve elsewhere) keeps the
// kubelet's connections to the old one: each says which socket it came in
// on. GetInfo names no endpoint on either, so that the kubelet connects to
// the path it found each at, not to the new path twice.
func TestWatcherModeNamesTheSocketAsked(t *testing.T) {
	obs := &fakeObserver{}
	s, old := startPool(t, newFakeBackend(), PoolServerOptions{Mode: ModeWatcher, Observer: obs, PrivateDirKey: "pool.sock"})
	oldConn := dialTest(t, old)
	if _, err := registerapi.NewRegistrationClient(oldConn).GetInfo(testCtx(t), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(filepath.Dir(old), "next.sock")
	if err := s.Reserve(next); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("old socket after Reserve elsewhere: %v, want it removed", err)
	}
	for _, tc := range []struct {
		conn *grpc.ClientConn
		want string
	}{{oldConn, old}, {dialTest(t, next), next}} {
		info, err := registerapi.NewRegistrationClient(tc.conn).GetInfo(testCtx(t), &registerapi.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if info.Endpoint != "" {
			t.Errorf("GetInfo on %s: endpoint %s, want none (the path the kubelet found)", tc.want, info.Endpoint)
		}
		if _, err := registerapi.NewRegistrationClient(tc.conn).NotifyRegistrationStatus(testCtx(t), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
			t.Fatal(err)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := []observedStatus{{testResource, old, true, ""}, {testResource, next, true, ""}}
	if fmt.Sprint(obs.status) != fmt.Sprint(want) {
		t.Errorf("RegistrationStatus heard %+v, want %+v", obs.status, want)
	}
	// One private directory, named by the key, for both names.
	entries, err := os.ReadDir(filepath.Dir(old))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{filepath.Base(privateDir(old, "pool.sock")), "next.sock"}; !slices.Equal(names, want) {
		t.Errorf("socket dir holds %q, want %q", names, want)
	}
}

func TestLegacyModeHasNoRegistrationService(t *testing.T) {
	_, path := startPool(t, newFakeBackend(), PoolServerOptions{Mode: ModeLegacy})
	_, err := registerapi.NewRegistrationClient(dialTest(t, path)).GetInfo(testCtx(t), &registerapi.InfoRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("GetInfo in legacy mode: %v, want Unimplemented", err)
	}
}

func TestSocketIsPrivate(t *testing.T) {
	_, path := startPool(t, newFakeBackend(), PoolServerOptions{})
	checkPrivateSocket(t, path)
}

// staleSocket leaves a socket file at path that nothing listens on, as a
// crashed daemon would.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

func TestServeOverStaleSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "p.sock")
	staleSocket(t, path)
	s := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{})
	if err := s.Serve(path); err != nil {
		t.Fatalf("Serve over a stale socket: %v", err)
	}
	t.Cleanup(func() { stopWithin(t, s, 5*time.Second) })
	if _, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).GetDevicePluginOptions(testCtx(t), &pluginapi.Empty{}); err != nil {
		t.Errorf("GetDevicePluginOptions: %v", err)
	}
	if err := s.Serve(path); err == nil {
		t.Error("a second Serve succeeded")
	}
}

func TestServeRefusesToReplaceAFile(t *testing.T) {
	path := filepath.Join(shortDir(t), "p.sock")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{})
	t.Cleanup(func() { stopWithin(t, s, time.Second) })
	if err := s.Serve(path); err == nil {
		t.Fatal("Serve replaced a regular file")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
		t.Errorf("file after Serve: %q, %v", b, err)
	}
}

func TestServeRejectsBadModeAndLongPath(t *testing.T) {
	dir := shortDir(t)
	s := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{Mode: "auto"})
	if err := s.Serve(filepath.Join(dir, "p.sock")); err == nil {
		t.Error("Serve in mode auto succeeded")
	}
	s = NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{})
	long := filepath.Join(dir, strings.Repeat("x", 120)+".sock")
	if err := s.Serve(long); err == nil {
		t.Error("Serve on a 120-byte name succeeded")
	}
}

func TestReserveAfterSocketDeleted(t *testing.T) {
	b := newFakeBackend()
	s, path := startPool(t, b, PoolServerOptions{})
	stream := openWatch(t, dialTest(t, path))
	sendAndReceive(t, b, stream, "a")

	// The kubelet restarts and deletes every socket in its dir.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		t.Fatal("dial after the socket was deleted succeeded")
	}
	if err := s.Reserve(path); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if s.Socket() != path {
		t.Errorf("Socket() = %q, want %q", s.Socket(), path)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket after Reserve: %v, %v", fi, err)
	}
	// New connections are served, and the old stream was not dropped.
	b.setAllocate(func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return &pluginapi.AllocateResponse{}, nil
	})
	if _, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).Allocate(testCtx(t), &pluginapi.AllocateRequest{}); err != nil {
		t.Errorf("Allocate after Reserve: %v", err)
	}
	sendAndReceive(t, b, stream, "a", "b")

	// Reserve while the socket is still there replaces it in place.
	if err := s.Reserve(path); err != nil {
		t.Fatalf("second Reserve: %v", err)
	}
	if _, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).GetDevicePluginOptions(testCtx(t), &pluginapi.Empty{}); err != nil {
		t.Errorf("after a second Reserve: %v", err)
	}
}

func TestStopLeavesAnotherServersSocket(t *testing.T) {
	s, path := startPool(t, newFakeBackend(), PoolServerOptions{})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// Another server now owns the path.
	other := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{})
	if err := other.Serve(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(t, other, 5*time.Second) })
	stopWithin(t, s, 5*time.Second)
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("the other server's socket after Stop: %v", err)
	}
}

func TestStopCutsShortAStuckCall(t *testing.T) {
	b := newFakeBackend()
	entered := make(chan struct{})
	b.setAllocate(func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	s, path := startPool(t, b, PoolServerOptions{CallTimeout: time.Minute})
	// The caller waits as long as it takes, as the kubelet does: only Stop
	// can end the call.
	callCtx, endCall := context.WithCancel(context.Background())
	t.Cleanup(endCall)
	errc := make(chan error, 1)
	go func() {
		_, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).Allocate(callCtx, &pluginapi.AllocateRequest{})
		errc <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopc := make(chan error, 1)
	go func() { stopc <- s.Stop(ctx) }()
	select {
	case err := <-stopc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop with a stuck call: %v, want DeadlineExceeded", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("Stop waited for the stuck call past its own deadline")
	}
	if err := <-errc; err == nil {
		t.Error("the stuck Allocate succeeded")
	}
}

// Close does not wait for a call in flight: the socket goes at once, the
// call still gets its answer, and Stop afterwards waits for it.
func TestCloseLeavesCallsToFinish(t *testing.T) {
	b := newFakeBackend()
	entered, release := make(chan struct{}), make(chan struct{})
	b.setAllocate(func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		close(entered)
		<-release
		return &pluginapi.AllocateResponse{}, nil
	})
	s, path := startPool(t, b, PoolServerOptions{CallTimeout: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).Allocate(testCtx(t), &pluginapi.AllocateRequest{})
		errc <- err
	}()
	<-entered
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket after Close: %v, want it removed", err)
	}
	if err := s.Reserve(path); err == nil {
		t.Error("Reserve after Close succeeded")
	}
	close(release)
	if err := <-errc; err != nil {
		t.Errorf("the call in flight at Close: %v", err)
	}
	stopWithin(t, s, 5*time.Second)
}

// A call Stop cuts short has ended (CallEnded) by the time its caller
// hears it failed: an answer the backend reads from then on reaches no
// one, and a backend that hands back an allocation it read late (the
// pool's) must not take it for delivered. gRPC closes the connection
// before it cancels the calls on it, so each round is a chance to see
// the caller's error first (about one in fifteen on a test machine:
// a hundred rounds all but never miss it).
func TestACallStopCutsShortHasEndedWhenItsCallerHears(t *testing.T) {
	for round := range 100 {
		b := newFakeBackend()
		entered, heard := make(chan struct{}), make(chan struct{})
		ended := make(chan bool, 1)
		b.setAllocate(func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			close(entered)
			<-heard
			ended <- CallEnded(ctx)
			return &pluginapi.AllocateResponse{}, nil
		})
		s, path := startPool(t, b, PoolServerOptions{CallTimeout: time.Minute})
		errc := make(chan error, 1)
		go func() {
			_, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).Allocate(testCtx(t), &pluginapi.AllocateRequest{})
			close(heard)
			errc <- err
		}()
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = s.Stop(ctx)
		cancel()
		if err := <-errc; err == nil {
			t.Fatalf("round %d: the Allocate Stop cut short succeeded", round)
		}
		if !<-ended {
			t.Fatalf("round %d: the call Stop cut short had not ended when its caller heard it failed", round)
		}
	}
}

// CallEnded tells a call whose caller went away from one that only ran
// past the server's own deadline: the first's answer reaches no one, the
// second's still reaches a caller that waits (the late answer of a
// DeadlineKeeper, whose call the server does not end at its deadline).
func TestCallEndedIsTheCallersEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		callerEnd bool
	}{
		{"the caller went away", true},
		{"past the server's deadline", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend()
			entered, ended := make(chan struct{}), make(chan bool, 1)
			b.setAllocate(func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
				close(entered)
				<-ctx.Done() // the server's deadline, or the caller's end
				// The caller's end reaches the server a moment after
				// the caller; the server's deadline is known at once.
				for deadline := time.Now().Add(5 * time.Second); tc.callerEnd && !CallEnded(ctx) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				ended <- CallEnded(ctx)
				return nil, ctx.Err()
			})
			timeout := time.Minute
			if !tc.callerEnd {
				timeout = 20 * time.Millisecond
			}
			_, path := startPool(t, keeper{b}, PoolServerOptions{CallTimeout: timeout})
			callCtx, endCall := context.WithCancel(testCtx(t))
			defer endCall()
			errc := make(chan error, 1)
			go func() {
				_, err := pluginapi.NewDevicePluginClient(dialTest(t, path)).Allocate(callCtx, &pluginapi.AllocateRequest{})
				errc <- err
			}()
			<-entered
			if tc.callerEnd {
				endCall()
			}
			if got := <-ended; got != tc.callerEnd {
				t.Errorf("CallEnded = %v, want %v", got, tc.callerEnd)
			}
			if err := <-errc; err == nil {
				t.Error("the Allocate succeeded")
			}
		})
	}
}

// The reason given to NotifyRegistrationStatus is logged and passed on
// whole when the kubelet's plugin watcher gives it (its texts with the
// longest socket path and resource name there are), and cut past
// MaxReason bytes, its length noted, when a forged or buggy call gives
// megabytes: anything root on the node can call it.
func TestARefusalsReasonIsBounded(t *testing.T) {
	sock := "/" + strings.Repeat("s", 106) // sun_path: 108 bytes with its NUL
	name := strings.Repeat("d", 244) + "/" + strings.Repeat("n", 63)
	huge := strings.Repeat("x", 4<<20-64)
	want := func(reason string) string {
		if reason == huge {
			return huge[:MaxReason] + fmt.Sprintf("… (%d bytes)", len(huge))
		}
		return reason
	}
	reasons := []string{
		// pkg/kubelet/pluginmanager/operationexecutor, with the errors of
		// the device manager (pkg/kubelet/cm/devicemanager).
		"RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket " + sock,
		`RegisterPlugin error -- plugin validation failed with err: invalid name of device plugin socket: the ResourceName "` + name + `" is invalid`,
		`RegisterPlugin error -- plugin registration failed with err: failed to get device plugin options: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial unix ` + sock + `: connect: connection refused"`,
		"RegisterPlugin error -- plugin registration failed with err: device plugin already connected: " + sock,
		huge,
	}
	for _, observed := range []bool{false, true} {
		t.Run(fmt.Sprintf("observed %v", observed), func(t *testing.T) {
			var logs actortest.Log
			opts := PoolServerOptions{Mode: ModeWatcher, Logger: zerolog.New(&logs).Level(zerolog.DebugLevel)}
			obs := &fakeObserver{}
			if observed {
				opts.Observer = obs
			}
			_, path := startPool(t, newFakeBackend(), opts)
			reg := registerapi.NewRegistrationClient(dialTest(t, path))
			for _, r := range reasons {
				if _, err := reg.NotifyRegistrationStatus(testCtx(t), &registerapi.RegistrationStatus{Error: r}); err != nil {
					t.Fatalf("NotifyRegistrationStatus: %v", err)
				}
			}
			var lines []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "kubelet rejected the pool") {
					lines = append(lines, line)
				}
			}
			if len(lines) != len(reasons) {
				t.Fatalf("%d log lines for %d refusals", len(lines), len(reasons))
			}
			for i, r := range reasons {
				var line struct{ Reason string }
				if err := json.Unmarshal([]byte(lines[i]), &line); err != nil || line.Reason != want(r) {
					t.Errorf("%d-byte log line %.200q (%v), want the reason %.200q", len(lines[i]), lines[i], err, want(r))
				}
			}
			if !observed {
				return
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			for i, r := range reasons {
				if i >= len(obs.status) || obs.status[i].reason != want(r) {
					t.Errorf("the observer heard %d statuses; of refusal %d, want the reason %.200q", len(obs.status), i, want(r))
				}
			}
		})
	}
}
