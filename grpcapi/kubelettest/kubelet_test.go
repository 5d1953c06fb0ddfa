package kubelettest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/grpcapi/kubelettest"
)

const nic = "example.com/nic"

// eventLog collects the stand-in's events.
type eventLog struct {
	mu      sync.Mutex
	events  []kubelettest.Event
	changed chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(ev kubelettest.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
	close(l.changed)
	l.changed = make(chan struct{})
}

// waitFor waits for an event of kind and returns the first.
func (l *eventLog) waitFor(ctx context.Context, t *testing.T, kind kubelettest.EventKind) kubelettest.Event {
	t.Helper()
	for {
		l.mu.Lock()
		for _, ev := range l.events {
			if ev.Kind == kind {
				l.mu.Unlock()
				return ev
			}
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no %s event: %v", kind, ctx.Err())
		}
	}
}

func (l *eventLog) kinds() []kubelettest.EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []kubelettest.EventKind
	for _, ev := range l.events {
		out = append(out, ev.Kind)
	}
	return out
}

func TestLegacyRegistrationAndListAndWatch(t *testing.T) {
	ctx := testContext(t)
	log := newEventLog()
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), OnEvent: log.add})
	socket := filepath.Join(k.DevicePluginDir(), "nic.sock")
	p := startFakePlugin(t, fakeConfig{
		socket:  socket,
		opts:    &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		devices: []*pluginapi.Device{device("a", pluginapi.Healthy, 0), device("b", pluginapi.Healthy, 1)},
	})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "nic.sock"); err != nil {
		t.Fatalf("Register: %v", err)
	}
	reg, err := k.WaitRegistered(ctx, nic)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Mode != kubelettest.ModeLegacy || reg.Endpoint != socket || reg.Count != 1 || reg.Boot != 1 ||
		!reg.Options.GetGetPreferredAllocationAvailable() || !reg.RegisterOptions.GetGetPreferredAllocationAvailable() {
		t.Errorf("registration = %+v", reg)
	}
	if _, err := k.WaitDevices(ctx, nic, func(d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}

	p.setDevices(device("a", pluginapi.Healthy, 0), device("b", pluginapi.Unhealthy, 1))
	devs, err := k.WaitDevices(ctx, nic, func(d []*pluginapi.Device) bool {
		return len(d) == 2 && d[1].GetHealth() == pluginapi.Unhealthy
	})
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].GetID() != "a" || devs[0].GetTopology().GetNodes()[0].GetID() != 0 {
		t.Errorf("devices = %v", devs)
	}

	// The plugin dies: the kubelet keeps the endpoint, stopped, and every
	// device turns unhealthy.
	p.stop()
	if err := k.WaitUnregistered(ctx, nic); err != nil {
		t.Fatal(err)
	}
	for _, d := range k.Devices(nic) {
		if d.GetHealth() != pluginapi.Unhealthy {
			t.Errorf("device %s is %s after the plugin died, want Unhealthy", d.GetID(), d.GetHealth())
		}
	}
	if _, err := k.Allocate(ctx, nic, []string{"a"}); !errors.Is(err, kubelettest.ErrEndpointStopped) {
		t.Errorf("Allocate on a dead plugin: err = %v, want ErrEndpointStopped", err)
	}
	log.waitFor(ctx, t, kubelettest.PluginDisconnected)
	want := []kubelettest.EventKind{kubelettest.KubeletBooted, kubelettest.PluginRegistered, kubelettest.DevicesListed, kubelettest.DevicesListed, kubelettest.PluginDisconnected}
	if got := log.kinds(); !equalKinds(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	// A list's arrival is noted at its Recv, before the stand-in's own
	// work on it: what benchmarks time the plugin by.
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, ev := range log.events {
		if ev.Kind == kubelettest.DevicesListed && (ev.Received.IsZero() || ev.Received.After(ev.At)) {
			t.Errorf("DevicesListed received %v, listed %v: want a receipt time, not after the listing", ev.Received, ev.At)
		}
	}
}

