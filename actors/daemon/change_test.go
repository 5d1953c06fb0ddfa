package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/health"
	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// healthConfig pools the vfio VFs (by driver) and the iavf VFs (with link
// health), with a short hold-down and probe interval so recovery is quick.
const healthConfig = `{
  "resourceList": [
    {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
     "health": {"holdDown": "400ms", "probeInterval": "100ms"}},
    {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]},
     "health": {"link": true, "holdDown": "400ms", "probeInterval": "100ms"}}
  ]
}`

// health returns the health the kubelet sees for one device of a resource,
// "" when the device is not listed.
func healthOf(k *kubelettest.Kubelet, resource, id string) string {
	for _, d := range k.Devices(resource) {
		if d.ID == id {
			return d.Health
		}
	}
	return ""
}

func waitHealth(ctx context.Context, t *testing.T, k *kubelettest.Kubelet, resource, id, want string) time.Time {
	t.Helper()
	_, err := k.WaitDevices(ctx, resource, func(ds []*pluginapi.Device) bool {
		for _, d := range ds {
			if d.ID == id {
				return d.Health == want
			}
		}
		return want == ""
	})
	if err != nil {
		t.Fatalf("%s %s: want health %q, have %q: %v", resource, id, want, healthOf(k, resource, id), err)
	}
	return time.Now()
}

// flapLink takes the link ifname down and up again, telling the daemon of
// each change as the kernel's link notifications do, and waits each time
// for the kubelet to see ids of resource unhealthy, then healthy.
func flapLink(ctx context.Context, t *testing.T, n *testNode, d *Daemon, ifname, resource string, ids []string) {
	t.Helper()
	for _, up := range []bool{false, true} {
		set, want := n.roots.SetLinkDown, pluginapi.Unhealthy
		if up {
			set, want = n.roots.SetLinkUp, pluginapi.Healthy
		}
		if err := set(ifname); err != nil {
			t.Fatal(err)
		}
		d.Send(&node.ProbeHealth{Interfaces: []string{ifname}})
		for _, id := range ids {
			waitHealth(ctx, t, n.kubelet, resource, id, want)
		}
	}
}

