package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLegacyRegistration(t *testing.T) {
	r := startRig(t, "legacy")
	logFigure(t, "legacy", "registration", r.registered)
	socks := socketsIn(t, devicePluginsDir)
	if len(socks) != len(sriovPools) {
		t.Errorf("device-plugins/ holds sockets %v, want one per pool (%d)", socks, len(sriovPools))
	}
	checkTopology(t, r.k, r.pods)
}

func TestLegacyAdmission(t *testing.T) {
	r := startRig(t, "legacy")
	_, a := admitDPDK(t, r)
	logFigure(t, "legacy", "admission", a.took)

	// A kernel VF: the PCI address in the env, no device nodes, nothing
	// for KubeVirt (no VM can take it), and a device-info file for the CNI.
	pod := r.pods.newPod(resNetdevice, 1)
	b, err := r.k.admit(t, pod)
	if err != nil {
		t.Fatalf("kubelet: admit a pod of 1 x %s: %v", resNetdevice, err)
	}
	ids := b.devices[resNetdevice]
	if v, _ := env(b, "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE"); len(ids) != 1 || v != ids[0] {
		t.Errorf("PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE = %q, want the device the kubelet allocated %v", v, ids)
	}
	if v, ok := env(b, "PCI_RESOURCE_INTEL_COM_INTEL_SRIOV_NETDEVICE"); ok {
		t.Errorf("PCI_RESOURCE_INTEL_COM_INTEL_SRIOV_NETDEVICE = %q, want none for a kernel VF", v)
	}
	if len(b.opts.Devices) != 0 {
		t.Errorf("devices for the runtime = %+v, want none for a kernel VF", b.opts.Devices)
	}
	if len(ids) == 1 {
		info := filepath.Join(r.node.devinfoDir, "intel.com-intel_sriov_netdevice-"+ids[0]+"-device.json")
		if _, err := os.Stat(info); err != nil {
			t.Errorf("device-info file: %v", err)
		}
	}

	// More than the pool has: the kubelet refuses before asking the daemon.
	_, err = r.k.admit(t, r.pods.newPod(resDPDKExtra, 2))
	if err == nil || !strings.Contains(err.Error(), "requested number of devices unavailable") {
		t.Errorf("kubelet: admit 2 x %s (the pool has 1): err = %v, want the kubelet's 'requested number of devices unavailable'", resDPDKExtra, err)
	}
}

// TestLegacyKubeletRestart restarts the kubelet: the new device manager
// empties device-plugins/ (the daemon's sockets with it), reads its
// checkpoint and serves a new kubelet.sock; the daemon must notice and
// register again.
func TestLegacyKubeletRestart(t *testing.T) {
	restartKubelet(t, startRig(t, "legacy"))
}

// TestLegacyDaemonSIGTERM stops the daemon cleanly: its sockets and their
// private directories go, the kubelet sees the ListAndWatch streams end
// and marks every device unhealthy (capacity stays, allocatable drops to
// zero), and a new pod is refused.
func TestLegacyDaemonSIGTERM(t *testing.T) {
	r := startRig(t, "legacy")
	if code := r.d.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("devledger exit code after SIGTERM = %d, want 0", code)
	}
	took := r.k.waitCapacity(t, "capacity kept, allocatable zero", r.d.stopped, 30*time.Second, func(c, a counts) bool {
		return equalCounts(c, sriovPools) && equalCounts(a, noneAllocatable)
	})
	logFigure(t, "legacy", "unhealthy-after-sigterm", took)
	if socks := socketsIn(t, devicePluginsDir); len(socks) != 0 {
		t.Errorf("device-plugins/ still holds %v after SIGTERM", socks)
	}
	if dirs := privateDirsIn(t, devicePluginsDir); len(dirs) != 0 {
		t.Errorf("device-plugins/ still holds devledger's %v after SIGTERM", dirs)
	}
	_, err := r.k.admit(t, r.pods.newPod(resDPDK, 1))
	if err == nil || !strings.Contains(err.Error(), "no healthy devices") {
		t.Errorf("kubelet: admit with the daemon stopped: err = %v, want the kubelet's 'no healthy devices'", err)
	}
	if s := replay(t, r.node.stateDir); s.Daemon.Running {
		t.Errorf("ledger: daemon still running after SIGTERM")
	}
}

// TestLegacyDaemonSIGKILL kills the daemon: the kubelet sees the streams
// break; a new daemon on the same state dir replays its ledger, re-creates
// its sockets over the stale ones and registers again.
func TestLegacyDaemonSIGKILL(t *testing.T) {
	killDaemon(t, startRig(t, "legacy"))
}
