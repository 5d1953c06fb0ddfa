package node

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/devledger/devledger/actors/health"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/sysfs"
)

func TestSocketDirs(t *testing.T) {
	const dir = "kubelet"
	tests := []struct {
		name string
		mode grpcapi.RegistrationMode
		want string
	}{
		{"legacy mode serves in device-plugins", grpcapi.ModeLegacy, "kubelet/device-plugins"},
		{"no mode is legacy", "", "kubelet/device-plugins"},
		{"watcher mode serves in plugins_registry", grpcapi.ModeWatcher, "kubelet/plugins_registry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SocketDir(dir, tc.mode); got != filepath.FromSlash(tc.want) {
				t.Errorf("SocketDir = %s, want %s", got, tc.want)
			}
		})
	}
	if got := KubeletSocket(dir); got != filepath.Join(dir, "device-plugins", "kubelet.sock") {
		t.Errorf("KubeletSocket = %s", got)
	}
	if got := PluginsRegistryDir(dir); got != filepath.Join(dir, "plugins_registry") {
		t.Errorf("PluginsRegistryDir = %s", got)
	}
}

func TestDigest(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"no file", nil, ""},
		{"an empty file", []byte{}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", []byte("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Digest(tc.data); got != tc.want {
				t.Errorf("Digest = %q, want %q", got, tc.want)
			}
		})
	}
}

const twoPools = `{"resourceList": [
  {"resourceName": "gpu", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI",
   "selectors": {"vendors": ["10de"], "drivers": ["vfio-pci"]}, "excludeTopology": true},
  {"resourceName": "sriov_net", "allocatePolicy": "packed",
   "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}
]}`

