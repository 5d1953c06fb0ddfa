package sysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// TestBrokenAttributes plants one fault at a time in the sriov tree and
// checks that the function is still reported, that only the field the
// fault concerns is unknown, and that one warning names the file.
func TestBrokenAttributes(t *testing.T) {
	const (
		pf  = "0000:3b:00.0"
		vf  = "0000:3b:01.0" // iavf, ens785f0v0
		vf2 = "0000:3b:01.2" // vfio-pci, group 102
	)
	tests := []struct {
		name      string
		addr      string
		breakTree func(r sysfsgen.Roots) error
		fix       func(want *Device)
		warning   string
	}{
		{
			name:      "garbage in numa_node",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "numa_node", "zero\n") },
			fix:       func(d *Device) { d.NUMANode = -1 },
			warning:   `numa_node: "zero" is not a NUMA node number`,
		},
		{
			name:      "numa_node below -1",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "numa_node", "-2") },
			fix:       func(d *Device) { d.NUMANode = -1 },
			warning:   "numa_node:",
		},
		{
			// A kernel without CONFIG_NUMA has none.
			name:      "missing numa_node",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.RemoveAttr(pf, "numa_node") },
			fix:       func(d *Device) { d.NUMANode = -1 },
		},
		{
			name:      "missing class",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.RemoveAttr(pf, "class") },
			fix: func(d *Device) {
				d.Class, d.ClassName, d.SubclassName = "", "", ""
			},
			warning: "class: missing",
		},
		{
			name:      "class too short",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "class", "0x0200\n") },
			fix: func(d *Device) {
				d.Class, d.ClassName, d.SubclassName = "", "", ""
			},
			warning: `class: "0x0200" is not 6 hex digits`,
		},
		{
			name:      "vendor not hex",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "vendor", "0xZZZZ\n") },
			fix: func(d *Device) {
				d.Vendor, d.VendorName, d.DeviceName = "", "", ""
			},
			warning: `vendor: "0xZZZZ" is not 4 hex digits`,
		},
		{
			name:      "device padded, with 0X, is fine",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "device", "  0X1592  ") },
			fix:       func(d *Device) {},
		},
		{
			name: "vendor is a directory",
			addr: pf,
			breakTree: func(r sysfsgen.Roots) error {
				if err := r.RemoveAttr(pf, "vendor"); err != nil {
					return err
				}
				return os.Mkdir(filepath.Join(r.DevicePath(pf), "vendor"), 0o755)
			},
			fix: func(d *Device) {
				d.Vendor, d.VendorName, d.DeviceName = "", "", ""
				d.Incomplete = true
			},
			warning: "vendor: is a directory",
		},
		{
			name:      "huge subsystem_device",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "subsystem_device", strings.Repeat("0", 8192)) },
			fix:       func(d *Device) { d.SubsystemDevice = "" },
			warning:   "subsystem_device: longer than",
		},
		{
			name: "dangling driver link",
			addr: vf,
			breakTree: func(r sysfsgen.Roots) error {
				if err := r.RemoveAttr(vf, "driver"); err != nil {
					return err
				}
				return os.Symlink("../../../bus/pci/drivers/gone", filepath.Join(r.DevicePath(vf), "driver"))
			},
			fix:     func(d *Device) { d.Driver = "" },
			warning: `driver: link to "../../../bus/pci/drivers/gone" is dangling`,
		},
		{
			name: "driver link to nothing named",
			addr: vf,
			breakTree: func(r sysfsgen.Roots) error {
				if err := r.RemoveAttr(vf, "driver"); err != nil {
					return err
				}
				return os.Symlink("..", filepath.Join(r.DevicePath(vf), "driver"))
			},
			fix:     func(d *Device) { d.Driver = "" },
			warning: "driver: link target",
		},
		{
			name: "iommu_group link to a non-number",
			addr: vf2,
			breakTree: func(r sysfsgen.Roots) error {
				if err := r.RemoveAttr(vf2, "iommu_group"); err != nil {
					return err
				}
				return os.Symlink("../../../kernel/iommu_groups/abc", filepath.Join(r.DevicePath(vf2), "iommu_group"))
			},
			fix:     func(d *Device) { d.IOMMUGroup, d.VFIODevice = "", false },
			warning: "iommu_group: link target",
		},
		{
			// Not read: the VFs are the PF's virtfn links.
			name:      "sriov_numvfs garbage",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "sriov_numvfs", "four") },
			fix:       func(*Device) {},
		},
		{
			name:      "sriov_totalvfs negative",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "sriov_totalvfs", "-1") },
			fix:       func(d *Device) { d.TotalVFs = -1 },
			warning:   "sriov_totalvfs:",
		},
		{
			name:      "acpi_index garbage",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "acpi_index", "x1") },
			fix:       func(d *Device) { d.ACPIIndex = "" },
			warning:   "acpi_index:",
		},
		{
			name:      "carrier garbage",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "net/ens785f0/carrier", "2\n") },
			fix:       func(d *Device) { d.Interfaces[0].Carrier = -1 },
			warning:   `net/ens785f0/carrier: "2" is neither 0 nor 1`,
		},
		{
			name:      "missing carrier",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.RemoveAttr(pf, "net/ens785f0/carrier") },
			fix:       func(d *Device) { d.Interfaces[0].Carrier = -1 },
			warning:   "net/ens785f0/carrier: no such file",
		},
		{
			name:      "operstate garbage",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "net/ens785f0/operstate", "UP!\n") },
			fix:       func(d *Device) { d.Interfaces[0].OperState = "" },
			warning:   "net/ens785f0/operstate:",
		},
		{
			name:      "unknown link type kept as a number",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "net/ens785f0/type", "772\n") },
			fix:       func(d *Device) { d.Interfaces[0].LinkType = "772" },
		},
		{
			name:      "link type garbage",
			addr:      pf,
			breakTree: func(r sysfsgen.Roots) error { return r.WriteAttr(pf, "net/ens785f0/type", "ether\n") },
			fix:       func(d *Device) { d.Interfaces[0].LinkType = "" },
			warning:   "net/ens785f0/type:",
		},
		{
			name: "physfn link to garbage",
			addr: vf,
			breakTree: func(r sysfsgen.Roots) error {
				if err := r.RemoveAttr(vf, "physfn"); err != nil {
					return err
				}
				return os.Symlink("../not-a-pf", filepath.Join(r.DevicePath(vf), "physfn"))
			},
			fix:     func(d *Device) { d.PF, d.VFIndex, d.PFInterface = "", -1, "" },
			warning: "physfn: link target",
		},
		{
			name: "PF without a virtfn link to the VF",
			addr: vf,
			breakTree: func(r sysfsgen.Roots) error {
				return os.Remove(filepath.Join(r.DevicePath(pf), "virtfn0"))
			},
			fix:     func(d *Device) { d.VFIndex = -1 },
			warning: "physfn: PF 0000:3b:00.0 has no virtfn link to this VF",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
			clean := byAddress(scanOK(t, sampleReader(t, roots)))
			if err := tc.breakTree(roots); err != nil {
				t.Fatalf("break the tree: %v", err)
			}
			devs := scanOK(t, sampleReader(t, roots))
			if len(devs) != len(clean) {
				t.Fatalf("scan found %d functions, want %d: a fault must not drop a device", len(devs), len(clean))
			}
			got := byAddress(devs)[tc.addr]
			want := clean[tc.addr]
			want.Interfaces = append([]NetInterface(nil), want.Interfaces...)
			tc.fix(&want)
			var warnings []string
			warnings, got.Warnings = got.Warnings, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s:\n got %+v\nwant %+v", tc.addr, got, want)
			}
			switch {
			case tc.warning == "" && len(warnings) != 0:
				t.Errorf("unexpected warnings %q", warnings)
			case tc.warning != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], tc.warning) && !strings.Contains(warnings[0], tc.warning)):
				t.Errorf("warnings = %q, want one saying %q", warnings, tc.warning)
			}
			for _, d := range devs {
				if d.Address != tc.addr && len(d.Warnings) > 0 {
					t.Errorf("%s: warnings %q from a fault elsewhere", d.Address, d.Warnings)
				}
			}
			// Device must agree with Scan, faults included.
			one, err := sampleReader(t, roots).Device(tc.addr)
			if err != nil {
				t.Fatalf("Device: %v", err)
			}
			if !reflect.DeepEqual(one, byAddress(devs)[tc.addr]) {
				t.Errorf("Device(%s) = %+v\nScan gave %+v", tc.addr, one, byAddress(devs)[tc.addr])
			}
		})
	}
}

