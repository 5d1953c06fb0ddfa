package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistrationMode says how the kubelet learns of a pool's socket.
type RegistrationMode string

const (
	// ModeLegacy: the socket lives in the kubelet's device-plugins dir and
	// the pool calls Register on kubelet.sock (RegisterWithKubelet).
	ModeLegacy RegistrationMode = "legacy"
	// ModeWatcher: the socket lives in the kubelet's plugins_registry dir and
	// also serves pluginregistration v1, which the kubelet's plugin watcher
	// calls when it finds the socket.
	ModeWatcher RegistrationMode = "watcher"
)

// streamWorkers is how many goroutines a pool's gRPC server keeps for its
// calls (more at once run on new goroutines): one for the kubelet's
// ListAndWatch stream, the rest for its Allocates and
// GetPreferredAllocations and for clients in parallel.
const streamWorkers = 8

// DefaultCallTimeout bounds an Allocate or GetPreferredAllocation call into
// the backend when PoolServerOptions.CallTimeout is zero. The kubelet itself
// calls both with no deadline, so this is what keeps a stuck pool from
// hanging pod admission.
const DefaultCallTimeout = 10 * time.Second

// PoolServerOptions configures a PoolServer. The zero value serves in legacy
// mode with DefaultCallTimeout and no logging.
type PoolServerOptions struct {
	// Mode is ModeLegacy (also when empty) or ModeWatcher.
	Mode RegistrationMode
	// Observer hears GetInfo and NotifyRegistrationStatus in watcher mode,
	// and logs them (the server's own lines are then debug); nil ignores
	// them.
	Observer RegistrationObserver
	// CallTimeout bounds each Allocate and GetPreferredAllocation call into
	// the backend; zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// Logger gets one line per stream opened or ended and per failed call.
	Logger zerolog.Logger
	// PrivateDirKey names the private directory beside the socket in which
	// each socket is made before it is moved into place; empty means the
	// socket's file name. A server that serves under a new name on every
	// Reserve gives a key that stays the same, so that it keeps one
	// directory across names (in watcher mode, one made anew for each),
	// and a directory a killed daemon left is found by the next socket.
	PrivateDirKey string
}

// PoolServer is one pool's gRPC server on a unix socket: DevicePlugin
// v1beta1 and, in watcher mode, pluginregistration v1 on the same socket. It
// translates the kubelet's calls into PoolBackend calls, bounds them with a
// deadline and maps errors to gRPC codes; it decides nothing itself.
//
// One grpc.Server lives as long as the PoolServer, across any number of
// listeners (Reserve), so connections the kubelet holds survive a socket
// being re-created. All methods are safe for concurrent use.
type PoolServer struct {
	resource string
	backend  PoolBackend
	mode     RegistrationMode
	observer RegistrationObserver
	timeout  time.Duration
	log      zerolog.Logger
	srv      *grpc.Server
	// stopping is closed by Close (and so by Stop); it ends ListAndWatch
	// streams, which would otherwise keep GracefulStop waiting until its
	// deadline.
	stopping chan struct{}
	sock     servedSocket
	// lists encodes the device lists of every ListAndWatch stream.
	lists listEncoder
	// drainOnce starts the one GracefulStop, which closes drained when
	// every call has finished.
	drainOnce sync.Once
	drained   chan struct{}
	// cut is closed once Stop gives up waiting, before it cuts the calls
	// short: gRPC tells the caller (the connection closes) before it
	// cancels the call's context, and an answer read in between must
	// count as reaching no one (CallEnded).
	cutOnce sync.Once
	cut     chan struct{}
}

