package sysfs

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	goldenfile "github.com/devledger/devledger/internal/golden"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// up and down are the interfaces of the scenarios as a scan reports them.
func up(name string) NetInterface {
	return NetInterface{Name: name, OperState: "up", Carrier: 1, LinkType: "ether"}
}

func down(name string) NetInterface {
	return NetInterface{Name: name, OperState: "down", Carrier: 0, LinkType: "ether"}
}

// mgmtNIC is the I350 every bare-metal scenario has.
var mgmtNIC = Device{
	Address: "0000:02:00.0", Vendor: "8086", Device: "1521",
	SubsystemVendor: "8086", SubsystemDevice: "0001",
	Class: "020000", ClassName: "Network controller", SubclassName: "Ethernet controller",
	VendorName: "Intel", DeviceName: "I350 Gigabit (sample)",
	Driver: "igb", NUMANode: 0, IOMMUGroup: "10", ACPIIndex: "1",
	TotalVFs: 7, NumVFs: 0, VFIndex: -1,
	Interfaces: []NetInterface{up("eno1")},
}

// e810VF is a VF of the sriov scenario as a scan reports it.
func e810VF(addr, pf, pfIf string, index, numa int, group, driver string, ifs ...NetInterface) Device {
	return Device{
		Address: addr, Vendor: "8086", Device: "1889",
		SubsystemVendor: "8086", SubsystemDevice: "0000",
		Class: "020000", ClassName: "Network controller", SubclassName: "Ethernet controller",
		VendorName: "Intel", DeviceName: "Ethernet Adaptive Virtual Function (sample)",
		Driver: driver, NUMANode: numa, IOMMUGroup: group, VFIODevice: driver == "vfio-pci",
		TotalVFs: -1, NumVFs: -1, PF: pf, VFIndex: index,
		Interfaces: ifs, PFInterface: pfIf,
	}
}

func e810PF(addr string, numa int, group string, numVFs int, ifc NetInterface) Device {
	return Device{
		Address: addr, Vendor: "8086", Device: "1592",
		SubsystemVendor: "8086", SubsystemDevice: "0002",
		Class: "020000", ClassName: "Network controller", SubclassName: "Ethernet controller",
		VendorName: "Intel", DeviceName: "E810-C QSFP (sample)",
		Driver: "ice", NUMANode: numa, IOMMUGroup: group,
		TotalVFs: 256, NumVFs: numVFs, VFIndex: -1,
		Interfaces: []NetInterface{ifc},
	}
}

func cx6VF(addr string, index int, group, driver string) Device {
	return Device{
		Address: addr, Vendor: "15b3", Device: "101c",
		SubsystemVendor: "15b3", SubsystemDevice: "0000",
		Class: "020000", ClassName: "Network controller", SubclassName: "Ethernet controller",
		VendorName: "Mellanox", DeviceName: "ConnectX-6 Virtual Function (sample)",
		Driver: driver, NUMANode: 0, IOMMUGroup: group, VFIODevice: driver == "vfio-pci",
		TotalVFs: -1, NumVFs: -1, PF: "0000:5e:00.0", VFIndex: index, PFInterface: "ens1f0",
	}
}

func h100(addr, driver string, numa int, group string) Device {
	return Device{
		Address: addr, Vendor: "10de", Device: "2330",
		SubsystemVendor: "10de", SubsystemDevice: "16c1",
		Class: "030200", ClassName: "Display controller", SubclassName: "3D controller",
		VendorName: "NVIDIA", DeviceName: "H100 SXM5 GPU (sample)",
		Driver: driver, NUMANode: numa, IOMMUGroup: group, VFIODevice: driver == "vfio-pci",
		TotalVFs: -1, NumVFs: -1, VFIndex: -1,
	}
}

func virtioFn(addr, device, class, subclass, deviceName string, ifs ...NetInterface) Device {
	return Device{
		Address: addr, Vendor: "1af4", Device: device,
		SubsystemVendor: "1af4", SubsystemDevice: "1100",
		Class: class, ClassName: baseClassNames[class[:2]], SubclassName: subclass,
		VendorName: "Red Hat virtio", DeviceName: deviceName,
		Driver: "virtio-pci", NUMANode: -1,
		TotalVFs: -1, NumVFs: -1, VFIndex: -1,
		Interfaces: ifs,
	}
}

