package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLegacySocketRemoved removes one pool's socket while the kubelet keeps
// running (an operator's rm, a clean-up script): the daemon re-creates the
// file and must stay registered, with the kubelet still holding one live
// connection to it, so that the pool keeps serving and a later daemon stop
// is seen.
//
// Against the kubelet 1.37 this fails: the daemon registers the same socket
// path again while the kubelet's connection to it is still open, the
// device manager refuses ("device plugin already connected") and, in doing
// so, forgets its first client, so it never notices that plugin go away.
// See issue 5 note.
func TestLegacySocketRemoved(t *testing.T) {
	r := startRig(t, "legacy")
	sock := filepath.Join(devicePluginsDir, "intel.com_intel_sriov_dpdk.sock")
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var s ledgerState
	for {
		s = replay(t, r.node.stateDir)
		reg := s.Pools[resDPDK].Registration
		if _, err := os.Stat(sock); err == nil && reg.Registered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the rm: socket re-created: %v; ledger registration of %s: %+v", fileThere(sock), resDPDK, reg)
		}
		time.Sleep(100 * time.Millisecond)
	}
	admitDPDK(t, r)
	r.d.signal(t, syscall.SIGTERM, 30*time.Second)
	r.k.waitCapacity(t, "allocatable zero after SIGTERM", r.d.stopped, 10*time.Second, func(_, a counts) bool {
		return equalCounts(a, noneAllocatable)
	})
}

func fileThere(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
