package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// resolver is the CDI library's cache over dir, as a container runtime
// keeps it: read afresh for each check.
func resolver(t *testing.T, dir string) *cdi.Cache {
	t.Helper()
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for path, errs := range c.GetErrors() {
		t.Errorf("the CDI cache refuses %s: %v", path, errs)
	}
	return c
}

// A CDI-enabled pool writes its spec: every name an Allocate answers with
// resolves through the CDI library's own cache, to the device nodes the
// pool gives with CDI off. A device that leaves the pool no longer
// resolves, and a pool a reload removes takes its spec with it; a pool
// without CDI writes none.
func TestCDINamesResolveThroughTheSpecsWritten(t *testing.T) {
	cfg := strings.Replace(sriovConfig, `{"resourceName": "sriov_vfio",`, `{"resourceName": "sriov_vfio", "cdi": {"enabled": true},`, 1)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.WatchConfig = false
	n.opts.CDISpecDir = filepath.Join(t.TempDir(), "cdi")
	d := n.start(t)
	ctx := waitCtx(t)
	devs, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{devs[0].ID, devs[3].ID}
	resp, err := n.kubelet.Allocate(ctx, vfioPool, ids)
	if err != nil {
		t.Fatal(err)
	}
	c := resolver(t, n.opts.CDISpecDir)
	names := resp.ContainerResponses[0].CdiDevices
	if len(names) != len(ids) || len(resp.ContainerResponses[0].Devices) != 0 {
		t.Fatalf("answer %+v: want %d CDI names and no device nodes", resp.ContainerResponses[0], len(ids))
	}
	for i, name := range names {
		dev := c.GetDevice(name.Name)
		if dev == nil {
			t.Errorf("%s does not resolve; the cache has %v", name.Name, c.ListDevices())
			continue
		}
		// What a container gets for it: the vfio nodes of that device,
		// as the pool gives them with CDI off.
		var hosts []string
		for _, dn := range dev.ContainerEdits.DeviceNodes {
			hosts = append(hosts, dn.HostPath)
		}
		if !slices.Contains(hosts, "/dev/vfio/vfio") || len(hosts) != 2 {
			t.Errorf("%s (%s) resolves to device nodes %v, want /dev/vfio/vfio and its group's", name.Name, ids[i], hosts)
		}
	}
	if got := len(c.ListDevices()); got != 5 {
		t.Errorf("the cache lists %d devices, want the pool's 5", got)
	}
	if entries, _ := os.ReadDir(n.opts.CDISpecDir); len(entries) != 1 {
		t.Errorf("spec dir holds %v, want the CDI pool's spec alone", entries)
	}

	// A device that leaves the pool leaves its spec.
	gone := devs[4].ID
	if err := n.roots.Remove(gone); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	if _, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 4 }); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, gone+" out of the spec", func() bool {
		c = resolver(t, n.opts.CDISpecDir)
		return c.GetDevice("intel.com/net-pci="+gone) == nil
	})
	if c.GetDevice(names[0].Name) == nil {
		t.Errorf("after %s left, %s no longer resolves: the cache lists %v", gone, names[0].Name, c.ListDevices())
	}

	// A reload that removes the pool removes its spec.
	n.reload(ctx, t, d, `{"resourceList": [{"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "drivers": ["iavf"]}}]}`)
	waitFor(ctx, t, "the spec removed with its pool", func() bool {
		entries, _ := os.ReadDir(n.opts.CDISpecDir)
		return len(entries) == 0
	})
}

// A reload that removes a CDI pool and moves its devices to another CDI
// pool of the same kind: each device has the same name in both specs, and
// a runtime resolves a name two specs define through neither. The removed
// pool's spec is gone once the reload is answered, not when the pool has
// stopped, after the pool the devices moved to may have written its own.
func TestARemovedCDIPoolsSpecGoesBeforeItsDevicesMove(t *testing.T) {
	cfg := strings.Replace(sriovConfig, `{"resourceName": "sriov_vfio",`, `{"resourceName": "sriov_vfio", "cdi": {"enabled": true},`, 1)
	moved := strings.Replace(dpdkConfig, `{"resourceName": "dpdk",`, `{"resourceName": "dpdk", "cdi": {"enabled": true},`, 1)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.WatchConfig = false
	n.opts.CDISpecDir = filepath.Join(t.TempDir(), "cdi")
	d := n.start(t)
	ctx := waitCtx(t)
	old := filepath.Join(n.opts.CDISpecDir, "devledger_intel.com_sriov_vfio.json")
	waitFor(ctx, t, "the vfio pool's spec", func() bool { _, err := os.Stat(old); return err == nil })

	n.reload(ctx, t, d, moved)
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed pool's CDI spec is still there once the reload is answered (%v): the devices' names resolve through neither spec until the pool has stopped", err)
	}
	devs, err := n.kubelet.WaitDevices(ctx, "intel.com/dpdk", func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the moved devices' names resolving", func() bool {
		c := resolver(t, n.opts.CDISpecDir)
		return !slices.ContainsFunc(devs, func(dev *pluginapi.Device) bool { return c.GetDevice("intel.com/net-pci="+dev.ID) == nil })
	})
}

