package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Names inside the kubelet directory, as the kubelet lays them out under
// /var/lib/kubelet.
const (
	DevicePluginsDir   = "device-plugins"
	PluginsRegistryDir = "plugins_registry"
	PodResourcesDir    = "pod-resources"
	KubeletSocketName  = "kubelet.sock"
	// CheckpointName is the device manager's checkpoint file in
	// device-plugins/, the one file a kubelet start leaves there besides
	// non-sockets.
	CheckpointName = "kubelet_internal_checkpoint"
)

// DefaultDialTimeout is how long the kubelet waits for a plugin socket to
// accept a connection (devicemanager/plugin/v1beta1/client.go and
// pluginmanager/operationexecutor/operation_generator.go both use 10 s).
const DefaultDialTimeout = 10 * time.Second

// maxSocketPath is the longest path a unix socket can be bound to on Linux
// (108 bytes of sun_path including the terminating NUL).
const maxSocketPath = 107

// Mode says how a plugin registered: by a Register call on kubelet.sock, or
// through a socket the plugin watcher found in plugins_registry/. The values
// are those of devledger's --registration flag.
type Mode string

// Registration modes.
const (
	ModeLegacy  Mode = "legacy"
	ModeWatcher Mode = "watcher"
)

// Errors returned by the stand-in's calls and queries; check with errors.Is.
var (
	// ErrNotRegistered: no plugin has registered the resource since the
	// kubelet last booted.
	ErrNotRegistered = errors.New("kubelet stand-in: resource not registered")
	// ErrEndpointStopped: the plugin's connection ended (ListAndWatch broke or
	// its socket was removed) and it has not registered again; the kubelet
	// refuses calls to such an endpoint.
	ErrEndpointStopped = errors.New("kubelet stand-in: endpoint has been stopped")
	// ErrCallNotOffered: the plugin's DevicePluginOptions do not offer the call
	// (GetPreferredAllocationAvailable, PreStartRequired), so the kubelet would
	// never make it.
	ErrCallNotOffered = errors.New("kubelet stand-in: call not offered by the plugin's options")
	// ErrKubeletDown: the stand-in is stopped (Options.Delayed before Boot, or
	// after Stop).
	ErrKubeletDown = errors.New("kubelet stand-in: kubelet is down")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("kubelet stand-in: closed")
)

// Options shape a stand-in. The zero value is a current kubelet with the
// plugin watcher off and the PodResources server on.
type Options struct {
	// PluginWatcher also runs the plugin watcher on plugins_registry/ (and
	// creates that dir, which is what devledger's --registration auto looks
	// for). The legacy registration server runs either way, as in a real
	// kubelet.
	PluginWatcher bool
	// Delayed leaves the kubelet down after New: the dirs exist but no
	// kubelet.sock; call Boot when the test wants the kubelet to appear.
	Delayed bool
	// NoPodResources runs no PodResources server and creates no
	// pod-resources/ dir: an old kubelet, or the feature turned off.
	NoPodResources bool
	// AsyncRegister answers Register before connecting to the plugin, as
	// kubelets before 1.25 did (the old manager.go ran addEndpoint in a
	// goroutine); connection failures then show only as rejections.
	AsyncRegister bool
	// NoticeDelay is how long the kubelet takes to notice that a plugin's
	// ListAndWatch ended (a loaded node): until then it counts the
	// connection as live, and refuses a Register of the same socket path
	// as already connected. Zero notices at once.
	NoticeDelay time.Duration
	// DialTimeout bounds dialing a plugin and its first calls; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// BeforeConnect, if set, is called by every registration once the
	// plugin has answered GetDevicePluginOptions and before its endpoint
	// becomes the resource's, with the resource and the endpoint's socket.
	// A test blocks in it to hold one registration back while another
	// overtakes it, as the kubelet's concurrent registrations can.
	BeforeConnect func(resource, socket string)
	// ConnectError, if set, is called by every registration right after
	// BeforeConnect; an error it returns fails the registration there, as
	// the device manager's RegisterPlugin fails when it cannot reach the
	// plugin. The plugin watcher keeps such a socket as registered and
	// never tries it again until it is re-created (kubelets 1.35.4 and
	// 1.34.4; later ones try again).
	ConnectError func(resource, socket string) error
	// Logger receives one line per state change; nil logs nothing. In tests,
	// zerolog.New(zerolog.NewTestWriter(t)) puts it in the test output.
	Logger *zerolog.Logger
	// OnEvent, if set, is called once per state change, in order, from the
	// goroutine that made the change. It must return quickly and must not call
	// Boot, Stop, Restart or Close.
	OnEvent func(Event)
}

