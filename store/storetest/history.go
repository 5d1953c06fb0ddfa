package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/devledger/devledger/events"
)

// PodHistory makes the events of pods using a node's pools, as a daemon
// would record them: allocations of one or two devices (with the answer
// the daemon gave), bindings to pods, releases, and now and then a device
// going unhealthy and, soon after, healthy again. At most 200 allocations
// are live at once. It predicts the sequence each event will get, so that
// bindings and releases name real allocations: the ledger must take the
// events in order, nobody else appending between.
type PodHistory struct {
	rnd       *rand.Rand
	pools     []string
	free      map[string][]string
	answer    func(pool string, ids []string) events.ContainerAllocation
	live      []podAlloc
	unhealthy []string
	bootID    string
	at        time.Time
}

type podAlloc struct {
	seq   uint64
	pool  string
	ids   []string
	bound bool
	at    time.Time
}

// NewPodHistory returns a history over pools (resource name to member
// addresses), seeded with seed. answer gives the Allocate answer recorded
// for ids of a pool. Events are stamped with bootID and with the time they
// are made (a microsecond apart at least, after since): the history is in
// the past when a daemon opens the ledger.
func NewPodHistory(seed uint64, pools map[string][]string, answer func(pool string, ids []string) events.ContainerAllocation, bootID string, since time.Time) *PodHistory {
	h := &PodHistory{
		rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), free: map[string][]string{},
		answer: answer, bootID: bootID, at: since,
	}
	for name, members := range pools {
		h.pools = append(h.pools, name)
		h.free[name] = slices.Clone(members)
	}
	slices.Sort(h.pools)
	return h
}

// Take returns the next n events; the first will get sequence seq.
func (h *PodHistory) Take(n int, seq uint64) []events.Envelope {
	out := make([]events.Envelope, n)
	for i := range out {
		h.at = h.at.Add(time.Microsecond)
		if now := time.Now(); now.After(h.at) {
			h.at = now
		}
		out[i] = events.New(h.step(seq+uint64(i)), h.at, h.bootID)
	}
	return out
}

func (h *PodHistory) step(seq uint64) events.Payload {
	r := h.rnd.IntN(100)
	switch {
	case r < 1 && len(h.unhealthy) < 4:
		free := h.free[h.pools[h.rnd.IntN(len(h.pools))]]
		if len(free) == 0 {
			break
		}
		if addr := free[h.rnd.IntN(len(free))]; !slices.Contains(h.unhealthy, addr) {
			h.unhealthy = append(h.unhealthy, addr)
			return events.DeviceHealthChanged{Address: addr, Healthy: false, Reason: "driver unbound"}
		}
	case r < 40 && len(h.live) < 200:
		pool := h.pools[h.rnd.IntN(len(h.pools))]
		free := h.free[pool]
		k := 1 + h.rnd.IntN(2)
		if len(free) < k {
			break
		}
		ids := slices.Clone(free[len(free)-k:])
		h.free[pool] = free[:len(free)-k]
		h.live = append(h.live, podAlloc{seq: seq, pool: pool, ids: ids, at: h.at})
		return events.DevicesAllocated{Pool: pool, DeviceIDs: ids, Response: h.answer(pool, ids)}
	case r < 70:
		for i := range h.live {
			if a := &h.live[i]; !a.bound {
				a.bound = true
				return events.AllocationBound{AllocationSeq: a.seq, Pool: a.pool, DeviceIDs: a.ids, Namespace: "batch",
					Pod: fmt.Sprintf("job-%d", a.seq), UID: fmt.Sprintf("%08x-0000-4000-8000-%012x", a.seq, a.seq), Container: "main"}
			}
		}
	}
	if len(h.unhealthy) > 0 {
		addr := h.unhealthy[0]
		h.unhealthy = h.unhealthy[1:]
		return events.DeviceHealthChanged{Address: addr, Healthy: true, Reason: "probes pass"}
	}
	if len(h.live) > 0 {
		i := h.rnd.IntN(len(h.live))
		a := h.live[i]
		h.live = slices.Delete(h.live, i, i+1)
		h.free[a.pool] = append(h.free[a.pool], a.ids...)
		return events.DevicesReleased{AllocationSeq: a.seq, Pool: a.pool, DeviceIDs: a.ids, HeldFor: h.at.Sub(a.at), Reason: "pod deleted"}
	}
	return events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}
}
