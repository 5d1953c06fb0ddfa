package allocation

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"
)

// cdiPool is pool with CDI enabled under kind.
func cdiPool(kind, prefix, name string, dt config.DeviceType, sels ...config.Selector) *config.Resource {
	res := pool(prefix, name, dt, sels...)
	res.CDI = config.CDI{Enabled: true, Kind: kind}
	return res
}

// withoutCDI is res with CDI disabled, as Respond answers a plain pool.
func withoutCDI(res *config.Resource) *config.Resource {
	plain := *res
	plain.CDI = config.CDI{}
	return &plain
}

// cdiCache loads the specs in dir as a runtime does, without watching, and
// fails t if the library reports an error for any of them.
func cdiCache(t *testing.T, dir string) *cdi.Cache {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for path, errs := range cache.GetErrors() {
		if len(errs) > 0 {
			t.Fatalf("CDI cache: %s: %v", path, errors.Join(errs...))
		}
	}
	return cache
}

// writeCDISpec builds and writes the spec of res for members, failing t on
// any error or refused member.
func writeCDISpec(t *testing.T, dir string, res *config.Resource, members []sysfs.Device, env Env) string {
	t.Helper()
	spec, refused, err := CDISpec(res, members, env)
	if err != nil || len(refused) > 0 {
		t.Fatalf("CDISpec: err %v, refused %v", err, refused)
	}
	path, err := WriteCDISpec(dir, res, spec)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func nodesOf(dns []*specs.DeviceNode) []events.DeviceNode {
	out := make([]events.DeviceNode, 0, len(dns))
	for _, dn := range dns {
		out = append(out, events.DeviceNode{ContainerPath: dn.Path, HostPath: dn.HostPath, Permissions: dn.Permissions})
	}
	return out
}

func rw(path string) events.DeviceNode { return rwAt(path, path) }

func rwAt(container, host string) events.DeviceNode {
	return events.DeviceNode{ContainerPath: container, HostPath: host, Permissions: "rw"}
}

// TestCDISpecResolvesAllocateNames does what a runtime does with an
// Allocate answer of a CDI pool: it loads the specs devledger wrote through
// the CDI library's own cache and resolves every name Respond returned.
// Each must resolve to the device nodes Respond gives that device when
// CDI is off.
func TestCDISpecResolvesAllocateNames(t *testing.T) {
	const pfA, pfB = "0000:3b:00.0", "0000:3b:00.1"
	noIOMMU := vf("0000:00:05.0", "", -1, "vfio-pci", "5", -1)
	noIOMMU.VFIODevice = false
	rdmaVF := func(addr string, idx int, rdma string) sysfs.Device {
		d := vf(addr, pfB, idx, "mlx5_core", "", 0)
		d.Vendor, d.Device, d.RDMADevices = "15b3", "101e", []string{rdma}
		return d
	}
	gpu := sysfs.Device{
		Address: "0000:65:00.0", Vendor: "10de", Device: "2330", Class: "030200",
		Driver: "vfio-pci", IOMMUGroup: "120", VFIODevice: true, TotalVFs: -1, NumVFs: -1, VFIndex: -1,
	}

	cases := []struct {
		name    string
		res     *config.Resource
		members []sysfs.Device
		env     Env
		// request is the container request, as indexes into members in
		// the kubelet's order.
		request []int
		// want pins the nodes of some devices independently of Respond,
		// so that the test fails if both lose them.
		want map[string][]events.DeviceNode
	}{
		{
			name: "vfio-vfs",
			res:  cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice),
			members: []sysfs.Device{
				vf("0000:3b:02.2", pfA, 2, "vfio-pci", "60", 0), // shares group 60 with 02.0
				vf("0000:3b:02.0", pfA, 0, "vfio-pci", "60", 0),
				vf("0000:3b:02.1", pfA, 1, "vfio-pci", "61", 0),
				noIOMMU,
			},
			env:     Env{DevRoot: devRoot(t, "vfio/vfio", "vfio/noiommu-5")},
			request: []int{2, 0, 3},
			want: map[string][]events.DeviceNode{
				"0000:3b:02.1": {rw("/dev/vfio/vfio"), rw("/dev/vfio/61")},
				"0000:00:05.0": {rw("/dev/vfio/vfio"), rwAt("/dev/vfio/5", "/dev/vfio/noiommu-5")},
			},
		},
		{
			name: "kernel-netdevice",
			res:  cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_netdevice", config.NetDevice),
			members: []sysfs.Device{
				vf("0000:3b:02.4", pfA, 4, "iavf", "64", 0),
				vf("0000:3b:02.5", pfA, 5, "iavf", "65", 0),
			},
			request: []int{1, 0},
			want:    map[string][]events.DeviceNode{"0000:3b:02.5": nil},
		},
		{
			name: "rdma",
			res:  cdiPool("nvidia.com/net-pci", "nvidia.com", "mlnx_sriov_rdma", config.NetDevice, config.Selector{IsRDMA: true}),
			members: []sysfs.Device{
				withChars(rdmaVF("0000:3b:0a.2", 2, "mlx5_2"), "mlx5_2", "uverbs2", "umad2", "issm2"),
				withChars(rdmaVF("0000:3b:0a.3", 3, "mlx5_3"), "mlx5_3", "uverbs3"),
			},
			env:     Env{DevRoot: devRoot(t, "infiniband/rdma_cm")},
			request: []int{0, 1},
			want: map[string][]events.DeviceNode{
				"0000:3b:0a.2": {rw("/dev/infiniband/issm2"), rw("/dev/infiniband/umad2"), rw("/dev/infiniband/uverbs2"), rw("/dev/infiniband/rdma_cm")},
			},
		},
		{
			name: "vhost-net",
			res:  cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk_vhost", config.NetDevice, config.Selector{NeedVhostNet: true}),
			members: []sysfs.Device{
				vf("0000:3b:02.0", pfA, 0, "vfio-pci", "60", 0),
				vf("0000:3b:02.1", pfA, 1, "vfio-pci", "61", 0),
			},
			env:     Env{DevRoot: devRoot(t, "vhost-net", "net/tun", "vfio/vfio"), HasVhostNet: true},
			request: []int{1},
			want: map[string][]events.DeviceNode{
				"0000:3b:02.1": {rw("/dev/vfio/vfio"), rw("/dev/vfio/61"), rw("/dev/vhost-net"), rw("/dev/net/tun")},
			},
		},
		{
			name:    "gpu",
			res:     cdiPool("nvidia.com/pci", "nvidia.com", "gpu", config.GenericPCI),
			members: []sysfs.Device{gpu},
			request: []int{0},
			want:    map[string][]events.DeviceNode{"0000:65:00.0": {rw("/dev/vfio/vfio"), rw("/dev/vfio/120")}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cdi")
			writeCDISpec(t, dir, tc.res, tc.members, tc.env)
			cache := cdiCache(t, dir)

			// The spec holds every member and nothing else.
			var all []string
			for _, m := range tc.members {
				all = append(all, tc.res.CDI.Kind+"="+m.Address)
			}
			slices.Sort(all)
			if got := cache.ListDevices(); !slices.Equal(got, all) {
				t.Errorf("cache lists %q, want %q", got, all)
			}

			var req []sysfs.Device
			for _, i := range tc.request {
				req = append(req, tc.members[i])
			}
			alloc, err := Respond(tc.res, req, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if len(alloc.CDIDevices) != len(req) || len(alloc.Devices) != 0 {
				t.Fatalf("Respond gave CDI names %q and nodes %v, want one name per device and no node", alloc.CDIDevices, alloc.Devices)
			}
			var envOnly []string
			for i, name := range alloc.CDIDevices {
				dev := cache.GetDevice(name)
				if dev == nil {
					t.Errorf("%s does not resolve", name)
					continue
				}
				if dev.GetQualifiedName() != name || dev.Name != req[i].Address {
					t.Errorf("%s resolved to %s", name, dev.GetQualifiedName())
				}
				plain, err := Respond(withoutCDI(tc.res), req[i:i+1], tc.env)
				if err != nil {
					t.Fatal(err)
				}
				edits := dev.ContainerEdits
				if got := nodesOf(edits.DeviceNodes); !slices.Equal(got, plain.Devices) {
					t.Errorf("%s: device nodes %v, Respond without CDI gives %v", name, got, plain.Devices)
				}
				if want, pinned := tc.want[req[i].Address]; pinned && !slices.Equal(nodesOf(edits.DeviceNodes), want) {
					t.Errorf("%s: device nodes %v, want %v", name, nodesOf(edits.DeviceNodes), want)
				}
				if len(edits.Mounts) != len(plain.Mounts) || len(edits.Hooks) != 0 || len(edits.NetDevices) != 0 || edits.IntelRdt != nil || len(edits.AdditionalGIDs) != 0 {
					t.Errorf("%s: edits beyond Respond's: %+v", name, edits)
				}
				var wantEnv []string
				if len(plain.Devices) == 0 {
					wantEnv = []string{cdiDeviceEnv(tc.res, req[i].Address)}
					envOnly = append(envOnly, name)
				}
				if !slices.Equal(edits.Env, wantEnv) {
					t.Errorf("%s: env %q, want %q", name, edits.Env, wantEnv)
				}
				for _, kv := range edits.Env {
					if k, _, _ := strings.Cut(kv, "="); alloc.Envs[k] != "" {
						t.Errorf("%s: sets %s, which Allocate sets for the whole request", name, k)
					}
				}
			}
			if spec := cache.GetVendorSpecs(strings.Split(tc.res.CDI.Kind, "/")[0]); len(spec) != 1 || len(spec[0].ContainerEdits.DeviceNodes)+len(spec[0].ContainerEdits.Env) != 0 {
				t.Errorf("want one spec without spec-wide edits, got %d", len(spec))
			}

			// Injecting a device node makes the library stat its host path
			// (the spec cannot carry type and numbers: sysfs does not read
			// them), and /dev/vfio/<group> and friends exist only on a real
			// node; so only devices without nodes are injected here.
			if len(envOnly) > 0 {
				ociSpec := &oci.Spec{Process: &oci.Process{Env: []string{"KEEP=1"}}}
				if unresolved, err := cache.InjectDevices(ociSpec, envOnly...); err != nil {
					t.Fatalf("inject %q: unresolved %q: %v", envOnly, unresolved, err)
				}
				want := []string{"KEEP=1"}
				for _, name := range envOnly {
					_, addr, _ := strings.Cut(name, "=")
					want = append(want, cdiDeviceEnv(tc.res, addr))
				}
				if !slices.Equal(ociSpec.Process.Env, want) {
					t.Errorf("injected env %q, want %q", ociSpec.Process.Env, want)
				}
			}
		})
	}
}

// TestWriteCDISpecFollowsMembers rewrites a pool's spec as its members
// change, as the pool actor will, and checks what a runtime then resolves.
func TestWriteCDISpecFollowsMembers(t *testing.T) {
	const pf = "0000:3b:00.0"
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	a := vf("0000:3b:02.0", pf, 0, "vfio-pci", "60", 0)
	b := vf("0000:3b:02.1", pf, 1, "vfio-pci", "61", 0)
	c := vf("0000:3b:02.2", pf, 2, "vfio-pci", "62", 0)
	name := func(d sysfs.Device) string { return res.CDI.Kind + "=" + d.Address }
	// resolves checks which of a, b and c resolve.
	resolves := func(t *testing.T, dir string, want ...bool) {
		t.Helper()
		cache := cdiCache(t, dir)
		for i, d := range []sysfs.Device{a, b, c} {
			if got := cache.GetDevice(name(d)) != nil; got != want[i] {
				t.Errorf("%s resolves: %v, want %v", name(d), got, want[i])
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "run", "cdi") // made by the first write

	path := writeCDISpec(t, dir, res, []sysfs.Device{a, b}, Env{})
	if path != CDISpecPath(dir, res) {
		t.Errorf("written to %s, want %s", path, CDISpecPath(dir, res))
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("spec dir: %v, %v; want mode 0755", fi, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("spec file: %v, %v; want mode 0644", fi, err)
	}
	resolves(t, dir, true, true, false)

	// a leaves, c joins.
	before := statAged(t, path)
	writeCDISpec(t, dir, res, []sysfs.Device{c, b}, Env{})
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Error("a changed spec was written in place, not renamed over the old file")
	}
	resolves(t, dir, false, true, true)

	// The same members, in another order: not a byte changes, so the file
	// is not touched.
	before = statAged(t, path)
	writeCDISpec(t, dir, res, []sysfs.Device{b, c}, Env{})
	after, err = os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("an unchanged spec was rewritten: mtime %v, was %v", after.ModTime(), before.ModTime())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("spec dir holds %d entries, want only the spec", len(entries))
	}

	// The pool goes.
	if err := RemoveCDISpec(dir, res); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spec still there after RemoveCDISpec: %v", err)
	}
	if got := cdiCache(t, dir).ListDevices(); len(got) != 0 {
		t.Errorf("after RemoveCDISpec the cache lists %q", got)
	}
	if err := RemoveCDISpec(dir, res); err != nil {
		t.Errorf("removing a missing spec: %v", err)
	}
	if err := RemoveCDISpec(filepath.Join(dir, "absent"), res); err != nil {
		t.Errorf("removing from a missing dir: %v", err)
	}
}

// statAged sets path's mtime an hour back, so that a rewrite within the
// file system's timestamp granularity still shows, and returns its info.
func statAged(t *testing.T, path string) os.FileInfo {
	t.Helper()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// A pool whose last usable member left has no names to resolve: writing
// its empty spec removes the file, which CDI would refuse anyway.
func TestWriteCDISpecWithoutDevicesRemoves(t *testing.T) {
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	dir := t.TempDir()
	path := writeCDISpec(t, dir, res, []sysfs.Device{vf("0000:3b:02.0", "0000:3b:00.0", 0, "vfio-pci", "60", 0)}, Env{})

	spec, refused, err := CDISpec(res, nil, Env{})
	if err != nil || len(refused) > 0 || spec == nil || len(spec.Devices) != 0 {
		t.Fatalf("CDISpec of no members = %+v, %v, %v; want an empty spec", spec, refused, err)
	}
	if _, err := WriteCDISpec(dir, res, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty spec left the file: %v", err)
	}
	if _, err := WriteCDISpec(dir, res, nil); err != nil {
		t.Errorf("nil spec, no file: %v", err)
	}
}

// A device that another spec in the dir defines too (the SR-IOV plugin's,
// left behind) is a conflict, named with both files; none otherwise.
func TestCDIConflicts(t *testing.T) {
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	dir := t.TempDir()
	path := writeCDISpec(t, dir, res, []sysfs.Device{vf("0000:3b:02.0", "0000:3b:00.0", 0, "vfio-pci", "60", 0)}, Env{})
	if got := CDIConflicts(dir, res); len(got) != 0 {
		t.Fatalf("conflicts of a spec alone: %v", got)
	}
	theirs := filepath.Join(dir, "sriov-dp-intel.com-net-pci.json")
	data := `{"cdiVersion":"0.5.0","kind":"intel.com/net-pci","devices":[{"name":"0000:3b:02.0","containerEdits":{"deviceNodes":[{"path":"/dev/vfio/60"}]}}]}`
	if err := os.WriteFile(theirs, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got := CDIConflicts(dir, res)
	if len(got) != 1 || !strings.Contains(got[0].Error(), "intel.com/net-pci=0000:3b:02.0") || !strings.Contains(got[0].Error(), theirs) || !strings.Contains(got[0].Error(), path) {
		t.Errorf("conflicts %v, want intel.com/net-pci=0000:3b:02.0 in %s and %s", got, path, theirs)
	}
}

func TestCDISpecRefusesMembers(t *testing.T) {
	const pf = "0000:3b:00.0"
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	ok := vf("0000:3b:02.0", pf, 0, "vfio-pci", "60", 0)
	cases := []struct {
		name    string
		bad     sysfs.Device
		want    error
		mention string
	}{
		{"vfio without group", vf("0000:3b:02.1", pf, 1, "vfio-pci", "", 0), ErrNoIOMMUGroup, "0000:3b:02.1"},
		{"listed twice", ok, ErrInvalidRequest, "0000:3b:02.0"},
		{"no address", sysfs.Device{Driver: "iavf"}, ErrInvalidRequest, "member 1 has no PCI address"},
		{"not a CDI device name", vf("0000:3b:02.", pf, 1, "iavf", "", 0), ErrInvalidRequest, "0000:3b:02."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, refused, err := CDISpec(res, []sysfs.Device{ok, tc.bad}, Env{})
			if err != nil {
				t.Fatalf("a refused member failed the whole spec: %v", err)
			}
			if len(refused) != 1 || !errors.Is(refused[0], tc.want) || !strings.Contains(refused[0].Error(), tc.mention) {
				t.Fatalf("refused %v, want one error wrapping %v that mentions %q", refused, tc.want, tc.mention)
			}
			if len(spec.Devices) != 1 || spec.Devices[0].Name != ok.Address {
				t.Fatalf("spec devices %+v, want only %s", spec.Devices, ok.Address)
			}
			dir := t.TempDir()
			if _, err := WriteCDISpec(dir, res, spec); err != nil {
				t.Fatal(err)
			}
			cache := cdiCache(t, dir)
			if got, want := cache.ListDevices(), []string{res.CDI.Kind + "=" + ok.Address}; !slices.Equal(got, want) {
				t.Errorf("cache lists %q, want %q", got, want)
			}
		})
	}
}

// A pool that can have no spec at all fails it whole.
func TestCDISpecPoolErrors(t *testing.T) {
	dev := vf("0000:3b:02.0", "0000:3b:00.0", 0, "vfio-pci", "60", 0)
	cases := []struct {
		name    string
		res     *config.Resource
		mention string
	}{
		{"kind without class", cdiPool("intel.com", "intel.com", "dpdk", config.NetDevice), `"intel.com"`},
		{"empty kind", cdiPool("", "intel.com", "dpdk", config.NetDevice), "intel.com/dpdk"},
		{"aux pool", cdiPool("nvidia.com/net-sf", "nvidia.com", "sf", config.AuxNetDevice), "nvidia.com/sf"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, refused, err := CDISpec(tc.res, []sysfs.Device{dev}, Env{})
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want ErrUnsupported mentioning %q", err, tc.mention)
			}
			if spec != nil || refused != nil {
				t.Errorf("spec %+v, refused %v alongside the error", spec, refused)
			}
		})
	}
}

