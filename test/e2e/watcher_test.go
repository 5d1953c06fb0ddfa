package e2e

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestWatcherRegistration(t *testing.T) {
	r := startRig(t, "watcher")
	logFigure(t, "watcher", "registration", r.registered)
	if socks := socketsIn(t, pluginsRegistryDir); len(socks) != len(sriovPools) {
		t.Errorf("plugins_registry/ holds sockets %v, want one per pool (%d)", socks, len(sriovPools))
	}
	if socks := socketsIn(t, devicePluginsDir); len(socks) != 0 {
		t.Errorf("device-plugins/ holds sockets %v, want none in watcher mode", socks)
	}
	checkTopology(t, r.k, r.pods)
	_, a := admitDPDK(t, r)
	logFigure(t, "watcher", "admission", a.took)
}

// TestWatcherRegistrationThroughAnotherPath: the daemon sees the kubelet's
// directory at another path than the kubelet does (k0s and MicroK8s keep
// it elsewhere on the host; the DaemonSet mounts it at /var/lib/kubelet).
// The plugin watcher still registers every pool: the daemon names no path
// of its own view to it, so the kubelet connects where it found each
// socket.
func TestWatcherRegistrationThroughAnotherPath(t *testing.T) {
	requireSuite(t)
	resetKubeletRoot(t)
	logKubeletTo(t)
	n := newNode(t, "sriov", "sriov.yaml")
	k := startKubelet(t, &podList{}, kubeletOptions{watcher: true})
	// Short: the sockets' paths under it must fit a unix socket address.
	view, err := os.MkdirTemp("", "view-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(view) })
	d := startDaemonAt(t, n, "watcher", filepath.Join(view, "kubelet"))
	k.waitAllocatable(t, d.started, sriovPools)
}

// TestWatcherKubeletRestart restarts the kubelet in watcher mode: the new
// plugin manager finds the daemon's sockets in plugins_registry/ and
// registers them again.
func TestWatcherKubeletRestart(t *testing.T) {
	restartKubelet(t, startRig(t, "watcher"))
}

// TestWatcherDaemonSIGKILL kills the daemon in watcher mode: its sockets stay
// behind in plugins_registry/ until a new daemon binds them again, which the
// plugin watcher must see as a new plugin to register.
func TestWatcherDaemonSIGKILL(t *testing.T) {
	killDaemon(t, startRig(t, "watcher"))
}

// TestWatcherDaemonSIGTERM stops the daemon cleanly in watcher mode, as
// TestLegacyDaemonSIGTERM does in legacy mode: the plugin watcher sees
// every pool's socket go and the kubelet drops allocatable to zero; the
// daemon leaves nothing of its own in plugins_registry/, neither a socket
// nor one of the private directories it makes them in, which a kubelet
// started later would walk and watch.
func TestWatcherDaemonSIGTERM(t *testing.T) {
	r := startRig(t, "watcher")
	if code := r.d.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("devledger exit code after SIGTERM = %d, want 0", code)
	}
	took := r.k.waitCapacity(t, "allocatable zero", r.d.stopped, 30*time.Second, func(_, a counts) bool {
		return equalCounts(a, noneAllocatable)
	})
	logFigure(t, "watcher", "unhealthy-after-sigterm", took)
	if socks := socketsIn(t, pluginsRegistryDir); len(socks) != 0 {
		t.Errorf("plugins_registry/ still holds %v after SIGTERM", socks)
	}
	if dirs := privateDirsIn(t, pluginsRegistryDir); len(dirs) != 0 {
		t.Errorf("plugins_registry/ still holds devledger's %v after SIGTERM", dirs)
	}
	if s := replay(t, r.node.stateDir); s.Daemon.Running {
		t.Errorf("ledger: daemon still running after SIGTERM")
	}
}

// TestWatcherSocketRemoved removes one pool's socket from plugins_registry/
// while the kubelet runs: the plugin watcher deregisters the pool, the
// daemon serves it on a new socket, and the watcher registers that one.
func TestWatcherSocketRemoved(t *testing.T) {
	r := startRig(t, "watcher")
	removed := time.Now()
	if err := os.Remove(poolSocket(t, pluginsRegistryDir, resDPDK)); err != nil {
		t.Fatal(err)
	}
	// The watcher's reconciler (one pass a second) unregisters the old
	// socket and registers the pool's new one.
	r.k.waitDeregistered(t, resDPDK, removed, 30*time.Second)
	took := r.k.waitAllocatable(t, removed, sriovPools)
	logFigure(t, r.mode, "reregistration-after-socket-removed", took)
	admitDPDK(t, r)
	r.d.signal(t, syscall.SIGTERM, 30*time.Second)
	r.k.waitCapacity(t, "allocatable zero after SIGTERM", r.d.stopped, 30*time.Second, func(_, a counts) bool {
		return equalCounts(a, noneAllocatable)
	})
}

// TestWatcherNeverSeesASocketBeingMade renews a pool's socket again and
// again under a kubelet started while the daemon served. Its plugin
// watcher walked plugins_registry/ at its start and watches every
// directory it found there, hidden or not: none of the directories the
// daemon makes its sockets in may be among them, or the watcher stats
// each socket made there (an error when the rename wins the race; the
// socket's hidden name has it ignored when it loses).
func TestWatcherNeverSeesASocketBeingMade(t *testing.T) {
	r := startRig(t, "watcher")
	r.k = r.k.restart(t, r.kopt)
	r.k.waitAllocatable(t, r.k.started, sriovPools)
	seen := &linesWith{needle: []byte(".devledger-")}
	kubeletLogs.set(seen)
	t.Cleanup(func() { kubeletLogs.set(io.Discard) })
	for range 10 {
		old := poolSocket(t, pluginsRegistryDir, resDPDK)
		if err := os.Remove(old); err != nil { // as an operator's rm would
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if socks := socketsIn(t, pluginsRegistryDir); len(socks) == len(sriovPools) && !slices.Contains(socks, filepath.Base(old)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s got no new socket", resDPDK)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.k.waitAllocatable(t, r.k.started, sriovPools)
	// Its removal of a path it never added (a directory made anew) is
	// no harm; an error, or a path added, is.
	var handled []string
	for _, line := range seen.get() {
		if strings.Contains(line, "Error when handling create event") || strings.Contains(line, "Adding socket path") {
			handled = append(handled, line)
		}
	}
	if len(handled) > 0 {
		t.Errorf("the kubelet handled %d paths in devledger's private directories, as:\n%s", len(handled), strings.Join(handled, "\n"))
	}
}

// linesWith keeps the lines written to it that hold needle.
type linesWith struct {
	needle []byte
	mu     sync.Mutex
	lines  []string
}

func (w *linesWith) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for line := range bytes.Lines(p) {
		if bytes.Contains(line, w.needle) {
			w.lines = append(w.lines, string(bytes.TrimSpace(line)))
		}
	}
	return len(p), nil
}

func (w *linesWith) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}
