package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registerBackoff retries a kubelet socket that does not answer yet. The
// first attempt is immediate; the retries stay short because a kubelet that
// is starting comes up within seconds and registration gates the pool.
var registerBackoff = backoff.Config{
	BaseDelay:  50 * time.Millisecond,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   time.Second,
}

// RegisterWithKubelet registers a legacy-mode pool: it calls the kubelet's
// Registration service on kubeletSocket with Version v1beta1, the resource
// name and endpointBaseName, the pool socket's file name inside the
// kubelet's device-plugins dir. opts may be nil; the kubelet ignores them
// and asks the pool's GetDevicePluginOptions instead. The pool must already
// be serving: the kubelet connects back before it answers.
//
// It waits for the kubelet's socket to answer until ctx ends, so give ctx a
// deadline. An answer with an error wraps ErrRegistrationRejected and keeps
// the kubelet's reason; a kubelet that was never reached wraps
// ErrKubeletUnreachable and ctx's error (or the transport's). Any other
// error leaves open whether the kubelet took the Register.
func RegisterWithKubelet(ctx context.Context, kubeletSocket, resource, endpointBaseName string, opts *pluginapi.DevicePluginOptions) error {
	if endpointBaseName == "" || filepath.Base(endpointBaseName) != endpointBaseName {
		return fmt.Errorf("register %s with the kubelet: endpoint %q: want a socket file name, not a path", resource, endpointBaseName)
	}
	// reached is set once a connection to the kubelet's socket is made:
	// until then, a failure is one the kubelet never saw.
	var reached atomic.Bool
	conn, err := dialUnix(kubeletSocket, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           registerBackoff,
		MinConnectTimeout: 5 * time.Second,
	}), grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", kubeletSocket)
		if err == nil {
			reached.Store(true)
		}
		return c, err
	}))
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w: %w", resource, kubeletSocket, ErrKubeletUnreachable, err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpointBaseName,
		ResourceName: resource,
		Options:      opts,
	}, grpc.WaitForReady(true))
	if err == nil {
		return nil
	}
	// gRPC may report the deadline a moment before ctx does.
	if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
		err = context.DeadlineExceeded
	} else if ctx.Err() != nil {
		err = ctx.Err()
	}
	if !reached.Load() {
		return fmt.Errorf("register %s with the kubelet at %s: %w: %w", resource, kubeletSocket, ErrKubeletUnreachable, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("register %s with the kubelet at %s: no answer: %w", resource, kubeletSocket, err)
	}
	// The kubelet's own texts are short: whatever answers on its socket
	// puts no more than MaxReason bytes of its own into the ledger or a log.
	st := clippedStatus(err)
	err = st.Err()
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return fmt.Errorf("register %s with the kubelet at %s: %w", resource, kubeletSocket, err)
	}
	if strings.Contains(st.Message(), "already connected") {
		return fmt.Errorf("register %s with the kubelet at %s: %w (%w): %s", resource, kubeletSocket, ErrRegistrationRejected, ErrAlreadyConnected, st.Message())
	}
	return fmt.Errorf("register %s with the kubelet at %s: %w: %s", resource, kubeletSocket, ErrRegistrationRejected, st.Message())
}