// Equal members give equal bytes whatever their order, at the lowest CDI
// version that holds them, which older runtimes still accept.
func TestCDISpecBytes(t *testing.T) {
	const pf = "0000:3b:00.0"
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_netdevice", config.NetDevice)
	a := vf("0000:3b:02.0", pf, 0, "vfio-pci", "60", 0)
	b := vf("0000:3b:02.1", pf, 1, "iavf", "61", 0)
	var files []string
	for _, members := range [][]sysfs.Device{{a, b}, {b, a}} {
		dir := t.TempDir()
		path := writeCDISpec(t, dir, res, members, Env{})
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, string(data))
	}
	want := `{"cdiVersion":"0.5.0","kind":"intel.com/net-pci","devices":[` +
		`{"name":"0000:3b:02.0","containerEdits":{"deviceNodes":[{"path":"/dev/vfio/vfio","hostPath":"/dev/vfio/vfio","permissions":"rw"},{"path":"/dev/vfio/60","hostPath":"/dev/vfio/60","permissions":"rw"}]}},` +
		`{"name":"0000:3b:02.1","containerEdits":{"env":["DEVLEDGER_CDI_INTEL_COM_INTEL_SRIOV_NETDEVICE_0000_3B_02_1=0000:3b:02.1"]}}],` +
		`"containerEdits":{}}`
	for i, got := range files {
		if got != want {
			t.Errorf("spec file %d:\n%s\nwant\n%s", i, got, want)
		}
	}

	// A class with a dot needs CDI 0.6.0, and gets it.
	dotted := cdiPool("intel.com/net.pci", "intel.com", "intel_sriov_netdevice", config.NetDevice)
	spec, _, err := CDISpec(dotted, []sysfs.Device{a}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Version != "0.6.0" {
		t.Errorf("version %s for kind %s, want 0.6.0", spec.Version, dotted.CDI.Kind)
	}
	writeCDISpec(t, t.TempDir(), dotted, []sysfs.Device{a}, Env{})
}

