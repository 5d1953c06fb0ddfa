package allocation

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// respondGolden is what a golden file pins: the response as the ledger
// records it, and its _INFO variable decoded, so a reader sees the JSON
// rather than an escaped string.
type respondGolden struct {
	Response events.ContainerAllocation `json:"response"`
	Info     json.RawMessage            `json:"info"`
}

func TestRespondGolden(t *testing.T) {
	const pfA, pfB = "0000:3b:00.0", "0000:3b:00.1"
	vfioVF := func(addr string, idx int, group string) sysfs.Device {
		return vf(addr, pfA, idx, "vfio-pci", group, 0)
	}
	dpdk := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	rdmaVF := func(addr string, idx int, rdma string) sysfs.Device {
		d := vf(addr, pfB, idx, "mlx5_core", "", 0)
		d.Vendor, d.Device = "15b3", "101e"
		d.RDMADevices = []string{rdma}
		d.Interfaces = []sysfs.NetInterface{{Name: "ens1f1v" + rdma[len(rdma)-1:], LinkType: "ether", Carrier: 1}}
		return d
	}
	gpu := sysfs.Device{
		Address: "0000:65:00.0", Vendor: "10de", Device: "2330", Class: "030200",
		Driver: "vfio-pci", NUMANode: 1, IOMMUGroup: "120", VFIODevice: true,
		TotalVFs: -1, NumVFs: -1, VFIndex: -1,
	}
	gpu2 := gpu
	gpu2.Address, gpu2.IOMMUGroup = "0000:e5:00.0", "168"
	withExtra := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	withExtra.AdditionalInfo = map[string]map[string]string{
		"*":            {"vlan": "100", "owner": "telco"},
		"0000:3b:02.1": {"vlan": "200", "slot": "east"},
	}
	withCDI := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	withCDI.CDI = config.CDI{Enabled: true, Kind: "intel.com/net-pci"}
	// Under no-IOMMU mode only /dev/vfio/noiommu-5 exists, so sysfs found
	// no /dev/vfio/5.
	noIOMMU := vf("0000:00:05.0", "", -1, "vfio-pci", "5", -1)
	noIOMMU.VFIODevice = false
	vdpaDev := vf("0000:3b:02.4", pfB, 4, "mlx5_core", "", 0)
	vdpaDev.VDPAType = "vhost"
	// Bound to igb_uio, its uio node not found: the plugin's uio provider
	// says so with an empty entry.
	uioNoNode := vf("0000:3b:02.5", pfA, 5, "igb_uio", "65", 0)
	// In RDMA exclusive mode a pod's namespace holds the RDMA device: only
	// the auxiliary device says RDMA is enabled.
	rdmaTaken := rdmaVF("0000:3b:0a.4", 4, "mlx5_4")
	rdmaTaken.RDMADevices = nil
	rdmaTaken.AuxDevices = []sysfs.AuxDevice{{Name: "mlx5_core.rdma.4", Type: "rdma"}}

	cases := []struct {
		name string
		res  *config.Resource
		devs []sysfs.Device
		env  Env
	}{
		{
			name: "vfio-vfs-distinct-groups",
			res:  dpdk,
			devs: []sysfs.Device{vfioVF("0000:3b:02.1", 1, "61"), vfioVF("0000:3b:02.0", 0, "60")},
		},
		{
			name: "vfio-vfs-shared-group",
			res:  dpdk,
			devs: []sysfs.Device{vfioVF("0000:3b:02.0", 0, "60"), vfioVF("0000:3b:02.1", 1, "60")},
		},
		{
			name: "vfio-noiommu",
			res:  dpdk,
			devs: []sysfs.Device{noIOMMU},
			env:  Env{DevRoot: devRoot(t, "vfio/vfio", "vfio/noiommu-5")},
		},
		{
			name: "netdevice-iavf",
			res:  pool("intel.com", "intel_sriov_netdevice", config.NetDevice),
			devs: []sysfs.Device{vf("0000:3b:02.3", pfA, 3, "iavf", "63", 0), vf("0000:3b:02.2", pfA, 2, "iavf", "62", 0)},
		},
		{
			name: "rdma",
			res:  pool("nvidia.com", "mlnx_sriov_rdma", config.NetDevice, config.Selector{Vendors: []string{"15b3"}, IsRDMA: true}),
			// mlx5_3's nodes are unknown: it gets rdma_cm only.
			devs: []sysfs.Device{withChars(rdmaVF("0000:3b:0a.2", 2, "mlx5_2"), "mlx5_2", "uverbs2", "umad2", "issm2"), rdmaVF("0000:3b:0a.3", 3, "mlx5_3")},
			env:  Env{DevRoot: devRoot(t, "infiniband/rdma_cm")},
		},
		{
			name: "rdma-device-elsewhere",
			res:  pool("nvidia.com", "mlnx_sriov_rdma", config.NetDevice, config.Selector{Vendors: []string{"15b3"}, IsRDMA: true}),
			devs: []sysfs.Device{rdmaTaken},
			env:  Env{DevRoot: devRoot(t, "infiniband/rdma_cm")},
		},
		{
			name: "uio-no-node",
			res:  dpdk,
			devs: []sysfs.Device{uioNoNode},
		},
		{
			name: "vhost-net",
			res:  pool("intel.com", "intel_sriov_dpdk_vhost", config.NetDevice, config.Selector{Drivers: []string{"vfio-pci"}, NeedVhostNet: true}),
			devs: []sysfs.Device{vfioVF("0000:3b:02.0", 0, "60"), vfioVF("0000:3b:02.1", 1, "61")},
			env:  Env{DevRoot: devRoot(t, "vhost-net", "net/tun"), HasVhostNet: true},
		},
		{
			name: "vhost-net-absent",
			res:  pool("intel.com", "intel_sriov_dpdk_vhost", config.NetDevice, config.Selector{Drivers: []string{"vfio-pci"}, NeedVhostNet: true}),
			devs: []sysfs.Device{vfioVF("0000:3b:02.0", 0, "60")},
			env:  Env{DevRoot: devRoot(t), HasVhostNet: false},
		},
		{
			name: "vdpa-vhost",
			res:  pool("nvidia.com", "vdpa_vhost", config.NetDevice, config.Selector{VDPAType: "vhost"}),
			devs: []sysfs.Device{func() sysfs.Device { d := vdpaDev; d.VhostVDPA = "vhost-vdpa-0"; return d }()},
		},
		{
			name: "additional-info",
			res:  withExtra,
			devs: []sysfs.Device{vfioVF("0000:3b:02.0", 0, "60"), vfioVF("0000:3b:02.1", 1, "61")},
		},
		{
			name: "cdi",
			res:  withCDI,
			devs: []sysfs.Device{vfioVF("0000:3b:02.1", 1, "61"), vfioVF("0000:3b:02.0", 0, "60")},
		},
		{
			name: "gpu-genericpci-vfio",
			res:  pool("nvidia.com", "gpu", config.GenericPCI, config.Selector{Vendors: []string{"10de"}, Drivers: []string{"vfio-pci"}}),
			devs: []sysfs.Device{gpu2, gpu},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := json.Marshal(tc.devs)
			got, err := Respond(tc.res, tc.devs, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if after, _ := json.Marshal(tc.devs); string(after) != string(before) {
				t.Error("Respond modified its devices")
			}
			info := got.Envs[tc.res.EnvVarName()+"_INFO"]
			if !json.Valid([]byte(info)) {
				t.Fatalf("_INFO is not JSON: %q", info)
			}
			out, err := json.MarshalIndent(respondGolden{Response: got, Info: json.RawMessage(info)}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "respond/"+tc.name+".json", append(out, '\n'))

			again, err := Respond(tc.res, tc.devs, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := json.Marshal(again); string(a) != string(mustJSON(t, got)) {
				t.Error("a second Respond gave different bytes")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRespondSRIOVFormat pins the two variables byte for byte against the
// form the SR-IOV plugin writes, independently of the golden files, and
// that the only other one is KubeVirt's, naming the vfio-bound function.
func TestRespondSRIOVFormat(t *testing.T) {
	res := pool("intel.com", "intel_sriov_netdevice", config.NetDevice)
	devs := []sysfs.Device{
		vf("0000:3b:02.1", "0000:3b:00.0", 1, "vfio-pci", "61", 0),
		vf("0000:3b:02.0", "0000:3b:00.0", 0, "iavf", "60", 0),
	}
	got, err := Respond(res, devs, Env{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE": "0000:3b:02.1,0000:3b:02.0",
		"PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE_INFO": `{"0000:3b:02.0":{"generic":{"deviceID":"0000:3b:02.0"}},` +
			`"0000:3b:02.1":{"generic":{"deviceID":"0000:3b:02.1"},"vfio":{"dev-mount":"/dev/vfio/61","mount":"/dev/vfio/vfio"}}}`,
		"PCI_RESOURCE_INTEL_COM_INTEL_SRIOV_NETDEVICE": "0000:3b:02.1",
	}
	for k, v := range want {
		if got.Envs[k] != v {
			t.Errorf("%s = %q, want %q", k, got.Envs[k], v)
		}
	}
	if len(got.Envs) != len(want) {
		t.Errorf("envs %v, want only %v", got.Envs, want)
	}
}

// TestRespondKubeVirt checks the variable KubeVirt's virt-launcher finds a
// VM's host devices in: the vfio-bound addresses in request order, and
// nothing for a pool whose functions stay on a kernel driver.
func TestRespondKubeVirt(t *testing.T) {
	const pf = "0000:3b:00.0"
	gpu := func(addr, driver, group string) sysfs.Device {
		return sysfs.Device{
			Address: addr, Vendor: "10de", Device: "2330", Class: "030200",
			Driver: driver, IOMMUGroup: group, VFIODevice: true,
			TotalVFs: -1, NumVFs: -1, VFIndex: -1,
		}
	}
	h100 := pool("nvidia.com", "h100_vfio", config.GenericPCI, config.Selector{Vendors: []string{"10de"}, Drivers: []string{"vfio-pci"}})
	h100CDI := *h100
	h100CDI.CDI = config.CDI{Enabled: true, Kind: "nvidia.com/gpu-vfio"}
	cases := []struct {
		name string
		res  *config.Resource
		devs []sysfs.Device
		want string // "" for no variable
	}{
		{
			name: "vfio gpus in request order",
			res:  h100,
			devs: []sysfs.Device{gpu("0000:e5:00.0", "vfio-pci", "168"), gpu("0000:3b:00.0", "vfio-pci", "60"), gpu("0000:65:00.0", "vfio-pci", "120")},
			want: "0000:e5:00.0,0000:3b:00.0,0000:65:00.0",
		},
		{
			name: "vfio variant driver",
			res:  h100,
			devs: []sysfs.Device{gpu("0009:01:00.0", "nvgrace_gpu_vfio_pci", "9")},
			want: "0009:01:00.0",
		},
		{
			name: "cdi pool keeps it",
			res:  &h100CDI,
			devs: []sysfs.Device{gpu("0000:65:00.0", "vfio-pci", "120"), gpu("0000:3b:00.0", "vfio-pci", "60")},
			want: "0000:65:00.0,0000:3b:00.0",
		},
		{
			name: "vfio vfs of a netdevice pool",
			res:  pool("intel.com", "intel_sriov_dpdk", config.NetDevice),
			devs: []sysfs.Device{vf("0000:3b:02.1", pf, 1, "vfio-pci", "61", 0), vf("0000:3b:02.0", pf, 0, "vfio-pci", "60", 0)},
			want: "0000:3b:02.1,0000:3b:02.0",
		},
		{
			name: "netdevice on a kernel driver",
			res:  pool("intel.com", "intel_sriov_netdevice", config.NetDevice),
			devs: []sysfs.Device{vf("0000:3b:02.3", pf, 3, "iavf", "63", 0), vf("0000:3b:02.2", pf, 2, "iavf", "62", 0)},
		},
		{
			name: "uio",
			res:  pool("intel.com", "intel_sriov_dpdk", config.NetDevice),
			devs: []sysfs.Device{vf("0000:3b:02.5", pf, 5, "igb_uio", "65", 0)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Respond(tc.res, tc.devs, Env{})
			if err != nil {
				t.Fatal(err)
			}
			name := tc.res.KubeVirtEnvVarName()
			v, ok := got.Envs[name]
			switch {
			case tc.want == "" && ok:
				t.Errorf("%s = %q, want none", name, v)
			case tc.want != "" && v != tc.want:
				t.Errorf("%s = %q (set %v), want %q", name, v, ok, tc.want)
			}
			for k := range got.Envs {
				if strings.HasPrefix(k, "PCI_RESOURCE_") && k != name {
					t.Errorf("unexpected variable %s", k)
				}
			}
		})
	}
	if got, want := h100.KubeVirtEnvVarName(), "PCI_RESOURCE_NVIDIA_COM_H100_VFIO"; got != want {
		t.Errorf("KubeVirtEnvVarName = %q, want %q", got, want)
	}
}

func TestRespondErrors(t *testing.T) {
	dpdk := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	ok := vf("0000:3b:02.0", "0000:3b:00.0", 0, "vfio-pci", "60", 0)
	badCDI := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	badCDI.CDI = config.CDI{Enabled: true, Kind: "intel.com"}
	aux := pool("nvidia.com", "sf", config.AuxNetDevice)
	cases := []struct {
		name    string
		res     *config.Resource
		devs    []sysfs.Device
		env     Env
		want    error
		mention string
	}{
		{"no devices", dpdk, nil, Env{}, ErrInvalidRequest, "no devices"},
		{"device twice", dpdk, []sysfs.Device{ok, ok}, Env{}, ErrInvalidRequest, "0000:3b:02.0"},
		{"no address", dpdk, []sysfs.Device{{}}, Env{}, ErrInvalidRequest, "no PCI address"},
		{"vfio without group", dpdk, []sysfs.Device{ok, vf("0000:3b:02.1", "0000:3b:00.0", 1, "vfio-pci", "", 0)}, Env{}, ErrNoIOMMUGroup, "0000:3b:02.1"},
		{"vfio group not a number", dpdk, []sysfs.Device{vf("0000:3b:02.1", "0000:3b:00.0", 1, "vfio-pci", "../x", 0)}, Env{}, ErrNoIOMMUGroup, "0000:3b:02.1"},
		{"cdi kind without class", badCDI, []sysfs.Device{ok}, Env{}, ErrUnsupported, `"intel.com"`},
		{"aux pool", aux, []sysfs.Device{ok}, Env{}, ErrUnsupported, "nvidia.com/sf"},
		{
			"rdma node with a slash",
			pool("nvidia.com", "rdma", config.NetDevice, config.Selector{IsRDMA: true}),
			[]sysfs.Device{func() sysfs.Device {
				d := ok
				d.RDMADevices = []string{"mlx5_0"}
				return withChars(d, "mlx5_0", "../uverbs0")
			}()},
			Env{},
			ErrInvalidRequest, "0000:3b:02.0",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Respond(tc.res, tc.devs, tc.env)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("err %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestCDINames(t *testing.T) {
	for kind, valid := range map[string]bool{
		"intel.com/net-pci": true, "nvidia.com/gpu": true, "a/b": true,
		"intel.com": false, "/net": false, "1ntel.com/net": false, "intel.com/net-": false, "intel com/net": false, "intél.com/net": false,
	} {
		if err := validCDIKind(kind); (err == nil) != valid {
			t.Errorf("validCDIKind(%q) = %v, want valid %v", kind, err, valid)
		}
	}
	for name, valid := range map[string]bool{
		"0000:3b:02.1": true, "mlx5_core.sf.2": true, "x": true,
		"": false, ":3b": false, "0000:3b:02.": false, "a/b": false, "a=b": false,
	} {
		if err := validCDIDeviceName(name); (err == nil) != valid {
			t.Errorf("validCDIDeviceName(%q) = %v, want valid %v", name, err, valid)
		}
	}
}

// The _INFO value is byte for byte what encoding/json makes of the same
// map, for plain names and for every kind of string it escapes.
func TestInfoJSONIsEncodingJSONs(t *testing.T) {
	odd := []string{"", "0000:3b:02.1", `quote"d`, `back\slash`, "<tag>&amp", "tab\tnew\nline", "\x00\x1f\x7f",
		"naïve ✓", "\u2028\u2029", "bad\xffutf8", "/dev/vfio/12"}
	cases := []map[string]map[string]map[string]string{
		{},
		{"0000:3b:02.1": {"generic": {"deviceID": "0000:3b:02.1"}}},
		{"0000:3b:02.1": {"generic": {"deviceID": "0000:3b:02.1"}, "vfio": {"mount": "/dev/vfio/vfio", "dev-mount": "/dev/vfio/71"}},
			"0000:3b:02.0": {"generic": {"deviceID": "0000:3b:02.0"}, "extra": {}, "none": nil}},
	}
	for i, a := range odd {
		m := map[string]map[string]map[string]string{a: {odd[(i+1)%len(odd)]: {odd[(i+2)%len(odd)]: odd[(i+3)%len(odd)]}}}
		cases = append(cases, m)
	}
	for _, info := range cases {
		want, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendInfoJSON(nil, info); string(got) != string(want) {
			t.Errorf("appendInfoJSON(%q) = %s, want %s", info, got, want)
		}
	}
}

// withChars gives d's RDMA device rdma the character devices names.
func withChars(d sysfs.Device, rdma string, names ...string) sysfs.Device {
	d.RDMACharDevices = map[string][]string{rdma: names}
	return d
}
