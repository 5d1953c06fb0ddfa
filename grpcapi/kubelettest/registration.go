package kubelettest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registrationServer is the v1beta1 Registration service on kubelet.sock for
// one boot.
type registrationServer struct {
	pluginapi.UnimplementedRegistrationServer
	k *Kubelet
	b *boot
}

// Register mirrors server.Register in devicemanager/plugin/v1beta1/server.go:
// version, then resource name, then connect (dial, GetDevicePluginOptions) and
// only then the answer. The error texts are the kubelet's.
func (s *registrationServer) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if !s.b.tasks.enter() {
		return nil, status.Error(codes.Unavailable, "kubelet is shutting down")
	}
	defer s.b.tasks.leave()
	k := s.k
	socket := filepath.Join(k.DevicePluginDir(), r.GetEndpoint())
	k.log.Debug().Str("resource", r.GetResourceName()).Str("endpoint", socket).Str("version", r.GetVersion()).Msg("register request")
	if !versionSupported(r.GetVersion()) {
		err := fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", r.GetVersion(), pluginapi.SupportedVersions)
		k.reject(s.b, r.GetResourceName(), socket, ModeLegacy, err.Error())
		return &pluginapi.Empty{}, err
	}
	if !IsExtendedResourceName(r.GetResourceName()) {
		err := fmt.Errorf("the ResourceName %q is invalid", r.GetResourceName())
		k.reject(s.b, r.GetResourceName(), socket, ModeLegacy, err.Error())
		return &pluginapi.Empty{}, err
	}
	// Today's kubelet tracks plugins by socket path and refuses a second
	// Register of a path it is still connected to (handler.go: "device
	// plugin already connected"): a plugin that re-created its socket file
	// under a live connection must not register again.
	k.mu.Lock()
	var connected bool
	for _, e := range k.endpoints {
		if e.socket == socket && !e.stopped {
			connected = true
		}
	}
	k.mu.Unlock()
	if connected {
		err := fmt.Errorf("device plugin already connected: %s", socket)
		k.reject(s.b, r.GetResourceName(), socket, ModeLegacy, err.Error())
		return &pluginapi.Empty{}, err
	}
	requested := r.GetOptions()
	if k.opts.AsyncRegister {
		s.b.tasks.run(func() {
			if _, err := k.connect(s.b, r.GetResourceName(), socket, ModeLegacy, requested); err != nil {
				k.reject(s.b, r.GetResourceName(), socket, ModeLegacy, err.Error())
			}
		})
		return &pluginapi.Empty{}, nil
	}
	if _, err := k.connect(s.b, r.GetResourceName(), socket, ModeLegacy, requested); err != nil {
		k.reject(s.b, r.GetResourceName(), socket, ModeLegacy, err.Error())
		return &pluginapi.Empty{}, err
	}
	return &pluginapi.Empty{}, nil
}

func versionSupported(versions ...string) bool {
	for _, v := range versions {
		for _, s := range pluginapi.SupportedVersions {
			if v == s {
				return true
			}
		}
	}
	return false
}

// endpoint is the kubelet's connection to one registered plugin.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	opts     *pluginapi.DevicePluginOptions
	reg      Registration
	ctx      context.Context
	cancel   context.CancelFunc

	stopped bool // guarded by Kubelet.mu: the connection ended, calls are refused

	closeOnce sync.Once
}

func (e *endpoint) close() {
	e.closeOnce.Do(func() {
		e.cancel()
		_ = e.conn.Close()
	})
}

