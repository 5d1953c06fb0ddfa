package sysfs

import (
	"slices"
	"syscall"
	"testing"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// switchdevNode is a ConnectX PF with two VFs and, in net/, what the kernel
// lists there: the PF's own interfaces and, in switchdev mode, the VFs'
// representors, named as on a node booted with net.ifnames=0 (the
// representors, made after the uplink, sort before it).
func switchdevNode(ifs ...sysfsgen.Interface) sysfsgen.Node {
	return sysfsgen.Node{Functions: []sysfsgen.Function{{
		Address: "0000:5e:00.0", Vendor: "15b3", Device: "101b", VFDevice: "101c",
		Class: "020000", Driver: "mlx5_core", IOMMUGroup: "40",
		TotalVFs: 8, Interfaces: ifs,
		VFs: []sysfsgen.Function{
			{Driver: "mlx5_core", IOMMUGroup: "41", Interfaces: []sysfsgen.Interface{{Name: "eth20"}}},
			{Driver: "vfio-pci", IOMMUGroup: "42"},
		},
	}}}
}

func TestSwitchdevUplinkNamesTheVFsPF(t *testing.T) {
	const id = "0c42a1030065b7a2"
	tests := []struct {
		name  string
		ifs   []sysfsgen.Interface
		order []string // the PF's interfaces as a scan reports them
	}{
		{
			name: "switchdev: the uplink first",
			ifs: []sysfsgen.Interface{
				{Name: "eth2", SwitchID: id, PortName: "p0"},
				{Name: "eth10", SwitchID: id, PortName: "pf0vf0"},
				{Name: "eth11", SwitchID: id, PortName: "pf0vf1"},
			},
			order: []string{"eth2", "eth10", "eth11"},
		},
		{
			name: "legacy: by name",
			ifs: []sysfsgen.Interface{
				{Name: "eth2"},
				{Name: "eth10"},
			},
			order: []string{"eth10", "eth2"},
		},
		{
			name: "switch ports but no uplink: by name",
			ifs: []sysfsgen.Interface{
				{Name: "eth2", SwitchID: id, PortName: "pf0vf9"},
				{Name: "eth10", SwitchID: id, PortName: "pf0vf0"},
			},
			order: []string{"eth10", "eth2"},
		},
		{
			name: "a port name without a switch ID: by name",
			ifs: []sysfsgen.Interface{
				{Name: "eth2", PortName: "p0"},
				{Name: "eth10"},
			},
			order: []string{"eth10", "eth2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleReader(t, sysfsgen.TempNode(t, switchdevNode(tc.ifs...)))
			devs := byAddress(scanOK(t, r))
			pf := devs["0000:5e:00.0"]
			var names []string
			for _, ifc := range pf.Interfaces {
				names = append(names, ifc.Name)
			}
			if !slices.Equal(names, tc.order) {
				t.Errorf("PF interfaces %v, want %v", names, tc.order)
			}
			if len(pf.Warnings) > 0 || pf.Incomplete {
				t.Errorf("PF warnings %q, incomplete %v", pf.Warnings, pf.Incomplete)
			}
			var vfs []string
			for addr, d := range devs {
				if d.PF == pf.Address {
					vfs = append(vfs, addr)
				}
			}
			if len(vfs) != 2 {
				t.Fatalf("VFs %v, want two", vfs)
			}
			for _, vf := range vfs {
				if got := devs[vf].PFInterface; got != tc.order[0] {
					t.Errorf("%s: PFInterface %q, want %q", vf, got, tc.order[0])
				}
				one, err := r.Device(vf)
				if err != nil {
					t.Fatal(err)
				}
				if one.PFInterface != tc.order[0] {
					t.Errorf("Device(%s): PFInterface %q, want %q", vf, one.PFInterface, tc.order[0])
				}
			}
		})
	}
}

// A read of the uplink's switch files that fails with an error other than
// the kernel's refusal on an interface that is no switch port (here
// EMFILE) leaves the PF's read incomplete, and its VFs' with it: the
// representor now first is no news of the VFs' PF. The refusal itself is
// no fault.
func TestSwitchdevUplinkReadFault(t *testing.T) {
	const id = "0c42a1030065b7a2"
	roots := sysfsgen.TempNode(t, switchdevNode(
		sysfsgen.Interface{Name: "eth2", SwitchID: id, PortName: "p0"},
		sysfsgen.Interface{Name: "eth10", SwitchID: id, PortName: "pf0vf0"},
		sysfsgen.Interface{Name: "eth11", SwitchID: id, PortName: "pf0vf1"},
	))
	for _, tc := range []struct {
		err        error
		incomplete bool
	}{{syscall.EMFILE, true}, {syscall.EOPNOTSUPP, false}} {
		r := sampleReader(t, roots)
		r.fs = faultFS{faults: map[string]error{"eth2/phys_switch_id": tc.err}}
		devs := scanOK(t, r)
		for _, d := range devs {
			if d.Address != "0000:5e:00.0" && d.PF != "0000:5e:00.0" {
				continue
			}
			if d.Incomplete != tc.incomplete {
				t.Errorf("%v: %s incomplete %v, want %v (warnings %q)", tc.err, d.Address, d.Incomplete, tc.incomplete, d.Warnings)
			}
		}
	}
}

// A ConnectX PF whose firmware has SR-IOV off (no sriov_totalvfs) can
// still have SFs, and in switchdev mode their representors sit in its
// net/ beside the uplink. The uplink comes first there too: it is what an
// SF pool's pfNames names and what the PF's own link check reads.
func TestSwitchdevUplinkFirstWithoutSRIOV(t *testing.T) {
	const id = "0c42a1030065b7a2"
	roots := sysfsgen.TempNode(t, sysfsgen.Node{Functions: []sysfsgen.Function{{
		Address: "0000:5e:00.0", Vendor: "15b3", Device: "101d",
		Class: "020000", Driver: "mlx5_core", IOMMUGroup: "40",
		Aux: []string{"mlx5_core.eth.0", "mlx5_core.sf.2"},
		Interfaces: []sysfsgen.Interface{
			{Name: "eth2", SwitchID: id, PortName: "p0"},
			{Name: "eth10", SwitchID: id, PortName: "pf0sf88"},
		},
	}}})
	pf := byAddress(scanOK(t, sampleReader(t, roots)))["0000:5e:00.0"]
	if pf.TotalVFs != -1 {
		t.Fatalf("TotalVFs %d, want -1 (no sriov_totalvfs)", pf.TotalVFs)
	}
	var names []string
	for _, ifc := range pf.Interfaces {
		names = append(names, ifc.Name)
	}
	if want := []string{"eth2", "eth10"}; !slices.Equal(names, want) {
		t.Errorf("PF interfaces %v, want %v", names, want)
	}
	if got := pf.ProbeTarget(true).Interface; got != "eth2" {
		t.Errorf("probe interface %q, want the uplink eth2", got)
	}
	if len(pf.Warnings) > 0 || pf.Incomplete {
		t.Errorf("PF warnings %q, incomplete %v", pf.Warnings, pf.Incomplete)
	}
}