// Kubelet is a running kubelet stand-in. All methods are safe for concurrent
// use.
type Kubelet struct {
	dir  string
	opts Options
	log  zerolog.Logger

	lifeMu sync.Mutex // serialises Boot, Stop, Restart and Close
	emitMu sync.Mutex // one OnEvent call at a time, in order
	ckptMu sync.Mutex // one checkpoint write at a time

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every state change
	closed      bool
	boot        *boot // nil while the kubelet is down
	boots       int
	bootedAt    time.Time
	endpoints   map[string]*endpoint // by resource; the kubelet keeps stopped ones too
	devices     map[string][]*pluginapi.Device
	ckptEntries []CheckpointEntry // see SetCheckpointEntries
	counts      map[string]int
	history     []Registration
	rejections  []Rejection
	pods        []*podresourcesapi.PodResources
	allocatable []*podresourcesapi.ContainerDevices // nil: derived from ListAndWatch
	podErr      error
}

// boot is one life of the kubelet process, from Boot to Stop.
type boot struct {
	n            int
	at           time.Time
	ctx          context.Context // cancelled by Stop: aborts dials and calls of this life
	cancel       context.CancelFunc
	tasks        tasks
	registration *grpc.Server
	podResources *grpc.Server
	watcher      *pluginWatcher
}

// New makes the kubelet dir layout under dir (created if missing) and, unless
// opts.Delayed, boots the kubelet. Close it when done.
func New(dir string, opts Options) (*Kubelet, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("kubelet stand-in dir %s: %w", dir, err)
	}
	k := &Kubelet{
		dir:       abs,
		opts:      opts,
		log:       zerolog.Nop(),
		changed:   make(chan struct{}),
		endpoints: make(map[string]*endpoint),
		devices:   make(map[string][]*pluginapi.Device),
		counts:    make(map[string]int),
	}
	if opts.Logger != nil {
		k.log = opts.Logger.With().Str("component", "kubelet-stand-in").Logger()
	}
	for _, p := range []string{k.RegistrationSocket(), k.PodResourcesSocket()} {
		if len(p) > maxSocketPath {
			return nil, fmt.Errorf("kubelet stand-in: socket path %s is %d bytes, unix sockets allow %d: use a shorter dir (ShortTempDir)", p, len(p), maxSocketPath)
		}
	}
	mk := []string{k.DevicePluginDir()}
	if opts.PluginWatcher {
		mk = append(mk, k.PluginsRegistryDir())
	}
	if !opts.NoPodResources {
		mk = append(mk, filepath.Dir(k.PodResourcesSocket()))
	}
	for _, d := range mk {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("kubelet stand-in: create %s: %w", d, err)
		}
	}
	if !opts.Delayed {
		if err := k.Boot(); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// Start is New for tests: dir "" means ShortTempDir(t); a failure fails the
// test, and Close runs in t.Cleanup.
func Start(t testing.TB, dir string, opts Options) *Kubelet {
	t.Helper()
	if dir == "" {
		dir = ShortTempDir(t)
	}
	k, err := New(dir, opts)
	if err != nil {
		t.Fatalf("start kubelet stand-in: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("close kubelet stand-in: %v", err)
		}
	})
	return k
}

// ShortTempDir makes a dir under the system temp dir with os.MkdirTemp("",
// "kt"), removed in t.Cleanup. t.TempDir() paths carry the test name and can
// push socket paths past the 107-byte limit of unix sockets.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatalf("make short temp dir: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// Dir is the kubelet dir (absolute).
func (k *Kubelet) Dir() string { return k.dir }

// DevicePluginDir is <dir>/device-plugins, where legacy plugins put their
// sockets and the kubelet its kubelet.sock.
func (k *Kubelet) DevicePluginDir() string { return filepath.Join(k.dir, DevicePluginsDir) }