func equalKinds(a, b []kubelettest.EventKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRegisterRejected(t *testing.T) {
	cases := []struct {
		name, version, resource, endpoint string
		want                              string
	}{
		{"unsupported version", "v1alpha1", nic, "nic.sock", `requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]`},
		{"no domain", pluginapi.Version, "nic", "nic.sock", `the ResourceName "nic" is invalid`},
		{"kubernetes.io domain", pluginapi.Version, "kubernetes.io/nic", "nic.sock", `the ResourceName "kubernetes.io/nic" is invalid`},
		{"requests prefix", pluginapi.Version, "requests.example.com/nic", "nic.sock", `the ResourceName "requests.example.com/nic" is invalid`},
		{"nothing at the endpoint", pluginapi.Version, nic, "missing.sock", "failed to dial device plugin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), DialTimeout: 200 * time.Millisecond})
			startFakePlugin(t, fakeConfig{socket: filepath.Join(k.DevicePluginDir(), "nic.sock")})
			err := register(ctx, k.RegistrationSocket(), tc.version, tc.resource, tc.endpoint)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register: err = %v, want it to contain %q", err, tc.want)
			}
			rej := k.Rejections()
			if len(rej) != 1 || !strings.Contains(rej[0].Reason, tc.want) || rej[0].Mode != kubelettest.ModeLegacy {
				t.Errorf("rejections = %+v", rej)
			}
			if regs := k.Registrations(); len(regs) != 0 {
				t.Errorf("registrations = %+v, want none", regs)
			}
		})
	}
}

func TestSecondRegisterReplacesEndpoint(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t)})
	first := startFakePlugin(t, fakeConfig{socket: filepath.Join(k.DevicePluginDir(), "a.sock"), devices: []*pluginapi.Device{device("old", pluginapi.Healthy)}})
	second := startFakePlugin(t, fakeConfig{socket: filepath.Join(k.DevicePluginDir(), "b.sock"), devices: []*pluginapi.Device{device("new", pluginapi.Healthy)}})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "a.sock"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitDevices(ctx, nic, nil); err != nil {
		t.Fatal(err)
	}
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "b.sock"); err != nil {
		t.Fatal(err)
	}
	reg, err := k.WaitRegistered(ctx, nic)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Endpoint != second.socket || reg.Count != 2 {
		t.Errorf("registration = %+v, want b.sock as the second", reg)
	}
	first.waitStreamEnded(ctx, t)
	if _, err := k.WaitDevices(ctx, nic, func(d []*pluginapi.Device) bool { return len(d) == 1 && d[0].GetID() == "new" }); err != nil {
		t.Fatal(err)
	}
}

func TestAsyncRegisterAnswersBeforeConnecting(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), AsyncRegister: true, DialTimeout: 200 * time.Millisecond})
	since := time.Now()
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "missing.sock"); err != nil {
		t.Fatalf("Register with AsyncRegister: %v, want nil (answered before connecting)", err)
	}
	rej, err := k.WaitRejected(ctx, nic, since)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rej.Reason, "failed to dial device plugin") {
		t.Errorf("rejection = %+v", rej)
	}
}

func TestWatcherRegistrationAndSocketRemoval(t *testing.T) {
	ctx := testContext(t)
	log := newEventLog()
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), PluginWatcher: true, OnEvent: log.add})
	dir := k.PluginsRegistryDir()
	info := func(name string) *registerapi.PluginInfo {
		return &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: name, SupportedVersions: []string{pluginapi.Version}}
	}
	// What the kubelet ignores: names starting with '.', and non-sockets.
	hidden := startFakePlugin(t, fakeConfig{socket: filepath.Join(dir, ".hidden.sock"), info: info("example.com/hidden")})
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "nic.sock")
	p := startFakePlugin(t, fakeConfig{socket: socket, info: info(nic), devices: []*pluginapi.Device{device("a", pluginapi.Healthy)}})

	reg, err := k.WaitRegistered(ctx, nic)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Mode != kubelettest.ModeWatcher || reg.Endpoint != socket {
		t.Errorf("registration = %+v", reg)
	}
	if st := p.nextStatus(ctx, t); !st.GetPluginRegistered() || st.GetError() != "" {
		t.Errorf("NotifyRegistrationStatus = %v, want registered", st)
	}
	if n := hidden.reg.getInfos.Load(); n != 0 {
		t.Errorf("GetInfo on a dot-named socket called %d times", n)
	}
	if _, err := k.WaitDevices(ctx, nic, nil); err != nil {
		t.Fatal(err)
	}

	// The socket goes while the plugin still serves: the kubelet deregisters.
	if err := os.Remove(socket); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitUnregistered(ctx, nic); err != nil {
		t.Fatal(err)
	}
	p.waitStreamEnded(ctx, t)
	if ev := log.waitFor(ctx, t, kubelettest.PluginDisconnected); ev.Reason != "plugin socket removed" {
		t.Errorf("disconnect event = %+v, want one for the removed socket", ev)
	}
	if rej := k.Rejections(); len(rej) != 0 {
		t.Errorf("rejections = %+v", rej)
	}
}

