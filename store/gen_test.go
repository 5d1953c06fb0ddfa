package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
)

// baseTime is when generated histories start.
var baseTime = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// history generates a plausible node history, one event at a time: a daemon
// start, a config with two pools, a few hundred devices joining them, the
// plugins registering, then mostly allocations, bindings and releases with
// now and then a health change. Events are one second apart. It predicts
// the sequence each event will get (the ledger must be empty and take its
// events in order), so that bindings and releases name real allocations.
type history struct {
	rnd     *rand.Rand
	n       uint64 // events produced so far
	pools   []string
	free    map[string][]string // pool -> free device addresses
	live    []liveAlloc
	devices []string
	setup   []events.Payload
}

type liveAlloc struct {
	seq   uint64
	pool  string
	ids   []string
	bound bool
	at    time.Time
}

func newHistory(seed uint64, devices int) *history {
	h := &history{
		rnd:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		pools: []string{"intel.com/sriov_net_a", "nvidia.com/gpu_vfio"},
		free:  map[string][]string{},
	}
	h.setup = append(h.setup, events.DaemonStarted{Version: "v0.1.0", Node: "node-7", PID: 4242, ConfigPath: "/etc/devledger/config.json", SysfsRoot: "/sys", KubeletDir: "/var/lib/kubelet", Registration: "watcher"})
	var specs []events.PoolSpec
	for _, p := range h.pools {
		specs = append(specs, events.PoolSpec{Resource: p, DeviceType: "netDevice", Definition: `{"resourceName":"` + p + `"}`})
	}
	h.setup = append(h.setup, events.ConfigApplied{Path: "/etc/devledger/config.json", SHA256: strings.Repeat("ab", 32), Pools: specs})
	members := map[string][]string{}
	for i := range devices {
		addr := fmt.Sprintf("0000:%02x:%02x.%d", 0x3b+i/256, (i/8)%32, i%8)
		pool := h.pools[i%len(h.pools)]
		h.devices = append(h.devices, addr)
		h.free[pool] = append(h.free[pool], addr)
		members[pool] = append(members[pool], addr)
		h.setup = append(h.setup, events.DeviceDiscovered{Device: events.DeviceFacts{
			Address: addr, Vendor: "8086", Device: "154c", Class: "0x020000", VendorName: "Intel Corporation",
			DeviceName: "Ethernet Virtual Function 700 Series", Driver: "vfio-pci", NUMANode: i % 2,
			IOMMUGroup: fmt.Sprint(100 + i), VFIODevice: true, PF: "0000:3a:00.0", VFIndex: i,
		}})
	}
	for _, p := range h.pools {
		slices.Sort(members[p])
		h.setup = append(h.setup,
			events.PoolMembershipChanged{Pool: p, Added: members[p], Reason: "config applied"},
			events.PluginServing{Pool: p, Socket: "/var/lib/kubelet/plugins_registry/" + strings.ReplaceAll(p, "/", "_") + ".sock", Mode: "watcher"},
			events.PluginRegistered{Pool: p, Socket: "/var/lib/kubelet/plugins_registry/" + strings.ReplaceAll(p, "/", "_") + ".sock", Mode: "watcher"})
	}
	return h
}

// next returns the next event; its Seq is left for the store to assign.
func (h *history) next() events.Envelope {
	h.n++
	at := baseTime.Add(time.Duration(h.n) * time.Second)
	var p events.Payload
	if int(h.n) <= len(h.setup) {
		p = h.setup[h.n-1]
	} else {
		p = h.step(at)
	}
	return events.New(p, at, "boot-0001")
}

func (h *history) step(at time.Time) events.Payload {
	r := h.rnd.IntN(100)
	switch {
	case r < 3:
		addr := h.devices[h.rnd.IntN(len(h.devices))]
		healthy := h.rnd.IntN(2) == 0
		reason := ""
		if !healthy {
			reason = "link down"
		}
		return events.DeviceHealthChanged{Address: addr, Healthy: healthy, Reason: reason}
	case r < 40 && len(h.live) < 200:
		pool := h.pools[h.rnd.IntN(len(h.pools))]
		free := h.free[pool]
		k := 1 + h.rnd.IntN(2)
		if len(free) < k {
			break
		}
		ids := slices.Clone(free[len(free)-k:])
		h.free[pool] = free[:len(free)-k]
		h.live = append(h.live, liveAlloc{seq: h.n, pool: pool, ids: ids, at: at})
		envName := "PCIDEVICE_" + strings.ToUpper(strings.NewReplacer("/", "_", ".", "_").Replace(pool))
		resp := events.ContainerAllocation{
			Envs:    map[string]string{envName: strings.Join(ids, ",")},
			Devices: []events.DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"}},
		}
		for _, id := range ids {
			g := "/dev/vfio/" + id[8:10]
			resp.Devices = append(resp.Devices, events.DeviceNode{ContainerPath: g, HostPath: g, Permissions: "rw"})
		}
		return events.DevicesAllocated{Pool: pool, DeviceIDs: ids, Response: resp}
	case r < 70:
		for i := range h.live {
			if a := &h.live[i]; !a.bound {
				a.bound = true
				pod := fmt.Sprintf("job-%d", a.seq)
				return events.AllocationBound{AllocationSeq: a.seq, Pool: a.pool, DeviceIDs: a.ids, Namespace: "batch",
					Pod: pod, UID: fmt.Sprintf("%08x-0000-4000-8000-%012x", a.seq, a.seq), Container: "main"}
			}
		}
	}
	if len(h.live) > 0 {
		i := h.rnd.IntN(len(h.live))
		a := h.live[i]
		h.live = slices.Delete(h.live, i, i+1)
		h.free[a.pool] = append(h.free[a.pool], a.ids...)
		return events.DevicesReleased{AllocationSeq: a.seq, Pool: a.pool, DeviceIDs: a.ids, HeldFor: at.Sub(a.at), Reason: "pod deleted"}
	}
	return events.KubeletRestarted{Socket: "/var/lib/kubelet/plugins_registry/kubelet.sock"}
}

// take returns the next n events.
func (h *history) take(n int) []events.Envelope {
	out := make([]events.Envelope, n)
	for i := range out {
		out[i] = h.next()
	}
	return out
}