// TestScanScenarios checks, for each scenario, how many functions a scan
// finds and every field of representative functions, and that a clean tree
// raises no warning.
func TestScanScenarios(t *testing.T) {
	mlxPF0 := Device{
		Address: "0000:5e:00.0", Vendor: "15b3", Device: "101b",
		SubsystemVendor: "15b3", SubsystemDevice: "0007",
		Class: "020000", ClassName: "Network controller", SubclassName: "Ethernet controller",
		VendorName: "Mellanox", DeviceName: "ConnectX-6 (sample)",
		Driver: "mlx5_core", NUMANode: 0, IOMMUGroup: "30",
		TotalVFs: 8, NumVFs: 5, VFIndex: -1,
		Interfaces:      []NetInterface{up("ens1f0")},
		RDMADevices:     []string{"mlx5_0"},
		RDMACharDevices: map[string][]string{"mlx5_0": {"issm0", "umad0", "uverbs0"}},
		AuxDevices: []AuxDevice{
			{Name: "mlx5_core.eth.0", Type: "eth"}, {Name: "mlx5_core.rdma.0", Type: "rdma"},
			{Name: "mlx5_core.sf.2", Type: "sf"}, {Name: "mlx5_core.sf.3", Type: "sf"},
		},
	}
	mlxPF1 := mlxPF0
	mlxPF1.Address, mlxPF1.IOMMUGroup, mlxPF1.NumVFs = "0000:5e:00.1", "31", 0
	mlxPF1.Interfaces = []NetInterface{{Name: "ib0", OperState: "up", Carrier: 1, LinkType: "infiniband",
		PKeys: []string{"0xffff", "0x8001"}}}
	mlxPF1.RDMADevices = []string{"mlx5_1"}
	mlxPF1.RDMACharDevices = map[string][]string{"mlx5_1": {"issm1", "umad1", "uverbs1"}}
	mlxPF1.AuxDevices = nil
	mlxVF0 := cx6VF("0000:5e:00.2", 0, "120", "mlx5_core")
	mlxVF0.Interfaces = []NetInterface{up("ens1f0v0")}
	mlxVF0.RDMADevices = []string{"mlx5_2"}
	mlxVF0.RDMACharDevices = map[string][]string{"mlx5_2": {"issm2", "umad2", "uverbs2"}}
	mlxVF3 := cx6VF("0000:5e:00.5", 3, "123", "mlx5_core")
	mlxVF3.VDPAType, mlxVF3.VDPADevice, mlxVF3.VhostVDPA = "vhost", "vdpa0", "vhost-vdpa-0"
	mlxVF4 := cx6VF("0000:5e:00.6", 4, "124", "mlx5_core")
	mlxVF4.VDPAType, mlxVF4.VDPADevice = "virtio", "vdpa0"

	hostBridge := Device{
		Address: "0000:00:00.0", Vendor: "8086", Device: "1237",
		SubsystemVendor: "1af4", SubsystemDevice: "1100",
		Class: "060000", ClassName: "Bridge", SubclassName: "Host bridge",
		VendorName: "Intel", DeviceName: "440FX host bridge (sample)",
		NUMANode: -1, TotalVFs: -1, NumVFs: -1, VFIndex: -1,
	}

	tests := []struct {
		scenario string
		count    int
		want     []Device
	}{
		{
			scenario: sysfsgen.ScenarioSRIOV,
			count:    12,
			want: []Device{
				mgmtNIC,
				func() Device {
					d := e810PF("0000:3b:00.0", 0, "20", 4, up("ens785f0"))
					d.ACPIIndex = "3"
					return d
				}(),
				e810PF("0000:3b:00.1", 0, "21", 0, down("ens785f1")),
				e810PF("0000:af:00.0", 1, "40", 4, up("ens801f0")),
				e810VF("0000:3b:01.0", "0000:3b:00.0", "ens785f0", 0, 0, "100", "iavf", up("ens785f0v0")),
				e810VF("0000:3b:01.1", "0000:3b:00.0", "ens785f0", 1, 0, "101", "iavf", up("ens785f0v1")),
				e810VF("0000:3b:01.3", "0000:3b:00.0", "ens785f0", 3, 0, "103", "vfio-pci"),
				e810VF("0000:af:01.0", "0000:af:00.0", "ens801f0", 0, 1, "110", "iavf", down("ens801f0v0")),
				e810VF("0000:af:01.3", "0000:af:00.0", "ens801f0", 3, 1, "113", "vfio-pci"),
			},
		},
		{
			scenario: sysfsgen.ScenarioMellanox,
			count:    8,
			want: []Device{
				mgmtNIC, mlxPF0, mlxPF1, mlxVF0,
				cx6VF("0000:5e:00.4", 2, "122", "vfio-pci"),
				mlxVF3, mlxVF4,
			},
		},
		{
			scenario: sysfsgen.ScenarioGPU,
			count:    5,
			want: []Device{
				mgmtNIC,
				h100("0000:18:00.0", "nvidia", 0, "50"),
				h100("0000:2a:00.0", "nvidia", 0, "51"),
				h100("0000:9a:00.0", "vfio-pci", 1, "52"),
				h100("0000:ab:00.0", "vfio-pci", 1, "53"),
			},
		},
		{
			scenario: sysfsgen.ScenarioVirtio,
			count:    4,
			want: []Device{
				hostBridge,
				virtioFn("0000:00:03.0", "1041", "020000", "Ethernet controller", "Virtio 1.0 network (sample)", up("eth0")),
				virtioFn("0000:00:04.0", "1042", "010000", "SCSI storage controller", "Virtio 1.0 block (sample)"),
				virtioFn("0000:00:05.0", "1041", "020000", "Ethernet controller", "Virtio 1.0 network (sample)", up("eth1")),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.scenario, func(t *testing.T) {
			roots := sysfsgen.TempScenario(t, tc.scenario)
			devs := scanOK(t, sampleReader(t, roots))
			if len(devs) != tc.count {
				t.Fatalf("scan found %d functions, want %d", len(devs), tc.count)
			}
			if !slices.IsSortedFunc(devs, func(a, b Device) int { return strings.Compare(a.Address, b.Address) }) {
				t.Errorf("scan result is not sorted by address")
			}
			for _, d := range devs {
				if len(d.Warnings) > 0 {
					t.Errorf("%s: unexpected warnings %q", d.Address, d.Warnings)
				}
			}
			got := byAddress(devs)
			for _, want := range tc.want {
				g, ok := got[want.Address]
				if !ok {
					t.Errorf("%s: not found", want.Address)
					continue
				}
				if !reflect.DeepEqual(g, want) {
					t.Errorf("%s:\n got %+v\nwant %+v", want.Address, g, want)
				}
			}
			checkGolden(t, tc.scenario, devs)
		})
	}
}

// checkGolden compares the whole scan with testdata/scan/<scenario>.json,
// which -update rewrites. The representative devices above pin the
// meaning; the golden file pins everything else.
func checkGolden(t *testing.T, scenario string, devs []Device) {
	t.Helper()
	got, err := json.MarshalIndent(devs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "scan", scenario+".json")
	goldenfile.Check(t, path, string(got))
}

// TestScanLargeScenario checks the large tree's make-up: every function is
// found, every VF is linked to its PF with the right index, nothing warns.
func TestScanLargeScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a tree of 1,032 functions")
	}
	devs := scanOK(t, sampleReader(t, largeTree(t)))
	if len(devs) != sysfsgen.LargeFunctions {
		t.Fatalf("scan found %d functions, want %d", len(devs), sysfsgen.LargeFunctions)
	}
	var pfs, vfs, gpus, ifs int
	got := byAddress(devs)
	for _, d := range devs {
		if len(d.Warnings) > 0 {
			t.Errorf("%s: unexpected warnings %q", d.Address, d.Warnings)
		}
		switch {
		case d.IsVF():
			vfs++
			pf := got[d.PF]
			if d.VFIndex < 0 || d.VFIndex >= pf.NumVFs || d.PFInterface != pf.Interfaces[0].Name {
				t.Errorf("%s: VF index %d, PF interface %q; PF %s has %d VFs and interface %q",
					d.Address, d.VFIndex, d.PFInterface, d.PF, pf.NumVFs, pf.Interfaces[0].Name)
			}
			if d.VFIndex%2 == 1 && (d.Driver != "iavf" || len(d.Interfaces) != 1) {
				t.Errorf("%s: odd VF should be on iavf with an interface: %+v", d.Address, d)
			}
			if d.VFIndex%2 == 0 && (d.Driver != "vfio-pci" || !d.VFIODevice) {
				t.Errorf("%s: even VF should be on vfio-pci with a VFIO node: %+v", d.Address, d)
			}
		case d.IsPFWithVFs():
			pfs++
		case d.Class == "030200":
			gpus++
		}
		ifs += len(d.Interfaces)
	}
	if pfs != sysfsgen.LargePFs || vfs != sysfsgen.LargePFs*sysfsgen.LargeVFsPerPF || gpus != sysfsgen.LargeGPUs {
		t.Errorf("found %d PFs, %d VFs, %d GPUs; want %d, %d, %d", pfs, vfs, gpus,
			sysfsgen.LargePFs, sysfsgen.LargePFs*sysfsgen.LargeVFsPerPF, sysfsgen.LargeGPUs)
	}
	if want := sysfsgen.LargePFs * (1 + sysfsgen.LargeVFsPerPF/2); ifs != want {
		t.Errorf("found %d interfaces, want %d", ifs, want)
	}
}

