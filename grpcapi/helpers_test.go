package grpcapi

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const testResource = "example.com/nic"

// shortDir returns a fresh temp dir with a short path: t.TempDir's names
// can push a socket path past the 107 bytes a unix socket allows.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fakeBackend is a PoolBackend with canned answers. lists is what
// WatchDevices hands out; the test sends on it. The answer functions are
// set with setAllocate and setPreferred: the race detector sees no order
// between a test's write and a server goroutine's read through a socket.
type fakeBackend struct {
	lists    chan []*pluginapi.Device
	watchErr error

	mu        sync.Mutex
	allocate  func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	preferred func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
}

func (b *fakeBackend) setAllocate(fn func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allocate = fn
}

func (b *fakeBackend) setPreferred(fn func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.preferred = fn
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{lists: make(chan []*pluginapi.Device)}
}

func (b *fakeBackend) WatchDevices(context.Context) (<-chan []*pluginapi.Device, error) {
	if b.watchErr != nil {
		return nil, b.watchErr
	}
	return b.lists, nil
}

func (b *fakeBackend) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	b.mu.Lock()
	fn := b.allocate
	b.mu.Unlock()
	return fn(ctx, req)
}

func (b *fakeBackend) PreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	b.mu.Lock()
	fn := b.preferred
	b.mu.Unlock()
	return fn(ctx, req)
}

// fakeObserver records what a RegistrationObserver hears.
type fakeObserver struct {
	mu     sync.Mutex
	infos  []string // sockets GetInfo was asked about
	status []observedStatus
}

type observedStatus struct {
	resource, socket string
	registered       bool
	reason           string
}

func (o *fakeObserver) InfoRequested(resource, socket string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.infos = append(o.infos, resource+" "+socket)
}

func (o *fakeObserver) RegistrationStatus(resource, socket string, registered bool, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.status = append(o.status, observedStatus{resource, socket, registered, reason})
}

// startPool serves backend at <short dir>/p.sock and stops it at cleanup.
func startPool(t *testing.T, backend PoolBackend, opts PoolServerOptions) (*PoolServer, string) {
	t.Helper()
	path := filepath.Join(shortDir(t), "p.sock")
	s := NewPoolServer(testResource, backend, opts)
	if err := s.Serve(path); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { stopWithin(t, s, 5*time.Second) })
	return s, path
}

func stopWithin(t testing.TB, s *PoolServer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// dialTest opens a client connection to the socket at path, closed at
// cleanup.
func dialTest(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := dialUnix(path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkPrivateSocket checks path is a 0600 socket, alone in its dir: the
// private directory it was created in is gone.
func checkPrivateSocket(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a 0600 socket", fi.Mode())
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	// Beside the socket, nothing but its private directory: 0700, empty.
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	priv := privateDir(path, "")
	if want := []string{filepath.Base(priv), filepath.Base(path)}; !slices.Equal(names, want) {
		t.Errorf("socket dir holds %q, want %q", names, want)
	}
	if fi, err := os.Lstat(priv); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("private dir %s: %v, %v; want a 0700 directory", priv, fi, err)
	}
	if inside, err := os.ReadDir(priv); err != nil || len(inside) != 0 {
		t.Errorf("private dir holds %v (%v), want nothing", inside, err)
	}
}
