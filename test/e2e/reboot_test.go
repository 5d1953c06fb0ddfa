package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The kernel boot ids of the fake node's two boots.
const (
	bootBefore = "5f3d6c1a-0b7e-4c2d-9a41-000000000001"
	bootAfter  = "5f3d6c1a-0b7e-4c2d-9a41-000000000002"
)

// dpdkEnv is the variable that names a container's DPDK VFs.
const dpdkEnv = "PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK"

// A node reboot, the pod coming back once the daemon serves again: the
// kubelet starts again on its checkpoint with no container running and its
// pod sources not yet synced, the daemon (killed by the reboot) starts on
// its ledger under a new kernel boot id and registers, and only then is the
// pod admitted again. The kubelet gives it its checkpointed devices without
// an Allocate, PodResources lists it holding them, and the ledger keeps
// the allocation live and bound to it.
func TestLegacyNodeRebootPodBackAfterTheDaemon(t *testing.T) {
	r, pod, before := startRebootRig(t)
	seq := waitBound(t, r, pod, 10*time.Second)
	reboot(t, r)

	r.d = startDaemon(t, r.node, "legacy")
	r.k.waitAllocatable(t, r.d.started, sriovPools)
	after, err := r.k.admit(t, pod)
	if err != nil {
		t.Fatalf("kubelet: admit the pod again after the reboot: %v", err)
	}
	r.k.sourcesReady()
	// Two whole reconciliation rounds that saw the pod back.
	r.k.waitLists(t, 3, 10*time.Second)
	checkPodKept(t, r, pod, seq, before, after, "the reboot")
	checkRebootCounted(t, replay(t, r.node.stateDir))
}

// A node reboot in the order a DaemonSet gets: the kubelet admits the pods
// it finds bound to the node before it has started any of them, the
// daemon's own pod included, so no plugin has registered yet. The kubelet
// has the resource from its checkpoint but no healthy device, and rejects
// the pod (UnexpectedAdmissionError): no Allocate, and once its sources are
// ready it drops the pod's devices from its checkpoint. PodResources no
// longer lists it; its controller's replacement gets an Allocate of its
// own, and the ledger ends the old allocation.
func TestLegacyNodeRebootPodBeforeTheDaemon(t *testing.T) {
	r, pod, before := startRebootRig(t)
	seq := waitBound(t, r, pod, 10*time.Second)
	reboot(t, r)

	_, err := r.k.admit(t, pod)
	const want = "no healthy devices present; cannot allocate unhealthy devices " + resDPDK
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("kubelet: admit the pod before any plugin registered: error %v, want %q", err, want)
	}
	// admit took the rejected pod off the active pods (the kubelet marks it
	// Failed).
	r.k.sourcesReady()
	r.d = startDaemon(t, r.node, "legacy")
	r.k.waitAllocatable(t, r.d.started, sriovPools)
	r.k.waitLists(t, 1, 10*time.Second)
	if got := r.k.allocated(pod); len(got) != 0 {
		t.Errorf("kubelet: the rejected pod still holds %v", got)
	}

	repl := r.pods.newPod(resDPDK, 2)
	b, err := r.k.admit(t, repl)
	if err != nil {
		t.Fatalf("kubelet: admit the replacement pod: %v", err)
	}
	t.Logf("the pod held %v; its replacement got %v", before.devices[resDPDK], b.devices[resDPDK])
	newSeq := waitBound(t, r, repl, 10*time.Second)
	// The old allocation ends: superseded by the replacement's, or, once
	// the daemon's settling time after a kubelet start (1m) is over,
	// released because no container holds it.
	deadline := time.Now().Add(90 * time.Second)
	for {
		s := replay(t, r.node.stateDir)
		if _, live := s.Allocations[uintKey(seq)]; !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger: allocation #%d of the rejected pod still live after 90s", seq)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := replay(t, r.node.stateDir)
	checkRebootCounted(t, s)
	h := allocationHistory(t, r.node.stateDir)
	if n := h.count("DevicesAllocated"); n != 2 {
		t.Errorf("ledger: %d DevicesAllocated, want 2 (the pod's before the reboot, its replacement's after)", n)
	}
	for _, e := range h {
		switch {
		case e.Type == "AllocationRecovered":
			t.Errorf("ledger #%d: AllocationRecovered %+v, want none", e.Seq, e.Payload)
		case e.Type == "DevicesReleased" && e.Payload.AllocationSeq == seq:
			t.Logf("ledger #%d: allocation #%d released: %s", e.Seq, seq, e.Payload.Reason)
		case e.Type == "DevicesReleased":
			t.Errorf("ledger #%d: DevicesReleased %+v, want only #%d's", e.Seq, e.Payload, seq)
		}
	}
	if a, live := s.Allocations[uintKey(newSeq)]; !live || a.Binding == nil || a.Binding.Pod != repl.Name {
		t.Errorf("ledger: the replacement's allocation #%d = %+v (live %v), want live and bound to %s", newSeq, a, live, repl.Name)
	}
}