// Pools that share a kind get a file each, and a runtime resolves the
// devices of both.
func TestCDISpecPathPerPool(t *testing.T) {
	const pf = "0000:3b:00.0"
	dpdk := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	netdev := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_netdevice", config.NetDevice)
	dir := t.TempDir()
	if got, want := CDISpecPath(dir, dpdk), filepath.Join(dir, "devledger_intel.com_intel_sriov_dpdk.json"); got != want {
		t.Errorf("CDISpecPath = %s, want %s", got, want)
	}
	if CDISpecPath(dir, dpdk) == CDISpecPath(dir, netdev) {
		t.Fatal("two pools share a spec file")
	}
	// The file follows the pool, not its kind.
	rekinded := *dpdk
	rekinded.CDI.Kind = "example.com/net"
	if CDISpecPath(dir, &rekinded) != CDISpecPath(dir, dpdk) {
		t.Error("a pool's spec file changes with its kind")
	}

	writeCDISpec(t, dir, dpdk, []sysfs.Device{vf("0000:3b:02.0", pf, 0, "vfio-pci", "60", 0)}, Env{})
	writeCDISpec(t, dir, netdev, []sysfs.Device{vf("0000:3b:02.1", pf, 1, "iavf", "", 0)}, Env{})
	want := []string{"intel.com/net-pci=0000:3b:02.0", "intel.com/net-pci=0000:3b:02.1"}
	if got := cdiCache(t, dir).ListDevices(); !slices.Equal(got, want) {
		t.Errorf("cache lists %q, want %q", got, want)
	}
	if err := RemoveCDISpec(dir, dpdk); err != nil {
		t.Fatal(err)
	}
	if got := cdiCache(t, dir).ListDevices(); !slices.Equal(got, want[1:]) {
		t.Errorf("after removing one pool's spec the cache lists %q, want %q", got, want[1:])
	}
}

