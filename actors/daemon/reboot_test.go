package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// setKernelBootID writes the kernel's boot id under n's proc root, as
// /proc/sys/kernel/random/boot_id reads on a node.
func setKernelBootID(t *testing.T, n *testNode, id string) {
	t.Helper()
	dir := filepath.Join(n.opts.ProcRoot, "sys", "kernel", "random")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rebootNode reboots n as a node goes down and comes back: d's run ends
// without DaemonStopped (the ledger and pid file as its last commit left
// them), the kernel's boot id changes, every VF is gone (nothing has
// written sriov_numvfs yet), /run is empty (device-info files, CDI specs),
// and a new kubelet lists none of the pods of before (they failed
// admission: the pools were not registered when it admitted them).
func rebootNode(ctx context.Context, t *testing.T, n *testNode, d *Daemon, bootID string) {
	t.Helper()
	files := []saved{save(t, filepath.Join(n.opts.StateDir, LedgerFileName)), save(t, filepath.Join(n.opts.StateDir, PIDFileName))}
	if err := d.Stop(ctx, "the node goes down"); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.restore(t)
	}
	for _, pf := range []string{"0000:3b:00.0", "0000:af:00.0"} {
		if err := n.roots.SetNumVFs(pf, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{n.opts.DevinfoDir, n.opts.CDISpecDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	setKernelBootID(t, n, bootID)
	n.kubelet.SetPods(nil)
	if err := n.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
}

// makeVFs does what the SR-IOV operator does some time after the boot:
// sriov_numvfs on both PFs, then the drivers of the scenario's VFs.
func makeVFs(t *testing.T, n *testNode) {
	t.Helper()
	for _, pf := range []string{"0000:3b:00.0", "0000:af:00.0"} {
		if err := n.roots.SetNumVFs(pf, 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	for addr, drv := range map[string]string{
		"0000:3b:01.0": "iavf", "0000:3b:01.1": "iavf", "0000:3b:01.2": "vfio-pci", "0000:3b:01.3": "vfio-pci",
		"0000:af:01.0": "iavf", "0000:af:01.1": "vfio-pci", "0000:af:01.2": "vfio-pci", "0000:af:01.3": "vfio-pci",
	} {
		if err := n.roots.Bind(addr, drv); err != nil {
			t.Fatal(err)
		}
	}
}

// A node reboot is recorded as one: the start after it notes the kernel's
// new boot id, and the fold counts the reboot, so `replay` and `--diff`
// tell it from a daemon crash. The start releases nothing: a kubelet that
// admits a pod again after its pool registered starts it on the devices it
// checkpointed, without an Allocate, so the pod that comes back is still
// the one bound, with no release and no recovery (test/e2e/reboot_test.go
// has both orders with the kubelet's own device manager). The pool,
// emptied at the start, names the allocation that still holds its member,
// as a pool that serves on does.
func TestARebootIsRecordedAndKeepsWhatTheKubeletCheckpointed(t *testing.T) {
	const held, bootBefore, bootAfter = "0000:3b:01.2", "6a1c1f0e-4d52-4c1b-9d0e-1f2a3b4c5d6e", "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70"
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d, ctx := bootAndAllocate(t, n, bootBefore, held)
	pod := []*podresourcesapi.PodResources{kubelettest.PodHolding("telco", "dpdk-0", "app", vfioPool, held)}
	n.kubelet.SetPods(pod)
	reconcileNow(ctx, t, d)
	before := waitLedger(ctx, t, d, "the allocation bound", func(s events.State) bool {
		return len(s.Holders[held]) == 1 && s.Allocations[s.Holders[held][0]].Binding != nil
	})
	seq := before.Holders[held][0]
	if got := before.Daemon.KernelBootID; got != bootBefore {
		t.Fatalf("the run records kernel boot id %q, want %q", got, bootBefore)
	}
	mark := d.rec.Log().LastSeq()

	rebootNode(ctx, t, n, d, bootAfter)
	n.kubelet.SetPods(pod) // the kubelet runs the pod again on its checkpointed device
	d = n.start(t)
	makeVFs(t, n)
	d.Send(&node.Rescan{Reason: "kernel: VFs added"})
	if _, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 }); err != nil {
		t.Fatal(err)
	}
	reconcileNow(ctx, t, d)

	after := ledgerState(t, d)
	if after.Daemon.KernelBootID != bootAfter || after.Daemon.Reboots != 1 || after.Daemon.Crashes != 1 {
		t.Errorf("after the reboot the ledger says kernel boot %q, %d reboots, %d crashes; want %q, 1, 1",
			after.Daemon.KernelBootID, after.Daemon.Reboots, after.Daemon.Crashes, bootAfter)
	}
	a, live := after.Allocations[seq]
	if !live || a.Binding == nil || a.Binding.Pod != "dpdk-0" {
		t.Errorf("allocation #%d of the pod the kubelet ran again is %+v (live %v); want it live, bound to telco/dpdk-0/app", seq, a, live)
	}
	if err := d.rec.Log().Read(mark+1, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.DevicesReleased:
			t.Errorf("#%d released allocation #%d: %s", e.Seq, p.AllocationSeq, p.Reason)
		case events.AllocationRecovered:
			t.Errorf("#%d recovered %v for %s/%s: %s", e.Seq, p.DeviceIDs, p.Namespace, p.Pod, p.Reason)
		case events.PoolMembershipChanged:
			if want := fmt.Sprintf("still held: %s by #%d", held, seq); slices.Contains(p.Removed, held) && !strings.Contains(p.Reason, want) {
				t.Errorf("#%d removed %s from %s saying %q; want it to say %q", e.Seq, held, p.Pool, p.Reason, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// After an unclean reboot in watcher mode the sockets the last run served
// are still in plugins_registry/ (it is on the node's disk), answered by
// nobody; the kubelet's plugin watcher tries each of them again and again.
// A start removes them (docs/operations.md: "A daemon start removes what
// a killed daemon left under the pool's names"), also those of pools that
// have no devices yet: the VFs come later, or never.
func TestRebootRemovesTheStaleSocketsOfPoolsWithNoDevicesYet(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{PluginWatcher: true})
	n.opts.Registration = "watcher"
	n.opts.ScanInterval = time.Hour
	setKernelBootID(t, n, "6a1c1f0e-4d52-4c1b-9d0e-1f2a3b4c5d6e")
	d := n.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, res := range []string{vfioPool, "intel.com/sriov_net"} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatal(err)
		}
	}
	left := socketsIn(t, n.kubelet.PluginsRegistryDir())
	if len(left) != 2 {
		t.Fatalf("the pools serve on %v; want two sockets", left)
	}
	rebootNode(ctx, t, n, d, "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70")
	for _, path := range left {
		staleSocket(t, path) // what the unclean stop left
	}
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	d = n.start(t)
	waitLedger(ctx, t, d, "the pools emptied at the start", func(s events.State) bool {
		return len(s.Pools[vfioPool].Members) == 0 && len(s.Pools["intel.com/sriov_net"].Members) == 0
	})
	// One line names each, once its records landed.
	const line = `"message":"pools have no devices and are not served"`
	waitFor(ctx, t, "the line naming the emptied pools", func() bool { return logs.Count("info", line) > 0 })
	if got, all := logs.Count("info", line), logs.String(); got != 1 || !strings.Contains(all, `"pools":["intel.com/sriov_vfio","intel.com/sriov_net"],`+line) {
		t.Errorf("%d lines say which pools have no devices, want one naming each emptied pool once:\n%s", got, all)
	}
	soon, cancelSoon := context.WithTimeout(ctx, 5*time.Second)
	defer cancelSoon()
	waitFor(soon, t, "the stale sockets removed", func() bool {
		return len(socketsIn(t, n.kubelet.PluginsRegistryDir())) == 0
	})
}

// A run in watcher mode was killed, leaving its sockets in
// plugins_registry/; the next run is in legacy mode (--registration
// changed, or auto found no plugin watcher). Its pools serve in
// device-plugins/, but the kubelet's plugin watcher would still dial what
// the last run left: the start removes it.
func TestAStartInTheOtherModeRemovesTheLastRunsSockets(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{PluginWatcher: true})
	n.opts.Registration = "watcher"
	d := n.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, res := range []string{vfioPool, netPool} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatal(err)
		}
	}
	left := socketsIn(t, n.kubelet.PluginsRegistryDir())
	if len(left) != 2 {
		t.Fatalf("the pools serve on %v; want two sockets", left)
	}
	if err := d.Stop(ctx, "test: the run is killed"); err != nil {
		t.Fatal(err)
	}
	for _, path := range left {
		staleSocket(t, path) // what a killed run leaves
	}
	n.opts.Registration = "legacy"
	n.start(t) // its cleanup stops it
	if got := socketsIn(t, n.kubelet.PluginsRegistryDir()); len(got) != 0 {
		t.Errorf("a legacy start left the watcher run's sockets %v", got)
	}
	// The kubelet still lists the last run's devices, so wait for the
	// sockets themselves: the pools serve after Start returns.
	soon, cancelSoon := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSoon()
	waitFor(soon, t, "two sockets in device-plugins/", func() bool {
		return len(socketsIn(t, n.kubelet.DevicePluginDir())) == 2
	})
	waitFullKubelet(t, n.kubelet, 10*time.Second)
}

// A card moved out of its slot, and another kind put in, across a reboot:
// the address of a held VF now holds another vendor's VF. The start
// records the held one removed (its allocation lost) and the new one
// discovered, not one device whose vendor changed: the history at the
// address, the allocation and the new device's health are not the old
// device's.
func TestAnotherKindOfDeviceAtAHeldAddressIsAnotherDevice(t *testing.T) {
	const held = "0000:af:01.1"
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d, ctx := bootAndAllocate(t, n, "6a1c1f0e-4d52-4c1b-9d0e-1f2a3b4c5d6e", held)
	seq := waitLedger(ctx, t, d, "the allocation", func(s events.State) bool { return len(s.Holders[held]) == 1 }).Holders[held][0]
	mark := d.rec.Log().LastSeq()

	rebootNode(ctx, t, n, d, "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70")
	if err := n.roots.Remove("0000:af:00.0"); err != nil {
		t.Fatal(err)
	}
	cx6 := sysfsgen.Function{
		Address: "0000:af:00.0", Vendor: "15b3", Device: "101d", SubsystemVendor: "15b3", SubsystemDevice: "0016",
		Class: "020000", Driver: "mlx5_core", NUMANode: 1, IOMMUGroup: "40",
		TotalVFs: 8, VFOffset: 8, VFStride: 1, VFDevice: "101e",
		Interfaces: []sysfsgen.Interface{{Name: "ens801f0np0"}},
		VFs:        []sysfsgen.Function{{Driver: "mlx5_core", IOMMUGroup: "140"}, {Driver: "vfio-pci", IOMMUGroup: "141"}},
	}
	if err := n.roots.Add(cx6); err != nil {
		t.Fatal(err)
	}
	d = n.start(t)
	after := waitLedger(ctx, t, d, "the new VF recorded", func(s events.State) bool {
		return s.Devices[held].Facts.Vendor == "15b3"
	})
	if a, live := after.Allocations[seq]; !live || !a.Lost {
		t.Errorf("allocation #%d of the VF that left the node is %+v (live %v); want it live and lost", seq, a, live)
	}
	var story []string
	if err := d.rec.Log().Read(mark+1, func(e events.Envelope) error {
		if e.Subject == held && e.Type != events.TypeDeviceHealthChanged {
			story = append(story, string(e.Type))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{string(events.TypeDeviceRemoved), string(events.TypeDeviceDiscovered)}; !slices.Equal(story, want) {
		t.Errorf("the start recorded %v for %s; want %v", story, held, want)
	}
}

// bootAndAllocate starts n's daemon under the kernel boot id boot, with
// scans an hour apart (the test rescans by hand), and allocates dev of
// vfioPool; the context ends with the test, 30 s at most.
func bootAndAllocate(t *testing.T, n *testNode, boot, dev string) (*Daemon, context.Context) {
	t.Helper()
	n.opts.ScanInterval = time.Hour
	setKernelBootID(t, n, boot)
	d := n.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
		t.Fatal(err)
	}
	return d, ctx
}