// A kubelet restart, the pod's container and the daemon running on (the
// device manager's scenario 2; a node reboot is its scenario 3). The
// kubelet is killed, and the new one starts on its checkpoint with the
// runtime reporting the container running and no pod known until its
// sources deliver them: its PodResources lists none at first, which the
// daemon must take for a kubelet not synced yet. The pod is then admitted
// again as HandlePodAdditions admits it, before any plugin registered: the
// device manager gives it its checkpointed devices with no Allocate and
// no health check. The ledger keeps the allocation live and bound to the
// pod throughout, and PodResources lists the pod holding its devices.
func TestLegacyKubeletRestartPodRunning(t *testing.T) {
	r, pod, before := startRebootRig(t)
	seq := waitBound(t, r, pod, 10*time.Second)
	r.k.kill(t)
	waitLedger(t, r, 10*time.Second, "the kubelet down and PodResources unavailable", func(s ledgerState) bool {
		return s.Kubelet.Down && !s.Attribution.Available
	})

	r.pods.remove(pod)
	r.kopt.booting = true
	r.kopt.running = []*v1.Pod{pod}
	r.k = startKubelet(t, r.pods, r.kopt)
	// The daemon reads the new kubelet's PodResources before the pod is
	// back in it.
	r.k.waitLists(t, 1, 10*time.Second)
	after, err := r.k.admit(t, pod)
	if err != nil {
		t.Fatalf("kubelet: admit the running pod again after the kubelet restart: %v", err)
	}
	r.k.waitAllocatable(t, r.k.started, sriovPools)
	r.k.sourcesReady()
	// Two whole reconciliation rounds that saw the pod back.
	r.k.waitLists(t, 3, 10*time.Second)
	checkPodKept(t, r, pod, seq, before, after, "the kubelet restart")
	if s := replay(t, r.node.stateDir); s.Kubelet.Down || s.Kubelet.Restarts != 1 {
		t.Errorf("ledger: kubelet %+v, want up after 1 restart", s.Kubelet)
	}
	admitFreeVF(t, r, "the kubelet restart")
}

// checkPodKept checks that pod, admitted again (after) across what, kept
// what it held (before): the kubelet gave it its checkpointed devices and
// Allocate response, PodResources lists it holding them, and the ledger
// kept allocation seq live and bound to it, with no Allocate for it
// again, no new binding, and no release or recovery.
func checkPodKept(t testing.TB, r *rig, pod *v1.Pod, seq uint64, before, after admission, what string) {
	t.Helper()
	if !slices.Equal(after.devices[resDPDK], before.devices[resDPDK]) {
		t.Errorf("after %s the kubelet gave the pod %v, want its checkpointed %v", what, after.devices[resDPDK], before.devices[resDPDK])
	}
	was, _ := env(before, dpdkEnv)
	if now, _ := env(after, dpdkEnv); now != was {
		t.Errorf("after %s %s = %q, want %q (the checkpointed Allocate response)", what, dpdkEnv, now, was)
	}
	if got := listPodResources(t, pod)[pod.Spec.Containers[0].Name][resDPDK]; !slices.Equal(got, before.devices[resDPDK]) {
		t.Errorf("after %s PodResources lists the pod holding %v of %s, want %v", what, got, resDPDK, before.devices[resDPDK])
	}

	s := replay(t, r.node.stateDir)
	a, live := s.Allocations[uintKey(seq)]
	switch {
	case !live:
		t.Errorf("ledger: allocation #%d is not live after %s; allocations: %+v", seq, what, s.Allocations)
	case a.Binding == nil || a.Binding.Pod != pod.Name:
		t.Errorf("ledger: allocation #%d bound to %+v after %s, want pod %s", seq, a.Binding, what, pod.Name)
	}
	h := allocationHistory(t, r.node.stateDir)
	if n := h.count("DevicesAllocated"); n != 1 {
		t.Errorf("ledger: %d DevicesAllocated, want 1: the kubelet must not call Allocate for a checkpointed container", n)
	}
	if n := h.count("AllocationBound"); n != 1 {
		t.Errorf("ledger: %d AllocationBound, want 1: the binding stands across %s", n, what)
	}
	for _, e := range h {
		if e.Type == "DevicesReleased" || e.Type == "AllocationRecovered" {
			t.Errorf("ledger #%d: %s %+v, want none across %s", e.Seq, e.Type, e.Payload, what)
		}
	}
}