// TestScanAhead checks that a scan begun ahead gives what Scan gives, as
// the tree was then, on every call, and Scan's error for a missing root.
func TestScanAhead(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	r := sampleReader(t, roots)
	want := scanOK(t, r)
	wait := r.ScanAhead()
	got, err := wait()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ScanAhead gave %d functions, %v; Scan gave %d", len(got), err, len(want))
	}
	if err := os.Remove(filepath.Join(roots.Sysfs, "bus", "pci", "devices", want[0].Address)); err != nil {
		t.Fatal(err)
	}
	if now := scanOK(t, r); len(now) != len(want)-1 {
		t.Fatalf("Scan after a removal found %d functions, want %d", len(now), len(want)-1)
	}
	if again, err := wait(); err != nil || !reflect.DeepEqual(again, want) {
		t.Errorf("a second wait gave %d functions, %v; want the first result", len(again), err)
	}
	missing := filepath.Join(t.TempDir(), "nowhere")
	if _, err := testReader(t, sysfsgen.Roots{Sysfs: missing, Dev: roots.Dev}, Options{}).ScanAhead()(); !errors.Is(err, ErrNoSysfsRoot) {
		t.Errorf("ScanAhead of a missing root: %v, want %v", err, ErrNoSysfsRoot)
	}
}