func TestWatcherRejectsInvalidPlugin(t *testing.T) {
	cases := []struct {
		name string
		info *registerapi.PluginInfo
		want string // %s is the socket path
	}{
		{
			"unsupported versions",
			&registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: nic, SupportedVersions: []string{"v1alpha1"}},
			"RegisterPlugin error -- plugin validation failed with err: manager version, v1beta1, is not among plugin supported versions [v1alpha1]",
		},
		{
			"invalid resource name",
			&registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "nic", SupportedVersions: []string{pluginapi.Version}},
			`RegisterPlugin error -- plugin validation failed with err: invalid name of device plugin socket: the ResourceName "nic" is invalid`,
		},
		{
			"not a device plugin",
			&registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: nic, SupportedVersions: []string{pluginapi.Version}},
			"RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket %s",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), PluginWatcher: true})
			socket := filepath.Join(k.PluginsRegistryDir(), "nic.sock")
			p := startFakePlugin(t, fakeConfig{socket: socket, info: tc.info})
			want := strings.ReplaceAll(tc.want, "%s", socket)
			st := p.nextStatus(ctx, t)
			if st.GetPluginRegistered() || st.GetError() != want {
				t.Errorf("NotifyRegistrationStatus = %v, want not registered with %q", st, want)
			}
			rej := k.Rejections()
			if len(rej) == 0 || rej[0].Reason != want || rej[0].Mode != kubelettest.ModeWatcher {
				t.Errorf("rejections = %+v", rej)
			}
			// The kubelet retries a failed validation with backoff (500 ms first).
			if st := p.nextStatus(ctx, t); st.GetPluginRegistered() {
				t.Errorf("retry: NotifyRegistrationStatus = %v", st)
			}
		})
	}
}

// A registration that fails in the device manager (ConnectError) leaves
// the socket registered with the plugin watcher, which never tries it
// again: kubelets 1.35.4 and 1.34.4. A socket created anew is registered.
func TestWatcherKeepsASocketWhoseConnectFailed(t *testing.T) {
	ctx := testContext(t)
	var fails atomic.Int32
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), PluginWatcher: true,
		ConnectError: func(string, string) error {
			if fails.Add(1) == 1 {
				return errors.New("failed to dial device plugin: refused")
			}
			return nil
		}})
	info := &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: nic, SupportedVersions: []string{pluginapi.Version}}
	socket := filepath.Join(k.PluginsRegistryDir(), "nic.sock")
	p := startFakePlugin(t, fakeConfig{socket: socket, info: info})
	want := "RegisterPlugin error -- plugin registration failed with err: failed to dial device plugin: refused"
	if st := p.nextStatus(ctx, t); st.GetPluginRegistered() || st.GetError() != want {
		t.Errorf("NotifyRegistrationStatus = %v, want not registered with %q", st, want)
	}
	// A retry would come 500 ms later: give it three times that.
	select {
	case st := <-p.reg.statuses:
		t.Fatalf("the plugin watcher tried the socket again: %v", st)
	case <-time.After(1500 * time.Millisecond):
	}
	if k.Connected(nic) || p.reg.getInfos.Load() != 1 {
		t.Errorf("connected %v after %d GetInfo calls, want neither connected nor asked again", k.Connected(nic), p.reg.getInfos.Load())
	}
	p.stop()
	socket2 := filepath.Join(k.PluginsRegistryDir(), "nic2.sock")
	startFakePlugin(t, fakeConfig{socket: socket2, info: info})
	if reg, err := k.WaitRegistered(ctx, nic); err != nil || reg.Endpoint != socket2 {
		t.Fatalf("registration on a new socket: %+v, %v", reg, err)
	}
}

func statSocket(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is %v, not a socket", path, fi.Mode())
	}
	return fi
}