// connect is the kubelet's connectClient + PluginConnected: dial the plugin,
// ask its options, make it the resource's endpoint (closing the one it
// replaces) and start ListAndWatch.
func (k *Kubelet) connect(b *boot, resource, socket string, mode Mode, requested *pluginapi.DevicePluginOptions) (Registration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, k.dialTimeout())
	defer cancel()
	conn, err := dialUnix(ctx, socket)
	if err != nil {
		return Registration{}, fmt.Errorf("failed to dial device plugin: %v", err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return Registration{}, fmt.Errorf("failed to get device plugin options: %v", err)
	}
	if k.opts.BeforeConnect != nil {
		k.opts.BeforeConnect(resource, socket)
	}
	if k.opts.ConnectError != nil {
		if err := k.opts.ConnectError(resource, socket); err != nil {
			_ = conn.Close()
			return Registration{}, err
		}
	}
	e := &endpoint{resource: resource, socket: socket, conn: conn, client: client, opts: opts}
	e.ctx, e.cancel = context.WithCancel(b.ctx)

	k.mu.Lock()
	if k.boot != b {
		k.mu.Unlock()
		e.close()
		return Registration{}, ErrKubeletDown
	}
	old := k.endpoints[resource]
	k.counts[resource]++
	e.reg = Registration{
		Resource:        resource,
		Endpoint:        socket,
		Mode:            mode,
		Options:         opts,
		RegisterOptions: requested,
		At:              time.Now(),
		Count:           k.counts[resource],
		Boot:            b.n,
	}
	k.endpoints[resource] = e
	k.history = append(k.history, e.reg)
	k.changedLocked()
	k.mu.Unlock()

	if old != nil {
		old.close()
	}
	// Registered, then listed: the stream starts once the event is out,
	// so that no list of the endpoint is told before its registration.
	k.emit(Event{Kind: PluginRegistered, At: e.reg.At, Boot: b.n, Resource: resource, Endpoint: socket, Mode: mode, Count: e.reg.Count})
	b.tasks.run(func() { k.listAndWatch(e) })
	return e.reg, nil
}

// listAndWatch is the kubelet's client.Run: keep the latest list until the
// stream ends, then treat the plugin as disconnected.
func (k *Kubelet) listAndWatch(e *endpoint) {
	stream, err := e.client.ListAndWatch(e.ctx, &pluginapi.Empty{})
	if err == nil {
		for {
			resp, rerr := stream.Recv()
			received := time.Now()
			if rerr != nil {
				err = rerr
				break
			}
			k.devicesListed(e, resp.GetDevices(), received)
		}
	}
	if d := k.opts.NoticeDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-e.ctx.Done():
		}
	}
	k.disconnect(e, fmt.Sprintf("ListAndWatch ended: %v", err))
}

// devicesListed takes a ListAndWatch answer. The checkpoint is written before
// the list becomes visible, so a test that saw the list finds the file.
func (k *Kubelet) devicesListed(e *endpoint, devs []*pluginapi.Device, received time.Time) {
	list := cloneDevices(devs)
	healthy := 0
	for _, d := range list {
		if d.GetHealth() == pluginapi.Healthy {
			healthy++
		}
	}
	if !k.publishDevices(e, list) {
		return
	}
	k.emit(Event{Kind: DevicesListed, At: time.Now(), Boot: e.reg.Boot, Resource: e.resource, Endpoint: e.socket, Mode: e.reg.Mode, Devices: len(list), Healthy: healthy, Received: received})
}

// publishDevices writes the checkpoint with list, then makes list the
// resource's current one, unless e stopped being the resource's live endpoint.
func (k *Kubelet) publishDevices(e *endpoint, list []*pluginapi.Device) bool {
	k.ckptMu.Lock()
	defer k.ckptMu.Unlock()
	k.mu.Lock()
	live := k.endpoints[e.resource] == e && !e.stopped
	var ckpt []byte
	if live {
		ckpt = k.checkpointLocked(e.resource, list)
	}
	k.mu.Unlock()
	if !live {
		return false
	}
	k.writeCheckpoint(ckpt)

	k.mu.Lock()
	defer k.mu.Unlock()
	if k.endpoints[e.resource] != e || e.stopped {
		return false
	}
	k.devices[e.resource] = list
	k.changedLocked()
	return true
}

// disconnect is the kubelet's disconnectClient + PluginDisconnected: the
// endpoint is kept but stopped and its devices turn unhealthy (capacity
// stays, allocatable drops to zero) until the plugin registers again.
func (k *Kubelet) disconnect(e *endpoint, why string) {
	k.mu.Lock()
	if k.endpoints[e.resource] != e || e.stopped {
		k.mu.Unlock()
		e.close()
		return
	}
	e.stopped = true
	for _, d := range k.devices[e.resource] {
		d.Health = pluginapi.Unhealthy
	}
	k.changedLocked()
	k.mu.Unlock()
	e.close()
	k.emit(Event{Kind: PluginDisconnected, At: time.Now(), Boot: e.reg.Boot, Resource: e.resource, Endpoint: e.socket, Mode: e.reg.Mode, Reason: why})
}

// deregister is DeRegisterPlugin: the plugin watcher saw the socket go.
func (k *Kubelet) deregister(resource, socket string) {
	k.mu.Lock()
	e := k.endpoints[resource]
	k.mu.Unlock()
	if e != nil && e.socket == socket {
		k.disconnect(e, "plugin socket removed")
	}
}

