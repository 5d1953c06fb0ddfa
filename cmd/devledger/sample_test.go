package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// sampleStory is the fixture of the golden tests (sampleCopy): a day on an
// SR-IOV + GPU node, written by hand in the shape the daemon records it:
// start, config, discovery, pools, registrations, allocations bound to
// pods, a driver unbind and recovery, a kubelet restart, releases, a clean
// stop with a snapshot, a second start, then an afternoon of new pods, a
// conflict, an allocation no pod claims (a leak suspect), a GPU whose
// driver is unbound for good and a short spell without PodResources. It is
// a story, not a record (its times and some of its wording are made up, so
// that the goldens read as a day); the bundled sample is the daemon's own.
func sampleStory() []events.Envelope {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	boot1, boot2 := "7f3c9a1e-boot-0001", "c2d4e6f8-boot-0002"
	var out []events.Envelope
	add := func(d time.Duration, boot string, p events.Payload) {
		out = append(out, events.New(p, at(d), boot))
	}

	const vfio, netdev, gpu = "intel.com/sriov_vfio", "intel.com/sriov_net", "nvidia.com/gpu"
	pf := func(addr, ifname string) events.DeviceFacts {
		return events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1592", Class: "020000",
			VendorName: "Intel Corporation", DeviceName: "Ethernet Controller E810-C for QSFP",
			Driver: "ice", NUMANode: 0, IOMMUGroup: "30", VFIndex: -1, Interfaces: []string{ifname}}
	}
	vf := func(addr, pfAddr string, idx int, driver, group string) events.DeviceFacts {
		d := events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1889", Class: "020000",
			VendorName: "Intel Corporation", DeviceName: "Ethernet Adaptive Virtual Function",
			Driver: driver, NUMANode: 0, IOMMUGroup: group, PF: pfAddr, VFIndex: idx, PFInterface: "ens1f0"}
		if driver == "vfio-pci" {
			d.VFIODevice = true
		} else {
			d.Interfaces = []string{"ens1f0v" + group}
		}
		return d
	}
	gpuDev := func(addr string, numa int, group string) events.DeviceFacts {
		return events.DeviceFacts{Address: addr, Vendor: "10de", Device: "2330", Class: "030200",
			VendorName: "NVIDIA Corporation", DeviceName: "GH100 [H100 SXM5 80GB]", Driver: "vfio-pci",
			NUMANode: numa, IOMMUGroup: group, VFIODevice: true, VFIndex: -1}
	}

	add(0, boot1, events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 4121, ConfigPath: "/etc/devledger/config.json",
		SysfsRoot: "/sys", KubeletDir: "/var/lib/kubelet", Registration: "legacy"})
	add(time.Second, boot1, events.ConfigApplied{Path: "/etc/devledger/config.json", SHA256: "5d41402abc4b2a76b9719d911017c592ae2f6a3b1c3e5d7f9a0b2c4d6e8f0a1b",
		Pools: []events.PoolSpec{
			{Resource: vfio, DeviceType: "netDevice", AllocatePolicy: "packed"},
			{Resource: netdev, DeviceType: "netDevice", AllocatePolicy: "spread"},
			{Resource: gpu, DeviceType: "genericPCI"},
		}})
	devs := []events.DeviceFacts{
		pf("0000:3b:00.0", "ens1f0"),
		vf("0000:3b:02.0", "0000:3b:00.0", 0, "vfio-pci", "140"),
		vf("0000:3b:02.1", "0000:3b:00.0", 1, "vfio-pci", "141"),
		vf("0000:3b:02.2", "0000:3b:00.0", 2, "vfio-pci", "142"),
		vf("0000:3b:02.3", "0000:3b:00.0", 3, "iavf", "143"),
		vf("0000:3b:02.4", "0000:3b:00.0", 4, "iavf", "144"),
		gpuDev("0000:af:00.0", 0, "70"),
		gpuDev("0000:d8:00.0", 1, "90"),
	}
	for i, d := range devs {
		add(2*time.Second+time.Duration(i)*time.Millisecond, boot1, events.DeviceDiscovered{Device: d})
	}
	add(3*time.Second, boot1, events.PoolMembershipChanged{Pool: vfio, Added: []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"}, Reason: "config applied"})
	add(3*time.Second, boot1, events.PoolMembershipChanged{Pool: netdev, Added: []string{"0000:3b:02.3", "0000:3b:02.4"}, Reason: "config applied"})
	add(3*time.Second, boot1, events.PoolMembershipChanged{Pool: gpu, Added: []string{"0000:af:00.0", "0000:d8:00.0"}, Reason: "config applied"})
	for _, p := range []string{vfio, netdev, gpu} {
		sock := sampleSocket(p)
		add(4*time.Second, boot1, events.PluginServing{Pool: p, Socket: sock, Mode: "legacy"})
		add(4*time.Second+5*time.Millisecond, boot1, events.PluginRegistered{Pool: p, Socket: sock, Mode: "legacy"})
	}

	vfioResp := func(addr, group string) events.ContainerAllocation {
		return events.ContainerAllocation{
			Envs: map[string]string{"PCIDEVICE_INTEL_COM_SRIOV_VFIO": addr,
				"PCIDEVICE_INTEL_COM_SRIOV_VFIO_INFO": `{"` + addr + `":{"generic":{"deviceID":"` + addr + `"},"vfio":{"dev-mount":"/dev/vfio/` + group + `","mount":"/dev/vfio/vfio"}}}`},
			Devices: []events.DeviceNode{
				{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"},
				{ContainerPath: "/dev/vfio/" + group, HostPath: "/dev/vfio/" + group, Permissions: "rw"},
			},
		}
	}
	add(1*time.Hour, boot1, events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{"0000:3b:02.1"}, Response: vfioResp("0000:3b:02.1", "141")})
	allocVF := uint64(len(out))
	add(1*time.Hour+3*time.Second, boot1, events.AllocationBound{AllocationSeq: allocVF, Pool: vfio, DeviceIDs: []string{"0000:3b:02.1"},
		Namespace: "telco", Pod: "dpdk-testpmd-7d9f", UID: "3f1e-77aa", Container: "testpmd"})
	add(1*time.Hour+20*time.Minute, boot1, events.DevicesAllocated{Pool: gpu, DeviceIDs: []string{"0000:af:00.0"},
		Response: events.ContainerAllocation{
			Envs:    map[string]string{"PCIDEVICE_NVIDIA_COM_GPU": "0000:af:00.0"},
			Devices: []events.DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"}, {ContainerPath: "/dev/vfio/70", HostPath: "/dev/vfio/70", Permissions: "rw"}},
		}})
	allocGPU := uint64(len(out))
	add(1*time.Hour+20*time.Minute+4*time.Second, boot1, events.AllocationBound{AllocationSeq: allocGPU, Pool: gpu, DeviceIDs: []string{"0000:af:00.0"},
		Namespace: "ml", Pod: "trainer-0", UID: "9c2b-01de", Container: "trainer"})
	add(2*time.Hour, boot1, events.DeviceHealthChanged{Address: "0000:3b:02.2", Healthy: false, Reason: "driver unbound (was vfio-pci)"})
	add(2*time.Hour+30*time.Second, boot1, events.DeviceHealthChanged{Address: "0000:3b:02.2", Healthy: true, Reason: "probes passed for 10s hold-down"})
	add(3*time.Hour, boot1, events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"})
	for _, p := range []string{vfio, netdev, gpu} {
		sock := sampleSocket(p)
		add(3*time.Hour+10*time.Millisecond, boot1, events.SocketLost{Pool: p, Socket: sock})
		add(3*time.Hour+20*time.Millisecond, boot1, events.PluginServing{Pool: p, Socket: sock, Mode: "legacy"})
		add(3*time.Hour+25*time.Millisecond, boot1, events.PluginRegistered{Pool: p, Socket: sock, Mode: "legacy"})
	}
	add(4*time.Hour+12*time.Minute, boot1, events.DevicesReleased{AllocationSeq: allocVF, Pool: vfio, DeviceIDs: []string{"0000:3b:02.1"},
		HeldFor: 3*time.Hour + 12*time.Minute, Reason: "pod telco/dpdk-testpmd-7d9f deleted"})
	add(5*time.Hour, boot1, events.DaemonStopped{Reason: "SIGTERM", Clean: true})
	add(5*time.Hour+2*time.Minute, boot2, events.DaemonStarted{Version: "v0.1.1", Node: "worker-3", PID: 5210, ConfigPath: "/etc/devledger/config.json",
		SysfsRoot: "/sys", KubeletDir: "/var/lib/kubelet", Registration: "legacy"})
	add(5*time.Hour+2*time.Minute+time.Second, boot2, events.DeviceRemoved{Address: "0000:3b:02.4", Reason: "gone from sysfs while the daemon was down"})
	add(5*time.Hour+2*time.Minute+time.Second, boot2, events.PoolMembershipChanged{Pool: netdev, Removed: []string{"0000:3b:02.4"}, Reason: "device removed"})
	for _, p := range []string{vfio, netdev, gpu} {
		sock := sampleSocket(p)
		add(5*time.Hour+2*time.Minute+2*time.Second, boot2, events.PluginServing{Pool: p, Socket: sock, Mode: "legacy"})
		add(5*time.Hour+2*time.Minute+2*time.Second+5*time.Millisecond, boot2, events.PluginRegistered{Pool: p, Socket: sock, Mode: "legacy"})
	}

	// The afternoon: the VF goes to a new testpmd pod, a router pod gets a
	// netdevice VF, the kubelet reports a vfio VF in the router that the
	// ledger has as free, an allocation no pod ever claims, a GPU losing
	// its driver, and the trainer finishing. No allocation here carries the
	// GPU pool's variable: TestCorruptRecord finds the one that does by it.
	add(5*time.Hour+5*time.Minute, boot2, events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{"0000:3b:02.1"}, Response: vfioResp("0000:3b:02.1", "141")})
	allocVF2 := uint64(len(out))
	add(5*time.Hour+5*time.Minute+2*time.Second, boot2, events.AllocationBound{AllocationSeq: allocVF2, Pool: vfio, DeviceIDs: []string{"0000:3b:02.1"},
		Namespace: "telco", Pod: "dpdk-testpmd-8b21", UID: "51c0-9e3a", Container: "testpmd"})
	netResp := func(addr string) events.ContainerAllocation {
		return events.ContainerAllocation{Envs: map[string]string{"PCIDEVICE_INTEL_COM_SRIOV_NET": addr}}
	}
	add(5*time.Hour+10*time.Minute, boot2, events.DevicesAllocated{Pool: netdev, DeviceIDs: []string{"0000:3b:02.3"}, Response: netResp("0000:3b:02.3")})
	allocNet := uint64(len(out))
	add(5*time.Hour+10*time.Minute+3*time.Second, boot2, events.AllocationBound{AllocationSeq: allocNet, Pool: netdev, DeviceIDs: []string{"0000:3b:02.3"},
		Namespace: "telco", Pod: "cnf-router-0", UID: "a7d2-4410", Container: "router"})
	add(5*time.Hour+30*time.Minute, boot2, events.AllocationConflict{Pool: vfio, Device: "0000:3b:02.0",
		Claims: []events.Claim{{Namespace: "telco", Pod: "cnf-router-0", Container: "router"}},
		Reason: "kubelet reports it in a container; the ledger has it free"})
	add(5*time.Hour+40*time.Minute, boot2, events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{"0000:3b:02.0"}, Response: vfioResp("0000:3b:02.0", "140")})
	allocUnclaimed := uint64(len(out))
	add(5*time.Hour+45*time.Minute, boot2, events.AllocationLeakSuspected{AllocationSeq: allocUnclaimed, Pool: vfio, DeviceIDs: []string{"0000:3b:02.0"},
		Age: 5 * time.Minute, Reason: "no container has claimed it for 5m0s"})
	add(6*time.Hour, boot2, events.DeviceHealthChanged{Address: "0000:d8:00.0", Healthy: false, Reason: "driver unbound (was vfio-pci)"})
	add(6*time.Hour+30*time.Minute, boot2, events.DevicesReleased{AllocationSeq: allocNet, Pool: netdev, DeviceIDs: []string{"0000:3b:02.3"},
		HeldFor: 1*time.Hour + 20*time.Minute, Reason: "pod telco/cnf-router-0 deleted"})
	add(6*time.Hour+40*time.Minute, boot2, events.AttributionChanged{Available: false,
		Reason: "list pod resources: dial unix /var/lib/kubelet/pod-resources/kubelet.sock: connect: connection refused"})
	add(6*time.Hour+42*time.Minute, boot2, events.AttributionChanged{Available: true, Reason: "pod resources answered"})
	add(7*time.Hour, boot2, events.DevicesReleased{AllocationSeq: allocGPU, Pool: gpu, DeviceIDs: []string{"0000:af:00.0"},
		HeldFor: 5*time.Hour + 40*time.Minute, Reason: "pod ml/trainer-0 completed"})
	return out
}

// sampleSocket is where the legacy-mode socket of a pool lives.
func sampleSocket(resource string) string {
	prefix, name, _ := strings.Cut(resource, "/")
	return "/var/lib/kubelet/device-plugins/" + prefix + "_" + name + ".sock"
}

// writeSampleLedger writes the sample story into a new ledger at path.
func writeSampleLedger(t testing.TB, path string) {
	t.Helper()
	l, err := store.Open(path, store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(context.Background(), sampleStory()...); err != nil {
		t.Fatal(err)
	}
}
