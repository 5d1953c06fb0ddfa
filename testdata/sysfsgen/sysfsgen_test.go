package sysfsgen

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// checkTree fails the test if any symlink under root is absolute or
// dangling, or resolves outside root: a built or mutated tree must look
// like a consistent kernel view and never point at the host.
func checkTree(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			t.Errorf("%s: absolute link to %s", path, target)
			return nil
		}
		resolved, err := filepath.EvalSymlinks(path)
		if err != nil && !strings.HasPrefix(d.Name(), "virtfn") {
			t.Errorf("%s -> %s: dangling", path, target)
			return nil
		}
		if err != nil {
			return nil // a VF removed alone: the kernel keeps its PF's link
		}
		realRoot, _ := filepath.EvalSymlinks(root)
		if !strings.HasPrefix(resolved, realRoot+string(filepath.Separator)) {
			t.Errorf("%s -> %s: resolves outside the tree", path, target)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return strings.TrimSpace(string(b))
}

func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestScenarios(t *testing.T) {
	want := []string{"gpu", "large", "mellanox", "noiommu", "sriov", "virtio"}
	if got := Scenarios(); !slices.Equal(got, want) {
		t.Fatalf("Scenarios() = %v, want %v", got, want)
	}
	if _, err := Scenario("nope"); !errors.Is(err, ErrUnknownScenario) {
		t.Errorf("Scenario(nope) = %v, want ErrUnknownScenario", err)
	}
	counts := map[string]int{"gpu": 5, "large": 1032, "mellanox": 8, "noiommu": 4, "sriov": 12, "virtio": 4}
	for _, name := range want {
		t.Run(name, func(t *testing.T) {
			n, err := Scenario(name)
			if err != nil {
				t.Fatal(err)
			}
			if got := FunctionCount(n); got != counts[name] {
				t.Errorf("FunctionCount = %d, want %d", got, counts[name])
			}
			if err := validate(n); err != nil {
				t.Errorf("scenario is invalid: %v", err)
			}
			if name == ScenarioLarge {
				return // built by the sysfs benchmark; too slow to build twice
			}
			r := TempNode(t, n)
			checkTree(t, filepath.Dir(r.Sysfs))
			devs, err := os.ReadDir(filepath.Join(r.Sysfs, "bus", "pci", "devices"))
			if err != nil || len(devs) != counts[name] {
				t.Errorf("bus/pci/devices has %d entries (%v), want %d", len(devs), err, counts[name])
			}
			if !exists(filepath.Join(r.Proc, "net", "route")) {
				t.Error("no proc/net/route")
			}
		})
	}
}

func TestLargeMakeUp(t *testing.T) {
	if LargeFunctions != 1032 || LargePFs+LargePFs*LargeVFsPerPF != 1024 || LargeGPUs != 8 {
		t.Fatalf("large scenario: %d functions = %d PFs × (1 + %d VFs) + %d GPUs; want 1,032 = 1,024 SR-IOV functions + 8 GPUs",
			LargeFunctions, LargePFs, LargeVFsPerPF, LargeGPUs)
	}
	n, _ := Scenario(ScenarioLarge)
	var vfs, gpus int
	for _, f := range n.Functions {
		vfs += len(f.VFs)
		if f.Class == "030200" {
			gpus++
		}
	}
	if vfs != LargePFs*LargeVFsPerPF || gpus != LargeGPUs {
		t.Errorf("large scenario has %d VFs and %d GPUs", vfs, gpus)
	}
}

func TestScenarioReturnsCopies(t *testing.T) {
	a, _ := Scenario(ScenarioSRIOV)
	a.Functions[1].VFs[0].Driver = "changed"
	b, _ := Scenario(ScenarioSRIOV)
	if b.Functions[1].VFs[0].Driver == "changed" {
		t.Error("Scenario shares state between calls")
	}
}