func TestRestartCleansDevicePluginDirAndReregisters(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t)})
	dpDir := k.DevicePluginDir()
	socket := filepath.Join(dpDir, "nic.sock")
	p := startFakePlugin(t, fakeConfig{socket: socket, devices: []*pluginapi.Device{device("a", pluginapi.Healthy)}})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "nic.sock"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitDevices(ctx, nic, nil); err != nil {
		t.Fatal(err)
	}
	checkpoint, err := os.ReadFile(k.CheckpointFile())
	if err != nil {
		t.Fatalf("the stand-in writes a checkpoint on ListAndWatch: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dpDir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dpDir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A hard link keeps the old kubelet.sock's inode from being reused.
	oldLink := filepath.Join(k.Dir(), "old-kubelet.sock")
	if err := os.Link(k.RegistrationSocket(), oldLink); err != nil {
		t.Fatal(err)
	}
	oldSock := statSocket(t, oldLink)
	before := k.BootedAt()

	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plugin socket after restart: %v, want it deleted", err)
	}
	if got, err := os.ReadFile(k.CheckpointFile()); err != nil || string(got) != string(checkpoint) {
		t.Errorf("checkpoint after restart = %q, %v; want it kept as %q", got, err, checkpoint)
	}
	for _, name := range []string{"notes.txt", "sub"} {
		if _, err := os.Stat(filepath.Join(dpDir, name)); err != nil {
			t.Errorf("%s after restart: %v; the kubelet deletes only sockets", name, err)
		}
	}
	if os.SameFile(statSocket(t, k.RegistrationSocket()), oldSock) {
		t.Error("kubelet.sock was not re-created")
	}
	if k.Boots() != 2 || !k.BootedAt().After(before) {
		t.Errorf("boots = %d, booted at %v (before %v)", k.Boots(), k.BootedAt(), before)
	}
	if d := k.Devices(nic); d != nil {
		t.Errorf("devices after restart = %v, want none until re-registration", d)
	}
	p.waitStreamEnded(ctx, t)

	// The plugin notices and comes back.
	p.stop()
	startFakePlugin(t, fakeConfig{socket: socket, devices: []*pluginapi.Device{device("a", pluginapi.Healthy)}})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "nic.sock"); err != nil {
		t.Fatal(err)
	}
	regs, err := k.RegisteredAfter(ctx, []string{nic}, k.BootedAt())
	if err != nil {
		t.Fatal(err)
	}
	if regs[0].Count != 2 || regs[0].Boot != 2 {
		t.Errorf("re-registration = %+v", regs[0])
	}
	if n := len(k.Registrations()); n != 2 {
		t.Errorf("%d registrations in the history, want 2", n)
	}
}

func TestRestartReregistersWatcherPlugins(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), PluginWatcher: true})
	socket := filepath.Join(k.PluginsRegistryDir(), "nic.sock")
	p := startFakePlugin(t, fakeConfig{
		socket:  socket,
		info:    &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: nic, SupportedVersions: []string{pluginapi.Version}},
		devices: []*pluginapi.Device{device("a", pluginapi.Healthy)},
	})
	if _, err := k.WaitRegistered(ctx, nic); err != nil {
		t.Fatal(err)
	}
	p.nextStatus(ctx, t)
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	regs, err := k.RegisteredAfter(ctx, []string{nic}, k.BootedAt())
	if err != nil {
		t.Fatal(err)
	}
	if regs[0].Count != 2 || regs[0].Mode != kubelettest.ModeWatcher {
		t.Errorf("re-registration = %+v", regs[0])
	}
	if st := p.nextStatus(ctx, t); !st.GetPluginRegistered() {
		t.Errorf("NotifyRegistrationStatus after restart = %v", st)
	}
	if _, err := os.Stat(socket); err != nil {
		t.Errorf("plugins_registry socket after restart: %v; the kubelet leaves that dir alone", err)
	}
}

func TestDelayedBootAndStop(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t), Delayed: true})
	if _, err := os.Stat(k.DevicePluginDir()); err != nil {
		t.Fatalf("device-plugins/ before boot: %v", err)
	}
	if _, err := os.Stat(k.RegistrationSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("kubelet.sock before boot: %v, want none", err)
	}
	if k.Up() {
		t.Error("Up before Boot")
	}
	if _, err := k.Allocate(ctx, nic, []string{"a"}); !errors.Is(err, kubelettest.ErrKubeletDown) {
		t.Errorf("Allocate before boot: %v, want ErrKubeletDown", err)
	}
	if err := k.Boot(); err != nil {
		t.Fatal(err)
	}
	statSocket(t, k.RegistrationSocket())

	// A stopped kubelet leaves a dead kubelet.sock behind.
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	statSocket(t, k.RegistrationSocket())
	if c, err := net.Dial("unix", k.RegistrationSocket()); err == nil {
		c.Close()
		t.Error("kubelet.sock accepts connections after Stop")
	}
	if err := k.Boot(); err != nil {
		t.Fatal(err)
	}
	if k.Boots() != 2 {
		t.Errorf("boots = %d, want 2", k.Boots())
	}
}

