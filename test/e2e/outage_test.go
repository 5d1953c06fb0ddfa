package e2e

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// waitKubeletUp waits up to within for the ledger to have the kubelet up
// and every pool registered on the socket it serves on now.
func waitKubeletUp(t testing.TB, r *rig, within time.Duration, what string) {
	t.Helper()
	waitPoolsRegistered(t, r, within, "the kubelet up ("+what+")", func(s ledgerState) bool { return !s.Kubelet.Down })
}

// The kubelet stops cleanly: its device manager's Stop removes
// kubelet.sock, and the daemon records the kubelet gone. The daemon
// restarts while it is down, and the kubelet then starts again. The
// ledger has the outage ended and every pool registered at once, each
// once with the new kubelet.
func TestLegacyKubeletOutageAcrossADaemonRestart(t *testing.T) {
	r := startRig(t, "legacy")
	r.k.stop()
	if _, err := os.Stat(filepath.Join(devicePluginsDir, "kubelet.sock")); err == nil {
		t.Fatal("kubelet.sock still there after the device manager stopped")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !replay(t, r.node.stateDir).Kubelet.Down {
		if time.Now().After(deadline) {
			t.Fatal("the kubelet's stop is not recorded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.d.signal(t, syscall.SIGTERM, 30*time.Second)
	r.d = startDaemon(t, r.node, "legacy")
	time.Sleep(500 * time.Millisecond)
	r.k = startKubelet(t, r.pods, r.kopt)
	r.k.waitFull(t, "the kubelet back", r.k.started)
	waitKubeletUp(t, r, 3*time.Second, "the kubelet back")
	// And it stays so: no pool registers anew with this kubelet (the
	// recheck of a kubelet recorded gone comes every 5s).
	time.Sleep(6 * time.Second)
	waitKubeletUp(t, r, time.Second, "6s on")
	history := registrationHistory(t, r.node.stateDir)
	last := 0
	for i, e := range history {
		if e.Type == "KubeletRestarted" {
			last = i
		}
	}
	if got := len(history[last+1:]); got != len(sriovPools) {
		t.Errorf("after the last KubeletRestarted the ledger has %d registration records, want %d: %+v", got, len(sriovPools), history[last:])
	}
}

// staleKubeletSocket leaves at kubelet.sock a socket file that nothing
// listens on: what a killed kubelet leaves behind.
func staleKubeletSocket(t testing.TB) {
	t.Helper()
	path := filepath.Join(devicePluginsDir, "kubelet.sock")
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
}

// The daemon starts while the kubelet is down, its kubelet.sock left by a
// killed kubelet, so the pools' Registers wait for the socket to answer.
// The kubelet that comes up removes the pools' sockets at its start: a
// Register it then takes names a socket that is gone. Every pool is
// registered with it within 2s all the same.
func TestLegacyKubeletUpAfterTheDaemon(t *testing.T) {
	r := startRig(t, "legacy")
	r.d.signal(t, syscall.SIGKILL, 30*time.Second)
	r.k.stop()
	staleKubeletSocket(t)
	r.d = startDaemon(t, r.node, "legacy")
	time.Sleep(1500 * time.Millisecond) // the pools serve; their Registers wait for the socket
	r.k = startKubelet(t, r.pods, r.kopt)
	r.k.waitFull(t, "the kubelet up after the daemon", r.k.started)
}