// TestBuildLayout checks the kernel's layout on the sriov scenario, link by
// link.
func TestBuildLayout(t *testing.T) {
	r := TempScenario(t, ScenarioSRIOV)
	pf := "0000:3b:00.0"
	vf := "0000:3b:01.2"
	links := []struct{ path, target string }{
		{"bus/pci/devices/" + pf, "../../../devices/pci0000:3b/" + pf},
		{"devices/pci0000:3b/" + pf + "/driver", "../../../bus/pci/drivers/ice"},
		{"devices/pci0000:3b/" + pf + "/iommu_group", "../../../kernel/iommu_groups/20"},
		{"devices/pci0000:3b/" + pf + "/virtfn2", "../" + vf},
		{"devices/pci0000:3b/" + vf + "/physfn", "../" + pf},
		{"devices/pci0000:3b/" + vf + "/driver", "../../../bus/pci/drivers/vfio-pci"},
		{"bus/pci/drivers/vfio-pci/" + vf, "../../../../devices/pci0000:3b/" + vf},
		{"kernel/iommu_groups/102/devices/" + vf, "../../../../devices/pci0000:3b/" + vf},
		{"class/net/ens785f0", "../../devices/pci0000:3b/" + pf + "/net/ens785f0"},
	}
	for _, l := range links {
		got, err := os.Readlink(filepath.Join(r.Sysfs, l.path))
		if err != nil || got != l.target {
			t.Errorf("%s -> %q (%v), want %q", l.path, got, err, l.target)
		}
	}
	files := []struct{ path, content string }{
		{"bus/pci/devices/" + pf + "/vendor", "0x8086"},
		{"bus/pci/devices/" + pf + "/class", "0x020000"},
		{"bus/pci/devices/" + pf + "/sriov_numvfs", "4"},
		{"bus/pci/devices/" + pf + "/sriov_totalvfs", "256"},
		{"bus/pci/devices/" + vf + "/device", "0x1889"},
		{"bus/pci/devices/" + vf + "/numa_node", "0"},
		{"class/net/ens785f0/operstate", "up"},
		{"class/net/ens785f0/carrier", "1"},
		{"class/net/ens785f0/type", "1"},
		{"class/net/ens785f1/operstate", "down"},
		{"class/net/ens785f1/carrier", "0"},
	}
	for _, f := range files {
		if got := readTrim(t, filepath.Join(r.Sysfs, f.path)); got != f.content {
			t.Errorf("%s = %q, want %q", f.path, got, f.content)
		}
	}
	for _, p := range []string{"vfio/vfio", "vfio/102", "vfio/113", "vhost-net", "net/tun"} {
		if !exists(filepath.Join(r.Dev, p)) {
			t.Errorf("dev/%s missing", p)
		}
	}
	if exists(filepath.Join(r.Dev, "vfio", "100")) {
		t.Error("dev/vfio/100 exists for a VF bound to iavf")
	}
	route := readTrim(t, filepath.Join(r.Proc, "net", "route"))
	lines := strings.Split(route, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "eno1\t00000000\t") {
		t.Errorf("proc/net/route has no default route via eno1:\n%s", route)
	}
}

// In vfio's no-IOMMU mode a group's node is dev/vfio/noiommu-<group>,
// made and removed by binding and unbinding as dev/vfio/<group> is.
func TestBuildNoIOMMU(t *testing.T) {
	r := TempScenario(t, ScenarioNoIOMMU)
	if got := readTrim(t, filepath.Join(r.Sysfs, noIOMMUParam)); got != "Y" {
		t.Errorf("%s = %q, want Y", noIOMMUParam, got)
	}
	node := filepath.Join(r.Dev, "vfio", "noiommu-0")
	if !exists(node) || exists(filepath.Join(r.Dev, "vfio", "0")) {
		t.Errorf("vfio nodes: noiommu-0 %v (want true), 0 %v (want false)", exists(node), exists(filepath.Join(r.Dev, "vfio", "0")))
	}
	if err := r.Unbind("0000:00:05.0"); err != nil {
		t.Fatal(err)
	}
	if exists(node) {
		t.Error("noiommu-0 stays after its only member was unbound")
	}
	if err := r.Bind("0000:00:05.0", "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if !exists(node) {
		t.Error("no noiommu-0 after the rebind")
	}
}