// TestDeviceMatchesScan checks that reading one function gives what a full
// scan gives for it, VF links included, and that a short address works.
func TestDeviceMatchesScan(t *testing.T) {
	for _, scenario := range []string{sysfsgen.ScenarioSRIOV, sysfsgen.ScenarioMellanox, sysfsgen.ScenarioVirtio} {
		t.Run(scenario, func(t *testing.T) {
			roots := sysfsgen.TempScenario(t, scenario)
			r := sampleReader(t, roots)
			for _, want := range scanOK(t, r) {
				got, err := r.Device(strings.ToUpper(want.Address[5:]))
				if err != nil {
					t.Fatalf("Device(%s): %v", want.Address, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Device(%s):\n got %+v\nwant %+v", want.Address, got, want)
				}
			}
		})
	}
}

func TestDeviceErrors(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	missing := filepath.Join(t.TempDir(), "nowhere")
	tests := []struct {
		name     string
		root     string
		addr     string
		sentinel error
		message  string
	}{
		{"absent address", roots.Sysfs, "0000:99:00.0", ErrNoDevice, "no PCI device 0000:99:00.0 under " + roots.Sysfs},
		{"malformed address", roots.Sysfs, "0000:3b:02", ErrInvalidAddress, `"0000:3b:02"`},
		{"path in address", roots.Sysfs, "../../etc", ErrInvalidAddress, "not a PCI address"},
		{"function above 7", roots.Sysfs, "0000:3b:02.8", ErrInvalidAddress, "not a PCI address"},
		{"missing root", missing, "0000:18:00.0", ErrNoSysfsRoot, missing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := testReader(t, sysfsgen.Roots{Sysfs: tc.root, Dev: roots.Dev}, Options{})
			_, err := r.Device(tc.addr)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("Device(%q) = %v, want an error wrapping %v", tc.addr, err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not say %q", err, tc.message)
			}
		})
	}
}