// waitFor polls ok until it says yes.
func waitFor(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// At start the daemon removes the CDI specs it wrote for pools that do not
// serve with CDI now (gone from the config while it was down), and leaves
// other programs' specs alone; in a dir whose name a glob would misread
// too.
func TestStaleCDISpecsGoAtStart(t *testing.T) {
	for _, dir := range []string{"cdi", "cdi[1]"} {
		t.Run(dir, func(t *testing.T) { staleCDISpecsGoAtStart(t, dir) })
	}
}

func staleCDISpecsGoAtStart(t *testing.T, dir string) {
	cfg := strings.Replace(sriovConfig, `{"resourceName": "sriov_vfio",`, `{"resourceName": "sriov_vfio", "cdi": {"enabled": true},`, 1)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.CDISpecDir = filepath.Join(t.TempDir(), dir)
	if err := os.MkdirAll(n.opts.CDISpecDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := []string{"devledger_intel.com_gone.json", "devledger_intel.com_sriov_net.json"}
	for _, name := range append(slices.Clone(stale), "vendor-gpu.yaml") {
		if err := os.WriteFile(filepath.Join(n.opts.CDISpecDir, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n.start(t)
	ctx := waitCtx(t)
	waitFor(ctx, t, "the stale specs gone and the pool's written", func() bool {
		entries, _ := os.ReadDir(n.opts.CDISpecDir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return slices.Equal(names, []string{"devledger_intel.com_sriov_vfio.json", "vendor-gpu.yaml"})
	})
}

// An isRdma pool's Allocate hands out its RDMA device's character devices
// (uverbs, umad, issm, which the function's infiniband_verbs/ and
// infiniband_mad/ name) and rdma_cm, and names them in _INFO, as the
// SR-IOV plugin does.
func TestAnRDMAPoolHandsOutItsCharacterDevices(t *testing.T) {
	const cfg = `{"resourceList": [{"resourceName": "mlx_rdma", "selectors": {"vendors": ["15b3"], "devices": ["101c"], "drivers": ["mlx5_core"], "isRdma": true}}]}`
	const pool, vf = "intel.com/mlx_rdma", "0000:5e:00.2" // mlx5_2
	n := newTestNode(t, sysfsgen.ScenarioMellanox, cfg, kubelettest.Options{})
	n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, pool); err != nil {
		t.Fatal(err)
	}
	resp, err := n.kubelet.Allocate(ctx, pool, []string{vf})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	var paths []string
	for _, d := range cr.Devices {
		paths = append(paths, d.ContainerPath)
	}
	want := []string{"/dev/infiniband/issm2", "/dev/infiniband/umad2", "/dev/infiniband/uverbs2", "/dev/infiniband/rdma_cm"}
	if !slices.Equal(paths, want) {
		t.Errorf("Allocate of %s mounts %v, want %v", vf, paths, want)
	}
	if info := cr.Envs["PCIDEVICE_INTEL_COM_MLX_RDMA_INFO"]; !strings.Contains(info, `"uverbs":"/dev/infiniband/uverbs2"`) {
		t.Errorf("_INFO names no uverbs node: %s", info)
	}
}

// A pool of functions bound to igb_uio hands out each one's /dev/uio<N>
// and names it in _INFO's "uio", as the SR-IOV plugin does.
func TestAUIOPoolHandsOutItsUIODevice(t *testing.T) {
	const cfg = `{"resourceList": [{"resourceName": "dpdk_uio", "selectors": {"vendors": ["8086"], "drivers": ["igb_uio"]}}]}`
	const pool, vf = "intel.com/dpdk_uio", "0000:3b:01.0"
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	if err := n.roots.Bind(vf, "igb_uio"); err != nil {
		t.Fatal(err)
	}
	n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, pool); err != nil {
		t.Fatal(err)
	}
	resp, err := n.kubelet.Allocate(ctx, pool, []string{vf})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	if len(cr.Devices) != 1 || cr.Devices[0].HostPath != "/dev/uio0" || cr.Devices[0].ContainerPath != "/dev/uio0" {
		t.Errorf("Allocate of %s mounts %v, want /dev/uio0", vf, cr.Devices)
	}
	if info := cr.Envs["PCIDEVICE_INTEL_COM_DPDK_UIO_INFO"]; !strings.Contains(info, `"uio":{"mount":"/dev/uio0"}`) {
		t.Errorf("_INFO names no uio node: %s", info)
	}
}

// With CDI on, a container gets the device nodes of its devices' entries
// in the pool's spec, not Allocate's answer; those entries must be what
// Allocate would hand out now. /dev/infiniband/rdma_cm appears when
// rdma_ucm loads, which may be after the daemon started: an Allocate then
// names rdma_cm in _INFO, and the container must get the node too.
func TestCDISpecFollowsTheDeviceNodesAnAllocateSees(t *testing.T) {
	const cfg = `{"resourceList": [{"resourceName": "mlx_rdma", "cdi": {"enabled": true}, "selectors": {"vendors": ["15b3"], "devices": ["101c"], "drivers": ["mlx5_core"], "isRdma": true}}]}`
	const pool, vf = "intel.com/mlx_rdma", "0000:5e:00.2"
	n := newTestNode(t, sysfsgen.ScenarioMellanox, cfg, kubelettest.Options{})
	n.opts.WatchConfig = false
	cm := filepath.Join(n.roots.Dev, "infiniband", "rdma_cm")
	if err := os.Remove(cm); err != nil {
		t.Fatal(err)
	}
	n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cm, nil, 0o644); err != nil { // rdma_ucm loaded
		t.Fatal(err)
	}
	resp, err := n.kubelet.Allocate(ctx, pool, []string{vf})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	if info := cr.Envs["PCIDEVICE_INTEL_COM_MLX_RDMA_INFO"]; !strings.Contains(info, `"rdma_cm":"/dev/infiniband/rdma_cm"`) {
		t.Fatalf("_INFO names no rdma_cm: %s", info)
	}
	dev := resolver(t, n.opts.CDISpecDir).GetDevice(cr.CdiDevices[0].Name)
	if dev == nil {
		t.Fatalf("%s does not resolve", cr.CdiDevices[0].Name)
	}
	var nodes []string
	for _, d := range dev.ContainerEdits.DeviceNodes {
		nodes = append(nodes, d.Path)
	}
	if !slices.Contains(nodes, "/dev/infiniband/rdma_cm") {
		t.Errorf("the container's _INFO names /dev/infiniband/rdma_cm, but its CDI device %s gives it only %v", cr.CdiDevices[0].Name, nodes)
	}
}

// The CDI names an Allocate answers with resolve when it answers, as its
// device-info files exist: a spec file lost since the pool wrote it (a
// cleanup of /var/run/cdi, a write that failed) is written again by the
// Allocate that needs it, not only at the pool's next membership change.
func TestAnAllocateWritesAMissingCDISpecAgain(t *testing.T) {
	cfg := strings.Replace(sriovConfig, `{"resourceName": "sriov_vfio",`, `{"resourceName": "sriov_vfio", "cdi": {"enabled": true},`, 1)
	n := newTestNode(t, "sriov", cfg, kubelettest.Options{})
	n.opts.WatchConfig = false
	n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 }); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(n.opts.CDISpecDir, "devledger_intel.com_sriov_vfio.json")
	waitFor(ctx, t, "the pool's spec", func() bool { _, err := os.Stat(spec); return err == nil })
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	resp, err := n.kubelet.Allocate(ctx, vfioPool, []string{movingDevice})
	if err != nil {
		t.Fatal(err)
	}
	name := resp.ContainerResponses[0].CdiDevices[0].Name
	if resolver(t, n.opts.CDISpecDir).GetDevice(name) == nil {
		t.Errorf("the Allocate answered %s, which resolves through no spec: the container cannot start", name)
	}
}
