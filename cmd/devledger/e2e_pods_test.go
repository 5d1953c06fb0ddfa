package main

import (
	"slices"
	"sort"
	"strings"
	"testing"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
)

// liveFromLedger lists the live allocations of a replayed state as
// "pool ids -> ns/pod/container", sorted.
func liveFromLedger(s events.State) []string {
	var out []string
	for _, a := range s.Allocations {
		holder := "unbound"
		if a.Binding != nil {
			holder = a.Binding.Namespace + "/" + a.Binding.Pod + "/" + a.Binding.Container
		}
		out = append(out, a.Pool+" "+strings.Join(a.DeviceIDs, ",")+" -> "+holder)
	}
	sort.Strings(out)
	return out
}

// liveFromKubelet lists what the stand-in's PodResources reports, in the
// same form.
func liveFromKubelet(pods []*podresourcesapi.PodResources) []string {
	var out []string
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				out = append(out, d.ResourceName+" "+strings.Join(d.DeviceIds, ",")+" -> "+p.Namespace+"/"+p.Name+"/"+c.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestE2EPodsAcrossSIGKILL: the ledger's live allocations follow the pods
// the kubelet reports, also across a daemon SIGKILL during which a pod went
// away and another came.
func TestE2EPodsAcrossSIGKILL(t *testing.T) {
	n := sriovNode(t, "legacy", kubelettest.Options{})
	p, _ := n.startRegistered(t, sriovPools, "--reconcile-interval", "100ms")
	ctx := e2eCtx(t)
	for _, ids := range [][]string{{"0000:3b:01.2"}, {"0000:af:01.3"}} {
		if _, err := n.kubelet.Allocate(ctx, vfioPool, ids); err != nil {
			t.Fatal(err)
		}
	}
	pods := []*podresourcesapi.PodResources{
		kubelettest.PodHolding("telco", "dpdk-a", "app", vfioPool, "0000:3b:01.2"),
		kubelettest.PodHolding("telco", "dpdk-b", "app", vfioPool, "0000:af:01.3"),
	}
	n.kubelet.SetPods(pods)
	n.waitLedger(t, "both allocations bound", func(envs []events.Envelope) bool {
		bound := 0
		for _, e := range envs {
			if e.Type == events.TypeAllocationBound {
				bound++
			}
		}
		return bound == 2
	})

	// While the daemon is down, dpdk-a goes.
	p.kill(t)
	pods = []*podresourcesapi.PodResources{pods[1]}
	n.kubelet.SetPods(pods)
	p2, _ := n.startRegistered(t, sriovPools, "--reconcile-interval", "100ms")
	want := liveFromKubelet(pods)
	n.waitLedger(t, "the release of dpdk-a", func(envs []events.Envelope) bool {
		return slices.ContainsFunc(envs, func(e events.Envelope) bool {
			r, ok := e.Payload.(events.DevicesReleased)
			return ok && strings.Contains(r.Reason, "dpdk-a")
		})
	})
	p2.kill(t)
	if got := liveFromLedger(replayJSON(t, n)); !slices.Equal(got, want) {
		t.Errorf("after SIGKILL and restart the ledger's live allocations are\n  %s\nthe kubelet reports\n  %s",
			strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
