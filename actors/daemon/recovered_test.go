package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// A lost tail is found: a backup put back in place lacks an allocation a
// pod still holds. After the start, the kubelet's PodResources report the
// pod; the daemon records the allocation as recovered from the kubelet,
// bound to the pod, and its pool holds the device again; the pod's end
// releases it.
func TestLostAllocationIsRecoveredFromTheKubelet(t *testing.T) {
	ctx := waitCtx(t)
	n, d, seq := recoverLostAllocation(ctx, t)
	// The pod goes, and with it the recovered allocation.
	n.kubelet.SetPods(nil)
	reconcileNow(ctx, t, d)
	waitLedger(ctx, t, d, "the recovered allocation released", func(s events.State) bool {
		_, live := s.Allocations[seq]
		return !live
	})
}

// recoveredDev is the device recoverLostAllocation recovers.
const recoveredDev = "0000:3b:01.2"

// recoverLostAllocation puts back a backup that lacks the allocation of
// recoveredDev a pod still holds, starts the daemon on it and waits for
// the allocation recovered from the kubelet, which its pool holds; it
// returns the allocation's sequence.
func recoverLostAllocation(ctx context.Context, t *testing.T) (*testNode, *Daemon, uint64) {
	t.Helper()
	const dev = recoveredDev
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	ledger := filepath.Join(n.opts.StateDir, LedgerFileName)
	d := n.start(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}

	// The allocation the backup will not have. The kubelet may not yet
	// have noticed the last run's stream end: wait for this run's
	// registration, not any.
	restarted := time.Now()
	d = n.start(t)
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{vfioPool}, restarted); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
		t.Fatal(err)
	}
	n.kubelet.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("ml", "trainer-0", "main", vfioPool, dev)})
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ledger, backup, 0o600); err != nil {
		t.Fatal(err)
	}

	restarted = time.Now()
	d = n.start(t)
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{vfioPool}, restarted); err != nil {
		t.Fatal(err)
	}
	// Two rounds: one that finds the device in a container and in no
	// live allocation, one that finds it so again.
	reconcileNow(ctx, t, d)
	reconcileNow(ctx, t, d)
	var seq uint64
	waitLedger(ctx, t, d, "the allocation recovered", func(s events.State) bool {
		for k, a := range s.Allocations {
			if a.Recovered && a.Pool == vfioPool && slices.Equal(a.DeviceIDs, []string{dev}) &&
				a.Binding != nil && a.Binding.Pod == "trainer-0" && a.Binding.Container == "main" {
				seq = k
				return true
			}
		}
		return false
	})
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Ask(ctx, kids.Pools[vfioPool], &pool.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if held := res.(*pool.Status).Held[dev]; !slices.Equal(held, []uint64{seq}) {
		t.Errorf("the pool holds %s by %v, want the recovered #%d", dev, held, seq)
	}

	return n, d, seq
}

// The pool's next Allocate of a recovered allocation's device supersedes
// it, as any allocation of the pool's that held the device: the kubelet
// gives out only a device it holds free.
func TestAnAllocateSupersedesARecoveredAllocation(t *testing.T) {
	ctx := waitCtx(t)
	n, d, seq := recoverLostAllocation(ctx, t)
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{recoveredDev}); err != nil {
		t.Fatal(err)
	}
	s := waitLedger(ctx, t, d, "the recovered allocation superseded", func(s events.State) bool {
		_, live := s.Allocations[seq]
		return !live
	})
	held := s.Holders[recoveredDev]
	if len(held) != 1 || held[0] <= seq {
		t.Fatalf("%s held by %v, want the new allocation alone", recoveredDev, held)
	}
	var a events.DevicesAllocated
	if err := d.rec.Log().Read(held[0], func(e events.Envelope) error {
		if e.Seq == held[0] {
			a = e.Payload.(events.DevicesAllocated)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Supersedes, []uint64{seq}) {
		t.Errorf("#%d supersedes %v, want the recovered #%d", held[0], a.Supersedes, seq)
	}
}
