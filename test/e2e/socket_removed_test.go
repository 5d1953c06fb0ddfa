package e2e

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestLegacySocketRemoved removes one pool's socket while the kubelet keeps
// running (an operator's rm, a clean-up script): the daemon serves the pool
// on a new socket and registers that one, and the kubelet, which keeps its
// connection to the old one, serves pods through the new one and still sees
// the daemon stop.
//
// Registering the same path again would not do: the kubelet 1.37 refuses a
// Register of a path it is connected to ("device plugin already
// connected") and, in doing so, forgets its first client, so it never
// notices that plugin go away (issue 14).
func TestLegacySocketRemoved(t *testing.T) {
	r := startRig(t, "legacy")
	sock := poolSocket(t, devicePluginsDir, resDPDK)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var s ledgerState
	for {
		s = replay(t, r.node.stateDir)
		reg := s.Pools[resDPDK].Registration
		if reg.Registered && reg.Socket != sock && fileThere(reg.Socket) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the rm: ledger registration of %s: %+v (old socket %s)", resDPDK, reg, sock)
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