func TestBuildVirtioAndMellanoxLayout(t *testing.T) {
	v := TempScenario(t, ScenarioVirtio)
	for _, p := range []string{
		"devices/pci0000:00/0000:00:03.0/virtio0/net/eth0/operstate",
		"devices/pci0000:00/0000:00:03.0/virtio0/driver",
		"devices/pci0000:00/0000:00:04.0/virtio1/driver",
	} {
		if !exists(filepath.Join(v.Sysfs, p)) {
			t.Errorf("virtio: %s missing", p)
		}
	}
	if exists(filepath.Join(v.Sysfs, "devices/pci0000:00/0000:00:03.0/iommu_group")) || exists(filepath.Join(v.Dev, "vfio")) {
		t.Error("virtio: a VM without IOMMU has IOMMU groups or VFIO")
	}
	if got := readTrim(t, filepath.Join(v.Sysfs, "bus/pci/devices/0000:00:03.0/numa_node")); got != "-1" {
		t.Errorf("virtio: numa_node = %s, want -1", got)
	}

	m := TempScenario(t, ScenarioMellanox)
	pkeys := filepath.Join(m.Sysfs, "bus/pci/devices/0000:5e:00.1/infiniband/mlx5_1/ports/1/pkeys")
	if got := readTrim(t, filepath.Join(pkeys, "1")); got != "0x8001" {
		t.Errorf("mellanox: pkeys/1 = %q", got)
	}
	if got := readTrim(t, filepath.Join(m.Sysfs, "class/net/ib0/type")); got != "32" {
		t.Errorf("mellanox: ib0 type = %q", got)
	}
	for _, p := range []string{"bus/auxiliary/devices/mlx5_core.sf.2", "class/infiniband/mlx5_0"} {
		if !exists(filepath.Join(m.Sysfs, p)) {
			t.Errorf("mellanox: %s missing", p)
		}
	}
	if got, _ := os.Readlink(filepath.Join(m.Sysfs, "bus/pci/devices/0000:5e:00.5/vdpa0/driver")); filepath.Base(got) != "vhost_vdpa" {
		t.Errorf("mellanox: VF 3 vdpa0 driver = %q", got)
	}
}

func TestBuildRejects(t *testing.T) {
	fn := func(mod func(*Function)) Node {
		f := Function{Address: "0000:01:00.0", Vendor: "8086", Device: "1592", Class: "020000", TotalVFs: 2}
		mod(&f)
		return Node{Functions: []Function{f}}
	}
	tests := []struct {
		name string
		node Node
		want string
	}{
		{"bad address", fn(func(f *Function) { f.Address = "1:2:3" }), "not of the form"},
		{"upper-case address", fn(func(f *Function) { f.Address = "0000:3B:00.0" }), "not of the form"},
		{"bad vendor", fn(func(f *Function) { f.Vendor = "80861" }), "vendor"},
		{"bad class", fn(func(f *Function) { f.Class = "0200" }), "class"},
		{"too many VFs", fn(func(f *Function) { f.VFs = make([]Function, 3) }), "TotalVFs"},
		{"nested VFs", fn(func(f *Function) { f.VFs = []Function{{VFs: []Function{{}}}} }), "cannot have VFs"},
		{"driver with slash", fn(func(f *Function) { f.Driver = "../x" }), "driver"},
		{"bad group", fn(func(f *Function) { f.IOMMUGroup = "g1" }), "IOMMU group"},
		{"duplicate interface", fn(func(f *Function) { f.Interfaces = []Interface{{Name: "a"}, {Name: "a"}} }), "used twice"},
		{"bad interface", fn(func(f *Function) { f.Interfaces = []Interface{{Name: "a/b"}} }), "interface name"},
		{"duplicate address", Node{Functions: []Function{
			{Address: "0000:01:00.0", Vendor: "8086", Device: "1592", Class: "020000"},
			{Address: "0000:01:00.0", Vendor: "8086", Device: "1592", Class: "020000"},
		}}, "used twice"},
		{"VF on a PF's address", fn(func(f *Function) {
			f.VFs = []Function{{Address: "0000:01:00.0"}}
		}), "used twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(t.TempDir(), tc.node)
			if !errors.Is(err, ErrInvalidNode) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build = %v, want ErrInvalidNode saying %q", err, tc.want)
			}
		})
	}
	t.Run("twice in one directory", func(t *testing.T) {
		dir := t.TempDir()
		n, _ := Scenario(ScenarioGPU)
		if _, err := Build(dir, n); err != nil {
			t.Fatal(err)
		}
		if _, err := Build(dir, n); err == nil {
			t.Error("second Build in the same directory succeeded")
		}
	})
}

