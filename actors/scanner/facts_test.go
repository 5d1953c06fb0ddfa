package scanner

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

func vf(addr, driver string) sysfs.Device {
	return sysfs.Device{Address: addr, Vendor: "8086", Device: "1889", Class: "020000", Driver: driver,
		NUMANode: 0, IOMMUGroup: "60", PF: "0000:3b:00.0", VFIndex: 0, PFInterface: "ens785f0"}
}

func known(present bool, d sysfs.Device) events.Device {
	return events.Device{Facts: FactsOf(d), Present: present, Healthy: present}
}

// summary turns Diff's payloads into comparable lines.
func summary(ps []events.Payload) []string {
	var out []string
	for _, p := range ps {
		line := string(p.EventType()) + " " + p.Subject()
		if c, ok := p.(events.DeviceChanged); ok {
			line += " " + strings.Join(c.Changed, ",")
		}
		out = append(out, line)
	}
	return out
}

func TestDiff(t *testing.T) {
	a, b, c := vf("0000:3b:01.0", "vfio-pci"), vf("0000:3b:01.1", "iavf"), vf("0000:3b:01.2", "iavf")
	rebound := a
	rebound.Driver, rebound.VFIODevice = "iavf", true
	moved := b
	moved.NUMANode = 1
	moved.Interfaces = []sysfs.NetInterface{{Name: "ens785f0v1", OperState: "up"}}
	movedDown := moved
	movedDown.Interfaces = []sysfs.NetInterface{{Name: "ens785f0v1", OperState: "down"}}
	swapped := a
	swapped.Vendor, swapped.Device = "15b3", "101e"
	unread := a
	unread.Vendor, unread.Driver, unread.Incomplete = "", "", true
	tests := []struct {
		name    string
		known   map[string]events.Device
		scanned []sysfs.Device
		want    []string
	}{
		{"nothing known, nothing found", nil, nil, nil},
		{"new devices are discovered in scan order", nil, []sysfs.Device{a, b},
			[]string{"DeviceDiscovered 0000:3b:01.0", "DeviceDiscovered 0000:3b:01.1"}},
		{"unchanged devices yield nothing",
			map[string]events.Device{a.Address: known(true, a), b.Address: known(true, b)}, []sysfs.Device{a, b}, nil},
		{"changed facts are named by their JSON names in field order",
			map[string]events.Device{a.Address: known(true, a), b.Address: known(true, b)}, []sysfs.Device{rebound, moved},
			[]string{"DeviceChanged 0000:3b:01.0 driver,vfio_device", "DeviceChanged 0000:3b:01.1 numa_node,interfaces"}},
		{"what only sysfs knows (operstate) is no change",
			map[string]events.Device{b.Address: known(true, moved)}, []sysfs.Device{movedDown}, nil},
		{"a present device missing from the scan is removed",
			map[string]events.Device{a.Address: known(true, a), b.Address: known(true, b)}, []sysfs.Device{b},
			[]string{"DeviceRemoved 0000:3b:01.0"}},
		{"a device already removed is not removed again",
			map[string]events.Device{a.Address: known(false, a), b.Address: known(true, b)}, []sysfs.Device{b}, nil},
		{"a removed device that comes back is discovered again, even unchanged",
			map[string]events.Device{a.Address: known(false, a)}, []sysfs.Device{a},
			[]string{"DeviceDiscovered 0000:3b:01.0"}},
		{"a device read incompletely is what was read (the scanner puts in a stand-in first)",
			map[string]events.Device{a.Address: known(true, a)}, []sysfs.Device{unread},
			[]string{"DeviceChanged 0000:3b:01.0 vendor,driver"}},
		{"a device read incompletely is discovered with what was read",
			map[string]events.Device{a.Address: known(false, a)}, []sysfs.Device{unread},
			[]string{"DeviceDiscovered 0000:3b:01.0"}},
		{"another kind of device at a known address is that one removed and this one discovered",
			map[string]events.Device{a.Address: known(true, a), b.Address: known(true, b)}, []sysfs.Device{swapped, b},
			[]string{"DeviceRemoved 0000:3b:01.0", "DeviceDiscovered 0000:3b:01.0"}},
		{"removals come after the rest, sorted by address",
			map[string]events.Device{c.Address: known(true, c), b.Address: known(true, b)}, []sysfs.Device{a},
			[]string{"DeviceDiscovered 0000:3b:01.0", "DeviceRemoved 0000:3b:01.1", "DeviceRemoved 0000:3b:01.2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := summary(Diff(tc.known, tc.scanned, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("Diff =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

// Removals are sorted by address every time, not in the order a map
// happens to give them: one run of a two-removal case passes by chance
// half the time.
func TestDiffSortsRemovalsEveryTime(t *testing.T) {
	ledger := map[string]events.Device{}
	var want []string
	for i := range 8 {
		d := vf(fmt.Sprintf("0000:3b:01.%d", i), "iavf")
		ledger[d.Address] = known(true, d)
		want = append(want, "DeviceRemoved "+d.Address)
	}
	for range 20 {
		if got := summary(Diff(ledger, nil, nil)); !slices.Equal(got, want) {
			t.Fatalf("Diff =\n  %q\nwant\n  %q", got, want)
		}
	}
}

// A function the kernel said it removed since the last scan, and that the
// scan finds, went and came back (its PF's VFs made anew): recorded
// removed, then discovered, even unchanged. One the ledger has removed
// already is discovered; one still gone is removed once.
func TestDiffOfFunctionsTheKernelRemoved(t *testing.T) {
	a, b, c := vf("0000:3b:01.0", "vfio-pci"), vf("0000:3b:01.1", "iavf"), vf("0000:3b:01.2", "iavf")
	known := map[string]events.Device{a.Address: known(true, a), b.Address: known(false, b), c.Address: known(true, c)}
	got := summary(Diff(known, []sysfs.Device{a, b}, []string{a.Address, b.Address, c.Address}))
	want := []string{"DeviceRemoved 0000:3b:01.0", "DeviceDiscovered 0000:3b:01.0", "DeviceDiscovered 0000:3b:01.1", "DeviceRemoved 0000:3b:01.2"}
	if !slices.Equal(got, want) {
		t.Errorf("Diff =\n  %q\nwant\n  %q", got, want)
	}
}

func TestDiffCarriesFreshFacts(t *testing.T) {
	a := vf("0000:3b:01.0", "vfio-pci")
	rebound := a
	rebound.Driver = "iavf"
	ps := Diff(map[string]events.Device{a.Address: known(true, a)}, []sysfs.Device{rebound}, nil)
	if len(ps) != 1 {
		t.Fatalf("Diff = %v, want one change", summary(ps))
	}
	ch := ps[0].(events.DeviceChanged)
	if !reflect.DeepEqual(ch.Device, FactsOf(rebound)) {
		t.Errorf("DeviceChanged carries %+v, want the scanned facts %+v", ch.Device, FactsOf(rebound))
	}
	removed := Diff(map[string]events.Device{a.Address: known(true, a)}, nil, nil)
	if r := removed[0].(events.DeviceRemoved); r.Reason == "" {
		t.Errorf("DeviceRemoved has no reason: %+v", r)
	}
	// IDs that differ at the address are another device; IDs a read
	// missed, on either side, say nothing.
	for _, tc := range []struct {
		name           string
		vendor, device string
		incomplete     bool
		knownMissing   string // the known ID unread: "vendor" or "device"
		another        string // "": not another device
	}{
		{name: "both IDs differ", vendor: "15b3", device: "101e", another: "15b3:101e where 8086:1889 was"},
		{name: "the vendor differs", vendor: "15b3", device: "1889", another: "15b3:1889 where 8086:1889 was"},
		{name: "the device ID differs", vendor: "8086", device: "1592", another: "8086:1592 where 8086:1889 was"},
		{name: "an incomplete scan", vendor: "15b3", device: "101e", incomplete: true},
		{name: "the vendor unread", vendor: "", device: "101e"},
		{name: "the device ID unread", vendor: "15b3", device: ""},
		{name: "the known vendor unread", vendor: "15b3", device: "101e", knownMissing: "vendor"},
		{name: "the known device ID unread", vendor: "15b3", device: "101e", knownMissing: "device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			swapped := a
			swapped.Vendor, swapped.Device, swapped.Incomplete = tc.vendor, tc.device, tc.incomplete
			k := known(true, a)
			switch tc.knownMissing {
			case "vendor":
				k.Facts.Vendor = ""
			case "device":
				k.Facts.Device = ""
			}
			ps := Diff(map[string]events.Device{a.Address: k}, []sysfs.Device{swapped}, nil)
			if tc.another == "" {
				if slices.Contains(summary(ps), "DeviceRemoved "+a.Address) {
					t.Errorf("Diff = %v, want no removal", summary(ps))
				}
				return
			}
			if len(ps) != 2 {
				t.Fatalf("Diff of another device at the address = %v, want its removal and discovery", summary(ps))
			}
			if r := ps[0].(events.DeviceRemoved); !strings.Contains(r.Reason, tc.another) {
				t.Errorf("DeviceRemoved of a device another took the address of says %q; want %q", r.Reason, tc.another)
			}
			if got := ps[1].(events.DeviceDiscovered).Device; !reflect.DeepEqual(got, FactsOf(swapped)) {
				t.Errorf("DeviceDiscovered carries %+v, want the scanned facts %+v", got, FactsOf(swapped))
			}
		})
	}
}

func TestChangedFields(t *testing.T) {
	base := FactsOf(vf("0000:3b:01.0", "iavf"))
	base.Interfaces = []string{"ens785f0v0"}
	tests := []struct {
		name   string
		change func(*events.DeviceFacts)
		want   []string
	}{
		{"same", func(*events.DeviceFacts) {}, nil},
		{"nil and empty slices are the same", func(f *events.DeviceFacts) { f.RDMADevices = []string{} }, nil},
		{"one slice element", func(f *events.DeviceFacts) { f.Interfaces = []string{"ens785f0v9"} }, []string{"interfaces"}},
		{"one slice element more", func(f *events.DeviceFacts) { f.Interfaces = append(f.Interfaces, "ens785f0v9") }, []string{"interfaces"}},
		{"several fields, in field order", func(f *events.DeviceFacts) {
			f.PFInterface, f.Vendor, f.VFIndex = "ens785f1", "15b3", 3
		}, []string{"vendor", "vf_index", "pf_interface"}},
		{"names without omitempty", func(f *events.DeviceFacts) { f.RDMADevices = []string{"mlx5_2"} }, []string{"rdma_devices"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := base
			b.Interfaces = slices.Clone(base.Interfaces)
			tc.change(&b)
			if got := ChangedFields(base, b); !slices.Equal(got, tc.want) {
				t.Errorf("ChangedFields = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFactsOf(t *testing.T) {
	d := sysfs.Device{
		Address: "0000:5e:00.2", Vendor: "15b3", Device: "101c", SubsystemVendor: "15b3", SubsystemDevice: "0001",
		Class: "020000", VendorName: "Mellanox", DeviceName: "ConnectX-6 VF", Driver: "mlx5_core", NUMANode: 1,
		IOMMUGroup: "88", VFIODevice: true, PF: "0000:5e:00.0", VFIndex: 0, PFInterface: "ens1f0",
		Interfaces:  []sysfs.NetInterface{{Name: "ens1f0v0", OperState: "up", Carrier: 1}, {Name: "ens1f0v0b"}},
		RDMADevices: []string{"mlx5_2"},
		// Not facts the ledger keeps:
		ClassName: "Network controller", ACPIIndex: "3", TotalVFs: -1, NumVFs: -1, VDPAType: "vhost",
		Warnings: []string{"numa_node: oops"},
	}
	want := events.DeviceFacts{
		Address: "0000:5e:00.2", Vendor: "15b3", Device: "101c", SubsystemVendor: "15b3", SubsystemDevice: "0001",
		Class: "020000", VendorName: "Mellanox", DeviceName: "ConnectX-6 VF", Driver: "mlx5_core", NUMANode: 1,
		IOMMUGroup: "88", VFIODevice: true, PF: "0000:5e:00.0", VFIndex: 0, PFInterface: "ens1f0",
		Interfaces: []string{"ens1f0v0", "ens1f0v0b"}, RDMADevices: []string{"mlx5_2"},
	}
	got := FactsOf(d)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FactsOf =\n  %+v\nwant\n  %+v", got, want)
	}
	d.RDMADevices[0] = "changed"
	if got.RDMADevices[0] != "mlx5_2" {
		t.Errorf("FactsOf shares RDMADevices with the scan")
	}
}
