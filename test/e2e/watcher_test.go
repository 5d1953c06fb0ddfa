package e2e

import (
	"os"
	"path/filepath"
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
