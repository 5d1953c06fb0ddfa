package daemon

import (
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
// bound to the pod, and its pool holds the device again (the next Allocate
// of it supersedes the recovered one); the pod's end releases it.
func TestLostAllocationIsRecoveredFromTheKubelet(t *testing.T) {
	const dev = "0000:3b:01.2"
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	ctx := waitCtx(t)
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

	// The pod goes, and with it the recovered allocation.
	n.kubelet.SetPods(nil)
	reconcileNow(ctx, t, d)
	waitLedger(ctx, t, d, "the recovered allocation released", func(s events.State) bool {
		_, live := s.Allocations[seq]
		return !live
	})
}