// PluginsRegistryDir is <dir>/plugins_registry, which the plugin watcher
// watches. It exists only with Options.PluginWatcher (unless the test makes it).
func (k *Kubelet) PluginsRegistryDir() string { return filepath.Join(k.dir, PluginsRegistryDir) }

// RegistrationSocket is <dir>/device-plugins/kubelet.sock.
func (k *Kubelet) RegistrationSocket() string {
	return filepath.Join(k.DevicePluginDir(), KubeletSocketName)
}

// PodResourcesSocket is <dir>/pod-resources/kubelet.sock.
func (k *Kubelet) PodResourcesSocket() string {
	return filepath.Join(k.dir, PodResourcesDir, KubeletSocketName)
}

// CheckpointFile is <dir>/device-plugins/kubelet_internal_checkpoint. The
// stand-in rewrites it (temp file, then rename) on every device list, as the
// kubelet does, so that a plugin watching device-plugins/ sees the same file
// traffic, and on SetCheckpointEntries. Its content is in the kubelet's
// layout (see SetCheckpointEntries for how it departs); the stand-in never
// reads it back.
func (k *Kubelet) CheckpointFile() string { return filepath.Join(k.DevicePluginDir(), CheckpointName) }

// Up reports whether the kubelet is booted.
func (k *Kubelet) Up() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.boot != nil
}

// BootedAt is the moment the latest boot created kubelet.sock (zero before the
// first boot). Benchmarks time re-registration from it with RegisteredAfter.
func (k *Kubelet) BootedAt() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bootedAt
}

// Boots counts the boots so far: 1 after the first, 2 after one Restart.
func (k *Kubelet) Boots() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.boots
}

// Boot starts the kubelet as a kubelet process starting does: it deletes the
// sockets in device-plugins/ (keeping the checkpoint and any non-socket),
// creates kubelet.sock and serves Registration, starts the PodResources server
// and, with Options.PluginWatcher, the plugin watcher, which registers every
// socket already in plugins_registry/. Boot on a booted kubelet does nothing.
func (k *Kubelet) Boot() error {
	k.lifeMu.Lock()
	defer k.lifeMu.Unlock()
	return k.bootLocked()
}

// Stop takes the kubelet down as a killed kubelet goes: every plugin
// connection is closed (their ListAndWatch streams end), the servers stop and
// the watcher with them, and the device lists are forgotten. kubelet.sock and
// the PodResources socket stay behind as dead files, as they do when the
// kubelet process dies; the next Boot deletes and re-creates them.
func (k *Kubelet) Stop() error {
	k.lifeMu.Lock()
	defer k.lifeMu.Unlock()
	k.stopLocked("stopped")
	return nil
}

// Restart is Stop then Boot: a kubelet restart. Plugins see their socket in
// device-plugins/ deleted and a new kubelet.sock created; watcher-mode plugins
// get GetInfo and NotifyRegistrationStatus again. BootedAt tells when the new
// kubelet.sock appeared.
func (k *Kubelet) Restart() error {
	k.lifeMu.Lock()
	defer k.lifeMu.Unlock()
	k.stopLocked("restarting")
	return k.bootLocked()
}