func TestVFAddress(t *testing.T) {
	tests := []struct {
		pf                    string
		offset, stride, index int
		want                  string
		wantErr               bool
	}{
		{"0000:3b:00.0", 8, 1, 0, "0000:3b:01.0", false},
		{"0000:3b:00.0", 8, 1, 9, "0000:3b:02.1", false},
		{"0000:5e:00.0", 2, 1, 3, "0000:5e:00.5", false},
		{"0000:3b:00.0", 0, 0, 0, "0000:3b:00.1", false},
		{"0000:17:00.0", 8, 1, 126, "0000:17:10.6", false},
		{"0000:3b:00.0", 128, 2, 2, "0000:3b:10.4", false},
		{"0000:ff:1f.0", 8, 1, 0, "", true},
		{"0000:3b:00.0", 8, 1, -1, "", true},
		{"bad", 8, 1, 0, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			got, err := VFAddress(tc.pf, tc.offset, tc.stride, tc.index)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("VFAddress(%s, %d, %d, %d) = %q, %v; want %q", tc.pf, tc.offset, tc.stride, tc.index, got, err, tc.want)
			}
		})
	}
}

// TestMutations drives each mutation on a fresh sriov tree and checks the
// files it leaves, and that the tree stays consistent (no dangling link).
func TestMutations(t *testing.T) {
	const (
		pf    = "0000:3b:00.0"
		vfio  = "0000:3b:01.2" // VF 2, vfio-pci, group 102
		iavf  = "0000:3b:01.0" // VF 0, iavf, ens785f0v0, group 100
		other = "0000:af:00.0"
	)
	tests := []struct {
		name   string
		mutate func(r Roots) error
		check  func(t *testing.T, r Roots)
	}{
		{
			name:   "unbind vfio-pci",
			mutate: func(r Roots) error { return r.Unbind(vfio) },
			check: func(t *testing.T, r Roots) {
				if exists(filepath.Join(r.DevicePath(vfio), "driver")) || exists(filepath.Join(r.Sysfs, "bus/pci/drivers/vfio-pci", vfio)) {
					t.Error("driver links remain")
				}
				if exists(filepath.Join(r.Dev, "vfio", "102")) {
					t.Error("dev/vfio/102 remains")
				}
			},
		},
		{
			name:   "unbind a net driver drops its interfaces",
			mutate: func(r Roots) error { return r.Unbind(iavf) },
			check: func(t *testing.T, r Roots) {
				if exists(filepath.Join(r.DevicePath(iavf), "net")) || exists(filepath.Join(r.Sysfs, "class/net/ens785f0v0")) {
					t.Error("interface remains after unbind")
				}
			},
		},
		{
			name:   "bind iavf VF to vfio-pci",
			mutate: func(r Roots) error { return r.Bind(iavf, "vfio-pci") },
			check: func(t *testing.T, r Roots) {
				got, _ := os.Readlink(filepath.Join(r.DevicePath(iavf), "driver"))
				if filepath.Base(got) != "vfio-pci" || !exists(filepath.Join(r.Dev, "vfio", "100")) {
					t.Errorf("driver -> %q, dev/vfio/100 present: %v", got, exists(filepath.Join(r.Dev, "vfio", "100")))
				}
			},
		},
		{
			// The kernel gives a function on a vfio-pci variant driver its
			// group node as it does one on vfio-pci, and takes it when the
			// group's last such member is unbound.
			name: "bind and unbind a vfio-pci variant",
			mutate: func(r Roots) error {
				if err := r.Bind(iavf, "mlx5_vfio_pci"); err != nil {
					return err
				}
				if !exists(filepath.Join(r.Dev, "vfio", "100")) {
					return errors.New("no dev/vfio/100 after binding mlx5_vfio_pci")
				}
				return r.Unbind(iavf)
			},
			check: func(t *testing.T, r Roots) {
				if exists(filepath.Join(r.Dev, "vfio", "100")) {
					t.Error("dev/vfio/100 remains after its only member left mlx5_vfio_pci")
				}
			},
		},
		{
			name:   "bind to a new driver creates it",
			mutate: func(r Roots) error { return r.Bind(vfio, "dpdk_fake") },
			check: func(t *testing.T, r Roots) {
				if !exists(filepath.Join(r.Sysfs, "bus/pci/drivers/dpdk_fake/bind")) {
					t.Error("driver directory not created")
				}
			},
		},
		{
			name:   "remove a VF",
			mutate: func(r Roots) error { return r.Remove(vfio) },
			check: func(t *testing.T, r Roots) {
				if exists(r.DevicePath(vfio)) || exists(filepath.Join(r.Sysfs, "bus/pci/devices", vfio)) ||
					exists(filepath.Join(r.Sysfs, "kernel/iommu_groups/102")) {
					t.Error("VF or its links remain")
				}
				// The PF's link to it stays, dangling, until SR-IOV is disabled.
				if target, err := os.Readlink(filepath.Join(r.DevicePath(pf), "virtfn2")); err != nil || filepath.Base(target) != vfio || !os.IsNotExist(statErr(filepath.Join(r.DevicePath(pf), "virtfn2"))) {
					t.Errorf("the PF's virtfn2 link: %q, %v; want it dangling, to %s", target, err, vfio)
				}
				if got := readTrim(t, filepath.Join(r.DevicePath(pf), "sriov_numvfs")); got != "4" {
					t.Errorf("sriov_numvfs = %s, want 4 (unchanged)", got)
				}
			},
		},
		{
			name:   "remove a PF takes its VFs",
			mutate: func(r Roots) error { return r.Remove(pf) },
			check: func(t *testing.T, r Roots) {
				left, _ := os.ReadDir(filepath.Join(r.Sysfs, "bus/pci/devices"))
				if len(left) != 12-5 {
					t.Errorf("%d functions left, want 7", len(left))
				}
				if exists(filepath.Join(r.Sysfs, "class/net/ens785f0")) {
					t.Error("PF interface remains")
				}
			},
		},
		{
			name: "set numvfs to 2 with a template",
			mutate: func(r Roots) error {
				return r.SetNumVFs(pf, 2, func(i int) Function {
					return Function{Driver: "iavf", Interfaces: []Interface{{Name: "new" + string(rune('a'+i))}}}
				})
			},
			check: func(t *testing.T, r Roots) {
				if got := readTrim(t, filepath.Join(r.DevicePath(pf), "sriov_numvfs")); got != "2" {
					t.Errorf("sriov_numvfs = %s", got)
				}
				if exists(r.DevicePath("0000:3b:01.2")) || !exists(r.DevicePath("0000:3b:01.1")) {
					t.Error("VFs not replaced")
				}
				if !exists(filepath.Join(r.Sysfs, "class/net/newb")) || exists(filepath.Join(r.Sysfs, "class/net/ens785f0v0")) {
					t.Error("interfaces not replaced")
				}
				g, _ := os.Readlink(filepath.Join(r.DevicePath("0000:3b:01.0"), "iommu_group"))
				if filepath.Base(g) != "114" {
					t.Errorf("new VF 0 in group %q, want the next free one, 114", g)
				}
				if got := readTrim(t, filepath.Join(r.DevicePath("0000:3b:01.0"), "device")); got != "0x1889" {
					t.Errorf("new VF device = %s", got)
				}
			},
		},
		{
			name:   "set numvfs on the second port with no template",
			mutate: func(r Roots) error { return r.SetNumVFs("0000:3b:00.1", 1, nil) },
			check: func(t *testing.T, r Roots) {
				vf, _ := VFAddress("0000:3b:00.1", 135, 1, 0)
				if exists(filepath.Join(r.DevicePath(vf), "driver")) || !exists(filepath.Join(r.DevicePath(vf), "physfn")) {
					t.Errorf("VF %s: want unbound with a physfn link", vf)
				}
			},
		},
		{
			name:   "link down",
			mutate: func(r Roots) error { return r.SetLinkDown("ens785f0") },
			check: func(t *testing.T, r Roots) {
				dir := filepath.Join(r.DevicePath(pf), "net", "ens785f0")
				if readTrim(t, filepath.Join(dir, "operstate")) != "down" || readTrim(t, filepath.Join(dir, "carrier")) != "0" {
					t.Error("link not down")
				}
			},
		},
		{
			name: "link up again and carrier only",
			mutate: func(r Roots) error {
				if err := r.SetLinkUp("ens801f0v0"); err != nil {
					return err
				}
				return r.SetCarrier("ens801f0v0", false)
			},
			check: func(t *testing.T, r Roots) {
				if readTrim(t, filepath.Join(r.Sysfs, "class/net/ens801f0v0/operstate")) != "up" ||
					readTrim(t, filepath.Join(r.Sysfs, "class/net/ens801f0v0/carrier")) != "0" {
					t.Error("operstate up, carrier 0 expected")
				}
			},
		},
		{
			name: "hot-plug a GPU with an interface added later",
			mutate: func(r Roots) error {
				if err := r.Add(Function{Address: "0000:c1:00.0", Vendor: "10de", Device: "2330", Class: "030200",
					Driver: "vfio-pci", NUMANode: 1, IOMMUGroup: "77"}); err != nil {
					return err
				}
				return r.AddInterface(other, Interface{Name: "extra0"})
			},
			check: func(t *testing.T, r Roots) {
				if !exists(filepath.Join(r.Sysfs, "bus/pci/devices/0000:c1:00.0")) || !exists(filepath.Join(r.Dev, "vfio", "77")) {
					t.Error("hot-plugged GPU or its VFIO node missing")
				}
				if got := readTrim(t, filepath.Join(r.Sysfs, "class/net/extra0/ifindex")); got == "" || got == "2" {
					t.Errorf("new interface ifindex %q clashes", got)
				}
			},
		},
		{
			name: "write and remove attributes",
			mutate: func(r Roots) error {
				if err := r.WriteAttr(pf, "numa_node", "garbage"); err != nil {
					return err
				}
				return r.RemoveAttr(pf, "class")
			},
			check: func(t *testing.T, r Roots) {
				if readTrim(t, filepath.Join(r.DevicePath(pf), "numa_node")) != "garbage" || exists(filepath.Join(r.DevicePath(pf), "class")) {
					t.Error("attributes not changed")
				}
			},
		},
		{
			name:   "default route moves",
			mutate: func(r Roots) error { return r.SetDefaultRoute("ens801f0") },
			check: func(t *testing.T, r Roots) {
				if !strings.Contains(readTrim(t, filepath.Join(r.Proc, "net/route")), "ens801f0\t00000000") {
					t.Error("default route not moved")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := TempScenario(t, ScenarioSRIOV)
			if err := tc.mutate(r); err != nil {
				t.Fatalf("mutate: %v", err)
			}
			tc.check(t, r)
			checkTree(t, filepath.Dir(r.Sysfs))
		})
	}
}

func TestMutationErrors(t *testing.T) {
	r := TempScenario(t, ScenarioGPU)
	tests := []struct {
		name string
		err  error
		is   error
	}{
		{"bind absent", r.Bind("0000:99:00.0", "x"), ErrNoFunction},
		{"unbind absent", r.Unbind("0000:99:00.0"), ErrNoFunction},
		{"remove malformed", r.Remove("nope"), ErrNoFunction},
		{"numvfs on a GPU", r.SetNumVFs("0000:18:00.0", 1, nil), nil},
		{"numvfs above total", r.SetNumVFs("0000:02:00.0", 8, nil), nil},
		{"attr escaping", r.WriteAttr("0000:18:00.0", "../../x", ""), nil},
		{"interface taken", r.AddInterface("0000:18:00.0", Interface{Name: "eno1"}), nil},
		{"link of absent interface", r.SetLinkDown("nope0"), nil},
		{"add duplicate", r.Add(Function{Address: "0000:18:00.0", Vendor: "10de", Device: "2330", Class: "030200"}), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(tc.err, tc.is) {
				t.Errorf("error %v does not wrap %v", tc.err, tc.is)
			}
		})
	}
	if err := r.Unbind("0000:02:00.0"); err != nil {
		t.Errorf("unbind: %v", err)
	}
	if err := r.Unbind("0000:02:00.0"); err != nil {
		t.Errorf("unbind of an unbound function: %v", err)
	}
	checkTree(t, filepath.Dir(r.Sysfs))
}