// A spec that is not for the pool, or that CDI refuses, is not written and
// leaves the pool's file as it was, with no temporary file behind.
func TestWriteCDISpecRefuses(t *testing.T) {
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	dir := t.TempDir()
	path := writeCDISpec(t, dir, res, []sysfs.Device{vf("0000:3b:02.0", "0000:3b:00.0", 0, "vfio-pci", "60", 0)}, Env{})
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edits := specs.ContainerEdits{Env: []string{"A=1"}}
	cases := []struct {
		name string
		spec *specs.Spec
		want error
	}{
		{"other kind", &specs.Spec{Version: "0.5.0", Kind: "example.com/net", Devices: []specs.Device{{Name: "x", ContainerEdits: edits}}}, ErrInvalidRequest},
		{"bad device name", &specs.Spec{Version: "0.5.0", Kind: res.CDI.Kind, Devices: []specs.Device{{Name: "a/b", ContainerEdits: edits}}}, nil},
		{"device without edits", &specs.Spec{Version: "0.5.0", Kind: res.CDI.Kind, Devices: []specs.Device{{Name: "x"}}}, nil},
		{"unknown version", &specs.Spec{Version: "9.9.9", Kind: res.CDI.Kind, Devices: []specs.Device{{Name: "x", ContainerEdits: edits}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WriteCDISpec(dir, res, tc.spec)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want an error naming %s (wrapping %v)", err, path, tc.want)
			}
			if got, _ := os.ReadFile(path); string(got) != string(good) {
				t.Errorf("a refused spec changed the file to %s", got)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("spec dir holds %d entries, want only the spec", len(entries))
			}
		})
	}
}

