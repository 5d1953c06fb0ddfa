package events

import (
	"reflect"
	"testing"
	"time"
)

// The fixed envelope fields of the samples: what the golden files pin.
var (
	sampleTime   = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)
	sampleBootID = "6f1c1f0e-7d4b-4c2a-9a52-3b8f0d2e4c11"
)

const sampleSeq = 4242

var sampleFacts = DeviceFacts{
	Address:         "0000:3b:02.1",
	Vendor:          "8086",
	Device:          "154c",
	SubsystemVendor: "8086",
	SubsystemDevice: "0000",
	Class:           "020000",
	VendorName:      "Intel Corporation",
	DeviceName:      "Ethernet Virtual Function 700 Series",
	Driver:          "vfio-pci",
	NUMANode:        1,
	IOMMUGroup:      "87",
	VFIODevice:      true,
	PF:              "0000:3b:00.0",
	VFIndex:         17,
	Interfaces:      []string{"ens1f0v17"},
	PFInterface:     "ens1f0",
	RDMADevices:     []string{"mlx5_19", "mlx5_20"},
}

// samples holds one payload of every catalog type with every field set, so a
// field the codec forgets shows up as a round-trip or golden failure.
// TestSamplesCoverCatalog fails when a type of the catalog has none here.
var samples = map[Type]Payload{
	TypeDaemonStarted: DaemonStarted{
		Version: "v0.3.1", Node: "worker-7", PID: 4711, ConfigPath: "/etc/devledger/config.json",
		SysfsRoot: "/sys", KubeletDir: "/var/lib/kubelet", Registration: "watcher",
		KernelBootID: "3c9e41b2-5a7d-4f08-b1e6-92d40c7a8f15",
	},
	TypeDaemonStopped: DaemonStopped{Reason: "SIGTERM", Clean: true},
	TypeConfigApplied: ConfigApplied{
		Path:   "/etc/devledger/config.json",
		SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Pools: []PoolSpec{
			{Resource: "intel.com/intel_sriov_netdevice", DeviceType: "netDevice", ExcludeTopology: true,
				AllocatePolicy: "packed", Definition: `{"resourceName":"intel_sriov_netdevice"}`},
			{Resource: "intel.com/intel_sriov_dpdk", DeviceType: "netDevice", ExcludeTopology: true,
				AllocatePolicy: "balanced", Definition: `{"resourceName":"intel_sriov_dpdk","selectors":{"drivers":["vfio-pci"]}}`},
		},
		Changes: []PoolChange{
			{Pool: "intel.com/intel_sriov_dpdk", Change: "changed", Fields: []string{`selectors.drivers: ["iavf"] → ["vfio-pci"]`},
				Joined: []string{"0000:3b:02.1", "0000:3b:02.2"}, Left: []string{"0000:3b:02.0"}},
			{Pool: "intel.com/intel_sriov_netdevice", Change: "members", Fields: []string{`excludeTopology: false → true`},
				Joined: []string{"0000:3b:02.0"}, Left: []string{"0000:3b:02.1", "0000:3b:02.2"}},
		},
	},
	TypeConfigRejected: ConfigRejected{
		Path: "/etc/devledger/config.json", SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		Errors: []string{"resourceList[0].resourceName: empty, want a name", "resourceList[2].selectors.vendors[0]: \"80861\" is not a 4-digit hex id"},
	},
	TypeDeviceDiscovered:    DeviceDiscovered{Device: sampleFacts},
	TypeDeviceChanged:       DeviceChanged{Device: sampleFacts, Changed: []string{"driver", "interfaces"}},
	TypeDeviceRemoved:       DeviceRemoved{Address: "0000:3b:02.1", Reason: "gone from sysfs"},
	TypeDeviceHealthChanged: DeviceHealthChanged{Address: "0000:3b:02.1", Healthy: true, Reason: "link up"},
	TypePoolMembershipChanged: PoolMembershipChanged{
		Pool: "intel.com/intel_sriov_dpdk", Added: []string{"0000:3b:02.1", "0000:3b:02.2"},
		Removed: []string{"0000:3b:02.0"}, Reason: "driver changed to vfio-pci",
	},
	TypePluginServing: PluginServing{Pool: "intel.com/intel_sriov_dpdk", Socket: "/var/lib/kubelet/plugins_registry/intel.com-intel_sriov_dpdk.sock", Mode: "watcher"},
	TypePluginRegistered: PluginRegistered{
		Pool: "intel.com/intel_sriov_dpdk", Socket: "/var/lib/kubelet/plugins_registry/intel.com-intel_sriov_dpdk.sock", Mode: "watcher",
	},
	TypeRegistrationFailed: RegistrationFailed{
		Pool: "intel.com/intel_sriov_dpdk", Socket: "/var/lib/kubelet/device-plugins/intel.com-intel_sriov_dpdk.sock",
		Mode: "legacy", Error: "device plugin already connected: /var/lib/kubelet/device-plugins/intel.com-intel_sriov_dpdk.sock", Attempt: 3,
		KubeletHolds: "/var/lib/kubelet/device-plugins/intel.com-intel_sriov_dpdk.sock", Action: "serving the pool on a new socket",
	},
	TypeKubeletRestarted: KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock",
		StoppedAt: time.Date(2025, 3, 14, 15, 9, 22, 101000000, time.UTC)},
	TypeKubeletStopped: KubeletStopped{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock",
		Reason: "its ListAndWatch streams ended and kubelet.sock refuses connections"},
	TypeSocketLost: SocketLost{Pool: "intel.com/intel_sriov_dpdk", Socket: "/var/lib/kubelet/device-plugins/intel.com-intel_sriov_dpdk.sock"},
	TypeDevicesAllocated: DevicesAllocated{
		Pool: "intel.com/intel_sriov_dpdk", DeviceIDs: []string{"0000:3b:02.1", "0000:3b:02.2"}, ContainerIndex: 1,
		Response: ContainerAllocation{
			Envs:        map[string]string{"PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK": "0000:3b:02.1,0000:3b:02.2", "A_FIRST": "sorted"},
			Mounts:      []Mount{{ContainerPath: "/dev/hugepages", HostPath: "/dev/hugepages", ReadOnly: true}},
			Devices:     []DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"}, {ContainerPath: "/dev/vfio/87", HostPath: "/dev/vfio/87", Permissions: "rw"}},
			Annotations: map[string]string{"k8s.v1.cni.cncf.io/resourceName": "intel.com/intel_sriov_dpdk"},
			CDIDevices:  []string{"intel.com/sriov=0000:3b:02.1"},
		},
		Supersedes: []uint64{4100}, HeldElsewhere: []uint64{3900}, Unhealthy: []string{"0000:3b:02.2"},
	},
	TypeAllocationConflict: AllocationConflict{
		Pool: "intel.com/intel_sriov_dpdk", Device: "0000:3b:02.1",
		Claims: []Claim{
			{AllocationSeq: 4100, Namespace: "net", Pod: "dpdk-a", Container: "app"},
			{AllocationSeq: 4200, Namespace: "net", Pod: "dpdk-b", Container: "app"},
		},
		Reason: "allocated while held",
	},
	TypeAllocationBound: AllocationBound{
		AllocationSeq: 4200, Pool: "intel.com/intel_sriov_dpdk", DeviceIDs: []string{"0000:3b:02.1", "0000:3b:02.2"},
		Namespace: "net", Pod: "dpdk-b", UID: "0b9e2f56-6c6e-4a57-8f0b-8f3f2f7c9d10", Container: "app",
	},
	TypeDevicesReleased: DevicesReleased{
		AllocationSeq: 4200, Pool: "intel.com/intel_sriov_dpdk", DeviceIDs: []string{"0000:3b:02.1", "0000:3b:02.2"},
		HeldFor: 90*time.Minute + 1500*time.Millisecond, Reason: "pod deleted",
	},
	TypeAllocationLeakSuspected: AllocationLeakSuspected{
		AllocationSeq: 4300, Pool: "intel.com/intel_sriov_dpdk", DeviceIDs: []string{"0000:3b:02.3"},
		Age: 5*time.Minute + 2*time.Second, Reason: "no container has claimed it for 5m2s",
	},
	TypeAttributionChanged: AttributionChanged{Available: true, Reason: "pod resources answered"},
	TypeSnapshotTaken:      SnapshotTaken{Seq: 4000, Size: 65536, Reason: "every 10000 events"},
	TypeEventLost:          EventLost{Type: "DevicesAllocated", Reason: "its record fails its checksum"},
	TypeDaemonCrashed:      DaemonCrashed{BootID: "7f3a9c0e1d2b4a56", LastSeq: 4121, LastAlive: time.Date(2026, 11, 24, 9, 14, 5, 0, time.UTC)},
	TypePluginWithdrawn: PluginWithdrawn{Pool: "intel.com/intel_sriov_dpdk", Socket: "/var/lib/kubelet/device-plugins/intel.com_intel_sriov_dpdk.3f2a91c0.sock",
		Reason: "no devices: the last one left (scan: device removed)"},
	TypeAllocationRecovered: AllocationRecovered{Pool: "intel.com/intel_sriov_dpdk", DeviceIDs: []string{"0000:3b:02.1", "0000:3b:02.2"},
		Namespace: "telco", Pod: "dpdk-testpmd-7d9f", Container: "testpmd",
		Reason: "the kubelet reports telco/dpdk-testpmd-7d9f/testpmd holding them, and the ledger has no live allocation of them"},
	TypeLedgerDamaged: LedgerDamaged{Problem: "corrupt at seq 29: checksum mismatch (stored 7fb73870, computed a0643d47 over 155 bytes)",
		Seq: 29, Served: "the state is rebuilt from the snapshot at seq 4000, after the damage"},
	TypeDamageAcknowledged: DamageAcknowledged{Problems: []string{"corrupt at seq 29: checksum mismatch (stored 7fb73870, computed a0643d47 over 155 bytes)"},
		Note: "salvaged to ledger.db.salvaged; old events of seq 29 lost"},
	TypeEventsDropped: EventsDropped{FromSeq: 1, ToSeq: 3000, Count: 3000, Bytes: 412345, SnapshotSeq: 4000, Reason: "older than 720h"},
}

