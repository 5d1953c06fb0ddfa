package kubelettest_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakePlugin is a tiny device plugin: a real gRPC DevicePlugin server on a
// unix socket, optionally also serving pluginregistration.v1 for the watcher.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	socket string
	opts   *pluginapi.DevicePluginOptions
	srv    *grpc.Server
	reg    *fakeRegistrar

	mu      sync.Mutex
	devices []*pluginapi.Device
	changed chan struct{}
	allocs  []*pluginapi.AllocateRequest

	streamEnded chan struct{} // one value per ListAndWatch stream that ended
	stopOnce    sync.Once
}

// fakeRegistrar answers the plugin watcher's GetInfo and records the
// NotifyRegistrationStatus calls.
type fakeRegistrar struct {
	registerapi.UnimplementedRegistrationServer
	info     *registerapi.PluginInfo
	getInfos atomic.Int32
	statuses chan *registerapi.RegistrationStatus
}

type fakeConfig struct {
	socket  string
	opts    *pluginapi.DevicePluginOptions
	devices []*pluginapi.Device
	// info, if set, makes the plugin a watcher-mode plugin answering GetInfo
	// with it.
	info *registerapi.PluginInfo
}

func startFakePlugin(t *testing.T, cfg fakeConfig) *fakePlugin {
	t.Helper()
	opts := cfg.opts
	if opts == nil {
		opts = &pluginapi.DevicePluginOptions{}
	}
	p := &fakePlugin{
		socket:      cfg.socket,
		opts:        opts,
		devices:     cfg.devices,
		changed:     make(chan struct{}),
		streamEnded: make(chan struct{}, 16),
		srv:         grpc.NewServer(),
	}
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	if cfg.info != nil {
		p.reg = &fakeRegistrar{info: cfg.info, statuses: make(chan *registerapi.RegistrationStatus, 16)}
		registerapi.RegisterRegistrationServer(p.srv, p.reg)
	}
	ln, err := net.Listen("unix", cfg.socket)
	if err != nil {
		t.Fatalf("fake plugin listen: %v", err)
	}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(p.stop)
	return p
}

// stop stops serving; the listener's close unlinks the socket.
func (p *fakePlugin) stop() { p.stopOnce.Do(p.srv.Stop) }

func (p *fakePlugin) setDevices(devs ...*pluginapi.Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devices = devs
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *fakePlugin) allocations() []*pluginapi.AllocateRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pluginapi.AllocateRequest(nil), p.allocs...)
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.opts, nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	defer func() { p.streamEnded <- struct{}{} }()
	for {
		p.mu.Lock()
		devs, ch := p.devices, p.changed
		p.mu.Unlock()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *fakePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	p.allocs = append(p.allocs, req)
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"FAKE_DEVICES": strings.Join(c.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

func (p *fakePlugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		ids := append(append([]string(nil), c.GetMustIncludeDeviceIDs()...), c.GetAvailableDeviceIDs()...)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids[:c.GetAllocationSize()]})
	}
	return resp, nil
}

func (r *fakeRegistrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.getInfos.Add(1)
	return r.info, nil
}

func (r *fakeRegistrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.statuses <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

// nextStatus waits for the next NotifyRegistrationStatus the plugin got.
func (p *fakePlugin) nextStatus(ctx context.Context, t *testing.T) *registerapi.RegistrationStatus {
	t.Helper()
	select {
	case s := <-p.reg.statuses:
		return s
	case <-ctx.Done():
		t.Fatalf("no NotifyRegistrationStatus at %s: %v", p.socket, ctx.Err())
		return nil
	}
}

// waitStreamEnded waits until one of the plugin's ListAndWatch streams ended.
func (p *fakePlugin) waitStreamEnded(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-p.streamEnded:
	case <-ctx.Done():
		t.Fatalf("ListAndWatch at %s did not end: %v", p.socket, ctx.Err())
	}
}

// register calls Register on kubelet.sock as a legacy plugin does.
func register(ctx context.Context, kubeletSock, version, resource, endpoint string) error {
	conn, err := grpc.NewClient("unix:"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      version,
		Endpoint:     endpoint,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	return err
}

func device(id string, health string, numa ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: health}
	if len(numa) > 0 {
		d.Topology = &pluginapi.TopologyInfo{}
		for _, n := range numa {
			d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return d
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *zerolog.Logger {
	l := zerolog.New(zerolog.NewTestWriter(t))
	return &l
}
