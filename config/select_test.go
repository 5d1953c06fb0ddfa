package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/devledger/devledger/sysfs"
)

// fn builds a PCI function as the sysfs reader would report it: an Intel
// Ethernet function bound to iavf, not SR-IOV, with the unknown values the
// contract documents; edit adjusts it.
func fn(addr string, edit func(d *sysfs.Device)) sysfs.Device {
	d := sysfs.Device{
		Address: addr, Vendor: "8086", Device: "154c", Class: "020000", ClassName: "Network controller",
		Driver: "iavf", NUMANode: -1, TotalVFs: -1, NumVFs: -1, VFIndex: -1,
	}
	if edit != nil {
		edit(&d)
	}
	return d
}

// pfWithVFs builds an SR-IOV PF with interface ifname and n VFs enabled,
// and its VFs at addresses prefix+".<i+1>" bound to driver (VF i has no
// interface when the driver is vfio-pci).
func pfWithVFs(addr, ifname string, n int, prefix, driver string) []sysfs.Device {
	devs := []sysfs.Device{fn(addr, func(d *sysfs.Device) {
		d.Device, d.Driver, d.TotalVFs, d.NumVFs = "1572", "i40e", 64, n
		d.Interfaces = []sysfs.NetInterface{{Name: ifname, OperState: "up", Carrier: 1, LinkType: "ether"}}
	})}
	for i := range n {
		devs = append(devs, fn(fmt.Sprintf("%s.%d", prefix, i+1), func(d *sysfs.Device) {
			d.Driver, d.PF, d.VFIndex, d.PFInterface = driver, addr, i, ifname
			if driver != "vfio-pci" {
				d.Interfaces = []sysfs.NetInterface{{Name: fmt.Sprintf("%sv%d", ifname, i), LinkType: "ether", Carrier: -1}}
			}
		}))
	}
	return devs
}

// pools renders where each device went: "address=pool" for pooled
// devices, sorted as given.
func pools(sel *Selection) []string {
	var out []string
	for _, p := range sel.Devices {
		if p.Pool != "" {
			out = append(out, p.Address+"="+p.Pool)
		}
		for _, a := range p.Aux {
			if a.Pool != "" {
				out = append(out, a.Name+"="+a.Pool)
			}
		}
	}
	return out
}

// selectBoth is c.Select, checked against c.Members: the two must give
// the pools the same members.
func selectBoth(t *testing.T, c *Config, devs []sysfs.Device, env Env) *Selection {
	t.Helper()
	sel := c.Select(devs, env)
	if got := c.Members(devs, env); !reflect.DeepEqual(got, sel.Pools) {
		t.Fatalf("Members gave\n%+v\nSelect gave\n%+v", got, sel.Pools)
	}
	return sel
}

// cfg parses a config made of the given resources.
func cfg(t *testing.T, resources string) *Config {
	t.Helper()
	return mustParse(t, "c.json", `{"resourceList": [`+resources+`]}`)
}