// NewPoolServer returns a server for the pool named resource (the extended
// resource name, "prefix/name") answered by backend. It serves nothing until
// Serve.
func NewPoolServer(resource string, backend PoolBackend, opts PoolServerOptions) *PoolServer {
	if opts.Mode == "" {
		opts.Mode = ModeLegacy
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	s := &PoolServer{
		resource: resource,
		backend:  backend,
		mode:     opts.Mode,
		observer: opts.Observer,
		timeout:  opts.CallTimeout,
		log:      opts.Logger.With().Str("pool", resource).Logger(),
		// Stream workers: a call runs on a goroutine kept from an earlier
		// one (its stack already grown), not on a new goroutine per call.
		srv:      grpc.NewServer(grpc.ForceServerCodecV2(newPoolCodec()), grpc.NumStreamWorkers(streamWorkers)),
		stopping: make(chan struct{}),
		drained:  make(chan struct{}),
		cut:      make(chan struct{}),
	}
	s.sock.dirKey, s.sock.fresh = opts.PrivateDirKey, s.mode == ModeWatcher
	pluginapi.RegisterDevicePluginServer(s.srv, devicePluginService{s: s})
	if s.mode == ModeWatcher {
		registerapi.RegisterRegistrationServer(s.srv, registrationService{s: s})
	}
	return s
}

// Serve creates the socket at socketPath (0600, replacing a stale socket
// file left there, refusing to replace anything that is not a socket) and
// serves on it in the background. It returns once the socket accepts
// connections, so a Register that follows finds the server up, as the
// kubelet requires. Serve may be called once; after a socket was lost, use
// Reserve.
func (s *PoolServer) Serve(socketPath string) error {
	return s.listen(socketPath, false)
}

// Reserve serves again ("re-serve") at socketPath, typically after the
// kubelet deleted the socket file on restart, or under a new name: it
// creates a new socket there as Serve does, then closes the previous
// listener. The gRPC server, its
// open connections and streams are kept. The previous socket file is
// removed only if it is still the one this server created (so never when
// the new socket took its path). On a server not yet serving, Reserve is
// Serve.
func (s *PoolServer) Reserve(socketPath string) error {
	return s.listen(socketPath, true)
}

func (s *PoolServer) listen(socketPath string, replace bool) error {
	if s.mode != ModeLegacy && s.mode != ModeWatcher {
		return fmt.Errorf("serve pool %s: registration mode %q: want %q or %q", s.resource, s.mode, ModeLegacy, ModeWatcher)
	}
	old, err := s.sock.listen(socketPath, replace, func(lis *privateListener) { go s.serveOn(lis) })
	if err != nil {
		return fmt.Errorf("serve pool %s: %w", s.resource, err)
	}
	if old != nil {
		if err := old.close(); err != nil {
			s.log.Debug().Err(err).Str("socket", old.path).Msg("closing the replaced listener")
		}
	}
	// The pool logs that it serves, with the ledger's record of it.
	s.log.Debug().Str("socket", s.Socket()).Str("mode", string(s.mode)).Msg("serving")
	return nil
}

// serveOn runs the gRPC server on one listener until that listener is
// closed (by Reserve or Stop) or fails.
func (s *PoolServer) serveOn(lis *privateListener) {
	err := s.srv.Serve(lis)
	if err != nil && !s.sock.retired(lis) && !errors.Is(err, grpc.ErrServerStopped) {
		s.log.Error().Err(err).Str("socket", lis.path).Msg("serving stopped")
	}
}

// Socket returns the absolute path of the socket being served, or "" before
// Serve.
func (s *PoolServer) Socket() string { return s.sock.socket() }

// callSocket is the socket a call came in on: the one served now, or one
// served before (Reserve keeps the kubelet's connections).
func (s *PoolServer) callSocket(ctx context.Context) string {
	if sock := SocketOf(ctx); sock != "" {
		return sock
	}
	return s.Socket()
}

// Close stops accepting connections, removes the socket file (if it is
// still this server's) and ends every ListAndWatch stream, at once: unary
// calls in flight go on, and Stop waits for them. A backend that answers
// from a single goroutine (an actor) closes from that goroutine and leaves
// Stop to another one, since the calls Stop waits for may be waiting for
// it. Close is idempotent; a closed server cannot serve again.
func (s *PoolServer) Close() error {
	first, err := s.sock.stop()
	if !first {
		return nil
	}
	close(s.stopping)
	if err != nil {
		return fmt.Errorf("stop pool %s: %w", s.resource, err)
	}
	return nil
}

// Stop is Close, then it waits for in-flight unary calls to finish until
// ctx ends; then it cuts them short and returns an error saying so. Stop is
// idempotent; a stopped server cannot serve again.
func (s *PoolServer) Stop(ctx context.Context) error {
	cerr := s.Close()
	s.drainOnce.Do(func() {
		go func() {
			s.srv.GracefulStop()
			s.log.Info().Msg("stopped serving")
			close(s.drained)
		}()
	})
	select {
	case <-s.drained:
	case <-ctx.Done():
		s.cutOnce.Do(func() { close(s.cut) })
		s.srv.Stop()
		<-s.drained
		return fmt.Errorf("stop pool %s: in-flight calls cut short: %w", s.resource, ctx.Err())
	}
	return cerr
}

// callBackend runs call with the server's deadline. A backend that keeps
// deadlines (DeadlineKeeper) is called on the handler's own goroutine and
// its answer is final. Any other backend's call runs in a goroutine of its
// own, so that the kubelet gets DeadlineExceeded on time even from a
// backend that ignores its context; an answer that arrived together with
// the deadline wins: an Allocate the ledger already holds is not reported
// as failed.
func callBackend[T comparable](s *PoolServer, ctx context.Context, method string, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, callKey{}, kubeletCall{ctx: ctx, cut: s.cut}), s.timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	var r result
	if _, ok := s.backend.(DeadlineKeeper); ok {
		r.v, r.err = call(ctx)
	} else {
		done := make(chan result, 1)
		go func() {
			v, err := call(ctx)
			done <- result{v, err}
		}()
		select {
		case r = <-done:
		case <-ctx.Done():
			select {
			case r = <-done:
			default:
				r.err = fmt.Errorf("pool %s did not answer %s: %w", s.resource, method, ctx.Err())
			}
		}
	}
	var zero T
	if r.err == nil && r.v == zero {
		r.err = fmt.Errorf("pool %s answered %s with nothing", s.resource, method)
	}
	if r.err != nil {
		st := backendStatus(r.err)
		s.log.Warn().Err(r.err).Str("method", method).Str("code", status.Code(st).String()).Msg("kubelet call failed")
		return zero, st
	}
	return r.v, nil
}