func TestAllocateAndPreferredPassThrough(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t)})
	p := startFakePlugin(t, fakeConfig{
		socket: filepath.Join(k.DevicePluginDir(), "nic.sock"),
		opts:   &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "nic.sock"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitRegistered(ctx, nic); err != nil {
		t.Fatal(err)
	}
	resp, err := k.Allocate(ctx, nic, []string{"a", "b"}, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetContainerResponses(); len(got) != 2 || got[0].GetEnvs()["FAKE_DEVICES"] != "a,b" || got[1].GetEnvs()["FAKE_DEVICES"] != "c" {
		t.Errorf("Allocate response = %v", resp)
	}
	want := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a", "b"}}, {DevicesIds: []string{"c"}}}}
	if got := p.allocations(); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("plugin got %v, want %v", got, want)
	}

	pref, err := k.GetPreferredAllocation(ctx, nic, []string{"x", "y"}, []string{"m"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ids := pref.GetContainerResponses()[0].GetDeviceIDs(); strings.Join(ids, ",") != "m,x" {
		t.Errorf("preferred = %v", ids)
	}
	if _, err := k.PreStartContainer(ctx, nic, []string{"a"}); !errors.Is(err, kubelettest.ErrCallNotOffered) {
		t.Errorf("PreStartContainer without PreStartRequired: %v, want ErrCallNotOffered", err)
	}
	if _, err := k.Allocate(ctx, "example.com/other", []string{"a"}); !errors.Is(err, kubelettest.ErrNotRegistered) {
		t.Errorf("Allocate of an unknown resource: %v, want ErrNotRegistered", err)
	}
}

func podResourcesClient(t *testing.T, socket string) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

func TestPodResources(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t)})
	startFakePlugin(t, fakeConfig{
		socket:  filepath.Join(k.DevicePluginDir(), "nic.sock"),
		devices: []*pluginapi.Device{device("a", pluginapi.Healthy, 0), device("b", pluginapi.Unhealthy, 1)},
	})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "nic.sock"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitDevices(ctx, nic, nil); err != nil {
		t.Fatal(err)
	}
	pods := []*podresourcesapi.PodResources{
		kubelettest.PodHolding("ns", "web", "app", nic, "a"),
		kubelettest.Pod("ns", "db",
			kubelettest.Container("main", kubelettest.OnNUMA(kubelettest.DevicesOf(nic, "b"), 1)),
			kubelettest.Container("sidecar")),
	}
	k.SetPods(pods)
	c := podResourcesClient(t, k.PodResourcesSocket())

	list, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(list, &podresourcesapi.ListPodResourcesResponse{PodResources: pods}) {
		t.Errorf("List = %v", list)
	}
	got, err := c.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "db", PodNamespace: "ns"})
	if err != nil || !proto.Equal(got.GetPodResources(), pods[1]) {
		t.Errorf("Get db = %v, %v", got, err)
	}
	if _, err := c.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "gone", PodNamespace: "ns"}); err == nil || !strings.Contains(err.Error(), "pod gone in namespace ns not found") {
		t.Errorf("Get of a missing pod: %v", err)
	}

	alloc, err := c.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantAlloc := []*podresourcesapi.ContainerDevices{kubelettest.OnNUMA(kubelettest.DevicesOf(nic, "a"), 0)}
	if !proto.Equal(alloc, &podresourcesapi.AllocatableResourcesResponse{Devices: wantAlloc}) {
		t.Errorf("GetAllocatableResources = %v, want the healthy device only", alloc)
	}

	k.FailPodResources(status.Error(codes.Unavailable, "feature off"))
	if _, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("List while failing: %v, want Unavailable", err)
	}
	k.FailPodResources(nil)

	// Pods survive a kubelet restart; the socket is a new one.
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	c = podResourcesClient(t, k.PodResourcesSocket())
	list, err = c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil || len(list.GetPodResources()) != 2 {
		t.Errorf("List after restart = %v, %v", list, err)
	}
}