// A read that fails with an error other than not-found leaves the
// function's read incomplete, and says which file failed; a file the
// function lacks, or the carrier of a link that is down, does not. A VF
// whose PF was read incompletely is too: its PF's interface comes from
// there.
func TestIncompleteReads(t *testing.T) {
	const (
		pf = "0000:3b:00.0" // ice, ens785f0
		vf = "0000:3b:01.0" // iavf, ens785f0v0, a VF of pf
	)
	pfAndVFs := []string{pf, vf, "0000:3b:01.1", "0000:3b:01.2", "0000:3b:01.3"}
	tests := []struct {
		name       string
		faults     map[string]error
		incomplete []string // the functions read incompletely
		warning    string   // of the first of them
	}{
		{name: "vendor", faults: map[string]error{pf + "/vendor": syscall.EIO}, incomplete: pfAndVFs, warning: "vendor: input/output error"},
		{name: "the function's directory", faults: map[string]error{"devices/" + vf: syscall.EMFILE}, incomplete: []string{vf},
			warning: ".: cannot list the function's directory: too many open files"},
		{name: "driver link", faults: map[string]error{vf + "/driver": syscall.ENOMEM}, incomplete: []string{vf}, warning: "driver: cannot allocate memory"},
		{name: "net", faults: map[string]error{pf + "/net": syscall.EIO}, incomplete: pfAndVFs, warning: "net: input/output error"},
		{name: "numa_node not found", faults: map[string]error{pf + "/numa_node": syscall.ENOENT}, warning: "numa_node: no such file"},
		{name: "carrier", faults: map[string]error{"ens785f0/carrier": syscall.EIO}, warning: "net/ens785f0/carrier: input/output error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
			r := sampleReader(t, roots)
			r.fs = faultFS{faults: tc.faults}
			devs := scanOK(t, r)
			var incomplete []string
			for _, d := range devs {
				if d.Incomplete {
					incomplete = append(incomplete, d.Address)
				}
			}
			if !slices.Equal(incomplete, tc.incomplete) {
				t.Errorf("read incompletely: %q, want %q", incomplete, tc.incomplete)
			}
			addr := pf
			if len(tc.incomplete) > 0 {
				addr = tc.incomplete[0]
			}
			if w := byAddress(devs)[addr].Warnings; !slices.ContainsFunc(w, func(s string) bool { return strings.HasPrefix(s, tc.warning) }) {
				t.Errorf("%s: warnings %q, want one saying %q", addr, w, tc.warning)
			}
		})
	}
}