// sampleEnvelope is the sample of t in an envelope with the fixed time, boot
// id and sequence.
func sampleEnvelope(tb testing.TB, t Type) Envelope {
	tb.Helper()
	p, ok := samples[t]
	if !ok {
		tb.Fatalf("no sample payload for %s: add one to samples", t)
	}
	e := New(p, sampleTime, sampleBootID)
	e.Seq = sampleSeq
	return e
}

func TestSamplesCoverCatalog(t *testing.T) {
	for _, typ := range Types() {
		t.Run(string(typ), func(t *testing.T) {
			p, ok := samples[typ]
			if !ok {
				t.Fatalf("no sample payload for %s: add one to samples", typ)
			}
			if p.EventType() != typ {
				t.Fatalf("sample for %s is a %s", typ, p.EventType())
			}
			for _, path := range zeroFields(reflect.ValueOf(p), string(typ)) {
				t.Errorf("%s is zero: fill every field of the sample", path)
			}
		})
	}
	if len(samples) != len(Types()) {
		t.Errorf("%d samples for %d catalog types", len(samples), len(Types()))
	}
}

// zeroFields lists the paths of the fields under v that hold their zero
// value, descending into structs, slices and maps.
func zeroFields(v reflect.Value, path string) []string {
	if v.IsZero() {
		return []string{path}
	}
	var zero []string
	switch v.Kind() {
	case reflect.Struct:
		if v.Type().PkgPath() != reflect.TypeFor[Envelope]().PkgPath() {
			break // time.Time and the like: non-zero is enough
		}
		for i := range v.NumField() {
			zero = append(zero, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
	case reflect.Slice:
		for i := range v.Len() {
			zero = append(zero, zeroFields(v.Index(i), path+"[]")...)
		}
	}
	return zero
}