func TestNoPodResources(t *testing.T) {
	k := kubelettest.Start(t, "", kubelettest.Options{NoPodResources: true})
	if _, err := os.Stat(filepath.Dir(k.PodResourcesSocket())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod-resources/ with NoPodResources: %v, want none", err)
	}
	if _, err := os.Stat(k.PluginsRegistryDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plugins_registry/ without PluginWatcher: %v, want none", err)
	}
}

func TestNewRejectsLongSocketPath(t *testing.T) {
	dir := filepath.Join(kubelettest.ShortTempDir(t), strings.Repeat("d", 90))
	if _, err := kubelettest.New(dir, kubelettest.Options{}); err == nil || !strings.Contains(err.Error(), "unix sockets allow 107") {
		t.Errorf("New with a long dir: %v", err)
	}
}

func TestIsExtendedResourceName(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		{"example.com/nic", true},
		{"intel.com/sriov_netdevice", true},
		{"nvidia.com/gpu", true},
		{"a.b/C_d.e-f", true},
		{"nic", false},
		{"kubernetes.io/nic", false},
		{"example.kubernetes.io/nic", false},
		{"requests.example.com/nic", false},
		{"/nic", false},
		{"example.com/", false},
		{"Example.com/nic", false},
		{"example.com/a/b", false},
		{"example.com/-nic", false},
		{"example.com/" + strings.Repeat("n", 63), true},
		{"example.com/" + strings.Repeat("n", 64), false},
		{strings.Repeat("d", 244) + ".com/nic", false}, // "requests." pushes the domain past 253
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := kubelettest.IsExtendedResourceName(tc.name); got != tc.want {
				t.Errorf("IsExtendedResourceName(%q) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// The checkpoint is laid out as the kubelet's device manager writes it
// (v2): Data.PodDeviceEntries, with each container's pod UID, name,
// resource and devices by NUMA node, Data.RegisteredDevices, and a
// Checksum; the entries null while none is set.
func TestTheCheckpointHasTheKubeletsLayout(t *testing.T) {
	ctx := testContext(t)
	k := kubelettest.Start(t, "", kubelettest.Options{Logger: testLogger(t)})
	startFakePlugin(t, fakeConfig{socket: filepath.Join(k.DevicePluginDir(), "nic.sock"), devices: []*pluginapi.Device{device("a", pluginapi.Healthy)}})
	if err := register(ctx, k.RegistrationSocket(), pluginapi.Version, nic, "nic.sock"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitDevices(ctx, nic, nil); err != nil {
		t.Fatal(err)
	}
	type layout struct {
		Data *struct {
			PodDeviceEntries []struct {
				PodUID, ContainerName, ResourceName string
				DeviceIDs                           map[string][]string
			}
			RegisteredDevices map[string][]string
		}
		Checksum *uint64
	}
	read := func() (layout, string) {
		t.Helper()
		b, err := os.ReadFile(k.CheckpointFile())
		if err != nil {
			t.Fatal(err)
		}
		var l layout
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if l.Data == nil || l.Checksum == nil || !reflect.DeepEqual(l.Data.RegisteredDevices, map[string][]string{nic: {"a"}}) {
			t.Errorf("checkpoint %s: want Data (RegisteredDevices %s: [a]) and Checksum", b, nic)
		}
		return l, string(b)
	}
	if _, b := read(); !strings.Contains(b, `"PodDeviceEntries":null`) {
		t.Errorf("checkpoint with no entries %s: want PodDeviceEntries null", b)
	}

	k.SetCheckpointEntries(kubelettest.CheckpointEntry{PodUID: "u-1", Container: "main", Resource: nic, DeviceIDs: []string{"a"}})
	l, b := read()
	if len(l.Data.PodDeviceEntries) != 1 {
		t.Fatalf("checkpoint %s: want one entry", b)
	}
	if e := l.Data.PodDeviceEntries[0]; e.PodUID != "u-1" || e.ContainerName != "main" || e.ResourceName != nic ||
		!reflect.DeepEqual(e.DeviceIDs, map[string][]string{"-1": {"a"}}) {
		t.Errorf("checkpoint entry %+v, want u-1's main holding a of %s (no NUMA node)", e, nic)
	}
}