// Close stops the kubelet for good and removes the sockets it created. It is
// idempotent; queries still answer from the last state, waits fail.
func (k *Kubelet) Close() error {
	k.lifeMu.Lock()
	defer k.lifeMu.Unlock()
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.mu.Unlock()
	k.stopLocked("closed")
	k.mu.Lock()
	k.closed = true
	k.changedLocked()
	k.mu.Unlock()
	var errs []error
	for _, p := range []string{k.RegistrationSocket(), k.PodResourcesSocket()} {
		if err := removeSocket(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (k *Kubelet) bootLocked() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return ErrClosed
	}
	if k.boot != nil {
		k.mu.Unlock()
		return nil
	}
	n := k.boots + 1
	k.mu.Unlock()

	dpDir := k.DevicePluginDir()
	if err := os.MkdirAll(dpDir, 0o750); err != nil {
		return fmt.Errorf("kubelet stand-in boot: create %s: %w", dpDir, err)
	}
	if err := cleanupDevicePluginDir(dpDir, k.CheckpointFile()); err != nil {
		return fmt.Errorf("kubelet stand-in boot: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &boot{n: n, ctx: ctx, cancel: cancel}
	regLn, err := listenUnix(k.RegistrationSocket())
	if err != nil {
		cancel()
		return fmt.Errorf("kubelet stand-in boot: %w", err)
	}
	b.at = time.Now()
	b.registration = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(b.registration, &registrationServer{k: k, b: b})
	var prLn net.Listener
	if !k.opts.NoPodResources {
		if err := os.MkdirAll(filepath.Dir(k.PodResourcesSocket()), 0o750); err != nil {
			regLn.Close()
			cancel()
			return fmt.Errorf("kubelet stand-in boot: %w", err)
		}
		if prLn, err = listenUnix(k.PodResourcesSocket()); err != nil {
			regLn.Close()
			cancel()
			return fmt.Errorf("kubelet stand-in boot: %w", err)
		}
		b.podResources = grpc.NewServer()
		podresourcesapi.RegisterPodResourcesListerServer(b.podResources, &podResourcesServer{k: k})
	}

	k.mu.Lock()
	k.boot = b
	k.boots = n
	k.bootedAt = b.at
	k.changedLocked()
	k.mu.Unlock()
	b.tasks.run(func() { _ = b.registration.Serve(regLn) })
	if b.podResources != nil {
		b.tasks.run(func() { _ = b.podResources.Serve(prLn) })
	}
	k.emit(Event{Kind: KubeletBooted, At: b.at, Boot: n, Endpoint: k.RegistrationSocket()})

	if k.opts.PluginWatcher {
		w, err := startPluginWatcher(k, b, k.PluginsRegistryDir())
		if err != nil {
			k.stopLocked("watcher failed")
			return fmt.Errorf("kubelet stand-in boot: %w", err)
		}
		b.watcher = w
	}
	return nil
}

func (k *Kubelet) stopLocked(why string) {
	k.mu.Lock()
	b := k.boot
	k.mu.Unlock()
	if b == nil {
		return
	}
	// Cancel first: whatever this boot was doing fails as "kubelet going
	// down" rather than as a plugin's fault.
	b.cancel()
	k.mu.Lock()
	k.boot = nil
	eps := k.endpoints
	k.endpoints = make(map[string]*endpoint)
	// A new kubelet starts with zero capacity until plugins register again.
	k.devices = make(map[string][]*pluginapi.Device)
	k.changedLocked()
	k.mu.Unlock()

	if b.watcher != nil {
		b.watcher.stop()
	}
	for _, e := range eps {
		e.close()
	}
	b.registration.Stop()
	if b.podResources != nil {
		b.podResources.Stop()
	}
	b.tasks.closeAndWait()
	k.emit(Event{Kind: KubeletStopped, At: time.Now(), Boot: b.n, Reason: why})
}

// changedLocked wakes every waiter; k.mu must be held.
func (k *Kubelet) changedLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *Kubelet) dialTimeout() time.Duration {
	if k.opts.DialTimeout > 0 {
		return k.opts.DialTimeout
	}
	return DefaultDialTimeout
}

// listenUnix binds a unix socket as the kubelet does: an old file at the path
// is removed first. The socket file is left in place when the listener
// closes, as it is when a kubelet dies.
func listenUnix(path string) (net.Listener, error) {
	if err := removeSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

func removeSocket(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// cleanupDevicePluginDir deletes what a starting kubelet deletes in
// device-plugins/: every unix socket except the checkpoint; dirs and other
// files stay (ManagerImpl.CleanupPluginDirectory in devicemanager/manager.go).
func cleanupDevicePluginDir(dir, checkpoint string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	var errs []error
	for _, ent := range entries {
		p := filepath.Join(dir, ent.Name())
		if p == checkpoint {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("clean %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// tasks tracks goroutines so that shutting down can wait for them. Once
// closeAndWait has begun, run refuses to start more, so no Add races the Wait.
type tasks struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

func (t *tasks) run(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// enter counts the calling goroutine in, as run does for a new one; false
// once closing. Pair with leave.
func (t *tasks) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tasks) leave() { t.wg.Done() }

func (t *tasks) closeAndWait() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	t.wg.Wait()
}