func TestSelect(t *testing.T) {
	// eth0: PF 0000:3b:00.0 with 4 VFs on iavf at 0000:3b:02.1-4;
	// eth1: PF 0000:3b:00.1 with 2 VFs on vfio-pci at 0000:3b:0a.1-2.
	node := append(pfWithVFs("0000:3b:00.0", "eth0", 4, "0000:3b:02", "iavf"),
		pfWithVFs("0000:3b:00.1", "eth1", 2, "0000:3b:0a", "vfio-pci")...)
	gpu := fn("0000:af:00.0", func(d *sysfs.Device) {
		d.Vendor, d.Device, d.Class, d.ClassName, d.Driver = "10de", "20b0", "030200", "Display controller", "vfio-pci"
	})
	qat := fn("0000:b1:00.0", func(d *sysfs.Device) {
		d.Device, d.Class, d.ClassName, d.Driver = "4941", "120000", "Processing accelerators", "vfio-pci"
	})
	tests := []struct {
		name      string
		resources string
		devs      []sysfs.Device
		env       Env
		want      []string
	}{
		{
			name:      "fields ANDed",
			resources: `{"resourceName": "a", "selectors": {"vendors": ["8086"], "drivers": ["vfio-pci"]}}`,
			devs:      node,
			want:      []string{"0000:3b:0a.1=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name:      "values ORed",
			resources: `{"resourceName": "a", "selectors": {"drivers": ["iavf", "vfio-pci"], "pciAddresses": ["0000:3b:02.1", "0000:3B:0A.2"]}}`,
			devs:      node,
			want:      []string{"0000:3b:02.1=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name:      "selector objects ORed",
			resources: `{"resourceName": "a", "selectors": [{"pciAddresses": ["0000:3b:02.2"]}, {"drivers": ["vfio-pci"]}]}`,
			devs:      node,
			want:      []string{"0000:3b:02.2=intel.com/a", "0000:3b:0a.1=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name: "first pool wins",
			resources: `{"resourceName": "a", "selectors": {"pfNames": ["eth0#0-1"]}},
				{"resourceName": "b", "selectors": {"vendors": ["8086"]}}`,
			devs: node,
			want: []string{
				"0000:3b:02.1=intel.com/a", "0000:3b:02.2=intel.com/a", "0000:3b:02.3=intel.com/b",
				"0000:3b:02.4=intel.com/b", "0000:3b:0a.1=intel.com/b", "0000:3b:0a.2=intel.com/b",
			},
		},
		{
			name:      "VF ranges on pfNames",
			resources: `{"resourceName": "a", "selectors": {"pfNames": ["eth0#0,2-3", "ETH1#1"]}}`,
			devs:      node,
			want:      []string{"0000:3b:02.1=intel.com/a", "0000:3b:02.3=intel.com/a", "0000:3b:02.4=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name:      "every entry for one PF counts",
			resources: `{"resourceName": "a", "selectors": {"pfNames": ["eth0#0", "eth0#3"]}}`,
			devs:      node,
			want:      []string{"0000:3b:02.1=intel.com/a", "0000:3b:02.4=intel.com/a"},
		},
		{
			name:      "VF ranges on rootDevices",
			resources: `{"resourceName": "a", "selectors": {"rootDevices": ["0000:3b:00.0#1", "0000:3b:00.1"]}}`,
			devs:      node,
			want:      []string{"0000:3b:02.2=intel.com/a", "0000:3b:0a.1=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name:      "PF with VFs is never a netDevice",
			resources: `{"resourceName": "a", "selectors": {"drivers": ["i40e"]}}`,
			devs:      node,
			want:      nil,
		},
		{
			name:      "PF without VFs is pooled",
			resources: `{"resourceName": "a", "selectors": {"drivers": ["i40e"]}}`,
			devs:      append(pfWithVFs("0000:5e:00.0", "eth5", 0, "", ""), node...),
			want:      []string{"0000:5e:00.0=intel.com/a"},
		},
		{
			name:      "default route interface never pooled",
			resources: `{"resourceName": "a", "selectors": {"drivers": ["iavf"]}}`,
			devs:      node,
			env:       Env{DefaultRouteInterfaces: []string{"eth0v1"}},
			want:      []string{"0000:3b:02.1=intel.com/a", "0000:3b:02.3=intel.com/a", "0000:3b:02.4=intel.com/a"},
		},
		{
			name:      "no driver never pooled",
			resources: `{"resourceName": "a", "deviceType": "genericPCI", "selectors": {"vendors": ["10de"]}}`,
			devs:      []sysfs.Device{gpu, fn("0000:af:00.1", func(d *sysfs.Device) { d.Vendor, d.Class, d.Driver = "10de", "030200", "" })},
			want:      []string{"0000:af:00.0=intel.com/a"},
		},
		{
			name: "class rules per device type",
			resources: `{"resourceName": "net", "selectors": {"drivers": ["vfio-pci"]}},
				{"resourceName": "accel", "deviceType": "accelerator", "selectors": {"drivers": ["vfio-pci"]}},
				{"resourceName": "any", "deviceType": "genericPCI", "selectors": {"drivers": ["vfio-pci"]}}`,
			devs: []sysfs.Device{gpu, qat, node[6]},
			want: []string{"0000:af:00.0=intel.com/any", "0000:b1:00.0=intel.com/accel", "0000:3b:0a.1=intel.com/net"},
		},
		{
			name:      "genericPCI skips PFs with VFs too",
			resources: `{"resourceName": "any", "deviceType": "genericPCI", "selectors": {"vendors": ["8086"], "drivers": ["i40e"]}}`,
			devs:      node,
			want:      nil,
		},
		{
			name:      "link type of a VF without interface is its PF's",
			resources: `{"resourceName": "a", "selectors": {"linkTypes": ["ether"], "drivers": ["vfio-pci"]}}, {"resourceName": "ib", "selectors": {"linkTypes": ["infiniband"]}}`,
			devs:      node,
			want:      []string{"0000:3b:0a.1=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name:      "ddpProfiles accept nothing",
			resources: `{"resourceName": "a", "selectors": [{"ddpProfiles": ["GTP"]}, {"pciAddresses": ["0000:3b:02.1"]}]}`,
			devs:      node,
			want:      []string{"0000:3b:02.1=intel.com/a"},
		},
		{
			name:      "needVhostNet does not filter",
			resources: `{"resourceName": "a", "selectors": {"drivers": ["vfio-pci"], "needVhostNet": true}}`,
			devs:      node,
			env:       Env{HasVhostNet: false},
			want:      []string{"0000:3b:0a.1=intel.com/a", "0000:3b:0a.2=intel.com/a"},
		},
		{
			name:      "acpi index",
			resources: `{"resourceName": "a", "selectors": {"acpiIndexes": ["101"]}}`,
			devs:      []sysfs.Device{fn("0000:01:00.0", func(d *sysfs.Device) { d.ACPIIndex = "101" }), fn("0000:01:00.1", nil)},
			want:      []string{"0000:01:00.0=intel.com/a"},
		},
		{
			// Parse warns that such an ID never matches; the plugin
			// compares every value as written.
			name:      "values compared case-sensitively",
			resources: `{"resourceName": "a", "selectors": {"devices": ["154C"]}}, {"resourceName": "b", "selectors": {"drivers": ["IAVF"]}}, {"resourceName": "c", "selectors": {"drivers": ["vfio-pci"]}}`,
			devs:      node,
			want:      []string{"0000:3b:0a.1=intel.com/c", "0000:3b:0a.2=intel.com/c"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := selectBoth(t, cfg(t, tc.resources), tc.devs, tc.env)
			if got := pools(sel); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pooled:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if len(sel.Devices) != len(tc.devs) {
				t.Errorf("%d placements for %d devices", len(sel.Devices), len(tc.devs))
			}
			members := 0
			for _, p := range sel.Pools {
				members += len(p.Members)
			}
			if members != len(tc.want) {
				t.Errorf("pools hold %d members, want %d", members, len(tc.want))
			}
		})
	}
}

func TestSelectRDMAVDPAAndPKeys(t *testing.T) {
	mlx := func(addr string, edit func(d *sysfs.Device)) sysfs.Device {
		return fn(addr, func(d *sysfs.Device) {
			d.Vendor, d.Device, d.Driver = "15b3", "101e", "mlx5_core"
			if edit != nil {
				edit(d)
			}
		})
	}
	devs := []sysfs.Device{
		mlx("0000:d8:00.2", func(d *sysfs.Device) { d.RDMADevices = []string{"mlx5_2"} }),
		mlx("0000:d8:00.3", func(d *sysfs.Device) { d.VDPAType = "vhost" }),
		mlx("0000:d8:00.4", func(d *sysfs.Device) {
			d.RDMADevices = []string{"mlx5_4"}
			d.Interfaces = []sysfs.NetInterface{{Name: "ib0", LinkType: "infiniband", PKeys: []string{"0x7fff", "0x8001"}}}
		}),
		mlx("0000:d8:00.5", func(d *sysfs.Device) {
			d.Interfaces = []sysfs.NetInterface{{Name: "ib1", LinkType: "infiniband", PKeys: []string{"0x8001"}}}
		}),
		// Its RDMA device in a pod's network namespace: the driver's
		// auxiliary RDMA device stays, and so does its pool.
		mlx("0000:d8:00.6", func(d *sysfs.Device) {
			d.AuxDevices = []sysfs.AuxDevice{{Name: "mlx5_core.eth.6", Type: "eth"}, {Name: "mlx5_core.rdma.6", Type: "rdma"}}
		}),
		mlx("0000:d8:00.7", func(d *sysfs.Device) { d.AuxDevices = []sysfs.AuxDevice{{Name: "mlx5_core.eth.7", Type: "eth"}} }),
	}
	c := cfg(t, `{"resourceName": "pkey", "selectors": {"pKeys": ["0x8001"]}},
		{"resourceName": "vhost", "selectors": {"vdpaType": "vhost"}},
		{"resourceName": "virtio", "selectors": {"vdpaType": "virtio"}},
		{"resourceName": "ib", "selectors": {"linkTypes": ["infiniband"], "pKeys": ["0x7FFF"]}},
		{"resourceName": "rdma", "selectors": {"isRdma": true}}`)
	want := []string{
		"0000:d8:00.2=intel.com/rdma", "0000:d8:00.3=intel.com/vhost",
		"0000:d8:00.4=intel.com/ib", "0000:d8:00.5=intel.com/pkey", "0000:d8:00.6=intel.com/rdma",
	}
	if got := pools(selectBoth(t, c, devs, Env{})); !reflect.DeepEqual(got, want) {
		t.Errorf("pooled:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSelectAuxiliaryDevices(t *testing.T) {
	bf2 := fn("0000:03:00.0", func(d *sysfs.Device) {
		d.Vendor, d.Device, d.Driver = "15b3", "a2d6", "mlx5_core"
		d.Interfaces = []sysfs.NetInterface{{Name: "p0", LinkType: "ether"}}
		d.AuxDevices = []sysfs.AuxDevice{{Name: "mlx5_core.eth.0", Type: "eth"}, {Name: "mlx5_core.sf.2", Type: "sf"}, {Name: "mlx5_core.sf.3", Type: "sf"}}
	})
	tests := []struct {
		name      string
		resources string
		env       Env
		want      []string
	}{
		{
			name:      "sf pool takes SFs, the function goes to its own pool",
			resources: `{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"vendors": ["15b3"], "pfNames": ["p0"], "auxTypes": ["sf"]}}, {"resourceName": "pf", "selectors": {"devices": ["a2d6"]}}`,
			want:      []string{"0000:03:00.0=intel.com/pf", "mlx5_core.sf.2=intel.com/sf", "mlx5_core.sf.3=intel.com/sf"},
		},
		{
			name:      "first aux pool wins",
			resources: `{"resourceName": "sf1", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"], "rootDevices": ["0000:03:00.0"]}}, {"resourceName": "sf2", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"]}}`,
			want:      []string{"mlx5_core.sf.2=intel.com/sf1", "mlx5_core.sf.3=intel.com/sf1"},
		},
		{
			name:      "SF indexes are unknown, so ranges never match",
			resources: `{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"], "pfNames": ["p0#1-5"]}}`,
			want:      nil,
		},
		{
			name:      "default route on the parent does not keep SFs out",
			resources: `{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"]}}`,
			env:       Env{DefaultRouteInterfaces: []string{"p0"}},
			want:      []string{"mlx5_core.sf.2=intel.com/sf", "mlx5_core.sf.3=intel.com/sf"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := selectBoth(t, cfg(t, tc.resources), []sysfs.Device{bf2}, tc.env)
			if got := pools(sel); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pooled:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestExplainReasons(t *testing.T) {
	node := pfWithVFs("0000:3b:00.0", "eth0", 8, "0000:3b:02", "iavf")
	gpu := fn("0000:af:00.0", func(d *sysfs.Device) { d.Class, d.ClassName = "030000", "Display controller" })
	unbound := fn("0000:3b:00.2", func(d *sysfs.Device) { d.Driver = "" })
	routed := fn("0000:3b:00.3", func(d *sysfs.Device) { d.Interfaces = []sysfs.NetInterface{{Name: "eno1"}} })
	devs := append(node, gpu, unbound, routed)
	env := Env{DefaultRouteInterfaces: []string{"eno1"}}
	tests := []struct {
		name      string
		resources string
		addr      string
		pool      string
		reason    string
		rules     []string
	}{
		{
			name:      "driver mismatch in a single pool",
			resources: `{"resourceName": "intel_sriov_dpdk", "selectors": {"vendors": ["8086"], "drivers": ["vfio-pci"]}}`,
			addr:      "0000:3b:02.1",
			reason:    "intel.com/intel_sriov_dpdk: drivers: device has iavf, pool wants vfio-pci",
			rules:     []string{"drivers: device has iavf, pool wants vfio-pci"},
		},
		{
			name:      "PF with VFs",
			resources: `{"resourceName": "a", "selectors": {"vendors": ["8086"]}}`,
			addr:      "0000:3b:00.0",
			reason:    "not pooled: PF has 8 VFs enabled",
			rules:     []string{"not pooled: PF has 8 VFs enabled"},
		},
		{
			name:      "no driver",
			resources: `{"resourceName": "a", "selectors": {"vendors": ["8086"]}}, {"resourceName": "b", "selectors": {"drivers": ["x"]}}`,
			addr:      "0000:3b:00.2",
			reason:    "not pooled: no driver bound",
			rules:     []string{"not pooled: no driver bound", "not pooled: no driver bound"},
		},
		{
			name:      "default route",
			resources: `{"resourceName": "a", "selectors": {"vendors": ["8086"]}}`,
			addr:      "0000:3b:00.3",
			reason:    "not pooled: carries the default route (eno1)",
			rules:     []string{"not pooled: carries the default route (eno1)"},
		},
		{
			name: "taken by an earlier pool",
			resources: `{"resourceName": "intel_sriov_netdevice", "selectors": [{"drivers": ["x"]}, {"drivers": ["iavf"]}]},
				{"resourceName": "b", "selectors": {"vendors": ["8086"]}}`,
			addr:  "0000:3b:02.3",
			pool:  "intel.com/intel_sriov_netdevice",
			rules: []string{"joined: selectors[1] matched", "taken by earlier pool intel.com/intel_sriov_netdevice"},
		},
		{
			name:      "wrong class",
			resources: `{"resourceName": "a", "selectors": {"vendors": ["8086"]}}, {"resourceName": "b", "deviceType": "accelerator", "selectors": {"vendors": ["8086"]}}`,
			addr:      "0000:af:00.0",
			reason:    "no pool takes class 0x03 (Display controller)",
			rules: []string{
				"class: device is class 0x03 (Display controller), netDevice pools take network controllers (0x02)",
				"class: device is class 0x03 (Display controller), accelerator pools take processing accelerators (0x12)",
			},
		},
		{
			name:      "VF outside the range",
			resources: `{"resourceName": "a", "selectors": {"pfNames": ["eth0#0-3"]}}, {"resourceName": "b", "selectors": {"rootDevices": ["0000:3b:00.1"]}}`,
			addr:      "0000:3b:02.6",
			reason:    "matches none of 2 pools",
			rules:     []string{"pfNames: VF 5 of eth0 is outside eth0#0-3", "rootDevices: PF is 0000:3b:00.0, pool wants 0000:3b:00.1"},
		},
		{
			name:      "several selector objects",
			resources: `{"resourceName": "a", "selectors": [{"drivers": ["x"]}, {"ddpProfiles": ["GTP"]}]}`,
			addr:      "0000:3b:02.1",
			reason:    "intel.com/a: no selector object matched",
			rules:     []string{"no selector object matched"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := selectBoth(t, cfg(t, tc.resources), devs, env)
			p, ok := sel.Placement(tc.addr)
			if !ok {
				t.Fatalf("no placement for %s", tc.addr)
			}
			if p.Pool != tc.pool || p.Reason != tc.reason {
				t.Errorf("pool %q reason %q, want %q %q", p.Pool, p.Reason, tc.pool, tc.reason)
			}
			var rules []string
			for _, v := range p.Verdicts {
				rules = append(rules, v.Rule)
			}
			if !reflect.DeepEqual(rules, tc.rules) {
				t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(rules, "\n"), strings.Join(tc.rules, "\n"))
			}
		})
	}
}

func TestExplainChecks(t *testing.T) {
	devs := pfWithVFs("0000:3b:00.0", "eth0", 2, "0000:3b:02", "vfio-pci")
	c := cfg(t, `{"resourceName": "a", "selectors": [
		{"vendors": ["8086"], "devices": ["1889", "154c"], "drivers": ["iavf"], "linkTypes": ["ether"], "isRdma": true, "needVhostNet": true},
		{"pfNames": ["eth1"], "ddpProfiles": ["GTP"], "vdpaType": "virtio"}]}`)
	p, _ := selectBoth(t, c, devs, Env{HasVhostNet: true}).Placement("3b:02.1")
	want := []SelectorVerdict{
		{Path: "resourceList[0].selectors[0]", Checks: []Check{
			{Field: "vendors", Passed: true, Reason: "vendors: device has 8086, pool wants 8086"},
			{Field: "devices", Passed: true, Reason: "devices: device has 154c, pool wants one of 1889, 154c"},
			{Field: "drivers", Reason: "drivers: device has vfio-pci, pool wants iavf"},
			{Field: "linkTypes", Passed: true, Reason: "linkTypes: link type is ether, pool wants ether"},
			{Field: "isRdma", Reason: "isRdma: device has no RDMA device"},
			{Field: "needVhostNet", Passed: true, Reason: "needVhostNet: /dev/vhost-net present"},
		}},
		{Path: "resourceList[0].selectors[1]", Checks: []Check{
			{Field: "pfNames", Reason: "pfNames: PF interface is eth0, pool wants eth1"},
			{Field: "ddpProfiles", Reason: "ddpProfiles: cannot be evaluated on this node"},
			{Field: "vdpaType", Reason: "vdpaType: device has no vDPA device, pool wants virtio"},
		}},
	}
	if !reflect.DeepEqual(p.Verdicts[0].Selectors, want) {
		t.Errorf("selector verdicts:\n%+v\nwant:\n%+v", p.Verdicts[0].Selectors, want)
	}
}

func TestSelectionListsEveryPoolAndDevice(t *testing.T) {
	c := cfg(t, `{"resourceName": "empty", "selectors": {"drivers": ["none"]}}, {"resourceName": "all", "selectors": {}}`)
	devs := []sysfs.Device{fn("0000:01:00.0", nil), fn("0000:01:00.1", nil)}
	sel := selectBoth(t, c, devs, Env{})
	if len(sel.Pools) != 2 || sel.Pools[0].Name != "intel.com/empty" || len(sel.Pools[0].Members) != 0 {
		t.Errorf("pools = %+v", sel.Pools)
	}
	if got := sel.Pools[1].Members; !reflect.DeepEqual(got, []string{"0000:01:00.0", "0000:01:00.1"}) {
		t.Errorf("members = %q", got)
	}
	if sel.Pools[1].Resource != &c.Resources[1] {
		t.Error("PoolMembers.Resource does not point into the config")
	}
	if _, ok := sel.Placement("0000:02:00.0"); ok {
		t.Error("Placement found an absent address")
	}
	if p, ok := sel.Placement("01:00.1"); !ok || p.Selector != "resourceList[1].selectors" {
		t.Errorf("Placement(01:00.1) = %+v, %v", p, ok)
	}
}

// A selector object without a path (a Config built in code, not parsed)
// still places: a match is told by the object matching, not by its path.
func TestSelectorWithoutAPathPlaces(t *testing.T) {
	c := &Config{Resources: []Resource{{Name: "a", Prefix: "x.com", DeviceType: NetDevice,
		Selectors: []Selector{{Drivers: []string{"iavf"}}}}}}
	sel := selectBoth(t, c, []sysfs.Device{fn("0000:3b:02.1", nil)}, Env{})
	if got := sel.Pools[0].Members; !reflect.DeepEqual(got, []string{"0000:3b:02.1"}) {
		t.Errorf("members = %q, want the iavf device", got)
	}
}
