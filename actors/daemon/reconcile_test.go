package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/actors/reconciler"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// ledgerState folds the running daemon's ledger.
func ledgerState(t testing.TB, d *Daemon) events.State {
	t.Helper()
	s, err := d.rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitLedger polls the ledger until ok says yes.
func waitLedger(ctx context.Context, t *testing.T, d *Daemon, what string, ok func(events.State) bool) events.State {
	t.Helper()
	for {
		s := ledgerState(t, d)
		if ok(s) {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reconcileNow asks the reconciler for a round and waits until it is done.
func reconcileNow(ctx context.Context, t testing.TB, d *Daemon) {
	t.Helper()
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Ask(ctx, kids.Reconciler, &reconciler.Query{})
	if err != nil {
		t.Fatal(err)
	}
	before := res.(*reconciler.Status).Rounds
	d.system.Root.Send(kids.Reconciler, &reconciler.Reconcile{})
	for {
		res, err := d.Ask(ctx, kids.Reconciler, &reconciler.Query{})
		if err != nil {
			t.Fatal(err)
		}
		if res.(*reconciler.Status).Rounds > before {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("reconcile round: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestReconcilerFollowsPods(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.LeakGrace = 300 * time.Millisecond
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio = "intel.com/sriov_vfio"
	if _, err := n.kubelet.WaitRegistered(ctx, vfio); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfio, []string{"0000:3b:01.2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfio, []string{"0000:af:01.1"}); err != nil {
		t.Fatal(err)
	}
	n.kubelet.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("telco", "dpdk-0", "app", vfio, "0000:3b:01.2")})

	// The first allocation is bound to the pod; the second, which no pod
	// claims, becomes a leak suspect after the grace.
	s := waitLedger(ctx, t, d, "binding and leak suspect", func(s events.State) bool {
		bound, leak := false, false
		for _, a := range s.Allocations {
			bound = bound || a.Binding != nil && a.Binding.Pod == "dpdk-0"
			leak = leak || a.LeakSuspected && a.DeviceIDs[0] == "0000:af:01.1"
		}
		return bound && leak
	})
	if len(s.Allocations) != 2 {
		t.Fatalf("%d live allocations, want 2", len(s.Allocations))
	}

	// A steady state writes nothing.
	reconcileNow(ctx, t, d)
	before := d.rec.Log().LastSeq()
	for range 3 {
		reconcileNow(ctx, t, d)
	}
	if after := d.rec.Log().LastSeq(); after != before {
		t.Errorf("steady rounds grew the ledger from #%d to #%d", before, after)
	}

	// The pod goes: released, and the device is free for the pool again.
	n.kubelet.SetPods(nil)
	reconcileNow(ctx, t, d)
	s = waitLedger(ctx, t, d, "release", func(s events.State) bool { return len(s.Holders["0000:3b:01.2"]) == 0 })
	var released *events.DevicesReleased
	if err := d.rec.Log().Read(0, func(e events.Envelope) error {
		if r, ok := e.Payload.(events.DevicesReleased); ok {
			released = &r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if released == nil || released.HeldFor <= 0 || released.Reason != "telco/dpdk-0/app no longer holds it" {
		t.Errorf("release recorded as %+v", released)
	}
}

// A restarted reconciler has forgotten the allocations it was told of:
// the node tells it them again, so the container that holds a device
// allocated before the restart is bound to that allocation, not taken
// for one the ledger lacks (AllocationRecovered, a second allocation).
func TestARestartedReconcilerStillAttributesEarlierAllocations(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:01.2"
	if _, err := n.kubelet.WaitRegistered(ctx, vfio); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfio, []string{dev}); err != nil {
		t.Fatal(err)
	}
	held := ledgerState(t, d).Holders[dev]
	if len(held) != 1 {
		t.Fatalf("%s has holders %v after its Allocate, want one", dev, held)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.system.Root.Send(kids.Reconciler, &reconciler.Crash{Reason: "test"})
	n.kubelet.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("telco", "dpdk-0", "app", vfio, dev)})
	var s events.State
	waitFor(ctx, t, "a binding after the reconciler restarted", func() bool {
		reconcileNow(ctx, t, d)
		s = ledgerState(t, d)
		for _, a := range s.Allocations {
			if a.Binding != nil {
				return true
			}
		}
		return false
	})
	a := s.Allocations[held[0]]
	if a.Binding == nil || a.Binding.Pod != "dpdk-0" || len(s.Allocations) != 1 {
		t.Errorf("allocations %+v; want #%d alone, bound to telco/dpdk-0/app", s.Allocations, held[0])
	}
}

func TestReconcilerWithoutPodResources(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{NoPodResources: true})
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/sriov_vfio"); err != nil {
		t.Fatal(err)
	}
	s := waitLedger(ctx, t, d, "attribution unavailable", func(s events.State) bool {
		return !s.Attribution.Since.IsZero() && !s.Attribution.Available
	})
	// Serving goes on.
	if _, err := n.kubelet.Allocate(ctx, "intel.com/sriov_vfio", []string{"0000:3b:01.2"}); err != nil {
		t.Fatalf("Allocate without PodResources: %v", err)
	}
	// Failing rounds record the loss once.
	count := 0
	if err := d.rec.Log().Read(0, func(e events.Envelope) error {
		if e.Type == events.TypeAttributionChanged {
			count++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if count != 1 {
		t.Errorf("AttributionChanged recorded %d times, want once (%s)", count, s.Attribution.Reason)
	}
}

func TestReconcilerErrorsThenRecovers(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.kubelet.FailPodResources(errors.New("feature gate off"))
	d := n.start(t)
	ctx := waitCtx(t)
	waitLedger(ctx, t, d, "attribution unavailable", func(s events.State) bool {
		return !s.Attribution.Since.IsZero() && !s.Attribution.Available
	})
	n.kubelet.FailPodResources(nil)
	reconcileNow(ctx, t, d)
	s := waitLedger(ctx, t, d, "attribution back", func(s events.State) bool { return s.Attribution.Available })
	if s.Attribution.Reason == "" {
		t.Errorf("attribution back without a reason")
	}
}

// When the kubelet comes back, pods are attributed again at once, not at
// the end of a backoff that grew while PodResources failed: after about
// 9 s of failures the next retry is 6 s away, and attribution must come
// back before that.
func TestAttributionRetriedWhenTheKubeletIsBack(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.kubelet.FailPodResources(errors.New("kubelet going down"))
	d := n.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	down := waitLedger(ctx, t, d, "attribution unavailable", func(s events.State) bool {
		return !s.Attribution.Since.IsZero() && !s.Attribution.Available
	})
	// Failures at 0, 1, 3 and 7 s, the next List at 15 s. The kubelet
	// comes back 2 s past the fourth, so that a late fourth List does
	// not find it (and pass the test with no word of the kubelet's
	// return), and 6 s before the fifth.
	time.Sleep(time.Until(down.Attribution.Since.Add(9 * time.Second)))
	n.kubelet.FailPodResources(nil)
	if err := n.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	// The backoff's first wait starts once the unavailability is
	// recorded, each later one once a List failed: its fifth List comes
	// no sooner than 1+2+4+8 s after the record's time, however late a
	// loaded machine runs it, and its answer later still. Attribution
	// back by then came with the kubelet.
	back, cancelBack := context.WithDeadline(ctx, down.Attribution.Since.Add(15*time.Second))
	defer cancelBack()
	waitLedger(back, t, d, "attribution back with the kubelet", func(s events.State) bool { return s.Attribution.Available })
}

// A device the kubelet gives out again 100 ms after its pod ended is a
// release of the old allocation, in the new one's event, and no conflict;
// one given out while the kubelet still reports the old pod holding it is
// recorded as a conflict naming both containers.
func TestReuseReleasesAndALiveOldHolderConflicts(t *testing.T) {
	const dev = "0000:3b:01.2"
	for _, oldAlive := range []bool{false, true} {
		t.Run(fmt.Sprintf("old holder alive=%v", oldAlive), func(t *testing.T) {
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
			d := n.start(t)
			ctx := waitCtx(t)
			if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
				t.Fatal(err)
			}
			if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
				t.Fatal(err)
			}
			old := kubelettest.PodHolding("ml", "trainer-0", "main", vfioPool, dev)
			n.kubelet.SetPods([]*podresourcesapi.PodResources{old})
			reconcileNow(ctx, t, d)
			first := waitLedger(ctx, t, d, "the first allocation bound", func(s events.State) bool {
				return len(s.Holders[dev]) == 1 && s.Allocations[s.Holders[dev][0]].Binding != nil
			}).Holders[dev][0]

			pods := []*podresourcesapi.PodResources{}
			if oldAlive {
				pods = append(pods, old)
			}
			n.kubelet.SetPods(pods)
			time.Sleep(100 * time.Millisecond)
			if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
				t.Fatal(err)
			}
			n.kubelet.SetPods(append(pods, kubelettest.PodHolding("ml", "trainer-1", "main", vfioPool, dev)))
			reconcileNow(ctx, t, d)
			reconcileNow(ctx, t, d)

			var supersedes []uint64
			var conflicts []events.AllocationConflict
			if err := d.rec.Log().Read(first+1, func(e events.Envelope) error {
				switch p := e.Payload.(type) {
				case events.DevicesAllocated:
					supersedes = append(supersedes, p.Supersedes...)
				case events.AllocationConflict:
					conflicts = append(conflicts, p)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(supersedes, []uint64{first}) {
				t.Errorf("the new allocation supersedes %v, want #%d", supersedes, first)
			}
			switch {
			case !oldAlive && len(conflicts) > 0:
				t.Errorf("a reuse after the pod ended was recorded as a conflict: %+v", conflicts)
			case oldAlive && (len(conflicts) != 1 || !strings.Contains(conflicts[0].Reason, "ml/trainer-0/main") ||
				!strings.Contains(conflicts[0].Reason, "ml/trainer-1/main")):
				t.Errorf("conflicts %+v, want one naming both containers", conflicts)
			}
		})
	}
}

// A kubelet that dies ends its ListAndWatch streams and leaves its socket
// behind, refusing connections: the daemon records KubeletStopped then,
// and the next kubelet's KubeletRestarted ends the outage, so the fold
// knows how long the kubelet was down.
func TestKubeletOutageIsRecorded(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	// Listed: its ListAndWatch stream is open.
	if _, err := n.kubelet.WaitDevices(ctx, vfioPool, func(l []*pluginapi.Device) bool { return len(l) > 0 }); err != nil {
		t.Fatal(err)
	}
	if err := n.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	down := waitLedger(ctx, t, d, "the kubelet recorded down", func(s events.State) bool { return s.Kubelet.Down })
	if s := down.Pools[vfioPool]; s.Registration.Registered {
		t.Errorf("pool %s still registered while the kubelet is down", vfioPool)
	}
	time.Sleep(300 * time.Millisecond)
	if err := n.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	up := waitLedger(ctx, t, d, "the kubelet back", func(s events.State) bool { return !s.Kubelet.Down && s.Kubelet.Outages == 1 })
	k := up.Kubelet
	if k.LastOutage.From != down.Kubelet.DownSince || k.Downtime < 300*time.Millisecond || k.Downtime != k.LastOutage.To.Sub(k.LastOutage.From) {
		t.Errorf("outage %+v after the stop at %s", k, down.Kubelet.DownSince)
	}
	var stops int
	var restarted events.KubeletRestarted
	if err := d.rec.Log().Read(0, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.KubeletStopped:
			stops++
			if !strings.Contains(p.Reason, "ListAndWatch stream") || !strings.Contains(p.Reason, "kubelet.sock refuses connections") {
				t.Errorf("KubeletStopped reason %q", p.Reason)
			}
		case events.KubeletRestarted:
			restarted = p
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stops != 1 || !restarted.StoppedAt.Equal(down.Kubelet.DownSince) {
		t.Errorf("%d KubeletStopped, KubeletRestarted %+v; want one stop, and the restart naming it", stops, restarted)
	}
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
}

// A restarted kubelet keeps its pods' devices (its checkpoint; Allocate is
// not called again) but lists no pod through PodResources until its sync
// loop has them back from the API server, after its registration socket
// is up. A pod that held its device throughout is neither released nor
// recovered, even if the node coordinator (and so the reconciler) starts
// again meanwhile: the allocation bound to it, with its answer, stays.
func TestAKubeletRestartReleasesNoDeviceItsPodsStillHold(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("node crash=%v", crash), func(t *testing.T) {
			const dev = "0000:3b:01.2"
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
			d := n.start(t)
			ctx := waitCtx(t)
			if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
				t.Fatal(err)
			}
			if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
				t.Fatal(err)
			}
			running := []*podresourcesapi.PodResources{kubelettest.PodHolding("telco", "dpdk-0", "app", vfioPool, dev)}
			n.kubelet.SetPods(running)
			reconcileNow(ctx, t, d)
			bound := waitLedger(ctx, t, d, "bound", func(s events.State) bool {
				return len(s.Holders[dev]) == 1 && s.Allocations[s.Holders[dev][0]].Binding != nil
			})
			first := bound.Holders[dev][0]

			n.kubelet.SetPods(nil) // its pods not synced yet
			if err := n.kubelet.Restart(); err != nil {
				t.Fatal(err)
			}
			if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
				t.Fatal(err)
			}
			reconcileNow(ctx, t, d)
			if crash {
				// A new reconciler counts its rounds from none.
				rounds := func() int {
					kids, err := d.Children(ctx)
					if err != nil {
						return -1
					}
					res, err := d.Ask(ctx, kids.Reconciler, &reconciler.Query{})
					if err != nil {
						return -1
					}
					return res.(*reconciler.Status).Rounds
				}
				was := rounds()
				d.Send(&node.Crash{Reason: "test"})
				for r := rounds(); r < 0 || r >= was; r = rounds() {
					select {
					case <-ctx.Done():
						t.Fatal("no new reconciler after the node crashed")
					case <-time.After(10 * time.Millisecond):
					}
				}
				reconcileNow(ctx, t, d)
			}
			n.kubelet.SetPods(running)
			reconcileNow(ctx, t, d)
			reconcileNow(ctx, t, d)

			if err := d.rec.Log().Read(first+1, func(e events.Envelope) error {
				switch e.Payload.(type) {
				case events.DevicesReleased, events.AllocationRecovered:
					t.Errorf("#%d: %+v, while telco/dpdk-0 held %s throughout", e.Seq, e.Payload, dev)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if s := ledgerState(t, d); !slices.Equal(s.Holders[dev], []uint64{first}) {
				t.Errorf("%s is held by %v, want #%d", dev, s.Holders[dev], first)
			}
		})
	}
}
