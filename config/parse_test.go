package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	goldenfile "github.com/devledger/devledger/internal/golden"
)

// fixtures is the folder of sample configs and golden files.
var fixtures = filepath.Join("..", "testdata", "config")

// mustParse parses src, failing the test on any error.
func mustParse(t *testing.T, name, src string) *Config {
	t.Helper()
	cfg, err := Parse(name, []byte(src))
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return cfg
}

// errorLines parses src and returns its error lines; it fails the test if
// src parses.
func errorLines(t *testing.T, name, src string) []string {
	t.Helper()
	cfg, err := Parse(name, []byte(src))
	if err == nil {
		t.Fatalf("Parse(%s) = %+v, want an error", name, cfg)
	}
	if cfg != nil {
		t.Errorf("Parse(%s) returned a config with an error", name)
	}
	return strings.Split(err.Error(), "\n")
}

func TestSRIOVPluginSamplesParseUnchanged(t *testing.T) {
	tests := []struct {
		file      string
		names     []string
		selectors []int
		warnings  []string
	}{
		{
			file: "sriov-readme.json",
			names: []string{
				"intel.com/intel_sriov_netdevice", "intel.com/intel_sriov_dpdk", "mellanox.com/mlnx_sriov_rdma",
				"intel.com/infiniband_rdma_netdevs", "intel.com/ct6dx_vdpa_vhost", "intel.com/intel_fpga",
				"nvidia.com/bf2_sf", "intel.com/intel_sriov_netdevice_additional_env",
				"broadcom.com/brcm_sriov_bnxt", "intel.com/old_selectors_syntax_example",
			},
			selectors: []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
			warnings:  []string{`resourceList[6].deviceType: "auxNetDevice": ` + auxUnsupported},
		},
		{
			file: "sriov-deployment-configmap.json",
			names: []string{
				"intel.com/intel_sriov_netdevice", "intel.com/intel_sriov_dpdk", "intel.com/mlnx_sriov_rdma",
				"intel.com/brcm_sriov_bnxt",
			},
			selectors: []int{1, 1, 1, 1},
		},
		{
			file:      "sriov-rdma.json",
			names:     []string{"mellanox.com/mlnx_rdma", "intel.com/intel_rdma"},
			selectors: []int{1, 1},
		},
		{
			file:      "sriov-ddp-x700.json",
			names:     []string{"intel.com/x700_gtp", "intel.com/x700_pppoe"},
			selectors: []int{1, 1},
			warnings: []string{
				"resourceList[0].selectors[0].ddpProfiles: cannot be evaluated on this node: this selector object accepts no device",
				"resourceList[1].selectors[0].ddpProfiles: cannot be evaluated on this node: this selector object accepts no device",
			},
		},
		{
			file:      "sriov-dpdk-all-nics.json",
			names:     []string{"dpdk.org/nic"},
			selectors: []int{3},
		},
		{
			file:      "sriov-node-specific.json",
			names:     []string{"intel.com/sriovnics"},
			selectors: []int{1},
		},
		{
			file:      "sriov-subfunctions.json",
			names:     []string{"nvidia.com/bf2_sf"},
			selectors: []int{1},
			warnings:  []string{`resourceList[0].deviceType: "auxNetDevice": ` + auxUnsupported},
		},
		{
			file:      "sriov-operator-node.json",
			names:     []string{"intel.com/intel_vf_net", "intel.com/intel_vf_dpdk"},
			selectors: []int{1, 1},
		},
		{
			file: "sriov-operator-mellanox.json",
			names: []string{
				"intel.com/mlx_rdma", "intel.com/mlx_dpdk", "intel.com/mlx_vhost_vdpa", "intel.com/mlx_virtio_vdpa",
			},
			selectors: []int{1, 1, 1, 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(fixtures, tc.file)
			cfg, err := Load(path, Options{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if cfg.Source != path {
				t.Errorf("Source = %q, want %q", cfg.Source, path)
			}
			var names []string
			var selectors []int
			for _, r := range cfg.Resources {
				names = append(names, r.FullName())
				selectors = append(selectors, len(r.Selectors))
			}
			if !reflect.DeepEqual(names, tc.names) {
				t.Errorf("names = %q, want %q", names, tc.names)
			}
			if !reflect.DeepEqual(selectors, tc.selectors) {
				t.Errorf("selector objects = %v, want %v", selectors, tc.selectors)
			}
			var want []string
			for _, w := range tc.warnings {
				want = append(want, path+": "+w)
			}
			if strings.Join(cfg.Warnings, "\n") != strings.Join(want, "\n") {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(cfg.Warnings, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// auxUnsupported is the warning for an auxNetDevice pool.
const auxUnsupported = "devledger serves no scalable functions yet: the pool takes none, the kubelet never hears of it and a pod that asks for it stays Pending"

func TestReadmeSampleModel(t *testing.T) {
	cfg, err := Load(filepath.Join(fixtures, "sriov-readme.json"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	dpdk := cfg.Resources[1]
	want := Selector{
		Path:         "resourceList[1].selectors[0]",
		Vendors:      []string{"8086"},
		Devices:      []string{"154c", "10ed", "1889"},
		Drivers:      []string{"vfio-pci"},
		PFNames:      []PFSelector{{Raw: "enp0s0f0", PF: "enp0s0f0"}, {Raw: "enp2s2f1", PF: "enp2s2f1"}},
		NeedVhostNet: true,
	}
	if !reflect.DeepEqual(dpdk.Selectors[0], want) {
		t.Errorf("intel_sriov_dpdk selector:\n got %+v\nwant %+v", dpdk.Selectors[0], want)
	}
	if !dpdk.SelectorList {
		t.Error("intel_sriov_dpdk: SelectorList = false for a list")
	}
	old := cfg.Resources[9]
	if old.SelectorList || old.Selectors[0].Path != "resourceList[9].selectors" {
		t.Errorf("old syntax: SelectorList %v, path %q; want false, resourceList[9].selectors", old.SelectorList, old.Selectors[0].Path)
	}
	sf := cfg.Resources[6]
	if sf.DeviceType != AuxNetDevice || !reflect.DeepEqual(sf.Selectors[0].PFNames, []PFSelector{{Raw: "p0#1-5", PF: "p0", Indexes: []IndexRange{{1, 5}}}}) {
		t.Errorf("bf2_sf = %+v", sf)
	}
	if cfg.Resources[5].DeviceType != Accelerator {
		t.Errorf("intel_fpga deviceType = %q", cfg.Resources[5].DeviceType)
	}
	info := cfg.Resources[7].AdditionalInfo
	if info["*"]["token"] != "3e49019f-412f-4f02-824e-4cd195944205" {
		t.Errorf("additionalInfo = %v", info)
	}
	first := cfg.Resources[0]
	if first.Prefix != DefaultResourcePrefix || first.DeviceType != NetDevice || first.AllocatePolicy != PolicyNone {
		t.Errorf("defaults: prefix %q, type %q, policy %q", first.Prefix, first.DeviceType, first.AllocatePolicy)
	}
	// No probeInterval: the daemon's --probe-interval applies.
	wantHealth := Health{HoldDown: 10 * time.Second}
	if first.Health != wantHealth {
		t.Errorf("default health = %+v, want %+v", first.Health, wantHealth)
	}
	if first.CDI != (CDI{Kind: "intel.com/net-pci"}) {
		t.Errorf("default cdi = %+v", first.CDI)
	}
	if got := cfg.Resources[2].EnvVarName(); got != "PCIDEVICE_MELLANOX_COM_MLNX_SRIOV_RDMA" {
		t.Errorf("EnvVarName = %q", got)
	}
}

func TestYAMLAndJSONGiveTheSameModel(t *testing.T) {
	fromYAML, err := Load(filepath.Join(fixtures, "devledger.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := Load(filepath.Join(fixtures, "devledger.json"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromYAML.Resources, fromJSON.Resources) {
		t.Errorf("YAML and JSON differ:\nyaml %+v\njson %+v", fromYAML.Resources, fromJSON.Resources)
	}
	if len(fromYAML.Warnings)+len(fromJSON.Warnings) != 0 {
		t.Errorf("warnings: %q %q", fromYAML.Warnings, fromJSON.Warnings)
	}
	r := fromYAML.Resources
	if want := (Health{Link: true, HoldDown: 30 * time.Second, Debounce: 2 * time.Second, ProbeInterval: time.Second}); r[0].Health != want {
		t.Errorf("health = %+v, want %+v", r[0].Health, want)
	}
	if r[0].AllocatePolicy != PolicySpread || r[2].AllocatePolicy != PolicyPacked {
		t.Errorf("policies = %q, %q", r[0].AllocatePolicy, r[2].AllocatePolicy)
	}
	if r[1].CDI != (CDI{Enabled: true, Kind: "example.com/net"}) || !r[1].ExcludeTopology {
		t.Errorf("dpdk = %+v", r[1])
	}
	wantPF := []PFSelector{
		{Raw: "ens1f0#0-3,6", PF: "ens1f0", Indexes: []IndexRange{{0, 3}, {6, 6}}},
		{Raw: "ens1f1", PF: "ens1f1"},
	}
	if !reflect.DeepEqual(r[1].Selectors[0].PFNames, wantPF) {
		t.Errorf("pfNames = %+v", r[1].Selectors[0].PFNames)
	}
	if r[2].DeviceType != GenericPCI || r[2].CDI.Kind != "nvidia.com/pci" || r[2].SelectorList {
		t.Errorf("gpu = %+v", r[2])
	}
}

func TestFormatDetection(t *testing.T) {
	const jsonSrc = `{"resourceList": [{"resourceName": "a", "selectors": {"drivers": ["iavf"]}}]}`
	const yamlSrc = "resourceList:\n- resourceName: a\n  selectors: {drivers: [iavf]}\n"
	tests := []struct {
		name, file, src string
		wantErr         string
	}{
		{name: "json by extension", file: "c.json", src: jsonSrc},
		{name: "yaml by extension", file: "c.yaml", src: yamlSrc},
		{name: "yml by extension", file: "c.YML", src: yamlSrc},
		{name: "json is yaml too", file: "c.yaml", src: jsonSrc},
		{name: "json by content", file: "config", src: "\n  " + jsonSrc},
		{name: "yaml by content", file: "config", src: yamlSrc},
		{name: "yaml in a .json file", file: "c.json", src: yamlSrc, wantErr: "c.json:1:1: syntax error: invalid character 'r' looking for beginning of value"},
		{name: "byte order mark", file: "c.json", src: "\xef\xbb\xbf" + jsonSrc},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(tc.file, []byte(tc.src))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Resources[0].Selectors[0].Drivers; !reflect.DeepEqual(got, []string{"iavf"}) {
				t.Errorf("drivers = %q", got)
			}
		})
	}
}

// TestErrors pins the message of every kind of config error.
func TestErrors(t *testing.T) {
	// res wraps one resource's JSON into a config.
	res := func(body string) string { return `{"resourceList": [` + body + `]}` }
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "reversed VF range in a single selector object",
			src:  res(`{"resourceName": "a", "selectors": {"drivers": ["x"]}}, {"resourceName": "b", "selectors": {"pfNames": ["eth0#5-2"]}}`),
			want: []string{`c.json: resourceList[1].selectors.pfNames[0]: "eth0#5-2": range end before start`},
		},
		{
			name: "reversed VF range in a selector list",
			src:  res(`{"resourceName": "a", "selectors": {"drivers": ["x"]}}, {"resourceName": "b", "selectors": [{"pfNames": ["eth0#5-2"]}]}`),
			want: []string{`c.json: resourceList[1].selectors[0].pfNames[0]: "eth0#5-2": range end before start`},
		},
		{
			name: "malformed VF ranges",
			src:  res(`{"resourceName": "a", "selectors": {"pfNames": ["eth0#1-", "eth0#-1", "eth0#1,,2", "eth0#1#2", "eth0#99999", "eth0#1-2-3", "eth0#3-2", "eth0#65536"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.pfNames[0]: "eth0#1-": malformed function range: missing index`,
				`c.json: resourceList[0].selectors.pfNames[1]: "eth0#-1": malformed function range: missing index`,
				`c.json: resourceList[0].selectors.pfNames[2]: "eth0#1,,2": empty function index in the list after '#'`,
				`c.json: resourceList[0].selectors.pfNames[3]: "eth0#1#2": more than one '#'`,
				`c.json: resourceList[0].selectors.pfNames[4]: "eth0#99999": function index 99999 out of range (0-65535)`,
				`c.json: resourceList[0].selectors.pfNames[5]: "eth0#1-2-3": malformed function index "2-3": want a number`,
				`c.json: resourceList[0].selectors.pfNames[6]: "eth0#3-2": range end before start`,
				`c.json: resourceList[0].selectors.pfNames[7]: "eth0#65536": function index 65536 out of range (0-65535)`,
			},
		},
		{
			name: "root device not a PCI address",
			src:  res(`{"resourceName": "a", "selectors": {"rootDevices": ["eth0#1", "#1"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.rootDevices[0]: "eth0#1": malformed PCI address, want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:86:00.0`,
				`c.json: resourceList[0].selectors.rootDevices[1]: "#1": empty PF address before '#'`,
			},
		},
		{
			name: "malformed PCI addresses",
			src:  res(`{"resourceName": "a", "selectors": {"pciAddresses": ["3b:02.1", "0000:3b:20.1", "0000:3b:02.8", "0000:3b:02.1"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.pciAddresses[0]: "3b:02.1": malformed PCI address, want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:3b:02.1`,
				`c.json: resourceList[0].selectors.pciAddresses[1]: "0000:3b:20.1": malformed PCI address, want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:3b:02.1`,
				`c.json: resourceList[0].selectors.pciAddresses[2]: "0000:3b:02.8": malformed PCI address, want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:3b:02.1`,
			},
		},
		{
			name: "wrong types",
			src:  res(`{"resourceName": 5, "resourcePrefix": true, "deviceType": [], "excludeTopology": "no", "selectors": {"vendors": "8086", "devices": [1234], "isRdma": 1, "vdpaType": {}}}`),
			want: []string{
				`c.json: resourceList[0].resourceName: 5: want a string, got a number`,
				`c.json: resourceList[0].resourcePrefix: true: want a string, got a boolean`,
				`c.json: resourceList[0].deviceType: want a string, got a list`,
				`c.json: resourceList[0].excludeTopology: "no": want true or false, got a string`,
				`c.json: resourceList[0].selectors.vendors: "8086": want a list of strings, got a string`,
				`c.json: resourceList[0].selectors.devices[0]: 1234: want a string, got a number`,
				`c.json: resourceList[0].selectors.isRdma: 1: want true or false, got a number`,
				`c.json: resourceList[0].selectors.vdpaType: want a string, got an object`,
			},
		},
		{
			name: "unknown fields everywhere",
			src:  `{"resourceList": [{"resourceName": "a", "resoureName": "b", "selectors": {"driver": ["x"], "zzz": []}, "health": {"hold": "1s"}, "cdi": {"enable": true}}], "extra": 1}`,
			want: []string{
				`c.json: resourceList[0].resoureName: unknown field (did you mean "resourceName"?)`,
				`c.json: resourceList[0].selectors.driver: unknown field (did you mean "drivers"?)`,
				`c.json: resourceList[0].selectors.zzz: unknown field`,
				`c.json: resourceList[0].health.hold: unknown field`,
				`c.json: resourceList[0].cdi.enable: unknown field (did you mean "enabled"?)`,
				`c.json: extra: unknown field`,
			},
		},
		{
			name: "resource names",
			src: res(`{"resourceName": "-a", "selectors": {"drivers": ["x"]}},
				{"resourceName": "", "selectors": {"drivers": ["x"]}},
				{"resourceName": "` + strings.Repeat("n", 64) + `", "selectors": {"drivers": ["x"]}},
				{"resourceName": "ok", "resourcePrefix": "requests.example.com", "selectors": {"drivers": ["x"]}},
				{"resourceName": "ok", "resourcePrefix": "example.com/x", "selectors": {"drivers": ["x"]}},
				{"resourceName": "ok", "resourcePrefix": "node.kubernetes.io", "selectors": {"drivers": ["x"]}}`),
			want: []string{
				`c.json: resourceList[0].resourceName: "-a": not a valid extended resource name: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
				`c.json: resourceList[1].resourceName: "": empty: every resource needs a name`,
				`c.json: resourceList[2].resourceName: "` + strings.Repeat("n", 64) + `": not a valid extended resource name: longer than 63 characters`,
				`c.json: resourceList[3].resourcePrefix: "requests.example.com": not a valid resource prefix: must not start with "requests."`,
				`c.json: resourceList[4].resourcePrefix: "example.com/x": not a valid resource prefix: must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)`,
				`c.json: resourceList[5].resourcePrefix: "node.kubernetes.io": not a valid resource prefix: kubernetes.io is reserved for Kubernetes' own resources`,
			},
		},
		{
			name: "duplicate names within a prefix",
			src: res(`{"resourceName": "a", "selectors": {"drivers": ["x"]}},
				{"resourceName": "a", "resourcePrefix": "example.com", "selectors": {"drivers": ["x"]}},
				{"resourceName": "a", "resourcePrefix": "intel.com", "selectors": {"drivers": ["x"]}}`),
			want: []string{`c.json: resourceList[2].resourceName: "a": duplicate resource intel.com/a (first at resourceList[0])`},
		},
		{
			name: "empty selector sets",
			src: res(`{"resourceName": "a"}, {"resourceName": "b", "selectors": null}, {"resourceName": "c", "selectors": []},
				{"resourceName": "d", "selectors": "vendors"}, {"resourceName": "e", "selectors": [{}, 1]},
				{"resourceName": "f", "deviceType": "genericPCI", "selectors": {"vendors": []}}`),
			want: []string{
				`c.json: resourceList[0].selectors: missing: every resource needs at least one selector object`,
				`c.json: resourceList[1].selectors: missing: every resource needs at least one selector object`,
				`c.json: resourceList[2].selectors: empty selector set: need at least one selector object`,
				`c.json: resourceList[3].selectors: "vendors": want a selector object or a list of selector objects, got a string`,
				`c.json: resourceList[4].selectors[1]: 1: want a selector object, got a number`,
				`c.json: resourceList[5].selectors: empty selector object: a genericPCI pool would take every PCI function on the node`,
			},
		},
		{
			name: "enums",
			src:  res(`{"resourceName": "a", "deviceType": "gpu", "allocatePolicy": "first", "selectors": {"vdpaType": "vdpa", "drivers": ["x"]}}`),
			want: []string{
				`c.json: resourceList[0].deviceType: "gpu": unknown device type, want one of netDevice, accelerator, auxNetDevice, genericPCI`,
				`c.json: resourceList[0].allocatePolicy: "first": unknown allocate policy, want one of packed, spread, none`,
				`c.json: resourceList[0].selectors.vdpaType: "vdpa": unknown vDPA type, want virtio or vhost`,
			},
		},
		{
			name: "selector combinations",
			src: res(`{"resourceName": "a", "selectors": {"isRdma": true, "vdpaType": "virtio"}},
				{"resourceName": "b", "deviceType": "auxNetDevice", "selectors": [{"vendors": ["15b3"]}, {"auxTypes": ["eth", "sf"]}, {"vendors": ["15b3"], "auxTypes": []}]}`),
			want: []string{
				`c.json: resourceList[0].selectors: isRdma and vdpaType cannot be combined`,
				`c.json: resourceList[1].selectors[0].auxTypes: missing: auxNetDevice selector objects need auxTypes`,
				`c.json: resourceList[1].selectors[1].auxTypes[0]: "eth": unsupported auxiliary device type, want "sf"`,
				`c.json: resourceList[1].selectors[2].auxTypes: missing: auxNetDevice selector objects need auxTypes`,
			},
		},
		{
			name: "values",
			src:  res(`{"resourceName": "a", "selectors": {"drivers": [""], "pKeys": ["0x1", "zz", "0x10000"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.drivers[0]: "": empty string`,
				`c.json: resourceList[0].selectors.pKeys[1]: "zz": malformed partition key, want up to four hex digits such as 0x7fff`,
				`c.json: resourceList[0].selectors.pKeys[2]: "0x10000": malformed partition key, want up to four hex digits such as 0x7fff`,
			},
		},
		{
			name: "durations",
			src:  res(`{"resourceName": "a", "selectors": {"drivers": ["x"]}, "health": {"holdDown": "-1s", "debounce": "soon", "probeInterval": "0", "link": "yes"}}`),
			want: []string{
				`c.json: resourceList[0].health.holdDown: "-1s": must not be negative`,
				`c.json: resourceList[0].health.debounce: "soon": malformed duration: want a number with a unit, such as "10s" or "500ms"`,
				`c.json: resourceList[0].health.probeInterval: "0": want at least 10ms`,
				`c.json: resourceList[0].health.link: "yes": want true or false, got a string`,
			},
		},
		{
			// Probes paced under the daemon's floor for --probe-interval
			// would run back to back; the floor itself is accepted.
			name: "probe interval under the floor",
			src: res(`{"resourceName": "a", "selectors": {"drivers": ["x"]}, "health": {"probeInterval": "1ns"}},
  {"resourceName": "b", "selectors": {"drivers": ["y"]}, "health": {"probeInterval": "9.999ms"}},
  {"resourceName": "c", "selectors": {"drivers": ["z"]}, "health": {"probeInterval": "10ms"}}`),
			want: []string{
				`c.json: resourceList[0].health.probeInterval: "1ns": want at least 10ms`,
				`c.json: resourceList[1].health.probeInterval: "9.999ms": want at least 10ms`,
			},
		},
		{
			name: "health and cdi shapes",
			src:  res(`{"resourceName": "a", "selectors": {"drivers": ["x"]}, "health": "10s", "cdi": {"kind": "1vendor/class"}, "additionalInfo": {"*": "token"}}`),
			want: []string{
				`c.json: resourceList[0].health: "10s": want an object, got a string`,
				`c.json: resourceList[0].cdi.kind: "1vendor/class": not a CDI kind: the vendor must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '-' and '.'`,
				`c.json: resourceList[0].additionalInfo["*"]: "token": want an object of strings, got a string`,
			},
		},
		{
			// A DNS subdomain, but no CDI vendor: refused only where CDI
			// would name the devices by it (the second pool sets a kind,
			// the third has CDI off).
			name: "cdi kind from a prefix that starts with a digit",
			src: `{"resourceList": [
  {"resourcePrefix": "6wind.com", "resourceName": "a", "selectors": {"drivers": ["x"]}, "cdi": {"enabled": true}},
  {"resourcePrefix": "6wind.com", "resourceName": "b", "selectors": {"drivers": ["x"]}, "cdi": {"enabled": true, "kind": "sixwind.com/net"}},
  {"resourcePrefix": "6wind.com", "resourceName": "c", "selectors": {"drivers": ["x"]}}]}`,
			want: []string{
				`c.json: resourceList[0].resourcePrefix: "6wind.com": CDI names this pool's devices by the default kind "6wind.com/net-pci", which is not a CDI kind: the vendor must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '-' and '.'; set cdi.kind`,
			},
		},
		{
			name: "duplicate keys",
			src:  res(`{"resourceName": "a", "selectors": {"drivers": ["x"], "drivers": ["y"], "Drivers": ["z"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.drivers: duplicate key`,
				`c.json: resourceList[0].selectors.Drivers: duplicate of resourceList[0].selectors.drivers`,
			},
		},
		{
			name: "top level",
			src:  `[1, 2]`,
			want: []string{`c.json: want an object with a resourceList, got a list`},
		},
		{
			name: "no resources",
			src:  `{"resourceList": []}`,
			want: []string{`c.json: resourceList: empty: the config needs at least one resource`},
		},
		{
			name: "missing resourceList",
			src:  `{}`,
			want: []string{`c.json: resourceList: missing: the config needs at least one resource`},
		},
		{
			name: "syntax error with position",
			src:  "{\"resourceList\": [\n  {\"resourceName\": \"a\",}\n]}",
			want: []string{`c.json:2:24: syntax error: invalid character '}' looking for beginning of object key string`},
		},
		{
			name: "truncated",
			src:  `{"resourceList": [`,
			want: []string{`c.json:1:19: syntax error: unexpected end of input`},
		},
		{
			name: "trailing data",
			src:  `{"resourceList": [{"resourceName": "a", "selectors": {}}]} {}`,
			want: []string{`c.json:1:60: syntax error: invalid character '{' after top-level value`},
		},
		{
			name: "empty file",
			src:  " \n",
			want: []string{`c.json: empty config: want an object with a resourceList`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorLines(t, "c.json", tc.src)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestYAMLErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "unquoted numbers",
			src:  "resourceList:\n- resourceName: a\n  selectors:\n    vendors: [8086]\n    pKeys: [0x7fff]\n",
			want: []string{
				`c.yaml: resourceList[0].selectors.pKeys[0]: 32767: want a string, got a number (quote it in YAML)`,
				`c.yaml: resourceList[0].selectors.vendors[0]: 8086: want a string, got a number (quote it in YAML)`,
			},
		},
		{
			name: "duplicate key",
			src:  "resourceList:\n- resourceName: a\n  resourceName: b\n",
			want: []string{`c.yaml: yaml: line 3: key "resourceName" already set in map`},
		},
		{
			name: "duplicate keys",
			src:  "resourceList:\n- resourceName: a\n  resourceName: b\n  selectors: {}\n  selectors: {}\n",
			want: []string{`c.yaml: yaml: line 3: key "resourceName" already set in map`, `c.yaml: yaml: line 5: key "selectors" already set in map`},
		},
		{
			name: "syntax",
			src:  "resourceList:\n- resourceName: a\n selectors: x\n",
			want: []string{`c.yaml: yaml: line 2: did not find expected key`},
		},
		{
			name: "empty document",
			src:  "# nothing\n",
			want: []string{`c.yaml: want an object with a resourceList, got null`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorLines(t, "c.yaml", tc.src)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	res := func(body string) string { return `{"resourceList": [` + body + `]}` }
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "selector fields the device type ignores",
			src:  res(`{"resourceName": "a", "deviceType": "accelerator", "selectors": {"vendors": ["8086"], "pfNames": ["eth0"], "isRdma": true}}`),
			want: []string{
				`c.json: resourceList[0].selectors.pfNames: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.isRdma: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
			},
		},
		{
			name: "acpiIndexes of accelerators, which the plugin ignores",
			src:  res(`{"resourceName": "a", "deviceType": "accelerator", "selectors": {"vendors": ["8086"], "acpiIndexes": ["5"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.acpiIndexes: applied here; the SR-IOV plugin documents it for accelerators but ignores it, so this pool takes fewer devices than the plugin's did`,
			},
		},
		{
			name: "two pools, one container variable",
			src:  res(`{"resourceName": "a.b", "selectors": {"drivers": ["x"]}}, {"resourceName": "a_b", "selectors": {"drivers": ["y"]}}`),
			want: []string{
				`c.json: resourceList[1].resourceName: "a_b": the container variable PCIDEVICE_INTEL_COM_A_B is also intel.com/a.b's: a container given both pools sees one pool's devices in it`,
			},
		},
		{
			name: "IDs that never match",
			src:  res(`{"resourceName": "a", "selectors": {"vendors": ["0x8086", "8086"], "devices": ["154C"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.vendors[0]: "0x8086": never matches: IDs are four lower-case hex digits, as the kernel writes them`,
				`c.json: resourceList[0].selectors.devices[0]: "154C": never matches: IDs are four lower-case hex digits, as the kernel writes them`,
			},
		},
		{
			name: "PCI address in upper case",
			src:  res(`{"resourceName": "a", "selectors": {"pciAddresses": ["0000:3b:02.1", "0000:3B:02.2"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.pciAddresses[1]: "0000:3B:02.2": matched without case here; the SR-IOV plugin compares it exactly and so matches no device, as the kernel writes addresses in lower case`,
			},
		},
		{
			name: "repeated PF",
			src:  res(`{"resourceName": "a", "selectors": {"pfNames": ["eth0#0-1", "ETH0#5"]}}`),
			want: []string{
				`c.json: resourceList[0].selectors.pfNames[1]: "ETH0#5": the SR-IOV plugin honours only the first entry for eth0; devledger takes every entry`,
			},
		},
		{
			name: "empty selector object",
			src:  res(`{"resourceName": "a", "selectors": [{}]}, {"resourceName": "b", "deviceType": "accelerator", "selectors": {"vendors": null}}`),
			want: []string{
				`c.json: resourceList[0].selectors[0]: empty selector object: accepts every network controller (class 0x02)`,
				`c.json: resourceList[1].selectors: empty selector object: accepts every processing accelerator (class 0x12)`,
			},
		},
		{
			name: "plugin internals and case",
			src:  res(`{"resourceName": "a", "SelectorObjs": [1], "Selectors": {"Drivers": ["x"]}}`),
			want: []string{
				`c.json: resourceList[0].SelectorObjs: ignored: an internal field of the SR-IOV plugin, not configuration`,
				`c.json: resourceList[0].Selectors: read as "selectors": field names are case-sensitive here; the SR-IOV plugin ignores case`,
				`c.json: resourceList[0].Selectors.Drivers: read as "drivers": field names are case-sensitive here; the SR-IOV plugin ignores case`,
			},
		},
		{
			// The plugin's own types write IsRdma, NeedVhostNet and a null
			// SelectorObj (the sriov-network-operator's configs): no
			// warning. Any other spelling, or a SelectorObj with a value,
			// was written by hand.
			name: "the plugin's own spellings",
			src: res(`{"resourceName": "a", "SelectorObj": null, "selectors": {"drivers": ["x"], "IsRdma": false, "NeedVhostNet": false}},` +
				`{"resourceName": "b", "SelectorObj": {}, "selectors": {"drivers": ["x"], "ISRDMA": false}}`),
			want: []string{
				`c.json: resourceList[1].SelectorObj: ignored: an internal field of the SR-IOV plugin, not configuration`,
				`c.json: resourceList[1].selectors.ISRDMA: read as "isRdma": field names are case-sensitive here; the SR-IOV plugin ignores case`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, "c.json", tc.src)
			if !reflect.DeepEqual(cfg.Warnings, tc.want) {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(cfg.Warnings, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestIgnoredSelectorFieldsAreDropped(t *testing.T) {
	cfg := mustParse(t, "c.json", `{"resourceList": [{"resourceName": "a", "deviceType": "accelerator", "selectors": {"vendors": ["8086"], "pfNames": ["eth0"]}}]}`)
	if s := cfg.Resources[0].Selectors[0]; s.PFNames != nil || !reflect.DeepEqual(s.Vendors, []string{"8086"}) {
		t.Errorf("selector = %+v, want pfNames dropped", s)
	}
}

// The SR-IOV plugin decodes a selector object into its device type's
// struct, so a field outside that struct is skipped unread, whatever it
// holds: such a config loads there, and must load here, with the warning.
func TestIgnoredSelectorFieldsAreNotValidated(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{
			name: "accelerator",
			src: `{"resourceName": "a", "deviceType": "accelerator", "selectors": {"vendors": ["8086"],
				"pfNames": ["eth0#5-2"], "rootDevices": "0000:86:00.0", "pKeys": ["zz"], "vdpaType": "vdpa", "isRdma": "yes"}}`,
			want: []string{
				`c.json: resourceList[0].selectors.pfNames: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.rootDevices: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.pKeys: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.vdpaType: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.isRdma: ignored: not a selector of deviceType accelerator (the SR-IOV plugin ignores it too)`,
			},
		},
		{
			name: "netDevice",
			src:  `{"resourceName": "a", "selectors": {"vendors": ["8086"], "auxTypes": ["eth"]}}`,
			want: []string{
				`c.json: resourceList[0].selectors.auxTypes: ignored: not a selector of deviceType netDevice (the SR-IOV plugin ignores it too)`,
			},
		},
		{
			name: "auxNetDevice",
			src: `{"resourceName": "a", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"],
				"pciAddresses": ["86:00.0"], "vdpaType": "vdpa", "pKeys": ["0x10000"], "isRdma": true}}`,
			want: []string{
				`c.json: resourceList[0].deviceType: "auxNetDevice": ` + auxUnsupported,
				`c.json: resourceList[0].selectors.pciAddresses: ignored: not a selector of deviceType auxNetDevice (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.vdpaType: ignored: not a selector of deviceType auxNetDevice (the SR-IOV plugin ignores it too)`,
				`c.json: resourceList[0].selectors.pKeys: ignored: not a selector of deviceType auxNetDevice (the SR-IOV plugin ignores it too)`,
			},
		},
		{
			name: "values that set nothing are not mentioned",
			src:  `{"resourceName": "a", "deviceType": "accelerator", "selectors": {"vendors": ["8086"], "pfNames": [], "isRdma": false, "vdpaType": "", "pKeys": null}}`,
			want: []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, "c.json", `{"resourceList": [`+tc.src+`]}`)
			if !reflect.DeepEqual(cfg.Warnings, tc.want) {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(cfg.Warnings, "\n"), strings.Join(tc.want, "\n"))
			}
			s := cfg.Resources[0].Selectors[0]
			dropped := s.PFNames == nil && s.RootDevices == nil && s.PKeys == nil && s.PCIAddresses == nil && s.VDPAType == ""
			if cfg.Resources[0].DeviceType == NetDevice {
				dropped = s.AuxTypes == nil
			}
			if !dropped {
				t.Errorf("selector = %+v, want the ignored fields dropped", s)
			}
		})
	}
}

// TestGolden pins the full error output for the bad configs under
// testdata/config. Run with -update to rewrite the golden files.
func TestGolden(t *testing.T) {
	for _, file := range []string{"bad.json", "bad.yaml"} {
		t.Run(file, func(t *testing.T) {
			// Parse under the bare file name so the golden output does
			// not depend on where the test runs.
			data, err := os.ReadFile(filepath.Join(fixtures, file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(file, data)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			got := err.Error() + "\n"
			golden := filepath.Join(fixtures, strings.TrimSuffix(file, filepath.Ext(file))+"-"+strings.TrimPrefix(filepath.Ext(file), ".")+".golden")
			goldenfile.Check(t, golden, got)
		})
	}
}

func TestErrorValues(t *testing.T) {
	_, err := Parse("c.json", []byte(`{"resourceList": [{"resourceName": "a", "selectors": {"pfNames": ["eth0#5-2"], "drivers": "x"}}]}`))
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrTooLarge) {
		t.Fatalf("errors.Is: err = %v", err)
	}
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("errors.As ErrorList: %v", err)
	}
	want := Error{File: "c.json", Path: "resourceList[0].selectors.pfNames[0]", Value: `"eth0#5-2"`, Msg: "range end before start", Err: ErrInvalid}
	if *list[0] != want {
		t.Errorf("first error = %+v, want %+v", *list[0], want)
	}
	var one *Error
	if !errors.As(err, &one) || one != list[0] {
		t.Errorf("errors.As *Error = %v", one)
	}
}

func TestLimits(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	tests := []struct {
		name    string
		file    string
		src     string
		sentry  error
		wantErr string
	}{
		{
			name:    "over 1 MiB",
			file:    "c.json",
			src:     `{"resourceList": []}` + strings.Repeat(" ", MaxSize),
			sentry:  ErrTooLarge,
			wantErr: "c.json: larger than 1 MiB; refused",
		},
		{
			name:    "deep JSON",
			file:    "c.json",
			src:     deep,
			sentry:  ErrInvalid,
			wantErr: "c.json:1:33: nested deeper than 32 levels; refused",
		},
		{
			name:    "deep JSON in an object",
			file:    "c.json",
			src:     `{"resourceList": ` + strings.Repeat(`[{"a":`, 20) + "1" + strings.Repeat("}]", 20) + "}",
			sentry:  ErrInvalid,
			wantErr: "c.json:1:109: nested deeper than 32 levels; refused",
		},
		{
			name:    "brackets in strings do not count",
			file:    "c.json",
			src:     `{"resourceList": [{"resourceName": "a", "selectors": {"drivers": ["` + strings.Repeat("[", 100) + `"]}}]}`,
			sentry:  nil,
			wantErr: "",
		},
		{
			name:    "deep YAML flow",
			file:    "c.yaml",
			src:     deep,
			sentry:  ErrInvalid,
			wantErr: "c.yaml: yaml: exceeded max depth of 10000",
		},
		{
			name:    "deep YAML block",
			file:    "c.yaml",
			src:     deepYAML(40),
			sentry:  ErrInvalid,
			wantErr: "c.yaml: nested deeper than 32 levels; refused",
		},
		{
			name:    "YAML alias bomb",
			file:    "c.yaml",
			src:     aliasBomb(),
			sentry:  ErrInvalid,
			wantErr: "c.yaml: yaml: document contains excessive aliasing",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.file, []byte(tc.src))
			if tc.sentry == nil {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, tc.sentry) {
				t.Fatalf("err = %v, want %v", err, tc.sentry)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("err = %q, want %q", err.Error(), tc.wantErr)
			}
		})
	}
}

// deepYAML nests block mappings n deep.
func deepYAML(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	return b.String()
}

// aliasBomb is the classic exponential YAML alias expansion.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString(`a: &a ["x","x","x","x","x","x","x","x","x"]` + "\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		b.WriteString(name + ": &" + name + " [*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + "]\n")
		prev = name
	}
	return b.String()
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(filepath.Join(dir, "none.json"), Options{})
		if err == nil || errors.Is(err, ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want a not-exist error", err)
		}
		if !strings.Contains(err.Error(), "none.json") {
			t.Errorf("err %q does not name the file", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		path := filepath.Join(dir, "big.json")
		if err := os.WriteFile(path, make([]byte, MaxSize+10), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, Options{})
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge", err)
		}
	})
}

// TestEnvVarName pins the SR-IOV plugin's rule (dots as '_') and
// KubeVirt's (util.ResourceNameToEnvVar: '/' and '.' as '_'), both
// upper-cased and leaving a '-' as it is.
func TestEnvVarName(t *testing.T) {
	tests := []struct{ prefix, name, want, kubeVirt string }{
		{"intel.com", "intel_sriov_netdevice", "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE", "PCI_RESOURCE_INTEL_COM_INTEL_SRIOV_NETDEVICE"},
		{"mellanox.com", "mlnx_sriov_rdma", "PCIDEVICE_MELLANOX_COM_MLNX_SRIOV_RDMA", "PCI_RESOURCE_MELLANOX_COM_MLNX_SRIOV_RDMA"},
		{"nvidia.com", "h100_vfio", "PCIDEVICE_NVIDIA_COM_H100_VFIO", "PCI_RESOURCE_NVIDIA_COM_H100_VFIO"},
		{"nvidia.com", "bf2-sf", "PCIDEVICE_NVIDIA_COM_BF2-SF", "PCI_RESOURCE_NVIDIA_COM_BF2-SF"},
		{"a.b.example.com", "x.y", "PCIDEVICE_A_B_EXAMPLE_COM_X_Y", "PCI_RESOURCE_A_B_EXAMPLE_COM_X_Y"},
		{"dpdk.org", "Nic", "PCIDEVICE_DPDK_ORG_NIC", "PCI_RESOURCE_DPDK_ORG_NIC"},
	}
	for _, tc := range tests {
		t.Run(tc.prefix+"/"+tc.name, func(t *testing.T) {
			if got := EnvVarName(tc.prefix, tc.name); got != tc.want {
				t.Errorf("EnvVarName = %q, want %q", got, tc.want)
			}
			if got := KubeVirtEnvVarName(tc.prefix, tc.name); got != tc.kubeVirt {
				t.Errorf("KubeVirtEnvVarName = %q, want %q", got, tc.kubeVirt)
			}
			r := Resource{Prefix: tc.prefix, Name: tc.name}
			if got := r.KubeVirtEnvVarName(); got != tc.kubeVirt {
				t.Errorf("Resource.KubeVirtEnvVarName = %q, want %q", got, tc.kubeVirt)
			}
		})
	}
}

func TestPFSelectorIncludes(t *testing.T) {
	tests := []struct {
		raw  string
		in   []int
		out  []int
		addr bool
	}{
		{raw: "eth0", in: []int{0, 1, 100}},
		{raw: "netpf0#0,2-7,9", in: []int{0, 2, 5, 7, 9}, out: []int{1, 8, 10}},
		{raw: "0000:86:00.0#0-1,3,4", in: []int{0, 1, 3, 4}, out: []int{2, 5}, addr: true},
		{raw: "10000:01:00.0#3", in: []int{3}, out: []int{0}, addr: true},
		{raw: "p0#1-1", in: []int{1}, out: []int{0, 2}},
		{raw: "p0#65535", in: []int{65535}, out: []int{65534}},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			sel, msg := parsePFSelector(tc.raw, tc.addr)
			if msg != "" {
				t.Fatalf("parsePFSelector: %s", msg)
			}
			for _, i := range tc.in {
				if !sel.Includes(i) {
					t.Errorf("Includes(%d) = false", i)
				}
			}
			for _, i := range tc.out {
				if sel.Includes(i) {
					t.Errorf("Includes(%d) = true", i)
				}
			}
		})
	}
}

func TestResourceNameRules(t *testing.T) {
	tests := []struct {
		name, prefix string
		ok           bool
	}{
		{"sriov_net_A", "intel.com", true},
		{"a", "a", true},
		{"a.b-c_d", "example.com", true},
		{strings.Repeat("a", 63), "example.com", true},
		{"a_", "example.com", false},
		{"a b", "example.com", false},
		{"ok", "Example.com", false},
		{"ok", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 54), false},
		{"ok", "kubernetes.io", false},
		{"ok", "notkubernetes.io", false},
		{"ok", "kubernetes.io.example.com", true},
	}
	for _, tc := range tests {
		t.Run(tc.prefix+"/"+tc.name, func(t *testing.T) {
			ok := checkResourceName(tc.name) == "" && checkResourcePrefix(tc.prefix) == ""
			if ok != tc.ok {
				t.Errorf("valid = %v, want %v (%s; %s)", ok, tc.ok, checkResourceName(tc.name), checkResourcePrefix(tc.prefix))
			}
		})
	}
}

// A pool whose files could not be named (a file name is at most 255
// bytes) is refused, naming the resource: the rules of resource names
// allow a prefix and name too long for a netDevice pool's device-info
// files or a CDI spec, and every Allocate would fail. Shorter passes, and
// other pools need no such file.
func TestResourceNamesTooLongForTheirFiles(t *testing.T) {
	label := strings.Repeat("p", 60)
	prefix := label + "." + label + "." + label + ".com" // 186
	long, short := strings.Repeat("n", 63), strings.Repeat("n", 20)
	pool := func(name, extra string) string {
		return `{"resourceList": [{"resourceName": "` + name + `", "resourcePrefix": "` + prefix + `", ` + extra + `"selectors": {"vendors": ["8086"]}}]}`
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		{"netDevice", pool(long, ""), "too long for its device-info files' names"},
		{"CDI", pool(long, `"deviceType": "genericPCI", "cdi": {"enabled": true, "kind": "example.com/pci"}, `), "too long for its CDI spec file's name"},
		{"short netDevice", pool(short, ""), ""},
		{"genericPCI without CDI", pool(long, `"deviceType": "genericPCI", `), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.json", []byte(tc.config))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "resourceList[0].resourceName") || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%v, want resourceList[0].resourceName refused: %s", err, tc.want)
			}
		})
	}
}

// advertiseEmpty is a pool's own switch, off unless set, and must be a
// boolean.
func TestAdvertiseEmpty(t *testing.T) {
	cfg := mustParse(t, "c.json", `{"resourceList": [
	  {"resourceName": "a", "advertiseEmpty": true, "selectors": {"vendors": ["8086"]}},
	  {"resourceName": "b", "selectors": {"vendors": ["8086"]}}]}`)
	if !cfg.Resources[0].AdvertiseEmpty || cfg.Resources[1].AdvertiseEmpty {
		t.Errorf("advertiseEmpty = %v, %v; want true, false", cfg.Resources[0].AdvertiseEmpty, cfg.Resources[1].AdvertiseEmpty)
	}
	_, err := Parse("c.json", []byte(`{"resourceList": [{"resourceName": "a", "advertiseEmpty": "yes", "selectors": {"vendors": ["8086"]}}]}`))
	if err == nil || !strings.Contains(err.Error(), "resourceList[0].advertiseEmpty") {
		t.Errorf("advertiseEmpty \"yes\": %v", err)
	}
}

// UseCDI (--use-cdi) enables CDI for every pool, as the SR-IOV plugin's
// flag does; a pool's own kind is kept.
func TestUseCDI(t *testing.T) {
	src := []byte(`{"resourceList": [
	  {"resourceName": "a", "selectors": {"vendors": ["8086"]}},
	  {"resourceName": "b", "cdi": {"kind": "example.com/b"}, "selectors": {"vendors": ["8086"]}}]}`)
	cfg, err := ParseWith("c.json", src, Options{UseCDI: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cfg.Resources {
		if !r.CDI.Enabled {
			t.Errorf("%s: CDI not enabled by UseCDI", r.Name)
		}
	}
	if k := cfg.Resources[1].CDI.Kind; k != "example.com/b" {
		t.Errorf("kind %q, want the pool's own", k)
	}
	if plain := mustParse(t, "c.json", string(src)); plain.Resources[0].CDI.Enabled {
		t.Error("CDI enabled without UseCDI")
	}
}
