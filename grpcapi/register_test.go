package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeKubelet is a minimal kubelet Registration server: it checks the
// version as the kubelet does, with the kubelet's wording, and records
// every request. An answer, if set, is its answer to every Register.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	supported []string
	answer    error

	mu  sync.Mutex
	got []*pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.got = append(k.got, r)
	k.mu.Unlock()
	if k.answer != nil {
		return nil, k.answer
	}
	if !slices.Contains(k.supported, r.Version) {
		return nil, fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", r.Version, k.supported)
	}
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) requests() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.got)
}

// serveFakeKubelet serves k on a unix socket at path until cleanup.
func serveFakeKubelet(t *testing.T, path string, k *fakeKubelet) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
}

func TestRegisterWithKubelet(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	k := &fakeKubelet{supported: []string{"v1beta1"}}
	serveFakeKubelet(t, sock, k)
	opts := &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
	if err := RegisterWithKubelet(testCtx(t), sock, testResource, "example.com_nic.sock", opts); err != nil {
		t.Fatalf("RegisterWithKubelet: %v", err)
	}
	want := &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "example.com_nic.sock", ResourceName: testResource, Options: opts}
	if got := k.requests(); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("kubelet got %v, want %v", got, want)
	}
}

func TestRegisterWithKubeletRejected(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	serveFakeKubelet(t, sock, &fakeKubelet{supported: []string{"v1"}})
	err := RegisterWithKubelet(testCtx(t), sock, testResource, "p.sock", nil)
	if !errors.Is(err, ErrRegistrationRejected) {
		t.Fatalf("RegisterWithKubelet = %v, want ErrRegistrationRejected", err)
	}
	if reason := `requested API version "v1beta1" is not supported by kubelet. Supported version is ["v1"]`; !strings.Contains(err.Error(), reason) {
		t.Errorf("error %q does not carry the kubelet's reason %q", err, reason)
	}
}

// Whatever answers on the kubelet's socket puts no more than MaxReason
// bytes of its own text into the error, which the registrar records and
// logs: the rest is cut, its length noted.
func TestRegisterWithKubeletCutsALongAnswer(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	want := huge[:MaxReason] + fmt.Sprintf("… (%d bytes)", len(huge))
	for _, tc := range []struct {
		name     string
		code     codes.Code
		rejected bool
	}{
		{"a refusal", codes.Unknown, true},
		{"unavailable", codes.Unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "kubelet.sock")
			serveFakeKubelet(t, sock, &fakeKubelet{answer: status.Error(tc.code, huge)})
			err := RegisterWithKubelet(testCtx(t), sock, testResource, "p.sock", nil)
			if msg := fmt.Sprint(err); errors.Is(err, ErrRegistrationRejected) != tc.rejected || !strings.Contains(msg, want) || len(msg) > 2*MaxReason {
				t.Errorf("RegisterWithKubelet answered a %d-byte %v: %d-byte error %.200q, want the answer cut to %d bytes (rejected: %v)", len(huge), tc.code, len(msg), msg, MaxReason, tc.rejected)
			}
		})
	}
}

func TestRegisterWithKubeletUnreachable(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := RegisterWithKubelet(ctx, sock, testResource, "p.sock", nil)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrKubeletUnreachable) || errors.Is(err, ErrRegistrationRejected) {
		t.Errorf("RegisterWithKubelet without a kubelet = %v, want DeadlineExceeded and ErrKubeletUnreachable, not a rejection", err)
	}
}

// A kubelet that took the connection but never answers may have taken the
// Register: that is not "unreachable".
func TestRegisterWithKubeletSilentIsNotUnreachable(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, silentRegistration{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	// Long enough to connect on a loaded machine: a deadline that ends
	// before the connection is made reads as unreachable.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = RegisterWithKubelet(ctx, sock, testResource, "p.sock", nil)
	if err == nil || errors.Is(err, ErrKubeletUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RegisterWithKubelet with a silent kubelet = %v, want DeadlineExceeded, not ErrKubeletUnreachable", err)
	}
}

// silentRegistration takes a Register and never answers it.
type silentRegistration struct {
	pluginapi.UnimplementedRegistrationServer
}

func (silentRegistration) Register(ctx context.Context, _ *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A kubelet that goes away while it holds the Register (a restart) has
// not rejected it: the answer is Unavailable, which leaves open whether it
// took the Register, and is not a rejection.
func TestRegisterWithKubeletGoneMidCallIsNotRejected(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	entered := make(chan struct{}, 1)
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, heldRegistration{entered: entered})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	errc := make(chan error, 1)
	go func() { errc <- RegisterWithKubelet(testCtx(t), sock, testResource, "p.sock", nil) }()
	select {
	case <-entered:
	case <-testCtx(t).Done():
		t.Fatal("the Register never reached the kubelet")
	}
	srv.Stop()
	err = <-errc
	if err == nil || errors.Is(err, ErrRegistrationRejected) || errors.Is(err, ErrKubeletUnreachable) {
		t.Errorf("RegisterWithKubelet with a kubelet gone mid-call = %v, want an error that is neither a rejection nor unreachable", err)
	}
}

// heldRegistration takes a Register, says so on entered, and holds it
// until the call ends.
type heldRegistration struct {
	pluginapi.UnimplementedRegistrationServer
	entered chan<- struct{}
}

func (r heldRegistration) Register(ctx context.Context, _ *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.entered <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestRegisterWithKubeletWaitsForTheSocket(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	errc := make(chan error, 1)
	go func() { errc <- RegisterWithKubelet(testCtx(t), sock, testResource, "p.sock", nil) }()
	k := &fakeKubelet{supported: []string{"v1beta1"}}
	serveFakeKubelet(t, sock, k)
	if err := <-errc; err != nil {
		t.Fatalf("RegisterWithKubelet before the kubelet came up: %v", err)
	}
	if n := len(k.requests()); n != 1 {
		t.Errorf("kubelet got %d requests, want 1", n)
	}
}

func TestRegisterWithKubeletRefusesAPathAsEndpoint(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	k := &fakeKubelet{supported: []string{"v1beta1"}}
	serveFakeKubelet(t, sock, k)
	err := RegisterWithKubelet(testCtx(t), sock, testResource, "dir/p.sock", nil)
	if err == nil || errors.Is(err, ErrRegistrationRejected) || errors.Is(err, ErrKubeletUnreachable) {
		t.Errorf("RegisterWithKubelet with endpoint dir/p.sock = %v, want a usage error", err)
	}
	if got := k.requests(); len(got) != 0 {
		t.Errorf("the kubelet was asked %v; a path as endpoint must not reach it", got)
	}
}
