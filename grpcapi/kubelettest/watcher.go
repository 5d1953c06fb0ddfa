package kubelettest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Timings of the kubelet's plugin manager (operationexecutor and
// goroutinemap): GetInfo gets 1 s, NotifyRegistrationStatus 5 s, and a failed
// registration is retried after 500 ms, doubling up to 2 min.
const (
	getInfoTimeout    = 1 * time.Second
	notifyTimeout     = 5 * time.Second
	firstRetryBackoff = 500 * time.Millisecond
	maxRetryBackoff   = 2 * time.Minute
)

// pluginWatcher is the kubelet's plugin manager for one boot: fsnotify fills a
// desired state (sockets present, each with the generation of its last
// Create), registrations fill an actual state, and reconcile makes the actual
// follow the desired (pluginwatcher/plugin_watcher.go, reconciler/reconciler.go).
// The kubelet's reconciler runs every second; this one runs on every change,
// so registration latency measured against it is the plugin's own.
type pluginWatcher struct {
	k    *Kubelet
	b    *boot
	dir  string
	fsw  *fsnotify.Watcher
	kick chan struct{}
	done chan struct{}
	ops  tasks

	mu      sync.Mutex
	gen     uint64
	desired map[string]uint64
	actual  map[string]watchedPlugin
	pending map[string]bool
	retry   map[string]retryState
	timers  map[string]*time.Timer
	stopped bool
}

// watchedPlugin is a socket the kubelet registered (its actual state of the
// world entry).
type watchedPlugin struct {
	gen      uint64
	name     string
	endpoint string
}

type retryState struct {
	gen       uint64
	delay     time.Duration
	notBefore time.Time
}

// startPluginWatcher adds the fsnotify watch on dir and only then lists it, so
// no socket created in between is missed.
func startPluginWatcher(k *Kubelet, b *boot, dir string) (*pluginWatcher, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("plugin watcher: create %s: %w", dir, err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("plugin watcher: %w", err)
	}
	w := &pluginWatcher{
		k: k, b: b, dir: dir, fsw: fsw,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		desired: make(map[string]uint64),
		actual:  make(map[string]watchedPlugin),
		pending: make(map[string]bool),
		retry:   make(map[string]retryState),
		timers:  make(map[string]*time.Timer),
	}
	if err := w.traverse(dir); err != nil {
		_ = fsw.Close()
		return nil, err
	}
	go w.loop()
	return w, nil
}

func (w *pluginWatcher) stop() {
	w.mu.Lock()
	w.stopped = true
	for _, t := range w.timers {
		t.Stop()
	}
	w.mu.Unlock()
	_ = w.fsw.Close()
	<-w.done
	w.ops.closeAndWait()
}

func (w *pluginWatcher) loop() {
	defer close(w.done)
	w.reconcile()
	for {
		select {
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			// The kubelet acts on Create and Remove only; a rename away leaves
			// the plugin registered.
			if ev.Has(fsnotify.Create) {
				w.handleCreate(ev.Name)
			} else if ev.Has(fsnotify.Remove) {
				w.handleRemove(ev.Name)
			}
			w.reconcile()
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.k.log.Warn().Err(err).Str("dir", w.dir).Msg("plugin watcher error")
		case <-w.kick:
			w.reconcile()
		case <-w.b.ctx.Done():
			return
		}
	}
}

// traverse watches dir, then walks it: sub-dirs are watched too, sockets are
// handled as if just created, anything else is ignored.
func (w *pluginWatcher) traverse(dir string) error {
	if err := w.fsw.Add(dir); err != nil {
		return fmt.Errorf("plugin watcher: watch %s: %w", dir, err)
	}
	return filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			if path == dir {
				return fmt.Errorf("plugin watcher: walk %s: %w", dir, err)
			}
			return nil
		}
		if path == dir {
			return nil
		}
		if info.IsDir() {
			if err := w.fsw.Add(path); err != nil {
				return fmt.Errorf("plugin watcher: watch %s: %w", path, err)
			}
			return nil
		}
		if info.Mode()&os.ModeSocket != 0 {
			w.handleCreate(path)
		}
		return nil
	})
}

// handleCreate ignores names starting with '.' and non-sockets; a socket
// (re)enters the desired state with a new generation, so a re-created socket
// is deregistered and registered again.
func (w *pluginWatcher) handleCreate(path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if strings.HasPrefix(fi.Name(), ".") {
		return
	}
	if fi.IsDir() {
		if err := w.traverse(path); err != nil {
			w.k.log.Warn().Err(err).Msg("plugin watcher: sub-dir not watched")
		}
		return
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return
	}
	w.mu.Lock()
	w.gen++
	w.desired[path] = w.gen
	w.mu.Unlock()
}

func (w *pluginWatcher) handleRemove(path string) {
	w.mu.Lock()
	delete(w.desired, path)
	w.mu.Unlock()
}