// startRebootRig starts the first boot of a node (kernel boot id
// bootBefore): a kubelet that serves PodResources, the daemon in legacy
// mode reconciling every 200ms, and a pod holding two DPDK VFs.
func startRebootRig(t testing.TB) (*rig, *v1.Pod, admission) {
	t.Helper()
	requireSuite(t)
	resetKubeletRoot(t)
	logKubeletTo(t)
	r := &rig{node: newNode(t, "sriov", "sriov.yaml"), pods: &podList{}, mode: "legacy"}
	r.node.args = []string{"--reconcile-interval", "200ms"}
	setBootID(t, r.node, bootBefore)
	r.kopt = kubeletOptions{podResources: true}
	r.k = startKubelet(t, r.pods, r.kopt)
	r.d = startDaemon(t, r.node, r.mode)
	r.registered = r.k.waitAllocatable(t, r.d.started, sriovPools)
	pod, a := admitDPDK(t, r)
	return r, pod, a
}

// reboot reboots the node: the daemon and the kubelet die (SIGKILL; the
// kubelet leaves its kubelet.sock), the kernel gets a new boot id, and
// what is on disk stays: the kubelet's root with its device-manager
// checkpoint and the daemon's state dir. A new kubelet starts on the same
// checkpoint with its pod sources not synced and no container running, the
// pod still bound to the node (the API server has it).
func reboot(t testing.TB, r *rig) {
	t.Helper()
	r.d.signal(t, syscall.SIGKILL, 30*time.Second)
	r.k.kill(t)
	setBootID(t, r.node, bootAfter)
	r.kopt.booting = true
	r.k = startKubelet(t, r.pods, r.kopt)
}

// setBootID writes the kernel boot id the daemon reads under --proc-root.
func setBootID(t testing.TB, n *node, id string) {
	t.Helper()
	path := filepath.Join(n.proc, "sys", "kernel", "random", "boot_id")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkRebootCounted checks that the ledger counts the one reboot.
func checkRebootCounted(t testing.TB, s ledgerState) {
	t.Helper()
	if s.Daemon.Reboots != 1 || s.Daemon.KernelBootID != bootAfter {
		t.Errorf("ledger: daemon reboots %d under kernel boot %q, want 1 under %q", s.Daemon.Reboots, s.Daemon.KernelBootID, bootAfter)
	}
}

// waitLists waits until the kubelet's PodResources service has answered n
// more List calls.
func (k *kubelet) waitLists(t testing.TB, n int64, within time.Duration) {
	t.Helper()
	want := k.podResources.lists.Load() + n
	deadline := time.Now().Add(within)
	for k.podResources.lists.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("kubelet: PodResources answered %d List calls in %v, want %d", k.podResources.lists.Load(), within, want)
		}
		time.Sleep(pollEvery)
	}
}

// waitBound waits until the ledger has a live allocation of resDPDK bound
// to pod, and returns its sequence number.
func waitBound(t testing.TB, r *rig, pod *v1.Pod, within time.Duration) uint64 {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := replay(t, r.node.stateDir)
		for _, a := range s.Allocations {
			if a.Pool == resDPDK && a.Binding != nil && a.Binding.Pod == pod.Name {
				return a.Seq
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger: no allocation bound to %s after %v: %+v", pod.Name, within, s.Allocations)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// uintKey is an allocation's key in replay's JSON.
func uintKey(seq uint64) string { return strconv.FormatUint(seq, 10) }

// allocationEvent is an allocation's event as dump --format jsonl prints it.
type allocationEvent struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Payload struct {
		AllocationSeq uint64   `json:"allocation_seq"`
		Pool          string   `json:"pool"`
		DeviceIDs     []string `json:"device_ids"`
		Pod           string   `json:"pod"`
		Reason        string   `json:"reason"`
	} `json:"payload"`
}

type allocationEvents []allocationEvent

func (h allocationEvents) count(typ string) int {
	n := 0
	for _, e := range h {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// allocationHistory is every allocation event of the ledger, in order.
func allocationHistory(t testing.TB, stateDir string) allocationEvents {
	t.Helper()
	out := devledger(t, "dump", "--state-dir", stateDir, "--format", "jsonl")
	var h allocationEvents
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e allocationEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("dump --format jsonl: %v: %s", err, line)
		}
		switch e.Type {
		case "DevicesAllocated", "AllocationBound", "DevicesReleased", "AllocationRecovered", "AllocationLeakSuspected", "AllocationConflict":
			h = append(h, e)
		}
	}
	return h
}