// The kernel reads sriov_numvfs under a lock that a write of it holds
// until its VFs are gone, and a VF bound to vfio-pci goes only when its
// user closes it: while a VM keeps one, the read waits, uninterruptibly.
// A scan counts the PF's virtfn links instead, and never opens the file:
// here a FIFO with no writer stands in for it, whose open waits as long.
func TestScanNeverWaitsOnSriovNumVFs(t *testing.T) {
	const pf = "0000:3b:00.0" // ice, four VFs
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	path := filepath.Join(roots.DevicePath(pf), "sriov_numvfs")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, path)
	r := sampleReader(t, roots)
	done := make(chan []Device, 1)
	go func() {
		devs, _ := r.Scan()
		done <- devs
	}()
	var devs []Device
	select {
	case devs = <-done:
	case <-time.After(20 * time.Second):
		// Let the waiting open through, so the test binary can end.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("the scan waits on sriov_numvfs")
	}
	d := byAddress(devs)[pf]
	if d.NumVFs != 4 || d.Incomplete || len(d.Warnings) > 0 {
		t.Errorf("%s: %d VFs, incomplete %v, warnings %q; want its 4 virtfn links counted, read whole", pf, d.NumVFs, d.Incomplete, d.Warnings)
	}
}

// TestWarningsLoggedOnce checks that a broken attribute is logged at warn
// level once per Reader however many scans see it, and still reported in
// every scan's Device.Warnings.
func TestWarningsLoggedOnce(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	if err := roots.WriteAttr("0000:18:00.0", "numa_node", "x"); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	r := testReader(t, roots, Options{PCIIDsPath: samplePCIIDs, Logger: logs.logger()})
	for range 3 {
		d := byAddress(scanOK(t, r))["0000:18:00.0"]
		if len(d.Warnings) != 1 {
			t.Fatalf("warnings = %q", d.Warnings)
		}
	}
	if n := logs.count("warn", "numa_node"); n != 1 {
		t.Errorf("numa_node warning logged %d times at warn, want 1", n)
	}
	if n := logs.count("debug", "numa_node"); n != 2 {
		t.Errorf("numa_node warning logged %d times at debug, want 2", n)
	}
}