func (w *pluginWatcher) kickNow() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// reconcile starts, per socket with no operation pending, an unregistration
// where the actual state is not desired (gone, or re-created since), and a
// registration where a desired socket is not registered and its backoff has
// passed. Operations end by kicking reconcile again.
func (w *pluginWatcher) reconcile() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	for path, a := range w.actual {
		if w.pending[path] {
			continue
		}
		if g, ok := w.desired[path]; ok && g == a.gen {
			continue
		}
		w.pending[path] = true
		w.ops.run(func() { w.unregister(path, a) })
	}
	now := time.Now()
	for path, g := range w.desired {
		if w.pending[path] {
			continue
		}
		if _, ok := w.actual[path]; ok {
			continue
		}
		if r, ok := w.retry[path]; ok && r.gen == g && now.Before(r.notBefore) {
			w.retryAt(path, r.notBefore.Sub(now))
			continue
		}
		w.pending[path] = true
		w.ops.run(func() { w.register(path, g) })
	}
}

// retryAt kicks reconcile after d; w.mu must be held.
func (w *pluginWatcher) retryAt(path string, d time.Duration) {
	if t := w.timers[path]; t != nil {
		t.Stop()
	}
	w.timers[path] = time.AfterFunc(d, w.kickNow)
}

func (w *pluginWatcher) unregister(path string, a watchedPlugin) {
	// The kubelet drops the actual state entry before calling the handler.
	w.mu.Lock()
	delete(w.actual, path)
	w.mu.Unlock()
	w.k.deregister(a.name, a.endpoint)
	w.mu.Lock()
	delete(w.pending, path)
	w.mu.Unlock()
	w.kickNow()
}

func (w *pluginWatcher) register(path string, gen uint64) {
	p, registered := w.registerSocket(path)
	w.mu.Lock()
	delete(w.pending, path)
	if registered {
		p.gen = gen
		w.actual[path] = p
		delete(w.retry, path)
	} else {
		r := w.retry[path]
		if r.gen != gen || r.delay == 0 {
			r = retryState{gen: gen, delay: firstRetryBackoff}
		} else {
			r.delay = min(2*r.delay, maxRetryBackoff)
		}
		r.notBefore = time.Now().Add(r.delay)
		w.retry[path] = r
	}
	w.mu.Unlock()
	w.kickNow()
}

// registerSocket is the kubelet's GenerateRegisterPluginFunc for a device
// plugin (operationexecutor/operation_generator.go), with its error texts. A
// rejection is recorded before the plugin is notified, so a plugin that saw
// the status finds the rejection in Rejections.
// registered reports whether the socket entered the actual state: the kubelet
// adds it before connecting, so a failed connect is not retried until the
// socket is re-created, while dial, GetInfo and validation failures are.
func (w *pluginWatcher) registerSocket(path string) (p watchedPlugin, registered bool) {
	k, b := w.k, w.b
	dctx, cancel := context.WithTimeout(b.ctx, k.dialTimeout())
	defer cancel()
	conn, err := dialUnix(dctx, path)
	if err != nil {
		k.reject(b, "", path, ModeWatcher, fmt.Sprintf("RegisterPlugin error -- dial failed at socket %s, err: %v", path, err))
		return p, false
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)

	ictx, icancel := context.WithTimeout(b.ctx, getInfoTimeout)
	info, err := client.GetInfo(ictx, &registerapi.InfoRequest{})
	icancel()
	if err != nil {
		k.reject(b, "", path, ModeWatcher, fmt.Sprintf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %v", path, err))
		return p, false
	}
	if info.GetType() != registerapi.DevicePlugin {
		msg := fmt.Sprintf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.GetType(), path)
		k.reject(b, info.GetName(), path, ModeWatcher, msg)
		w.notify(client, path, false, msg)
		return p, false
	}
	endpoint := info.GetEndpoint()
	if endpoint == "" {
		endpoint = path
	}
	if err := validatePlugin(info.GetName(), info.GetSupportedVersions()); err != nil {
		msg := fmt.Sprintf("RegisterPlugin error -- plugin validation failed with err: %v", err)
		k.reject(b, info.GetName(), endpoint, ModeWatcher, msg)
		w.notify(client, path, false, msg)
		return p, false
	}
	p = watchedPlugin{name: info.GetName(), endpoint: endpoint}
	if _, err := k.connect(b, info.GetName(), endpoint, ModeWatcher, nil); err != nil {
		msg := fmt.Sprintf("RegisterPlugin error -- plugin registration failed with err: %v", err)
		k.reject(b, info.GetName(), endpoint, ModeWatcher, msg)
		w.notify(client, path, false, msg)
		return p, true
	}
	w.notify(client, path, true, "")
	return p, true
}

// validatePlugin is the device manager's ValidatePlugin (plugin/v1beta1/handler.go).
func validatePlugin(name string, versions []string) error {
	if !versionSupported(versions...) {
		return fmt.Errorf("manager version, %s, is not among plugin supported versions %v", pluginapi.Version, versions)
	}
	if !IsExtendedResourceName(name) {
		return fmt.Errorf("invalid name of device plugin socket: %s", fmt.Sprintf("the ResourceName %q is invalid", name))
	}
	return nil
}

func (w *pluginWatcher) notify(client registerapi.RegistrationClient, path string, registered bool, errText string) {
	ctx, cancel := context.WithTimeout(w.b.ctx, notifyTimeout)
	defer cancel()
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: registered, Error: errText}); err != nil {
		w.k.log.Warn().Err(err).Str("endpoint", path).Bool("registered", registered).Msg("NotifyRegistrationStatus failed")
	}
}