// devicePluginService is the DevicePlugin v1beta1 face of a PoolServer,
// kept unexported so the gRPC methods do not become PoolServer's API.
type devicePluginService struct {
	pluginapi.UnimplementedDevicePluginServer
	s *PoolServer
}

var _ pluginapi.DevicePluginServer = devicePluginService{}

func (devicePluginService) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true, PreStartRequired: false}, nil
}

// ListAndWatch forwards every list the backend publishes until the kubelet
// goes away, the backend closes its channel, or the server stops. Both of
// the last two end the stream with Unavailable: the kubelet then marks the
// pool's devices unhealthy until a new stream opens.
func (d devicePluginService) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	s := d.s
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// A pool serves on a new socket after each renewal, and streams on the
	// old one may still be open: each line names the stream's.
	log := s.log.With().Str("socket", s.callSocket(ctx)).Logger()
	lists, err := s.backend.WatchDevices(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("cannot watch the pool's devices")
		return backendStatus(err)
	}
	log.Info().Msg("kubelet opened ListAndWatch")
	for {
		select {
		case <-ctx.Done():
			log.Info().Msg("kubelet closed ListAndWatch")
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopping:
			return status.Errorf(codes.Unavailable, "pool %s: server stopping", s.resource)
		case list, ok := <-lists:
			if !ok {
				if ctx.Err() != nil {
					return status.FromContextError(ctx.Err()).Err()
				}
				log.Info().Msg("pool stopped publishing devices; ending ListAndWatch")
				return status.Errorf(codes.Unavailable, "pool %s stopped serving its devices", s.resource)
			}
			msg, err := s.lists.encode(list)
			if err != nil {
				log.Error().Err(err).Msg("cannot encode the device list; ending ListAndWatch")
				return status.Errorf(codes.Internal, "pool %s: %v", s.resource, err)
			}
			if err := stream.SendMsg(msg); err != nil {
				log.Info().Err(err).Msg("ListAndWatch send failed")
				return err
			}
		}
	}
}

func (d devicePluginService) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return callBackend(d.s, ctx, "GetPreferredAllocation", func(ctx context.Context) (*pluginapi.PreferredAllocationResponse, error) {
		return d.s.backend.PreferredAllocation(ctx, req)
	})
}

func (d devicePluginService) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return callBackend(d.s, ctx, "Allocate", func(ctx context.Context) (*pluginapi.AllocateResponse, error) {
		return d.s.backend.Allocate(ctx, req)
	})
}

// PreStartContainer is never required (GetDevicePluginOptions says so), but
// a kubelet that calls it anyway gets an answer.
func (devicePluginService) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// registrationService is the pluginregistration v1 face of a PoolServer in
// watcher mode.
type registrationService struct {
	registerapi.UnimplementedRegistrationServer
	s *PoolServer
}

var _ registerapi.RegistrationServer = registrationService{}

// GetInfo names the pool and no endpoint: the kubelet then connects to the
// path it found the socket at, in its own view of plugins_registry. A path
// of the daemon's would be wrong wherever the pod mounts the kubelet's
// directory elsewhere than the host has it (k0s, MicroK8s: the kubelet
// uses an endpoint as given), and another of the server's sockets would
// have the kubelet connect to that path twice, once for each socket.
func (r registrationService) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s := r.s
	if s.observer != nil {
		s.observer.InfoRequested(s.resource, s.callSocket(ctx))
	}
	return &registerapi.PluginInfo{
		Type:              registerapi.DevicePlugin,
		Name:              s.resource,
		SupportedVersions: []string{pluginapi.Version},
	}, nil
}

func (r registrationService) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s := r.s
	socket, why := s.callSocket(ctx), reason(st.Error)
	// An observer tells the story (the registrar: once, not per retry of
	// the plugin watcher); a line here would say it again.
	ok, refused := zerolog.InfoLevel, zerolog.WarnLevel
	if s.observer != nil {
		ok, refused = zerolog.DebugLevel, zerolog.DebugLevel
	}
	if st.PluginRegistered {
		s.log.WithLevel(ok).Str("socket", socket).Msg("kubelet registered the pool")
	} else {
		s.log.WithLevel(refused).Str("socket", socket).Str("reason", why).Msg("kubelet rejected the pool")
	}
	if s.observer != nil {
		s.observer.RegistrationStatus(s.resource, socket, st.PluginRegistered, why)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