func TestHealthUnbindRebind(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, healthConfig, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour // changes are seen by probes and explicit rescans
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio, vf = "intel.com/sriov_vfio", "0000:3b:01.2"
	waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Healthy)

	if err := n.roots.Unbind(vf); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Unhealthy)
	// The unbound device stays in its pool.
	if healthOf(n.kubelet, vfio, vf) == "" {
		t.Fatalf("%s left its pool when unbound", vf)
	}

	if err := n.roots.Bind(vf, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	rebound := time.Now()
	d.Send(&node.Rescan{Reason: "test"})
	healthy := waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Healthy)
	if held := healthy.Sub(rebound); held < 400*time.Millisecond {
		t.Errorf("healthy again %s after the rebind, before the 400ms hold-down", held)
	}
	s := ledgerState(t, d)
	if !s.Devices[vf].Healthy {
		t.Errorf("the ledger says %s is %q", vf, s.Devices[vf].HealthReason)
	}
	var reasons []string
	if err := d.rec.Log().Read(0, func(e events.Envelope) error {
		if h, ok := e.Payload.(events.DeviceHealthChanged); ok && h.Address == vf {
			reasons = append(reasons, h.Reason)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 2 || !strings.Contains(reasons[0], "driver unbound (was vfio-pci)") {
		t.Errorf("health transitions recorded: %q", reasons)
	}
}

// A device unbound in its pool stays unhealthy through a restart of the
// daemon or of the node coordinator: the new one never saw the driver it
// joined with, and keeps it in its pool for it was there before, not for
// a driver it has now.
func TestAnUnboundDeviceStaysUnhealthyThroughARestart(t *testing.T) {
	for _, restart := range []string{"daemon", "node"} {
		t.Run(restart, func(t *testing.T) {
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, healthConfig, kubelettest.Options{})
			n.opts.ScanInterval = time.Hour
			d := n.start(t)
			ctx := waitCtx(t)
			const vfio, vf = "intel.com/sriov_vfio", "0000:3b:01.2"
			waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Healthy)
			if err := n.roots.Unbind(vf); err != nil {
				t.Fatal(err)
			}
			d.Send(&node.Rescan{Reason: "test"})
			waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Unhealthy)
			from := d.rec.Log().LastSeq() + 1
			if restart == "daemon" {
				if err := d.Stop(ctx, "test"); err != nil {
					t.Fatal(err)
				}
				d = n.start(t)
			} else {
				d.Send(&node.Crash{Reason: "test"})
			}
			// Past the 400ms hold-down a passing probe would have ended.
			time.Sleep(1500 * time.Millisecond)
			if h := healthOf(n.kubelet, vfio, vf); h != pluginapi.Unhealthy {
				t.Errorf("after a %s restart the kubelet sees the unbound %s %q", restart, vf, h)
			}
			if err := d.rec.Log().Read(from, func(e events.Envelope) error {
				if h, ok := e.Payload.(events.DeviceHealthChanged); ok && h.Address == vf && h.Healthy {
					t.Errorf("#%d: the unbound %s recorded healthy (%q)", e.Seq, vf, h.Reason)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// Bound again, it comes back.
			if err := n.roots.Bind(vf, "vfio-pci"); err != nil {
				t.Fatal(err)
			}
			d.Send(&node.Rescan{Reason: "test"})
			waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Healthy)
		})
	}
}

func TestHealthLinkDownOnPF(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, healthConfig, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	n.start(t)
	ctx := waitCtx(t)
	const net = "intel.com/sriov_net"
	// 0000:3b:01.0 and .1 are iavf VFs of ens785f0.
	waitHealth(ctx, t, n.kubelet, net, "0000:3b:01.0", pluginapi.Healthy)
	// The VF's own interface stays as it is: down on the host is how a
	// free VF is, and its PF's port is what carries it.
	if err := n.roots.SetLinkDown("ens785f0"); err != nil {
		t.Fatal(err)
	}
	waitHealth(ctx, t, n.kubelet, net, "0000:3b:01.0", pluginapi.Unhealthy)
	if err := n.roots.SetLinkUp("ens785f0"); err != nil {
		t.Fatal(err)
	}
	waitHealth(ctx, t, n.kubelet, net, "0000:3b:01.0", pluginapi.Healthy)
	// 0000:af:01.0's own interface has been down throughout, as a free
	// VF's is on the host; its PF, ens801f0, is up.
	if h := healthOf(n.kubelet, net, "0000:af:01.0"); h != pluginapi.Healthy {
		t.Errorf("a VF down on the host, its PF up, is %q", h)
	}
	// The vfio pool does not ask for link health.
	if h := healthOf(n.kubelet, "intel.com/sriov_vfio", "0000:3b:01.2"); h != pluginapi.Healthy {
		t.Errorf("vfio VF is %q", h)
	}
}

// A PF (any function but a VF) handed to a pod by moving its netdev into
// the pod's namespace (the host-device CNI) is as healthy as before: its
// interface left the host's class/net because the pod holds it. The probe
// the kernel's notification asks for, made before the rescan, must not
// find it unhealthy ("no interface"), which would list it so for a whole
// hold-down.
func TestAHeldPFWhoseInterfaceWentToItsPodStaysHealthy(t *testing.T) {
	const res, pf, ifname = "intel.com/e810_port", "0000:3b:00.1", "ens785f1"
	cfg := `{"resourceList": [{"resourceName": "e810_port", "selectors": {"pciAddresses": ["` + pf + `"]},
	  "health": {"link": true, "holdDown": "1h", "probeInterval": "100ms"}}]}`
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	if err := n.roots.SetLinkUp(ifname); err != nil {
		t.Fatal(err)
	}
	d := n.start(t)
	ctx := waitCtx(t)
	waitHealth(ctx, t, n.kubelet, res, pf, pluginapi.Healthy)
	if _, err := n.kubelet.Allocate(ctx, res, []string{pf}); err != nil {
		t.Fatal(err)
	}
	// The CNI moves the netdev into the pod: gone from the host's sysfs.
	for _, p := range []string{filepath.Join(n.roots.Sysfs, "class", "net", ifname), filepath.Join(n.roots.DevicePath(pf), "net", ifname)} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	// What the kernel's uevent for it asks (planKernelBatch).
	d.Send(&node.Rescan{Reason: "kernel: 1 device events"})
	d.Send(&node.ProbeHealth{Addresses: []string{pf}, Interfaces: []string{ifname}})
	deadline := time.Now().Add(time.Second) // ten probes
	for time.Now().Before(deadline) {
		if h := healthOf(n.kubelet, res, pf); h != pluginapi.Healthy {
			t.Fatalf("the PF its pod holds, link up, driver bound, is listed %q", h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHotPlug(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, healthConfig, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio = "intel.com/sriov_vfio"
	if _, err := n.kubelet.WaitDevices(ctx, vfio, func(ds []*pluginapi.Device) bool { return len(ds) == 5 }); err != nil {
		t.Fatal(err)
	}
	// An allocated device is removed: it leaves the pool, its allocation
	// stays in the ledger, marked lost.
	if _, err := n.kubelet.Allocate(ctx, vfio, []string{"0000:af:01.3"}); err != nil {
		t.Fatal(err)
	}
	if err := n.roots.Remove("0000:af:01.3"); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	if _, err := n.kubelet.WaitDevices(ctx, vfio, func(ds []*pluginapi.Device) bool { return len(ds) == 4 }); err != nil {
		t.Fatalf("removed device still listed: %v", err)
	}
	s := waitLedger(ctx, t, d, "allocation marked lost", func(s events.State) bool {
		for _, a := range s.Allocations {
			if slices.Contains(a.DeviceIDs, "0000:af:01.3") {
				return a.Lost
			}
		}
		return false
	})
	if len(s.Allocations) != 1 {
		t.Errorf("%d live allocations, want the lost one", len(s.Allocations))
	}

	// New VFs on the second port: those bound to vfio-pci join the pool.
	err := n.roots.SetNumVFs("0000:3b:00.1", 2, func(i int) sysfsgen.Function {
		return sysfsgen.Function{Driver: "vfio-pci", IOMMUGroup: "20" + string(rune('0'+i))}
	})
	if err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	if _, err := n.kubelet.WaitDevices(ctx, vfio, func(ds []*pluginapi.Device) bool { return len(ds) == 6 }); err != nil {
		t.Fatalf("new VFs not listed: %v", err)
	}
}

// writeConfigMap lays out a config the way the kubelet mounts a ConfigMap:
// dir/config.json -> ..data/config.json, ..data -> ..<version>/.
func writeConfigMap(t *testing.T, dir, version, content string) {
	t.Helper()
	vdir := filepath.Join(dir, ".."+version)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vdir, "config.json"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(".."+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "config.json")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "config.json"), link); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigReload(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	cmDir := t.TempDir()
	writeConfigMap(t, cmDir, "v1", sriovConfig)
	n.opts.ConfigPath = filepath.Join(cmDir, "config.json")
	d := n.start(t)
	ctx := waitCtx(t)
	for _, res := range []string{"intel.com/sriov_vfio", "intel.com/sriov_net"} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatal(err)
		}
	}

	// The ConfigMap is updated: sriov_net goes, a PF pool comes,
	// sriov_vfio changes a field.
	pre := waitLedger(ctx, t, d, "both pools registered", func(s events.State) bool {
		return s.Pools["intel.com/sriov_vfio"].Registration.Registered && s.Pools["intel.com/sriov_net"].Registration.Registered
	})
	v2 := `{"resourceList": [
	  {"resourceName": "sriov_vfio", "excludeTopology": true, "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}},
	  {"resourceName": "e810_port", "selectors": {"pciAddresses": ["0000:3b:00.1"]}}
	]}`
	writeConfigMap(t, cmDir, "v2", v2)
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/e810_port"); err != nil {
		t.Fatalf("new pool not registered: %v", err)
	}
	if _, err := n.kubelet.WaitDevices(ctx, "intel.com/e810_port", func(ds []*pluginapi.Device) bool { return len(ds) == 1 }); err != nil {
		t.Fatal(err)
	}
	post := waitLedger(ctx, t, d, "the removed pool stopped", func(s events.State) bool {
		left := poolSockets(t, n.kubelet.DevicePluginDir(), "intel.com/sriov_net")
		_, pooled := s.Pools["intel.com/sriov_net"]
		return len(left) == 0 && !pooled
	})
	// The ConfigApplied says what the reload changed, and the devices it
	// names moving are those the pools then took and let go.
	var changes []events.PoolChange
	if err := d.rec.Log().Read(pre.Seq+1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.ConfigApplied); ok {
			changes = p.Changes
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []events.PoolChange{
		{Pool: "intel.com/sriov_vfio", Change: "changed", Fields: []string{"excludeTopology: false → true"}},
		{Pool: "intel.com/e810_port", Change: "added", Joined: post.Pools["intel.com/e810_port"].Members},
		{Pool: "intel.com/sriov_net", Change: "removed", Left: pre.Pools["intel.com/sriov_net"].Members},
	}
	if !reflect.DeepEqual(changes, want) || len(want[1].Joined) != 1 || len(want[2].Left) == 0 {
		t.Errorf("the reload's changes:\n got %+v\nwant %+v", changes, want)
	}
	// Status and readiness follow the config in force: the new pool is
	// there and registered, the removed one gone.
	var st grpcapi.AdminStatus
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if st, err = d.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if d.Ready(ctx) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var names []string
	for _, p := range st.Pools {
		names = append(names, p.Resource)
	}
	if got := strings.Join(names, " "); got != "intel.com/e810_port intel.com/sriov_vfio" || !d.Ready(ctx) {
		t.Errorf("after the reload, status lists %q, ready %v; want the two pools in force, ready", got, d.Ready(ctx))
	}

	// Garbage: rejected, with its errors; nothing changes.
	before := ledgerState(t, d)
	writeConfigMap(t, cmDir, "v3", `{"resourceList": [{"resourceName": "bad name!", "selectors": {"pfNames": ["eth0#5-2"]}}]}`)
	s := waitLedger(ctx, t, d, "config rejected", func(s events.State) bool { return s.Config.Rejections > before.Config.Rejections })
	if s.Config.SHA256 != before.Config.SHA256 || len(s.Pools) != len(before.Pools) {
		t.Errorf("a rejected config changed the config in force")
	}
	if got := strings.Join(s.Config.LastError, "\n"); !strings.Contains(got, "range end before start") || !strings.Contains(got, "resourceList[0]") {
		t.Errorf("rejection errors: %q", got)
	}

	// Deleted: logged, kept.
	res, err := d.Reload(ctx, "test")
	if err != nil || !res.Unchanged && res.Rejected == nil {
		t.Logf("reload of the same bad file: %+v %v", res, err)
	}
	os.Remove(n.opts.ConfigPath)
	res, err = d.Reload(ctx, "test")
	if err != nil || res.Err == nil || res.Applied {
		t.Errorf("reload of a deleted config = %+v, %v; want an error and nothing applied", res, err)
	}
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/e810_port"); err != nil {
		t.Errorf("pool lost after the config file went: %v", err)
	}
}

// A reload that removes pools records their members leaving in the order
// of the pools' names, not of a map: the same change reads the same in
// every ledger.
func TestAReloadRecordsTheRemovedPoolsInOrder(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	d := n.start(t)
	ctx := waitCtx(t)
	pre := waitLedger(ctx, t, d, "both pools have members", func(s events.State) bool {
		return len(s.Pools["intel.com/sriov_vfio"].Members) > 0 && len(s.Pools["intel.com/sriov_net"].Members) > 0
	})
	if err := os.WriteFile(n.opts.ConfigPath, []byte(`{"resourceList": [{"resourceName": "e810_port", "selectors": {"pciAddresses": ["0000:3b:00.1"]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Reload(ctx, "test"); err != nil || !res.Applied {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	var removed []string
	if err := d.rec.Log().Read(pre.Seq+1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.PoolMembershipChanged); ok && strings.HasPrefix(p.Reason, "pool removed from the config") {
			removed = append(removed, p.Pool)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"intel.com/sriov_net", "intel.com/sriov_vfio"}; !slices.Equal(removed, want) {
		t.Errorf("removed pools recorded in the order %v, want %v", removed, want)
	}
}

// TestKernelEventsWatch starts a daemon listening to kernel events (where
// netlink is allowed) and checks it serves and stops cleanly with the
// watcher running; kernel events themselves are tested in package sysfs.
func TestKernelEventsWatch(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.KernelEvents = true
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/sriov_vfio"); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
}

// A config change that moves a device while a container holds it moves it
// openly: the old pool's membership change names the allocation, the new
// pool records that the device arrived held and lists it unhealthy, so
// its kubelet resource cannot give it out again, and the allocation stays
// live while the container holds it (the pool that made it is gone from
// the config). Once the container goes, it is released and the device is
// healthy in its new pool.
func TestConfigChangeMovesAHeldDeviceOpenly(t *testing.T) {
	n, d, ctx := allocatedBeforeMove(t, nil)
	const vfio, dpdk, dev = "intel.com/sriov_vfio", "intel.com/dpdk", movingDevice
	n.kubelet.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("telco", "dpdk-0", "app", vfio, dev)})
	reconcileNow(ctx, t, d)
	var seq uint64
	waitLedger(ctx, t, d, "the allocation bound", func(s events.State) bool {
		for k, a := range s.Allocations {
			if a.Binding != nil && a.DeviceIDs[0] == dev {
				seq = k
				return true
			}
		}
		return false
	})

	// sriov_vfio goes; its devices go to a new pool, dpdk.
	n.reload(ctx, t, d, dpdkConfig)
	health := func(list []*pluginapi.Device) (string, int) {
		h, healthy := "", 0
		for _, x := range list {
			if x.ID == dev {
				h = x.Health
			}
			if x.Health == pluginapi.Healthy {
				healthy++
			}
		}
		return h, healthy
	}
	// The other four are listed healthy once the old pool, stopping, can
	// no longer give them out.
	var last []*pluginapi.Device
	if _, err := n.kubelet.WaitDevices(ctx, dpdk, func(ds []*pluginapi.Device) bool {
		last = ds
		h, healthy := health(ds)
		return len(ds) == 5 && h == pluginapi.Unhealthy && healthy == 4
	}); err != nil {
		h, healthy := health(last)
		t.Fatalf("in the new pool (%d devices) the held device is %q, %d healthy; want it unhealthy, the other 4 healthy: %v", len(last), h, healthy, err)
	}
	wantHeld := fmt.Sprintf("%s by #%d", dev, seq)
	// The pools' membership changes are recorded as the kubelet hears of
	// them, not before: wait for both.
	var gone, arrived string
	waitFor(ctx, t, "both pools' membership changes in the ledger", func() bool {
		if err := d.rec.Log().Read(0, func(e events.Envelope) error {
			if m, ok := e.Payload.(events.PoolMembershipChanged); ok {
				switch {
				case m.Pool == vfio && len(m.Removed) > 0:
					gone = m.Reason
				case m.Pool == dpdk && len(m.Added) > 0:
					arrived = m.Reason
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return gone != "" && arrived != ""
	})
	if !strings.Contains(gone, "moved to "+dpdk+": ") || !strings.Contains(gone, dev) || !strings.Contains(gone, "still held: "+wantHeld) {
		t.Errorf("the old pool's removal says %q; want it to name where %s went, and %s", gone, dev, wantHeld)
	}
	if !strings.Contains(arrived, "arrived held, listed unhealthy until released: "+wantHeld+" of "+vfio) {
		t.Errorf("the new pool's membership says %q; want it to name %s of %s", arrived, wantHeld, vfio)
	}

	// The container still holds it: the allocation stays live.
	reconcileNow(ctx, t, d)
	if s := ledgerState(t, d); len(s.Holders[dev]) != 1 {
		t.Fatalf("after a round with the container still there, %s has holders %v; want the allocation live", dev, s.Holders[dev])
	}

	// The container goes: released, and the device is usable in dpdk.
	n.kubelet.SetPods(nil)
	reconcileNow(ctx, t, d)
	if _, err := n.kubelet.WaitDevices(ctx, dpdk, func(ds []*pluginapi.Device) bool { h, _ := health(ds); return h == pluginapi.Healthy }); err != nil {
		t.Fatalf("the device never became healthy in its new pool: %v", err)
	}
	if s := ledgerState(t, d); len(s.Holders[dev]) != 0 {
		t.Errorf("after the container went, holders %v", s.Holders[dev])
	}
}

// VFs that go (a probe finds them gone before the scan does) and come back
// (sriov_numvfs set again) are new devices: healthy at once, as the
// ledger's discovery says, not unhealthy for the hold-down.
func TestVFsBackAfterRemovalAreHealthyAtOnce(t *testing.T) {
	cfg := `{"resourceList": [{"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
	  "health": {"holdDown": "1h", "probeInterval": "1h"}}]}`
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval, n.opts.ProbeInterval = time.Hour, time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio, pf = "intel.com/sriov_vfio", "0000:3b:00.1"
	vfs := func(count int) error {
		return n.roots.SetNumVFs(pf, count, func(i int) sysfsgen.Function {
			return sysfsgen.Function{Driver: "vfio-pci", IOMMUGroup: "20" + string(rune('0'+i))}
		})
	}
	listed := func(what string, ok func([]*pluginapi.Device) bool) []*pluginapi.Device {
		t.Helper()
		list, err := n.kubelet.WaitDevices(ctx, vfio, ok)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return list
	}
	if err := vfs(2); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	list := listed("new VFs", func(ds []*pluginapi.Device) bool { return len(ds) == 7 })
	added := vfsOf(t, n.roots, list, pf)

	if err := vfs(0); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.ProbeHealth{Addresses: added})
	listed("VFs gone, found by the probe", func(ds []*pluginapi.Device) bool {
		for _, x := range ds {
			if slices.Contains(added, x.ID) && x.Health != pluginapi.Unhealthy {
				return false
			}
		}
		return len(ds) == 7
	})
	d.Send(&node.Rescan{Reason: "test"})
	listed("VFs gone, found by the scan", func(ds []*pluginapi.Device) bool { return len(ds) == 5 })

	if err := vfs(2); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	list = listed("VFs back", func(ds []*pluginapi.Device) bool { return len(ds) == 7 })
	for _, x := range list {
		if slices.Contains(added, x.ID) && x.Health != pluginapi.Healthy {
			t.Errorf("%s is back %s; want healthy at once (the hold-down is an hour)", x.ID, x.Health)
		}
	}
	// And the health checker agrees: no recovery to record an hour later.
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Ask(ctx, kids.Health, &health.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range added {
		if v := res.(*health.Verdicts).Devices[addr]; !v.Healthy {
			t.Errorf("the health checker has %s %+v", addr, v)
		}
	}
}

// VFs follow their PF's link when their pool asks for link health, those
// bound to vfio-pci and those with an interface of their own alike: the
// PF's link alone going down makes its VFs unhealthy, and them only; it
// coming back up makes them healthy again after the hold-down.
func TestPFLinkDownAloneTakesItsVFIOVFs(t *testing.T) {
	cfg := `{"resourceList": [
	  {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
	   "health": {"link": true, "holdDown": "200ms", "probeInterval": "100ms"}},
	  {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]},
	   "health": {"link": true, "holdDown": "200ms", "probeInterval": "100ms"}}
	]}`
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	n.start(t)
	ctx := waitCtx(t)
	const vfio, net = "intel.com/sriov_vfio", "intel.com/sriov_net"
	list := waitDevicesAll(ctx, t, n.kubelet, vfio, pluginapi.Healthy)
	ofPF := vfsOf(t, n.roots, list, "0000:3b:00.0")
	var others []string
	for _, x := range list {
		if !slices.Contains(ofPF, x.ID) {
			others = append(others, x.ID)
		}
	}
	if len(others) == 0 {
		t.Fatal("every vfio VF is on ens785f0; the test needs one elsewhere")
	}
	if err := n.roots.SetLinkDown("ens785f0"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ofPF {
		waitHealth(ctx, t, n.kubelet, vfio, id, pluginapi.Unhealthy)
	}
	for _, id := range others {
		if h := healthOf(n.kubelet, vfio, id); h != pluginapi.Healthy {
			t.Errorf("%s, on another PF, is %s", id, h)
		}
	}
	// The iavf VF of the PF follows it, its own interface up or not; one
	// on another PF does not.
	waitHealth(ctx, t, n.kubelet, net, "0000:3b:01.0", pluginapi.Unhealthy)
	if h := healthOf(n.kubelet, net, "0000:af:01.0"); h != pluginapi.Healthy {
		t.Errorf("the iavf VF of ens801f0 is %s", h)
	}
	down := time.Now()
	if err := n.roots.SetLinkUp("ens785f0"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ofPF {
		if at := waitHealth(ctx, t, n.kubelet, vfio, id, pluginapi.Healthy); at.Sub(down) < 200*time.Millisecond {
			t.Errorf("%s healthy again after %v, inside the hold-down", id, at.Sub(down))
		}
	}
}

// waitDevicesAll waits until every device of resource is listed with
// health, and returns the list.
func waitDevicesAll(ctx context.Context, t *testing.T, k *kubelettest.Kubelet, resource, health string) []*pluginapi.Device {
	t.Helper()
	list, err := k.WaitDevices(ctx, resource, func(ds []*pluginapi.Device) bool {
		for _, d := range ds {
			if d.Health != health {
				return false
			}
		}
		return len(ds) > 0
	})
	if err != nil {
		t.Fatalf("%s: not every device %s: %v", resource, health, err)
	}
	return list
}

// oneVFIOConfig pools one vfio-pci VF alone, and the iavf VFs: binding
// that VF to iavf moves it from one pool to the other.
const oneVFIOConfig = `{"resourceList": [
  {"resourceName": "one_vfio", "selectors": {"pciAddresses": ["0000:3b:01.2"], "drivers": ["vfio-pci"]}},
  {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}
]}`

// A driver rebind places the device again: from vfio-pci to iavf it
// leaves the pool that selects vfio-pci for the one that selects iavf,
// and both record it. The pool it leaves has no device now: by default it
// is withdrawn, as the SR-IOV plugin skips a pool with none (its socket
// goes, the kubelet drops the resource, the ledger says so), and served
// again once the device comes back; with advertiseEmpty it stays served
// and registered, listing none.
func TestRebindEmptiesAPool(t *testing.T) {
	for _, advertise := range []bool{false, true} {
		t.Run(fmt.Sprintf("advertiseEmpty=%v", advertise), func(t *testing.T) {
			cfg := oneVFIOConfig
			if advertise {
				cfg = strings.Replace(cfg, `"resourceName": "one_vfio",`, `"resourceName": "one_vfio", "advertiseEmpty": true,`, 1)
			}
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
			n.opts.ScanInterval = time.Hour
			d := n.start(t)
			ctx := waitCtx(t)
			const one, net, dev = "intel.com/one_vfio", "intel.com/sriov_net", "0000:3b:01.2"
			count := func(want int) func([]*pluginapi.Device) bool {
				return func(ds []*pluginapi.Device) bool { return len(ds) == want }
			}
			if _, err := n.kubelet.WaitDevices(ctx, one, count(1)); err != nil {
				t.Fatal(err)
			}
			if _, err := n.kubelet.WaitDevices(ctx, net, count(3)); err != nil {
				t.Fatal(err)
			}
			reg, err := n.kubelet.WaitRegistered(ctx, one)
			if err != nil {
				t.Fatal(err)
			}

			if err := n.roots.Bind(dev, "iavf"); err != nil {
				t.Fatal(err)
			}
			d.Send(&node.Rescan{Reason: "test"})
			list, err := n.kubelet.WaitDevices(ctx, net, count(4))
			if err != nil {
				t.Fatalf("the rebound device never joined %s: %v", net, err)
			}
			if !slices.ContainsFunc(list, func(x *pluginapi.Device) bool { return x.ID == dev }) {
				t.Errorf("%s lists %d devices, not %s", net, len(list), dev)
			}
			s := waitLedger(ctx, t, d, "both membership changes", func(s events.State) bool {
				return s.Devices[dev].Pool == net && len(s.Pools[one].Members) == 0
			})
			if _, ok := s.Pools[one]; !ok {
				t.Errorf("%s left the ledger's pools", one)
			}
			// An operator reading the ledger sees the move from both ends.
			wantReasons(t, d, 1, dev, map[string]string{one: "; moved to " + net + ": " + dev, net: "; moved from " + one + ": " + dev})

			if advertise {
				// Still served and registered, with nothing to offer.
				if _, err := n.kubelet.WaitDevices(ctx, one, count(0)); err != nil {
					t.Fatalf("the rebound device is still in %s: %v", one, err)
				}
				if _, err := os.Stat(reg.Endpoint); err != nil {
					t.Errorf("the empty pool's socket: %v", err)
				}
				again, err := n.kubelet.WaitRegistered(ctx, one)
				if err != nil || again.Endpoint != reg.Endpoint {
					t.Errorf("the empty pool's registration: %+v, %v", again, err)
				}
				return
			}
			// Withdrawn: the socket goes, the kubelet has no endpoint,
			// and the ledger says it no longer serves.
			if err := n.kubelet.WaitUnregistered(ctx, one); err != nil {
				t.Fatal(err)
			}
			waitLedger(ctx, t, d, "the pool withdrawn", func(s events.State) bool { return !s.Pools[one].Registration.Serving })
			if _, err := os.Stat(reg.Endpoint); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the withdrawn pool's socket: %v, want it gone", err)
			}
			if st, err := d.Status(ctx); err != nil || !slices.ContainsFunc(st.Pools, func(p grpcapi.AdminPoolStatus) bool { return p.Resource == one && p.NoDevices }) {
				t.Errorf("status %+v, %v: want %s as having no devices", st, err, one)
			}
			waitFor(ctx, t, "ready with a pool withdrawn for want of devices", func() bool { return d.Ready(ctx) })

			// Back: served and registered again, on a new socket.
			if err := n.roots.Bind(dev, "vfio-pci"); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			d.Send(&node.Rescan{Reason: "test"})
			regs, err := n.kubelet.RegisteredAfter(ctx, []string{one}, back)
			if err != nil {
				t.Fatal(err)
			}
			if regs[0].Endpoint == reg.Endpoint {
				t.Errorf("served again on the old socket %s", reg.Endpoint)
			}
			if _, err := n.kubelet.WaitDevices(ctx, one, count(1)); err != nil {
				t.Fatal(err)
			}
			// The kubelet may hear of it before the ledger has it.
			waitLedger(ctx, t, d, "served again, in the ledger", func(s events.State) bool {
				return s.Pools[one].Registration.Serving && slices.Equal(s.Pools[one].Members, []string{dev})
			})
			var withdrawn, served int
			var backReason string
			if err := d.rec.Log().Read(1, func(e events.Envelope) error {
				switch p := e.Payload.(type) {
				case events.PoolMembershipChanged:
					if p.Pool == one && slices.Contains(p.Added, dev) {
						backReason = p.Reason
					}
				case events.PluginWithdrawn:
					if p.Pool == one && p.Socket == reg.Endpoint {
						withdrawn++
					}
				case events.PluginServing:
					if p.Pool == one {
						served++
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if withdrawn != 1 || served != 2 {
				t.Errorf("the ledger has %d PluginWithdrawn of the first socket and %d PluginServing of %s, want 1 and 2", withdrawn, served, one)
			}
			// The pool spawned again says why: the scan, not a daemon start.
			if !strings.HasPrefix(backReason, "scan: test") {
				t.Errorf("the device came back to %s with the reason %q, want the scan's", one, backReason)
			}
		})
	}
}

// A device rebound while the daemon was down has moved when it starts
// again: the two pools' membership changes at start name each other.
func TestMoveWhileDownIsRecordedAtStart(t *testing.T) {
	n, ctx, seq := reboundWhileDown(t)
	const one, net, dev = "intel.com/one_vfio", "intel.com/sriov_net", "0000:3b:01.2"
	d := n.start(t)
	waitLedger(ctx, t, d, "the move at start", func(s events.State) bool {
		return s.Devices[dev].Pool == net && len(s.Pools[one].Members) == 0
	})
	wantReasons(t, d, seq+1, dev, map[string]string{one: "daemon start; moved to " + net + ": " + dev, net: "daemon start; moved from " + one + ": " + dev})
}

// The same config file read with other options (here --resource-prefix)
// makes other pools: the start records the config again, and the ledger's
// pools are the ones served, not the last run's.
func TestAStartWithOtherConfigOptionsRecordsItsPools(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	if err := n.start(t).Stop(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	n.opts.ConfigOptions.ResourcePrefix = "example.com"
	d := n.start(t)
	ctx := waitCtx(t)
	waitLedger(ctx, t, d, "the pools of the new prefix, and none of the old", func(s events.State) bool {
		_, old := s.Pools[vfioPool]
		_, now := s.Pools["example.com/sriov_vfio"]
		return now && !old
	})
}

// A pool the config dropped while no daemon ran is recorded as it is at a
// reload: its members' removal, with the allocations that still hold
// them, ahead of the config that drops it. A device's history says it
// left the pool, not only that it joined another.
func TestAPoolDroppedWhileDownRecordsItsMembersLeaving(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	d := n.start(t)
	ctx := waitCtx(t)
	devs, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatal(err)
	}
	dev := devs[0].ID
	a, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev})
	if err != nil || len(a.ContainerResponses) != 1 {
		t.Fatalf("allocate %s: %v", dev, err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	seq := d.rec.Log().LastSeq()
	members := replayStopped(t, n.opts.StateDir).Pools[vfioPool].Members
	if err := os.WriteFile(n.opts.ConfigPath, []byte(dpdkConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	d = n.start(t)
	waitLedger(ctx, t, d, "the devices in the new pool", func(s events.State) bool { return s.Devices[dev].Pool == "intel.com/dpdk" })
	var removed *events.PoolMembershipChanged
	if err := d.rec.Log().Read(seq+1, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.PoolMembershipChanged:
			if p.Pool == vfioPool {
				removed = &p
			}
		case events.ConfigApplied:
			if removed == nil {
				t.Errorf("#%d: the config that drops %s, and no record of its members leaving before it", e.Seq, vfioPool)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if removed == nil {
		t.FailNow()
	}
	if !slices.Equal(removed.Removed, members) || len(removed.Added) > 0 {
		t.Errorf("%s's members leaving: +%v -%v, want -%v", vfioPool, removed.Added, removed.Removed, members)
	}
	for _, want := range []string{"removed from the config", "still held: " + dev + " by #"} {
		if !strings.Contains(removed.Reason, want) {
			t.Errorf("the reason %q does not say %q", removed.Reason, want)
		}
	}
}

// A move is two records, one per pool. A daemon killed between them leaves
// the device listed by both pools; the start after finishes the move: the
// pool it left, with no device now so not served, records that it left.
func TestAMoveHalfRecordedIsFinishedAtStart(t *testing.T) {
	n, ctx, _ := reboundWhileDown(t)
	const one, net, dev = "intel.com/one_vfio", "intel.com/sriov_net", "0000:3b:01.2"
	// The joining pool's half of the move, then nothing: the kill.
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	joined := events.PoolMembershipChanged{Pool: net, Added: []string{dev}, Reason: "scan: test; moved from " + one + ": " + dev}
	if _, err := l.Append(ctx, events.Envelope{Payload: joined}); err != nil {
		t.Fatal(err)
	}
	seq := l.LastSeq()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := replayStopped(t, n.opts.StateDir); !slices.Contains(st.Pools[one].Members, dev) || st.Devices[dev].Pool != net {
		t.Fatalf("the ledger does not list %s in both pools: %s has %q, the device is in %q", dev, one, st.Pools[one].Members, st.Devices[dev].Pool)
	}
	d := n.start(t)
	waitLedger(ctx, t, d, "the move finished", func(s events.State) bool {
		return s.Devices[dev].Pool == net && len(s.Pools[one].Members) == 0
	})
	wantReasons(t, d, seq+1, dev, map[string]string{one: "daemon start; moved to " + net + ": " + dev})
}

// reboundWhileDown starts a daemon on oneVFIOConfig, stops it once
// 0000:3b:01.2 is in intel.com/one_vfio, and binds that VF to iavf (the
// driver intel.com/sriov_net selects). It returns the stopped ledger's
// last seq.
func reboundWhileDown(t *testing.T) (*testNode, context.Context, uint64) {
	t.Helper()
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, oneVFIOConfig, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const one, dev = "intel.com/one_vfio", "0000:3b:01.2"
	waitLedger(ctx, t, d, "the first placement", func(s events.State) bool { return s.Devices[dev].Pool == one })
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if err := n.roots.Bind(dev, "iavf"); err != nil {
		t.Fatal(err)
	}
	return n, ctx, d.rec.Log().LastSeq()
}

// wantReasons checks that, from seq on, a membership change of each pool
// of want that adds or removes dev has a reason that says want's words.
func wantReasons(t *testing.T, d *Daemon, seq uint64, dev string, want map[string]string) {
	t.Helper()
	var seen []string
	if err := d.rec.Log().Read(seq, func(e events.Envelope) error {
		if m, ok := e.Payload.(events.PoolMembershipChanged); ok && slices.Contains(slices.Concat(m.Added, m.Removed), dev) {
			seen = append(seen, m.Pool+": "+m.Reason)
			if strings.Contains(m.Reason, want[m.Pool]) {
				delete(want, m.Pool)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for pool, reason := range want {
		t.Errorf("no membership change of %s says %q; those of %s: %q", pool, reason, dev, seen)
	}
}

// A pool of the config that no device joins (a pfNames range with a
// typo, one an earlier pool's range covers) is not served, and the log
// names it, once: at the start, and for a reload that adds one, in one
// line for all of them, whatever the number of pools.
func TestAPoolWithNoDevicesIsNamedInTheLog(t *testing.T) {
	cfg := `{"resourceList": [
	  {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}},
	  {"resourceName": "vfio_again", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}},
	  {"resourceName": "typo", "selectors": {"pfNames": ["ens9f9"]}},
	  {"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"vendors": ["8086"], "auxTypes": ["sf"]}}
	]}`
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/sriov_vfio"); err != nil {
		t.Fatal(err)
	}
	const line = `"message":"pools have no devices and are not served"`
	// Logged as the first scan is placed, which a pool's registration
	// follows; waited for all the same.
	waitFor(ctx, t, "the line naming the pools with no devices", func() bool { return logs.Count("info", line) > 0 })
	if got, want := logs.Count("info", line), 1; got != want {
		t.Fatalf("%d lines say which pools have no devices at the start, want %d:\n%s", got, want, logs)
	}
	if !strings.Contains(logs.String(), `"pools":["intel.com/vfio_again","intel.com/typo"]`) {
		t.Errorf("the start's line does not name both pools with no devices:\n%s", logs)
	}

	added := strings.Replace(cfg, `"resourceList": [`, `"resourceList": [
	  {"resourceName": "gone_nic", "selectors": {"pciAddresses": ["0000:99:00.0"]}},`, 1)
	if err := os.WriteFile(n.opts.ConfigPath, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Reload(ctx, "test"); err != nil || !res.Applied {
		t.Fatalf("reload = %+v, %v", res, err)
	}
	if got, want := logs.Count("info", line), 2; got != want {
		t.Fatalf("%d lines say which pools have no devices after a reload that adds one, want %d:\n%s", got, want, logs)
	}
	if !strings.Contains(logs.String(), `"pools":["intel.com/gone_nic"]`) {
		t.Errorf("the reload's line does not name the pool it added, alone:\n%s", logs)
	}

	// A served pool whose last device leaves says so itself, as it
	// withdraws: no other line names it.
	emptied := strings.Replace(added, `{"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"]`,
		`{"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["ffff"]`, 1)
	if err := os.WriteFile(n.opts.ConfigPath, []byte(emptied), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Reload(ctx, "test"); err != nil || !res.Applied {
		t.Fatalf("reload = %+v, %v", res, err)
	}
	waitFor(ctx, t, "the emptied pool's own line", func() bool {
		return logs.Count("info", `"message":"pool withdrawn: it has no devices"`) > 0
	})
	if got, want := logs.Count("info", line), 2; got != want {
		t.Errorf("%d lines say which pools have no devices after a reload that empties a served one, want %d:\n%s", got, want, logs)
	}
}

// SIGHUP reloads the config, here with the file watcher off (only SIGHUP
// reloads then): the pool the new config adds serves and registers. A
// SIGHUP that finds the file unchanged says so, once.
func TestSIGHUPReloads(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, n.opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	wctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(wctx, "intel.com/sriov_vfio"); err != nil {
		t.Fatal(err)
	}
	v2 := `{"resourceList": [
	  {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}},
	  {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}},
	  {"resourceName": "e810_port", "selectors": {"pciAddresses": ["0000:3b:00.1"]}}
	]}`
	if err := os.WriteFile(n.opts.ConfigPath, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	sighup(t)
	if _, err := n.kubelet.WaitRegistered(wctx, "intel.com/e810_port"); err != nil {
		t.Fatalf("the pool of the config reloaded on SIGHUP: %v", err)
	}
	if strings.Contains(logs.String(), "config unchanged") {
		t.Fatalf("a reload that changed the config said it was unchanged:\n%s", logs)
	}
	sighup(t)
	for !strings.Contains(logs.String(), `"message":"SIGHUP: config unchanged"`) {
		select {
		case <-wctx.Done():
			t.Fatalf("a SIGHUP on the same file left no line:\n%s", logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A pool that sets no probeInterval is probed at the daemon's
// --probe-interval: a short one finds an unbound device with no kernel
// event and no rescan.
func TestDaemonProbeIntervalAppliesToPoolsThatSetNone(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.ScanInterval, n.opts.ProbeInterval = time.Hour, 50*time.Millisecond
	n.start(t)
	ctx := waitCtx(t)
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:01.2"
	waitHealth(ctx, t, n.kubelet, vfio, dev, pluginapi.Healthy)
	if err := n.roots.Unbind(dev); err != nil {
		t.Fatal(err)
	}
	soon, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	waitHealth(soon, t, n.kubelet, vfio, dev, pluginapi.Unhealthy)
}

// A pool removed by one reload and added again by the next, in a daemon
// that has run a while (here: restarted), starts from the ledger as it is
// then, not as it was when the daemon started: its membership change is
// recorded against the ledger's members, which end up its own.
func TestPoolAddedAgainStartsFromTheLedgerOfNow(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio = "intel.com/sriov_vfio"
	members := func(want int) func(events.State) bool {
		return func(s events.State) bool { return len(s.Pools[vfio].Members) == want }
	}
	waitLedger(ctx, t, d, "the pool's members", members(5))
	if err := d.Stop(ctx, "restart"); err != nil {
		t.Fatal(err)
	}
	d = n.start(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfio); err != nil {
		t.Fatal(err)
	}
	netOnly := `{"resourceList": [{"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}]}`
	n.reload(ctx, t, d, netOnly)
	n.reload(ctx, t, d, sriovConfig)
	waitLedger(ctx, t, d, "the pool added again with its members", members(5))
}

// An allocation no container claims (a leak suspect) uses no device: a
// device it holds that moved to another pool is usable there once the
// suspicion is recorded, and held again if a container claims it after
// all.
func TestUnclaimedAllocationDoesNotHoldAMovedDevice(t *testing.T) {
	n, d, ctx := allocatedBeforeMove(t, func(o *Options) { o.LeakGrace = 200 * time.Millisecond })
	const vfio, dpdk, dev = "intel.com/sriov_vfio", "intel.com/dpdk", movingDevice
	n.reload(ctx, t, d, dpdkConfig)
	waitHealth(ctx, t, n.kubelet, dpdk, dev, pluginapi.Unhealthy)

	// Past the grace, with no container: a leak suspect, and the device
	// is usable in dpdk.
	for s := ledgerState(t, d); !slices.ContainsFunc(slices.Collect(maps.Values(s.Allocations)), func(a events.Allocation) bool { return a.LeakSuspected }); s = ledgerState(t, d) {
		reconcileNow(ctx, t, d)
	}
	waitHealth(ctx, t, n.kubelet, dpdk, dev, pluginapi.Healthy)

	// A container claims it after all: held again.
	n.kubelet.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("telco", "late", "app", vfio, dev)})
	reconcileNow(ctx, t, d)
	waitHealth(ctx, t, n.kubelet, dpdk, dev, pluginapi.Unhealthy)
}

// A device that moved while held, given out by its new pool while its
// old allocation was a leak suspect, and then claimed by the old pool's
// container after all: the kubelet reports it under both resources, and
// the ledger records that double claim, under the pool that gave it out
// again.
func TestADeviceClaimedInTheOldPoolAndTheNewIsAConflict(t *testing.T) {
	n, d, ctx := allocatedBeforeMove(t, func(o *Options) { o.LeakGrace = 200 * time.Millisecond })
	const vfio, dpdk, dev = "intel.com/sriov_vfio", "intel.com/dpdk", movingDevice
	n.reload(ctx, t, d, dpdkConfig)
	for s := ledgerState(t, d); !slices.ContainsFunc(slices.Collect(maps.Values(s.Allocations)), func(a events.Allocation) bool { return a.LeakSuspected }); s = ledgerState(t, d) {
		reconcileNow(ctx, t, d)
	}
	waitHealth(ctx, t, n.kubelet, dpdk, dev, pluginapi.Healthy)
	mark := d.rec.Log().LastSeq()
	if _, err := n.kubelet.Allocate(ctx, dpdk, []string{dev}); err != nil {
		t.Fatal(err)
	}
	n.kubelet.SetPods([]*podresourcesapi.PodResources{
		kubelettest.PodHolding("telco", "late", "app", vfio, dev),
		kubelettest.PodHolding("telco", "new", "app", dpdk, dev),
	})
	reconcileNow(ctx, t, d)
	reconcileNow(ctx, t, d)
	var conflicts []events.AllocationConflict
	if err := d.rec.Log().Read(mark+1, func(e events.Envelope) error {
		if c, ok := e.Payload.(events.AllocationConflict); ok {
			conflicts = append(conflicts, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(conflicts) != 1 || conflicts[0].Pool != dpdk || conflicts[0].Device != dev || len(conflicts[0].Claims) != 2 ||
		!strings.Contains(conflicts[0].Reason, "telco/late/app") || !strings.Contains(conflicts[0].Reason, "telco/new/app") {
		t.Errorf("conflicts %+v, want one in %s naming both containers", conflicts, dpdk)
	}
}

// dpdkConfig is sriovConfig with sriov_vfio gone and its devices in a new
// pool, dpdk.
const dpdkConfig = `{"resourceList": [
  {"resourceName": "dpdk", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}},
  {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}
]}`

// A reload's record does not hold the node's mailbox while it is on its
// way to disk: the node answers a Query meanwhile (the blocking record
// did not), holds what would read the new config (a second reload, which
// then finds the file unchanged), and answers the reload once the config
// is durable.
func TestAReloadDoesNotHoldTheNodesMailboxForItsRecord(t *testing.T) {
	n, d, ctx, release := reloadWhileTheWriterWaits(t)
	first, second := reloadTwice(d)
	ask, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := d.Ask(ask, d.node, &node.Query{}); err != nil {
		t.Fatalf("a Query while the config is being recorded: %v", err)
	}
	select {
	case r := <-first:
		t.Fatalf("the reload was answered before its record was durable: %+v", r)
	default:
	}
	release()
	expectReloads(ctx, t, first, second)
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/dpdk"); err != nil {
		t.Fatal(err)
	}
}

// A node that crashes while a reload's record is on its way waits for it,
// and its next incarnation serves the new config and takes what the last
// one held (the second reload), as it would have taken it from the
// mailbox.
func TestANodeThatCrashesWhileRecordingAConfigKeepsItAndWhatItHeld(t *testing.T) {
	n, d, ctx, release := reloadWhileTheWriterWaits(t)
	first, second := reloadTwice(d)
	crashed := time.Now()
	d.Send(&node.Crash{Reason: "test"})
	release()
	expectReloads(ctx, t, first, second)
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{"intel.com/dpdk", netPool}, crashed); err != nil {
		t.Fatal(err)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(kids.Pools)); !slices.Equal(got, []string{"intel.com/dpdk", netPool}) {
		t.Errorf("after the crash the node serves %v, want the reloaded config's pools", got)
	}
}

// A node that stops while a reload's record is on its way answers the
// reload once the config is durable, and a reload it held with an error:
// no incarnation is left to read the file. So is a reload asked once it
// began to stop, at once, not when the asker's timeout ends.
func TestANodeThatStopsWhileRecordingAConfigAnswersWhatItHeld(t *testing.T) {
	_, d, ctx, release := reloadWhileTheWriterWaits(t)
	first, second := reloadTwice(d)
	d.system.Root.Poison(d.node) // as Stop does, after the reloads
	late := d.system.Root.RequestFuture(d.node, &node.ReloadConfig{Reason: "late"}, 5*time.Second)
	release()
	if res, err := late.Result(); err != nil || res.(*node.ReloadResult).Err == nil {
		t.Errorf("a reload asked of a stopping node: %+v, %v; want it refused", res, err)
	}
	if r := answers(ctx, t, first, second); !r[0].Applied || r[1].Err == nil {
		t.Fatalf("reloads: %+v, %+v; want the first applied and the second refused as the node stops", r[0], r[1])
	}
}

// A SIGTERM that comes while a SIGHUP's reload waits for the disk begins
// the stop at once, not when the reload gives up 10 s later: the stop may
// need 22 of the 30 s the kubelet gives it. The config is read before the
// node stops, in one piece, and the stop is clean.
func TestASignalDuringAReloadThatWaitsForTheDiskStopsAtOnce(t *testing.T) {
	n, d, ctx, release := reloadWhileTheWriterWaits(t)
	sig, signal := context.WithCancel(context.Background())
	defer signal()
	hup := make(chan os.Signal)
	served := make(chan error, 1)
	go func() { served <- d.serve(sig, hup) }()
	hup <- syscall.SIGHUP // taken: the reload is asked of the node
	signal()
	// Well within the reload's own 10 s: a stop that waited for it would
	// begin only once it gave up.
	begun, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	waitFor(begun, t, "the stop to begin while the reload waits", func() bool { return d.background.Err() != nil })
	release()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the daemon did not stop")
	}
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var stopped *events.DaemonStopped
	if err := l.Read(0, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DaemonStopped); ok {
			stopped = &p
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stopped == nil || !stopped.Clean {
		t.Errorf("DaemonStopped %+v, want a clean stop", stopped)
	}
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := node.Digest([]byte(dpdkConfig)); st.Config.SHA256 != want {
		t.Errorf("the config in the ledger is %.12s, want the reloaded one's %.12s", st.Config.SHA256, want)
	}
}

// reloadWhileTheWriterWaits starts a node on sriovConfig, holds the
// store's writer (a guarded append whose check waits for release) and
// writes dpdkConfig to the config file.
func reloadWhileTheWriterWaits(t *testing.T) (n *testNode, d *Daemon, ctx context.Context, release func()) {
	t.Helper()
	n = newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	d = n.start(t)
	ctx = supervisionCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	release = holdWriter(ctx, t, d.rec.Log())
	if err := os.WriteFile(n.opts.ConfigPath, []byte(dpdkConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return n, d, ctx, release
}

// reloadTwice asks the node to reload twice, in this order, and returns
// where each answer will come.
func reloadTwice(d *Daemon) (first, second <-chan any) {
	answer := func(f *actor.Future) <-chan any {
		ch := make(chan any, 1)
		go func() {
			res, err := f.Result()
			if err != nil {
				ch <- err
				return
			}
			ch <- res
		}()
		return ch
	}
	f1 := d.system.Root.RequestFuture(d.node, &node.ReloadConfig{Reason: "first"}, 30*time.Second)
	f2 := d.system.Root.RequestFuture(d.node, &node.ReloadConfig{Reason: "second"}, 30*time.Second)
	return answer(f1), answer(f2)
}

// expectReloads expects the first reload applied and the second to find
// the file unchanged.
func expectReloads(ctx context.Context, t *testing.T, first, second <-chan any) {
	t.Helper()
	if r := answers(ctx, t, first, second); !r[0].Applied || !r[1].Unchanged {
		t.Fatalf("reloads: %+v, %+v; want the first applied and the second to find it unchanged", r[0], r[1])
	}
}

// answers waits for the answer to each reload.
func answers(ctx context.Context, t *testing.T, chs ...<-chan any) []*node.ReloadResult {
	t.Helper()
	out := make([]*node.ReloadResult, len(chs))
	for i, ch := range chs {
		var r any
		select {
		case r = <-ch:
		case <-ctx.Done():
			t.Fatalf("reload %d: no answer", i+1)
		}
		res, ok := r.(*node.ReloadResult)
		if !ok {
			t.Fatalf("reload %d: %v", i+1, r)
		}
		out[i] = res
	}
	return out
}

// reload writes cfg to the node's config file and has d apply it.
func (n *testNode) reload(ctx context.Context, t *testing.T, d *Daemon, cfg string) {
	t.Helper()
	if err := os.WriteFile(n.opts.ConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Reload(ctx, "test"); err != nil || !res.Applied {
		t.Fatalf("reload = %+v, %v", res, err)
	}
}

// A link notification, as the kernel event path sends it (Daemon.Probe,
// straight to the health checker), is enough on its own: with no periodic
// probe, a PF's link going down takes its vfio VFs down, and coming back
// up brings them back, each time by the link check alone.
func TestLinkNotificationAloneMovesHealth(t *testing.T) {
	cfg := `{"resourceList": [
	  {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
	   "health": {"link": true, "holdDown": "0s", "probeInterval": "1h"}}
	]}`
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval, n.opts.ProbeInterval = time.Hour, time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio = "intel.com/sriov_vfio"
	list := waitDevicesAll(ctx, t, n.kubelet, vfio, pluginapi.Healthy)
	ofPF := vfsOf(t, n.roots, list, "0000:3b:00.0")
	flapLink(ctx, t, n, d, "ens785f0", vfio, ofPF)
	changes := 0
	if err := d.rec.Log().Read(0, func(e events.Envelope) error {
		if h, ok := e.Payload.(events.DeviceHealthChanged); ok && slices.Contains(ofPF, h.Address) {
			changes++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if changes != 2*len(ofPF) {
		t.Errorf("%d DeviceHealthChanged for the PF's %d VFs, want two each", changes, len(ofPF))
	}
}

// movingDevice is the vfio VF that dpdkConfig moves from sriov_vfio to
// dpdk.
const movingDevice = "0000:3b:01.2"

// allocatedBeforeMove starts a daemon with sriovConfig (its options changed
// by tweak, if set) and allocates movingDevice from sriov_vfio.
func allocatedBeforeMove(t *testing.T, tweak func(*Options)) (*testNode, *Daemon, context.Context) {
	t.Helper()
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	if tweak != nil {
		tweak(&n.opts)
	}
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/sriov_vfio"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, "intel.com/sriov_vfio", []string{movingDevice}); err != nil {
		t.Fatal(err)
	}
	return n, d, ctx
}

// A pool whose devices are not there yet is not served (the SR-IOV
// plugin's rule): a hot-plugged device brings it to the kubelet, and the
// device's removal takes it away again, each recorded.
func TestHotPlugServesAnEmptyPoolAndUnplugWithdrawsIt(t *testing.T) {
	cfg := strings.Replace(sriovConfig, `"resourceList": [`, `"resourceList": [
    {"resourceName": "gpu", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI", "selectors": {"vendors": ["10de"]}},`, 1)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const gpu, addr = "nvidia.com/gpu", "0000:d8:00.0"
	for _, p := range []string{vfioPool, netPool} {
		if _, err := n.kubelet.WaitRegistered(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, "ready with a pool that has no devices", func() bool { return d.Ready(ctx) })
	if n.kubelet.Connected(gpu) || len(n.kubelet.Registrations()) != 2 {
		t.Fatalf("registrations %+v: want the two pools with devices, not %s", n.kubelet.Registrations(), gpu)
	}

	plugged := time.Now()
	if err := n.roots.Add(sysfsgen.Function{Address: addr, Vendor: "10de", Device: "2330", Class: "030200", Driver: "vfio-pci", IOMMUGroup: "300"}); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	regs, err := n.kubelet.RegisteredAfter(ctx, []string{gpu}, plugged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.WaitDevices(ctx, gpu, func(ds []*pluginapi.Device) bool { return len(ds) == 1 && ds[0].ID == addr }); err != nil {
		t.Fatal(err)
	}

	if err := n.roots.Remove(addr); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	if err := n.kubelet.WaitUnregistered(ctx, gpu); err != nil {
		t.Fatal(err)
	}
	st := waitLedger(ctx, t, d, "the pool withdrawn", func(s events.State) bool {
		return s.Pools[gpu].Registration.Socket == regs[0].Endpoint && !s.Pools[gpu].Registration.Serving
	})
	if m := st.Pools[gpu].Members; len(m) != 0 {
		t.Errorf("the ledger lists %v in %s after the unplug", m, gpu)
	}
	waitFor(ctx, t, "ready after the pool was withdrawn", func() bool { return d.Ready(ctx) })
}

// An auxNetDevice pool is not served: devledger takes no scalable
// function into a pool yet, so the kubelet never hears of the pool (a pod
// that asks for it stays Pending) and the ledger gives it no members,
// while the pool beside it serves the card's VFs. The config's warning
// says so; this holds it to the truth.
func TestAnAuxNetDevicePoolIsNotServed(t *testing.T) {
	cfg := `{"resourceList": [
	  {"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"vendors": ["15b3"], "auxTypes": ["sf"]}},
	  {"resourceName": "mlx_net", "selectors": {"vendors": ["15b3"], "drivers": ["mlx5_core"]}}]}`
	n := newTestNode(t, sysfsgen.ScenarioMellanox, cfg, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	const sf, net = "intel.com/sf", "intel.com/mlx_net"
	if _, err := n.kubelet.WaitDevices(ctx, net, func(ds []*pluginapi.Device) bool { return len(ds) > 0 }); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "ready", func() bool { return d.Ready(ctx) })
	st := waitLedger(ctx, t, d, "the served pool's members", func(s events.State) bool { return len(s.Pools[net].Members) > 0 })
	if n.kubelet.Connected(sf) || slices.ContainsFunc(n.kubelet.Registrations(), func(r kubelettest.Registration) bool { return r.Resource == sf }) {
		t.Errorf("the kubelet heard of %s: %+v", sf, n.kubelet.Registrations())
	}
	if m := st.Pools[sf].Members; len(m) != 0 {
		t.Errorf("the ledger lists %v in %s", m, sf)
	}
}

// A pool withdrawn and wanted again at once (its one device rebound away
// and back): the new pool waits for the old one to stop, so that the old
// one's last records and its CDI spec removal come before the new one's,
// and ends served, with its device, in the ledger and in a CDI spec.
func TestAPoolWithdrawnAndWantedAgainAtOnce(t *testing.T) {
	cfg := strings.Replace(oneVFIOConfig, `"resourceName": "one_vfio",`, `"resourceName": "one_vfio", "cdi": {"enabled": true},`, 1)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const one, dev = "intel.com/one_vfio", "0000:3b:01.2"
	first, err := n.kubelet.WaitRegistered(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet may hear of the pool before its members are in the
	// ledger (registrations are recorded without waiting): the wait below
	// for the device gone must not see the ledger of before.
	waitLedger(ctx, t, d, "the pool's device in the ledger", func(s events.State) bool { return len(s.Pools[one].Members) == 1 })
	flipped := time.Now()
	for _, driver := range []string{"iavf", "vfio-pci"} {
		if err := n.roots.Bind(dev, driver); err != nil {
			t.Fatal(err)
		}
		d.Send(&node.Rescan{Reason: "test"})
		if driver == "iavf" { // withdrawing: back as soon as the pool records it
			waitLedger(ctx, t, d, "the device gone from the pool", func(s events.State) bool { return len(s.Pools[one].Members) == 0 })
		}
	}
	regs, err := n.kubelet.RegisteredAfter(ctx, []string{one}, flipped)
	if err != nil {
		t.Fatal(err)
	}
	if regs[0].Endpoint == first.Endpoint {
		t.Errorf("served again on the old socket %s", first.Endpoint)
	}
	if _, err := n.kubelet.WaitDevices(ctx, one, func(ds []*pluginapi.Device) bool { return len(ds) == 1 }); err != nil {
		t.Fatal(err)
	}
	waitLedger(ctx, t, d, "the pool served, with its device", func(s events.State) bool {
		p := s.Pools[one]
		return p.Registration.Serving && slices.Equal(p.Members, []string{dev})
	})
	waitFor(ctx, t, "the CDI spec with the device", func() bool {
		return resolver(t, n.opts.CDISpecDir).GetDevice("intel.com/net-pci="+dev) != nil
	})
}

// A reload recorded before the first scan has placed anything starts the
// pools it adds at that placement, registered like the others: here the
// first scan fails (the PCI devices dir is a file) while a reload adds the
// net pool.
func TestAPoolAReloadAddsBeforeTheFirstScanIsServed(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, vfioOnlyConfig, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	devices := filepath.Join(n.roots.Sysfs, "bus", "pci", "devices")
	away := devices + ".away"
	if err := os.Rename(devices, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(devices, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := n.start(t)
	ctx := waitCtx(t)
	if err := os.WriteFile(n.opts.ConfigPath, []byte(sriovConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	// The watcher may have read it already.
	if res, err := d.Reload(ctx, "test"); err != nil || !(res.Applied || res.Unchanged) {
		t.Fatalf("reload = %+v, %v", res, err)
	}
	if kids, err := d.Children(ctx); err != nil || kids.Placed {
		t.Fatalf("the node placed devices before the scan could read them (%v)", err)
	}
	if err := os.Remove(devices); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, devices); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	for _, res := range []string{vfioPool, netPool} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Errorf("%s: %v", res, err)
		}
	}
}

// A scan that changes none of the facts the ledger keeps may still move a
// device between running pools: here VF 4 of the mellanox node has its
// vdpa device rebound from virtio_vdpa to vhost_vdpa, which takes it from
// the mlx5_core pool to the vhost one, as a fresh start places it, and its
// Allocate answer is the vhost pool's.
func TestARescanMovesADeviceOnAFactTheLedgerDoesNotKeep(t *testing.T) {
	cfg := `{"resourceList": [
	  {"resourceName": "vdpa_vhost", "selectors": {"vendors": ["15b3"], "vdpaType": "vhost"}},
	  {"resourceName": "mlx_net", "selectors": {"vendors": ["15b3"], "drivers": ["mlx5_core"]}}]}`
	n := newTestNode(t, sysfsgen.ScenarioMellanox, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const vhost, other, vf = "intel.com/vdpa_vhost", "intel.com/mlx_net", "0000:5e:00.6"
	lists := func(want bool) func([]*pluginapi.Device) bool {
		return func(ds []*pluginapi.Device) bool {
			return slices.ContainsFunc(ds, func(d *pluginapi.Device) bool { return d.ID == vf }) == want
		}
	}
	if _, err := n.kubelet.WaitDevices(ctx, other, lists(true)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.WaitDevices(ctx, vhost, lists(false)); err != nil {
		t.Fatal(err)
	}
	if err := n.roots.BindVDPA(vf, "vhost_vdpa"); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	if _, err := n.kubelet.WaitDevices(ctx, vhost, lists(true)); err != nil {
		t.Fatalf("%s after the rescan: %v", vhost, err)
	}
	if _, err := n.kubelet.WaitDevices(ctx, other, lists(false)); err != nil {
		t.Fatalf("%s after the rescan: %v", other, err)
	}
	resp, err := n.kubelet.Allocate(ctx, vhost, []string{vf})
	if err != nil {
		t.Fatal(err)
	}
	// vhost_vdpa gave it a character device, as it gives 0000:5e:00.5
	// vhost-vdpa-0.
	cr := resp.ContainerResponses[0]
	if info := cr.Envs["PCIDEVICE_INTEL_COM_VDPA_VHOST_INFO"]; !strings.Contains(info, `"vdpa":{"mount":"/dev/vhost-vdpa-1"}`) {
		t.Errorf("the vhost pool's answer for %s names no vhost-vdpa node: %q", vf, info)
	}
	if len(cr.Devices) != 1 || cr.Devices[0].HostPath != "/dev/vhost-vdpa-1" {
		t.Errorf("the vhost pool's answer for %s mounts %v, want /dev/vhost-vdpa-1", vf, cr.Devices)
	}
}

// A PF's VFs destroyed and made again between two scans (sriov_numvfs
// rewritten) come back at the same addresses in new IOMMU groups: the
// health checker probes the new groups' /dev/vfio nodes, not the old
// ones', and the VFs stay healthy. (A probe round between the VFs' going
// and their coming back sees them gone, as one on a node would; it must
// not outlast the rescan.)
func TestVFsMadeAgainInNewIOMMUGroupsStayHealthy(t *testing.T) {
	cfg := `{"resourceList": [{"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
	  "health": {"holdDown": "200ms", "probeInterval": "100ms"}}]}`
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const vfio, pf = "intel.com/sriov_vfio", "0000:af:00.0"
	vfs := []string{"0000:af:01.1", "0000:af:01.2", "0000:af:01.3"}
	for _, vf := range vfs {
		waitHealth(ctx, t, n.kubelet, vfio, vf, pluginapi.Healthy)
	}
	before := ledgerState(t, d)
	from := d.rec.Log().LastSeq() + 1
	if err := n.roots.SetNumVFs(pf, 4, func(i int) sysfsgen.Function {
		if i == 0 {
			return sysfsgen.Function{Driver: "iavf"}
		}
		return sysfsgen.Function{Driver: "vfio-pci"}
	}); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "sriov_numvfs rewritten"})
	waitLedger(ctx, t, d, "the new IOMMU groups", func(s events.State) bool {
		for _, vf := range vfs {
			if s.Devices[vf].Facts.IOMMUGroup == before.Devices[vf].Facts.IOMMUGroup {
				return false
			}
		}
		return true
	})
	time.Sleep(500 * time.Millisecond) // five probe rounds, past a hold-down
	last := map[string]events.DeviceHealthChanged{}
	if err := d.rec.Log().Read(from, func(e events.Envelope) error {
		if h, ok := e.Payload.(events.DeviceHealthChanged); ok {
			last[h.Address] = h
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for addr, h := range last {
		if !h.Healthy {
			t.Errorf("%s is left unhealthy: %s", addr, h.Reason)
		}
	}
	for _, vf := range vfs {
		if h := healthOf(n.kubelet, vfio, vf); h != pluginapi.Healthy {
			t.Errorf("%s listed %q in its new IOMMU group", vf, h)
		}
	}
}