func parse(t *testing.T, data string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("config.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfigApplied(t *testing.T) {
	ca := ConfigApplied("/etc/devledger/config.json", []byte(twoPools), parse(t, twoPools))
	if ca.Path != "/etc/devledger/config.json" || ca.SHA256 != Digest([]byte(twoPools)) {
		t.Errorf("ConfigApplied path %q sha %q", ca.Path, ca.SHA256)
	}
	if len(ca.Pools) != 2 {
		t.Fatalf("%d pool specs, want 2", len(ca.Pools))
	}
	gpu, nic := ca.Pools[0], ca.Pools[1]
	if gpu.Resource != "nvidia.com/gpu" || gpu.DeviceType != "genericPCI" || !gpu.ExcludeTopology || gpu.AllocatePolicy != "none" {
		t.Errorf("gpu spec %+v", gpu)
	}
	if nic.Resource != "intel.com/sriov_net" || nic.DeviceType != "netDevice" || nic.ExcludeTopology || nic.AllocatePolicy != "packed" {
		t.Errorf("nic spec (defaults filled in) %+v", nic)
	}
	for _, p := range ca.Pools {
		var def map[string]any
		if err := json.Unmarshal([]byte(p.Definition), &def); err != nil {
			t.Errorf("%s definition is not JSON: %v\n%s", p.Resource, err, p.Definition)
		}
	}

	// The same file parsed again, or laid out differently, gives the same
	// definitions; only the digest tells the bytes apart.
	again := ConfigApplied("/etc/devledger/config.json", []byte(twoPools), parse(t, twoPools))
	compact := `{"resourceList":[{"resourceName":"gpu","resourcePrefix":"nvidia.com","deviceType":"genericPCI","selectors":{"vendors":["10de"],"drivers":["vfio-pci"]},"excludeTopology":true},{"resourceName":"sriov_net","allocatePolicy":"packed","selectors":{"vendors":["8086"],"devices":["1889"],"drivers":["iavf"]}}]}`
	reformatted := ConfigApplied("/etc/devledger/config.json", []byte(compact), parse(t, compact))
	for i := range ca.Pools {
		if again.Pools[i] != ca.Pools[i] {
			t.Errorf("parsing the same file twice changed %s's spec:\n%+v\n%+v", ca.Pools[i].Resource, ca.Pools[i], again.Pools[i])
		}
		if reformatted.Pools[i] != ca.Pools[i] {
			t.Errorf("reformatting the file changed %s's spec:\n%+v\n%+v", ca.Pools[i].Resource, ca.Pools[i], reformatted.Pools[i])
		}
	}
	if reformatted.SHA256 == ca.SHA256 {
		t.Errorf("different bytes, same digest")
	}

	// A changed selector changes that pool's definition, and only that.
	wider := `{"resourceList": [
  {"resourceName": "gpu", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI",
   "selectors": {"vendors": ["10de"], "drivers": ["vfio-pci", "nvidia"]}, "excludeTopology": true},
  {"resourceName": "sriov_net", "allocatePolicy": "packed",
   "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}
]}`
	changed := ConfigApplied("/etc/devledger/config.json", []byte(wider), parse(t, wider))
	if changed.Pools[0].Definition == ca.Pools[0].Definition {
		t.Errorf("a new driver in gpu's selector left its definition as it was")
	}
	if changed.Pools[1] != ca.Pools[1] {
		t.Errorf("a change to gpu changed sriov_net's spec")
	}
}

func TestDefinitionIgnoresThePoolsPlaceInTheFile(t *testing.T) {
	alone := `{"resourceList": [{"resourceName": "sriov_net", "selectors": {"vendors": ["8086"]}}]}`
	below := `{"resourceList": [
  {"resourceName": "gpu", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI", "selectors": {"vendors": ["10de"]}},
  {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"]}}
]}`
	before := ConfigApplied("config.json", []byte(alone), parse(t, alone)).Pools[0]
	after := ConfigApplied("config.json", []byte(below), parse(t, below)).Pools[1]
	if before != after {
		t.Errorf("a pool added above sriov_net changed its spec:\n%s\n%s", before.Definition, after.Definition)
	}
}

// Verdicts go to the pool that holds each device now, one list per pool;
// a device in no pool, or in a pool not running, has none to tell.
func TestVerdictsGoToTheDevicesPools(t *testing.T) {
	p1, p2 := actor.NewPID("nonhost", "pool-a-0"), actor.NewPID("nonhost", "pool-b-1")
	owner := map[string]string{"0000:3b:02.0": "a", "0000:3b:02.1": "b", "0000:3b:02.2": "a", "0000:3b:02.3": "c"}
	pools := map[string]*actor.PID{"a": p1, "b": p2}
	got := byPool([]health.Verdict{
		{Address: "0000:3b:02.0", Reason: "in a", Seq: 3},
		{Address: "0000:3b:02.1", Reason: "in b", Healthy: true},
		{Address: "0000:3b:02.2", Reason: "in a too"},
		{Address: "0000:3b:02.3", Reason: "in c, not running"},
		{Address: "0000:3b:09.0", Reason: "in no pool"},
	}, owner, pools)
	want := map[*actor.PID][]pool.SetHealth{
		p1: {{Address: "0000:3b:02.0", Reason: "in a", Seq: 3}, {Address: "0000:3b:02.2", Reason: "in a too"}},
		p2: {{Address: "0000:3b:02.1", Reason: "in b", Healthy: true}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("byPool = %v, want %v", got, want)
	}
}

// A VF whose InfiniBand netdev and RDMA device are in a pod (RDMA
// exclusive mode) has no partition key the host can read: it stays in
// the pKeys pool it was placed in, where a broader pool would take it.
// Placed nowhere before, it goes where the selectors say.
func TestPlacementKeepsADeviceWhoseFactsAreInAPod(t *testing.T) {
	cfg, err := config.ParseWith("config.json", []byte(`{"resourceList": [
		{"resourceName": "pkey", "selectors": {"pKeys": ["0x8001"]}},
		{"resourceName": "ib", "selectors": {"vendors": ["15b3"], "linkTypes": ["infiniband"]}}]}`), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	resources, _ := poolsOf(cfg)
	pf := sysfs.Device{Address: "0000:d8:00.0", Vendor: "15b3", Class: "020700", Driver: "mlx5_core", NumVFs: 2,
		Interfaces: []sysfs.NetInterface{{Name: "ib0", LinkType: "infiniband"}}}
	vf := func(addr string, inPod bool) sysfs.Device {
		d := sysfs.Device{Address: addr, Vendor: "15b3", Class: "020700", Driver: "mlx5_core", PF: pf.Address, PFInterface: "ib0",
			AuxDevices: []sysfs.AuxDevice{{Name: "mlx5_core.rdma.1", Type: "rdma"}}}
		if !inPod {
			d.RDMADevices = []string{"mlx5_1"}
			d.Interfaces = []sysfs.NetInterface{{Name: "ib1", LinkType: "infiniband", PKeys: []string{"0x8001"}}}
		}
		return d
	}
	before := map[string]string{"0000:d8:00.1": "intel.com/pkey", "0000:d8:00.2": "intel.com/pkey"}
	devices := []sysfs.Device{pf, vf("0000:d8:00.1", true), vf("0000:d8:00.2", false), vf("0000:d8:00.3", true)}
	// .2 still shows its key; .3 was in no pool.
	_, owner, members := placement(cfg, resources, devices, config.Env{}, before)
	want := map[string]string{"0000:d8:00.1": "intel.com/pkey", "0000:d8:00.2": "intel.com/pkey", "0000:d8:00.3": "intel.com/ib"}
	if !reflect.DeepEqual(owner, want) {
		t.Errorf("owner = %v, want %v", owner, want)
	}
	for name, ds := range members {
		for _, d := range ds {
			if owner[d.Address] != name {
				t.Errorf("%s listed in %s, owned by %s", d.Address, name, owner[d.Address])
			}
		}
	}
	if len(members["intel.com/pkey"])+len(members["intel.com/ib"]) != 3 {
		t.Errorf("members %v", members)
	}
}
