package benchbaseline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DevicePlugin is a DevicePlugin v1beta1 service that answers from memory:
// ListAndWatch sends Devices once and holds the stream open, Allocate
// answers every container request with Answer. It keeps no state and checks
// nothing.
type DevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	// Devices is what ListAndWatch sends; nil sends an empty list.
	Devices []*pluginapi.Device
	// Answer is every container's answer; nil makes Allocate fail with
	// Unimplemented.
	Answer *pluginapi.ContainerAllocateResponse
	// Commit, if set, is called once per Allocate before it answers, and
	// its error fails the call: a plugin that persists.
	Commit func() error
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer: no
// optional calls.
func (*DevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements pluginapi.DevicePluginServer.
func (p *DevicePlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.Devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Allocate implements pluginapi.DevicePluginServer.
func (p *DevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if p.Answer == nil {
		return nil, status.Error(codes.Unimplemented, "this baseline plugin has no answer")
	}
	if p.Commit != nil {
		if err := p.Commit(); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, len(req.ContainerRequests))}
	for i := range req.ContainerRequests {
		resp.ContainerResponses[i] = p.Answer
	}
	return resp, nil
}

// Server serves one DevicePlugin service on a unix socket. One grpc.Server
// lives across any number of sockets at the same path, as a plain device
// plugin's does, so Relisten after the kubelet deleted the file keeps open
// connections. Its methods are safe for concurrent use.
type Server struct {
	path string
	srv  *grpc.Server

	mu  sync.Mutex
	lis net.Listener
}

// Serve creates the socket at path, replacing a file left there, and serves
// plugin on it in the background. The socket accepts connections when Serve
// returns.
func Serve(path string, plugin pluginapi.DevicePluginServer) (*Server, error) {
	s := &Server{path: path, srv: grpc.NewServer()}
	pluginapi.RegisterDevicePluginServer(s.srv, plugin)
	if err := s.Relisten(); err != nil {
		s.srv.Stop()
		return nil, err
	}
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Relisten creates the socket again at its path (removing whatever file is
// there) and closes the previous listener; the grpc.Server and its
// connections stay.
func (s *Server) Relisten() error {
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("baseline plugin: %w", err)
	}
	lis, err := net.Listen("unix", s.path)
	if err != nil {
		return fmt.Errorf("baseline plugin: %w", err)
	}
	// The path is ours to remove, not the listener's: a later Relisten
	// put a new socket there.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	go s.srv.Serve(lis)
	s.mu.Lock()
	old := s.lis
	s.lis = lis
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Stop ends every connection and removes the socket.
func (s *Server) Stop() {
	s.srv.Stop()
	os.Remove(s.path)
}