func TestScanRoots(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	emptyBus := t.TempDir()
	if err := os.MkdirAll(filepath.Join(emptyBus, "bus", "pci", "devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "no", "sys")
	tests := []struct {
		name    string
		root    string
		wantErr error
	}{
		{"missing root", missing, ErrNoSysfsRoot},
		{"root is a file", file, ErrNoSysfsRoot},
		{"empty root", t.TempDir(), nil},
		{"empty bus/pci/devices", emptyBus, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := testReader(t, sysfsgen.Roots{Sysfs: tc.root, Dev: t.TempDir()}, Options{})
			devs, err := r.Scan()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.root) {
					t.Fatalf("Scan() = %v, want an error wrapping %v naming %s", err, tc.wantErr, tc.root)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if devs == nil || len(devs) != 0 {
				t.Errorf("Scan() = %#v, want an empty, non-nil list", devs)
			}
		})
	}
}

// firstListingFails is osFS whose first listing of a dir ending in
// bus/pci/devices fails as if the root were not there yet.
type firstListingFails struct {
	osFS
	failed *bool
}

func (f firstListingFails) readDirNames(path string) ([]string, error) {
	if strings.HasSuffix(path, "bus/pci/devices") && !*f.failed {
		*f.failed = true
		return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	return f.osFS.readDirNames(path)
}

// A root that comes as a scan begins (a hostPath mounted, a tree moved
// back) fails the listing, then is there when the scan checks it: the
// scan lists again, and does not take the node for one with no PCI bus.
func TestScanOfARootThatCameMeanwhile(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	r := testReader(t, roots, Options{})
	want, err := r.Scan()
	if err != nil || len(want) == 0 {
		t.Fatalf("Scan: %d functions, %v", len(want), err)
	}
	var failed bool
	r.fs = firstListingFails{failed: &failed}
	got, err := r.Scan()
	if err != nil || !failed || len(got) != len(want) {
		t.Errorf("Scan after a listing that failed: %d functions, %v (failed once: %v); want %d", len(got), err, failed, len(want))
	}
}

func TestNewDefaults(t *testing.T) {
	r := New(Options{})
	if r.SysfsRoot() != "/sys" || r.DevRoot() != "/dev" || r.pciIDsSearchRoot != "/" || r.workers < 1 || r.workers > maxWorkers {
		t.Errorf("New(Options{}) = roots %q %q, search root %q, %d workers", r.SysfsRoot(), r.DevRoot(), r.pciIDsSearchRoot, r.workers)
	}
}

// TestScanIgnoresNonAddresses checks that junk under bus/pci/devices is not
// taken for a function.
func TestScanIgnoresNonAddresses(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	if err := os.WriteFile(filepath.Join(roots.Sysfs, "bus", "pci", "devices", "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := len(scanOK(t, sampleReader(t, roots))); n != 5 {
		t.Errorf("scan found %d functions, want 5", n)
	}
}

// TestScanKernelWithoutNUMA reads a node whose kernel was built without
// CONFIG_NUMA (some ARM and 32-bit kernels), where no PCI function has a
// numa_node attribute: every function is on no node, as the SR-IOV plugin
// reads it, and that is no fault of the function.
func TestScanKernelWithoutNUMA(t *testing.T) {
	roots := sysfsgen.TempNode(t, sysfsgen.Node{
		WithoutNUMA: true,
		Functions: []sysfsgen.Function{
			{Address: "0000:01:00.0", Vendor: "15b3", Device: "101d", Class: "020000",
				Driver: "mlx5_core", NUMANode: 0, IOMMUGroup: "3",
				TotalVFs: 8, VFDevice: "101e",
				Interfaces: []sysfsgen.Interface{{Name: "enP1p1s0f0np0"}},
				VFs:        []sysfsgen.Function{{Driver: "vfio-pci", IOMMUGroup: "4"}}},
			{Address: "0004:01:00.0", Vendor: "144d", Device: "a80a", Class: "010802",
				Driver: "nvme", NUMANode: 0, IOMMUGroup: "9"},
		},
		VFIO: true,
	})
	// VFs made afresh have no numa_node either.
	if err := roots.SetNumVFs("0000:01:00.0", 2, nil); err != nil {
		t.Fatal(err)
	}
	r := sampleReader(t, roots)
	devs := scanOK(t, r)
	if len(devs) != 4 {
		t.Fatalf("scan found %d functions, want 4", len(devs))
	}
	for _, d := range devs {
		if d.NUMANode != -1 || len(d.Warnings) > 0 || d.Incomplete {
			t.Errorf("%s: NUMA node %d, warnings %q, incomplete %v; want -1, none, false", d.Address, d.NUMANode, d.Warnings, d.Incomplete)
		}
		one, err := r.Device(d.Address)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(one, d) {
			t.Errorf("Device(%s) = %+v, scan read %+v", d.Address, one, d)
		}
	}
}