// Mounts Respond would give a device are carried as bind mounts the
// library accepts and injects; Respond gives none today, so they are
// checked on the conversion itself.
func TestCDIEditsMounts(t *testing.T) {
	alloc := events.ContainerAllocation{
		Envs:    map[string]string{"PCIDEVICE_X": "0000:3b:02.0"},
		Devices: []events.DeviceNode{rw("/dev/vfio/60")},
		Mounts: []events.Mount{
			{ContainerPath: "/run/ro", HostPath: "/var/lib/ro", ReadOnly: true},
			{ContainerPath: "/run/rw", HostPath: "/var/lib/rw"},
		},
	}
	e := cdiEdits(alloc)
	if len(e.Env) != 0 {
		t.Errorf("request variables copied: %q", e.Env)
	}
	if got := nodesOf(e.DeviceNodes); !slices.Equal(got, alloc.Devices) {
		t.Errorf("nodes %v, want %v", got, alloc.Devices)
	}
	e.DeviceNodes = nil // injection would stat /dev/vfio/60
	dir := t.TempDir()
	res := cdiPool("intel.com/net-pci", "intel.com", "intel_sriov_dpdk", config.NetDevice)
	spec := &specs.Spec{Kind: res.CDI.Kind, Devices: []specs.Device{{Name: "0000:3b:02.0", ContainerEdits: e}}}
	var err error
	if spec.Version, err = specs.MinimumRequiredVersion(spec); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCDISpec(dir, res, spec); err != nil {
		t.Fatal(err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}}
	if _, err := cdiCache(t, dir).InjectDevices(ociSpec, res.CDI.Kind+"=0000:3b:02.0"); err != nil {
		t.Fatal(err)
	}
	want := []oci.Mount{
		{Destination: "/run/ro", Source: "/var/lib/ro", Type: "bind", Options: []string{"rbind", "ro"}},
		{Destination: "/run/rw", Source: "/var/lib/rw", Type: "bind", Options: []string{"rbind", "rw"}},
	}
	if len(ociSpec.Mounts) != len(want) {
		t.Fatalf("injected mounts %+v, want %+v", ociSpec.Mounts, want)
	}
	for i := range want {
		got := ociSpec.Mounts[i]
		if got.Destination != want[i].Destination || got.Source != want[i].Source || got.Type != want[i].Type || !slices.Equal(got.Options, want[i].Options) {
			t.Errorf("mount %d = %+v, want %+v", i, got, want[i])
		}
	}
}
