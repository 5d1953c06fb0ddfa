package e2e

import "testing"

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