// TestWarningsPastTheCapLoggedAtDebug checks that a Reader that remembers
// as many warnings as it may logs a new one at debug level only: one it
// cannot remember would otherwise repeat at warn on every scan.
func TestWarningsPastTheCapLoggedAtDebug(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	if err := roots.WriteAttr("0000:18:00.0", "numa_node", "x"); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	r := testReader(t, roots, Options{PCIIDsPath: samplePCIIDs, Logger: logs.logger()})
	for i := range maxRemembered {
		r.warned[fmt.Sprintf("churn %d", i)] = struct{}{}
	}
	for range 3 {
		scanOK(t, r)
	}
	if n, d := logs.count("warn", "numa_node"), logs.count("debug", "numa_node"); n != 0 || d != 3 {
		t.Errorf("numa_node warning logged %d times at warn and %d at debug, want 0 and 3", n, d)
	}
}

// TestReaderSeesMutations checks the Reader against the generator's
// mutations, the way later health and hot-plug code will use them.
func TestReaderSeesMutations(t *testing.T) {
	const pf, vf = "0000:3b:00.0", "0000:3b:01.0"
	tests := []struct {
		name   string
		mutate func(r sysfsgen.Roots) error
		check  func(t *testing.T, devs map[string]Device)
	}{
		{
			name:   "unbind",
			mutate: func(r sysfsgen.Roots) error { return r.Unbind(vf) },
			check: func(t *testing.T, devs map[string]Device) {
				if d := devs[vf]; d.Driver != "" || len(d.Interfaces) != 0 {
					t.Errorf("unbound VF: driver %q, interfaces %v", d.Driver, d.Interfaces)
				}
			},
		},
		{
			name:   "bind vfio-pci",
			mutate: func(r sysfsgen.Roots) error { return r.Bind(vf, "vfio-pci") },
			check: func(t *testing.T, devs map[string]Device) {
				if d := devs[vf]; d.Driver != "vfio-pci" || !d.VFIODevice {
					t.Errorf("VF: driver %q, VFIO %v", d.Driver, d.VFIODevice)
				}
			},
		},
		{
			name:   "remove",
			mutate: func(r sysfsgen.Roots) error { return r.Remove(vf) },
			check: func(t *testing.T, devs map[string]Device) {
				if _, ok := devs[vf]; ok || len(devs) != 11 {
					t.Errorf("removed VF still found, or %d functions", len(devs))
				}
				// Its PF's virtfn link stays, dangling, as sriov_numvfs does.
				if d := devs[pf]; d.NumVFs != 4 || len(d.Warnings) > 0 {
					t.Errorf("PF after a VF removed alone: %d VFs, warnings %q; want 4, none", d.NumVFs, d.Warnings)
				}
			},
		},
		{
			name: "more VFs",
			mutate: func(r sysfsgen.Roots) error {
				return r.SetNumVFs(pf, 8, func(int) sysfsgen.Function { return sysfsgen.Function{Driver: "vfio-pci"} })
			},
			check: func(t *testing.T, devs map[string]Device) {
				if devs[pf].NumVFs != 8 || len(devs) != 16 {
					t.Errorf("PF has %d VFs, %d functions", devs[pf].NumVFs, len(devs))
				}
				if d := devs["0000:3b:01.7"]; d.VFIndex != 7 || d.PF != pf || !d.VFIODevice {
					t.Errorf("VF 7: %+v", d)
				}
			},
		},
		{
			name:   "link down",
			mutate: func(r sysfsgen.Roots) error { return r.SetLinkDown("ens785f0v0") },
			check: func(t *testing.T, devs map[string]Device) {
				if got := devs[vf].Interfaces[0]; got.OperState != "down" || got.Carrier != 0 {
					t.Errorf("interface: %+v", got)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
			if err := tc.mutate(roots); err != nil {
				t.Fatal(err)
			}
			devs := scanOK(t, sampleReader(t, roots))
			for _, d := range devs {
				if len(d.Warnings) > 0 {
					t.Errorf("%s: warnings %q", d.Address, d.Warnings)
				}
			}
			tc.check(t, byAddress(devs))
		})
	}
}

// TestScanWhileRemoving scans while another goroutine hot-unplugs
// functions: scans must neither fail nor race (run with -race), whatever
// state they catch the tree in.
func TestScanWhileRemoving(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	r := testReader(t, roots, Options{Workers: 4})
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, a := range []string{"0000:3b:01.0", "0000:3b:01.1", "0000:af:00.0", "0000:3b:00.0"} {
			if err := roots.Remove(a); err != nil {
				t.Errorf("remove %s: %v", a, err)
			}
		}
	})
	for range 20 {
		if _, err := r.Scan(); err != nil {
			t.Errorf("Scan during removal: %v", err)
		}
	}
	wg.Wait()
	if n := len(scanOK(t, r)); n != 2 {
		t.Errorf("after removal %d functions, want 2", n)
	}
}