// reject records a failed registration attempt, unless it failed because this
// boot is ending: that is the kubelet going down, not the plugin's doing.
func (k *Kubelet) reject(b *boot, resource, endpoint string, mode Mode, reason string) {
	if b.ctx.Err() != nil {
		return
	}
	r := Rejection{Resource: resource, Endpoint: endpoint, Mode: mode, Reason: reason, At: time.Now(), Boot: b.n}
	k.mu.Lock()
	k.rejections = append(k.rejections, r)
	k.changedLocked()
	k.mu.Unlock()
	k.emit(Event{Kind: RegistrationRejected, At: r.At, Boot: b.n, Resource: resource, Endpoint: endpoint, Mode: mode, Reason: reason})
}

// dialUnix connects to a unix socket and waits until the connection is ready
// or ctx ends, as the kubelet's blocking dial does.
func dialUnix(ctx context.Context, path string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return conn, nil
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return nil, fmt.Errorf("connection to %s shut down", path)
		}
		if !conn.WaitForStateChange(ctx, s) {
			_ = conn.Close()
			return nil, fmt.Errorf("dial %s: %w (last state %s)", path, ctx.Err(), s)
		}
	}
}

func cloneDevices(devs []*pluginapi.Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out
}

// checkpointLocked is the content of the stand-in's checkpoint, in the
// kubelet's device-manager layout (v2): the entries of SetCheckpointEntries,
// and the device IDs per resource with resource's list replaced by list
// (resource "" replaces none). k.mu must be held.
func (k *Kubelet) checkpointLocked(resource string, list []*pluginapi.Device) []byte {
	reg := make(map[string][]string, len(k.devices)+1)
	ids := func(devs []*pluginapi.Device) []string {
		out := make([]string, 0, len(devs))
		for _, d := range devs {
			out = append(out, d.GetID())
		}
		sort.Strings(out)
		return out
	}
	for res, devs := range k.devices {
		reg[res] = ids(devs)
	}
	if resource != "" {
		reg[resource] = ids(list)
	}
	type entry struct {
		PodUID        string
		ContainerName string
		ResourceName  string
		DeviceIDs     map[string][]string
		AllocResp     []byte
	}
	var entries []entry // null when none, as the kubelet writes it
	for _, e := range k.ckptEntries {
		entries = append(entries, entry{PodUID: e.PodUID, ContainerName: e.Container, ResourceName: e.Resource,
			DeviceIDs: map[string][]string{"-1": slices.Clone(e.DeviceIDs)}, AllocResp: []byte{}})
	}
	type data struct {
		PodDeviceEntries  []entry
		RegisteredDevices map[string][]string
	}
	out, _ := json.Marshal(struct {
		Data     data
		Checksum uint64
	}{Data: data{entries, reg}})
	return out
}

// CheckpointEntry is one container's devices of one resource, as the
// kubelet's device manager checkpoints them once it allocated them.
type CheckpointEntry struct {
	PodUID, Container, Resource string
	DeviceIDs                   []string
}

// SetCheckpointEntries sets the allocations the checkpoint holds from now on
// and writes it: the kubelet writes its checkpoint after each Allocate, with
// every container's devices and its pod's UID, which PodResources does not
// give. The stand-in departs from the kubelet here: the test says what was
// allocated to whom; the entries carry no allocation response, their devices
// no NUMA node; and its Checksum is 0, not the kubelet's hash of its structs.
func (k *Kubelet) SetCheckpointEntries(entries ...CheckpointEntry) {
	k.ckptMu.Lock()
	defer k.ckptMu.Unlock()
	k.mu.Lock()
	k.ckptEntries = slices.Clone(entries)
	ckpt := k.checkpointLocked("", nil)
	k.mu.Unlock()
	k.writeCheckpoint(ckpt)
}

// writeCheckpoint replaces the checkpoint file through a dot-named temp file
// and a rename, so a watcher of device-plugins/ sees what it sees on a node.
// k.ckptMu must be held.
func (k *Kubelet) writeCheckpoint(data []byte) {
	dir := k.DevicePluginDir()
	f, err := os.CreateTemp(dir, "."+CheckpointName+"-*")
	if err != nil {
		k.log.Debug().Err(err).Msg("checkpoint not written")
		return
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		_ = os.Remove(f.Name())
		k.log.Debug().AnErr("write", werr).AnErr("close", cerr).Msg("checkpoint not written")
		return
	}
	if err := os.Rename(f.Name(), k.CheckpointFile()); err != nil {
		_ = os.Remove(f.Name())
		k.log.Debug().Err(err).Msg("checkpoint not written")
	}
}
