package e2e

import (
	"os"
	"path/filepath"
	"slices"
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

// waitKubeletDown waits for the ledger to have the kubelet down.
func waitKubeletDown(t testing.TB, r *rig) {
	t.Helper()
	waitLedger(t, r, 10*time.Second, "the kubelet down", func(s ledgerState) bool { return s.Kubelet.Down })
}

// waitPoolsServing waits until the ledger has every pool serving on a
// socket that is there, as the daemon's start number starts records it:
// a run killed before leaves its sockets, and its records.
func waitPoolsServing(t testing.TB, r *rig, starts int) {
	t.Helper()
	waitLedger(t, r, 10*time.Second, "every pool serving", func(s ledgerState) bool {
		if s.Daemon.Starts != starts {
			return false
		}
		for res := range sriovPools {
			reg := s.Pools[res].Registration
			if !reg.Serving || filepath.Dir(reg.Socket) != r.socketDir() || !fileThere(reg.Socket) {
				return false
			}
		}
		return true
	})
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
	waitKubeletDown(t, r)
	r.d.signal(t, syscall.SIGTERM, 30*time.Second)
	r.d = startDaemon(t, r.node, "legacy")
	waitPoolsServing(t, r, 2)
	r.k = startKubelet(t, r.pods, r.kopt)
	r.k.waitFull(t, "the kubelet back", r.k.started)
	waitKubeletUp(t, r, 3*time.Second, "the kubelet back")
	// And it stays so: no pool registers anew with this kubelet (the
	// recheck of a kubelet recorded gone comes every 5s).
	ledgerHolds(t, r, 6*time.Second, "the kubelet up and every pool registered", func(s ledgerState) bool {
		return !s.Kubelet.Down && everyPoolRegistered(t, r, s)
	})
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

// killedFor is how long killKubelet keeps the kubelet down: longer than a
// pool's ListGrace once its stream ended (1s, then 1s more once the
// kubelet answered a check) and than the daemon's wait before it dials a
// kubelet recorded gone again (5s).
const killedFor = 6 * time.Second

// TestLegacyKubeletKilled kills the kubelet while the daemon runs (see
// killKubelet).
func TestLegacyKubeletKilled(t *testing.T) { killKubelet(t, startRig(t, "legacy")) }

// TestWatcherKubeletKilled is TestLegacyKubeletKilled with the plugin
// manager finding the sockets in plugins_registry/.
func TestWatcherKubeletKilled(t *testing.T) { killKubelet(t, startRig(t, "watcher")) }

// killKubelet admits a pod and kills the kubelet: its kubelet.sock stays,
// refusing connections, and only the end of the pools' streams tells the
// daemon. The ledger must have the kubelet down, and every pool must go on
// serving on its socket without registering, not even once its ListGrace
// is over, for as long as the kubelet is down. Then a new kubelet starts:
// the ledger has it restarted and every pool registered with it once, the
// pod keeps its devices and a new pod gets the free VF.
func killKubelet(t testing.TB, r *rig) {
	t.Helper()
	pod, a := admitDPDK(t, r)
	before := replay(t, r.node.stateDir)
	sockets := map[string]string{}
	for res := range sriovPools {
		sockets[res] = poolSocket(t, r.socketDir(), res)
	}
	r.k.kill(t)
	killed := time.Now()
	waitKubeletDown(t, r)
	logFigure(t, r.mode, "kubelet-down-recorded-after-kill", time.Since(killed))
	ledgerHolds(t, r, killedFor, "the kubelet down and every pool serving on its socket, registering nowhere", func(s ledgerState) bool {
		if !s.Kubelet.Down {
			return false
		}
		for res, sock := range sockets {
			reg := s.Pools[res].Registration
			if !reg.Serving || reg.Registered || reg.Socket != sock || !fileThere(sock) ||
				reg.Failures != before.Pools[res].Registration.Failures {
				return false
			}
		}
		return true
	})

	r.k = startKubelet(t, r.pods, r.kopt)
	took := r.k.waitFull(t, "the kubelet's start after the kill", r.k.started)
	logFigure(t, r.mode, "all-registered-after-killed-kubelet", took)
	waitPoolsRegistered(t, r, 10*time.Second, "the kubelet up after 1 restart", func(s ledgerState) bool {
		return !s.Kubelet.Down && s.Kubelet.Restarts == 1
	})
	if got := r.k.allocated(pod); !slices.Equal(got[resDPDK], a.devices[resDPDK]) {
		t.Errorf("after the kubelet's kill and start the pod holds %v, want %v", got[resDPDK], a.devices[resDPDK])
	}
	admitFreeVF(t, r, "the kubelet's kill and start")

	// From the kill on: the stop, the restart, then each pool once.
	history := registrationHistory(t, r.node.stateDir)
	i := slices.IndexFunc(history, func(e ledgerEvent) bool { return e.Type == "KubeletStopped" })
	if i < 0 {
		t.Fatalf("ledger: no KubeletStopped: %+v", history)
	}
	registered := map[string]bool{}
	for j, e := range history[i:] {
		switch {
		case j == 0:
		case j == 1 && e.Type == "KubeletRestarted":
		case j > 1 && e.Type == "PluginRegistered" && !registered[e.Payload.Pool]:
			registered[e.Payload.Pool] = true
		default:
			t.Errorf("ledger #%d: %s %+v; want from the kill on KubeletStopped, KubeletRestarted, then one PluginRegistered per pool", e.Seq, e.Type, e.Payload)
		}
	}
	if len(registered) != len(sriovPools) {
		t.Errorf("ledger: %d pools registered after the kubelet's restart, want %d", len(registered), len(sriovPools))
	}
}

// The daemon starts while the kubelet is down, its kubelet.sock left by a
// killed kubelet, so the pools' Registers wait for the socket to answer.
// The kubelet that comes up removes the pools' sockets at its start: a
// Register it then takes names a socket that is gone. Every pool is
// registered with it within 2s all the same.
func TestLegacyKubeletUpAfterTheDaemon(t *testing.T) {
	r := startRig(t, "legacy")
	r.d.signal(t, syscall.SIGKILL, 30*time.Second)
	r.k.kill(t)
	r.d = startDaemon(t, r.node, "legacy")
	// A pool asks for its Register as it records that it serves: the
	// Registers wait for the socket.
	waitPoolsServing(t, r, 2)
	r.k = startKubelet(t, r.pods, r.kopt)
	r.k.waitFull(t, "the kubelet up after the daemon", r.k.started)
}
