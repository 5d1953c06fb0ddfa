package events

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"
)

const (
	poolA = "intel.com/sriov_dpdk"
	poolB = "intel.com/sriov_netdevice"
	poolC = "example.com/fpga"
	dev1  = "0000:3b:02.1"
	dev2  = "0000:3b:02.2"
	dev3  = "0000:3b:02.3"
	dev4  = "0000:3b:02.4"
	// allocSeq is the sequence of the live allocation of the base state.
	allocSeq = 9
	// eventSeq is the sequence of the event under test.
	eventSeq = 100
)

var baseTime = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// at is the time of the event with sequence seq in these tests.
func at(seq uint64) time.Time { return baseTime.Add(time.Duration(seq) * time.Second) }

func ev(seq uint64, p Payload) Envelope {
	e := New(p, at(seq), "boot-1")
	e.Seq = seq
	return e
}

func facts(addr string) DeviceFacts {
	return DeviceFacts{Address: addr, Vendor: "8086", Device: "154c", Class: "020000", Driver: "vfio-pci",
		NUMANode: 0, Interfaces: []string{"if-" + addr[len(addr)-1:]}}
}

// baseEvents build the state every Apply case starts from: a started daemon,
// pools A and B, devices 1-3 (1 and 2 in A, 3 in B), both pools registered,
// and a live allocation of device 1 at allocSeq.
func baseEvents() []Envelope {
	ps := []Payload{
		DaemonStarted{Version: "v1", PID: 10},
		ConfigApplied{Path: "c.json", SHA256: "aa", Pools: []PoolSpec{{Resource: poolA, DeviceType: "netDevice"}, {Resource: poolB, DeviceType: "netDevice"}}},
		DeviceDiscovered{Device: facts(dev1)},
		DeviceDiscovered{Device: facts(dev2)},
		DeviceDiscovered{Device: facts(dev3)},
		PoolMembershipChanged{Pool: poolA, Added: []string{dev2, dev1}},
		PoolMembershipChanged{Pool: poolB, Added: []string{dev3}},
		PluginServing{Pool: poolA, Socket: "a.sock", Mode: "watcher"},
		DevicesAllocated{Pool: poolA, DeviceIDs: []string{dev1}},
		PluginRegistered{Pool: poolA, Socket: "a.sock", Mode: "watcher"},
		PluginServing{Pool: poolB, Socket: "b.sock", Mode: "watcher"},
		PluginRegistered{Pool: poolB, Socket: "b.sock", Mode: "watcher"},
	}
	es := make([]Envelope, len(ps))
	for i, p := range ps {
		es[i] = ev(uint64(i+1), p)
	}
	return es
}

func fold(s State, es ...Envelope) State {
	for _, e := range es {
		s = Apply(s, e)
	}
	return s
}

// TestBaseState spells the base state out, so the cases below can say only
// what an event changes.
func TestBaseState(t *testing.T) {
	got := fold(NewState(), baseEvents()...)
	want := State{
		Seq: 12, Time: at(12),
		Daemon: DaemonState{BootID: "boot-1", Version: "v1", StartedAt: at(1), Running: true, Starts: 1, LastSeq: 12, LastAt: at(12)},
		Config: ConfigState{Path: "c.json", SHA256: "aa", AppliedAt: at(2)},
		Pools: map[string]Pool{
			poolA: {Spec: PoolSpec{Resource: poolA, DeviceType: "netDevice"}, Members: []string{dev1, dev2},
				Registration: Registration{Socket: "a.sock", Mode: "watcher", Serving: true, Registered: true, RegisteredAt: at(10)}},
			poolB: {Spec: PoolSpec{Resource: poolB, DeviceType: "netDevice"}, Members: []string{dev3},
				Registration: Registration{Socket: "b.sock", Mode: "watcher", Serving: true, Registered: true, RegisteredAt: at(12)}},
		},
		Devices: map[string]Device{
			dev1: {Facts: facts(dev1), Present: true, Healthy: true, HealthSeq: 3, Pool: poolA},
			dev2: {Facts: facts(dev2), Present: true, Healthy: true, HealthSeq: 4, Pool: poolA},
			dev3: {Facts: facts(dev3), Present: true, Healthy: true, HealthSeq: 5, Pool: poolB},
		},
		Allocations: map[uint64]Allocation{allocSeq: {Seq: allocSeq, Pool: poolA, DeviceIDs: []string{dev1}, At: at(allocSeq)}},
		Holders:     map[string][]uint64{dev1: {allocSeq}},
	}
	assertState(t, got, want)
}

// assertState fails unless got and want hold the same facts, checked both by
// Equal and field by field.
func assertState(t *testing.T, got, want State) {
	t.Helper()
	if !reflect.DeepEqual(normalize(got), normalize(want)) || !got.Equal(want) {
		g, _ := json.MarshalIndent(normalize(got), "", "  ")
		w, _ := json.MarshalIndent(normalize(want), "", "  ")
		t.Fatalf("state differs: %s", firstDiff(string(g), string(w)))
	}
}

func TestApply(t *testing.T) {
	tests := []struct {
		name string
		// setup events are applied to the base state before the event.
		setup []Payload
		event Payload
		// want changes the state before the event into the state after it;
		// Seq and Time are moved by the test.
		want func(s *State)
	}{
		{
			name:  "DaemonStarted: a new run, nothing serving or registered",
			event: DaemonStarted{Version: "v2", PID: 20},
			want: func(s *State) {
				s.Daemon = DaemonState{BootID: "boot-1", Version: "v2", StartedAt: at(eventSeq), Running: true, Starts: 2}
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "DaemonStarted after a crash counts the start and keeps running",
			setup: []Payload{DaemonStarted{Version: "v1"}},
			event: DaemonStarted{Version: "v1"},
			want: func(s *State) {
				s.Daemon.Starts = 3
				s.Daemon.StartedAt = at(eventSeq)
			},
		},
		{
			name:  "DaemonCrashed: the run before stopped when it was last alive; a crash counted; nothing serving",
			event: DaemonCrashed{BootID: "boot-1", LastSeq: 9, LastAlive: at(eventSeq - 1)},
			want: func(s *State) {
				s.Daemon.Running, s.Daemon.StoppedAt, s.Daemon.Crashes = false, at(eventSeq-1), 1
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "DaemonStarted after a crash keeps the count of crashes",
			setup: []Payload{DaemonCrashed{BootID: "boot-1", LastAlive: at(1)}},
			event: DaemonStarted{Version: "v2"},
			want: func(s *State) {
				s.Daemon = DaemonState{BootID: "boot-1", Version: "v2", StartedAt: at(eventSeq), Running: true, Starts: 2, Crashes: 1}
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "DaemonStarted under another kernel boot id counts a node reboot, and keeps the allocations",
			setup: []Payload{DaemonStarted{Version: "v1", KernelBootID: "k-1"}, DaemonCrashed{BootID: "boot-1", LastAlive: at(1)}},
			event: DaemonStarted{Version: "v1", KernelBootID: "k-2"},
			want: func(s *State) {
				s.Daemon = DaemonState{BootID: "boot-1", Version: "v1", StartedAt: at(eventSeq), Running: true, Starts: 3, Crashes: 1,
					KernelBootID: "k-2", Reboots: 1}
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "DaemonStarted under the same kernel boot id is no reboot",
			setup: []Payload{DaemonStarted{Version: "v1", KernelBootID: "k-1"}},
			event: DaemonStarted{Version: "v1", KernelBootID: "k-1"},
			want: func(s *State) {
				s.Daemon = DaemonState{BootID: "boot-1", Version: "v1", StartedAt: at(eventSeq), Running: true, Starts: 3, KernelBootID: "k-1"}
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "DaemonStarted that could not read the kernel boot id counts no reboot, nor does the start after it",
			setup: []Payload{DaemonStarted{Version: "v1", KernelBootID: "k-1"}, DaemonStarted{Version: "v1"}},
			event: DaemonStarted{Version: "v1", KernelBootID: "k-2"},
			want: func(s *State) {
				s.Daemon = DaemonState{BootID: "boot-1", Version: "v1", StartedAt: at(eventSeq), Running: true, Starts: 4, KernelBootID: "k-2"}
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "DaemonStopped: not running, nothing serving or registered",
			event: DaemonStopped{Reason: "SIGTERM", Clean: true},
			want: func(s *State) {
				s.Daemon.Running, s.Daemon.StoppedAt = false, at(eventSeq)
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "ConfigApplied dropping a pool frees its devices",
			setup: []Payload{ConfigRejected{Errors: []string{"bad"}}},
			event: ConfigApplied{Path: "d.json", SHA256: "bb", Pools: []PoolSpec{{Resource: poolA, DeviceType: "netDevice", AllocatePolicy: "packed"}}},
			want: func(s *State) {
				s.Config = ConfigState{Path: "d.json", SHA256: "bb", AppliedAt: at(eventSeq), Rejections: 1}
				a := s.Pools[poolA]
				a.Spec.AllocatePolicy = "packed"
				s.Pools[poolA] = a
				delete(s.Pools, poolB)
				setDevice(s, dev3, func(d *Device) { d.Pool = "" })
			},
		},
		{
			name:  "ConfigApplied adding a pool",
			event: ConfigApplied{Path: "c.json", SHA256: "cc", Pools: []PoolSpec{{Resource: poolC}, {Resource: poolB, DeviceType: "netDevice"}, {Resource: poolA, DeviceType: "netDevice"}}},
			want: func(s *State) {
				s.Config.SHA256, s.Config.AppliedAt = "cc", at(eventSeq)
				s.Pools[poolC] = Pool{Spec: PoolSpec{Resource: poolC}}
			},
		},
		{
			name:  "ConfigApplied with no pools frees every device",
			event: ConfigApplied{Path: "e.json"},
			want: func(s *State) {
				s.Config = ConfigState{Path: "e.json", AppliedAt: at(eventSeq)}
				clear(s.Pools)
				for _, addr := range []string{dev1, dev2, dev3} {
					setDevice(s, addr, func(d *Device) { d.Pool = "" })
				}
			},
		},
		{
			name:  "ConfigRejected counts and keeps the config in force",
			event: ConfigRejected{Path: "c.json", Errors: []string{"resourceList[0]: bad"}},
			want: func(s *State) {
				s.Config.Rejections = 1
				s.Config.LastError = []string{"resourceList[0]: bad"}
			},
		},
		{
			name:  "DeviceDiscovered: a new device, present and healthy",
			event: DeviceDiscovered{Device: facts(dev4)},
			want: func(s *State) {
				s.Devices[dev4] = Device{Facts: facts(dev4), Present: true, Healthy: true, HealthSeq: eventSeq}
			},
		},
		{
			name:  "DeviceDiscovered again after removal",
			setup: []Payload{DeviceRemoved{Address: dev2}},
			event: DeviceDiscovered{Device: facts(dev2)},
			want: func(s *State) {
				setDevice(s, dev2, func(d *Device) { d.Present, d.Healthy, d.HealthReason, d.HealthSeq = true, true, "", eventSeq })
			},
		},
		{
			name:  "DeviceChanged keeps health and pool",
			setup: []Payload{DeviceHealthChanged{Address: dev2, Reason: "link down"}},
			event: DeviceChanged{Device: DeviceFacts{Address: dev2, Driver: "iavf"}, Changed: []string{"driver"}},
			want: func(s *State) {
				setDevice(s, dev2, func(d *Device) {
					d.Facts = DeviceFacts{Address: dev2, Driver: "iavf"}
					d.Healthy, d.HealthReason = false, "link down"
				})
			},
		},
		{
			name:  "DeviceChanged of a removed device is a rediscovery",
			setup: []Payload{DeviceRemoved{Address: dev2, Reason: "gone"}},
			event: DeviceChanged{Device: DeviceFacts{Address: dev2, Driver: "iavf"}},
			want: func(s *State) {
				setDevice(s, dev2, func(d *Device) {
					d.Facts = DeviceFacts{Address: dev2, Driver: "iavf"}
					d.Present, d.Healthy, d.HealthReason, d.HealthSeq = true, true, "", eventSeq
				})
			},
		},
		{
			name:  "DeviceChanged of an unknown device",
			event: DeviceChanged{Device: facts(dev4)},
			want: func(s *State) {
				s.Devices[dev4] = Device{Facts: facts(dev4), Present: true, Healthy: true, HealthSeq: eventSeq}
			},
		},
		{
			name:  "DeviceRemoved: absent, unhealthy, its allocation lost",
			event: DeviceRemoved{Address: dev1, Reason: "gone from sysfs"},
			want: func(s *State) {
				setDevice(s, dev1, func(d *Device) {
					d.Present, d.Healthy, d.HealthReason, d.HealthSeq = false, false, "removed: gone from sysfs", eventSeq
				})
				a := s.Allocations[allocSeq]
				a.Lost = true
				s.Allocations[allocSeq] = a
			},
		},
		{
			name:  "DeviceRemoved without a reason",
			event: DeviceRemoved{Address: dev3},
			want: func(s *State) {
				setDevice(s, dev3, func(d *Device) { d.Present, d.Healthy, d.HealthReason, d.HealthSeq = false, false, "removed", eventSeq })
			},
		},
		{
			name:  "DeviceRemoved of an unknown device",
			event: DeviceRemoved{Address: dev4},
			want: func(s *State) {
				s.Devices[dev4] = Device{Facts: DeviceFacts{Address: dev4}, HealthReason: "removed", HealthSeq: eventSeq}
			},
		},
		{
			name:  "DeviceHealthChanged to unhealthy",
			event: DeviceHealthChanged{Address: dev2, Healthy: false, Reason: "link down"},
			want: func(s *State) {
				setDevice(s, dev2, func(d *Device) { d.Healthy, d.HealthReason, d.HealthSeq = false, "link down", eventSeq })
			},
		},
		{
			name:  "DeviceHealthChanged back to healthy",
			setup: []Payload{DeviceHealthChanged{Address: dev2, Reason: "link down"}},
			event: DeviceHealthChanged{Address: dev2, Healthy: true, Reason: "link up"},
			want: func(s *State) {
				setDevice(s, dev2, func(d *Device) { d.Healthy, d.HealthReason, d.HealthSeq = true, "link up", eventSeq })
			},
		},
		{
			name:  "DeviceHealthChanged of an unknown device",
			event: DeviceHealthChanged{Address: dev4, Healthy: false, Reason: "no link"},
			want: func(s *State) {
				s.Devices[dev4] = Device{Facts: DeviceFacts{Address: dev4}, Present: true, HealthReason: "no link", HealthSeq: eventSeq}
			},
		},
		{
			name:  "PoolMembershipChanged adds in order and removes",
			setup: []Payload{DeviceDiscovered{Device: facts(dev4)}},
			event: PoolMembershipChanged{Pool: poolA, Added: []string{dev4, "0000:00:01.0"}, Removed: []string{dev1}, Reason: "driver changed"},
			want: func(s *State) {
				setMembers(s, poolA, "0000:00:01.0", dev2, dev4)
				setDevice(s, dev1, func(d *Device) { d.Pool = "" })
				setDevice(s, dev4, func(d *Device) { d.Pool = poolA })
				s.Devices["0000:00:01.0"] = Device{Facts: DeviceFacts{Address: "0000:00:01.0"}, Present: true, Healthy: true, Pool: poolA}
			},
		},
		{
			name:  "PoolMembershipChanged adding a member twice keeps one",
			event: PoolMembershipChanged{Pool: poolA, Added: []string{dev2, dev1, dev2}},
			want:  func(s *State) {},
		},
		{
			name:  "PoolMembershipChanged removing a stranger",
			event: PoolMembershipChanged{Pool: poolA, Removed: []string{dev3, dev4}},
			want:  func(s *State) {},
		},
		{
			name:  "PoolMembershipChanged of a new pool sorts its members",
			event: PoolMembershipChanged{Pool: poolC, Added: []string{dev3, dev2}},
			want: func(s *State) {
				s.Pools[poolC] = Pool{Spec: PoolSpec{Resource: poolC}, Members: []string{dev2, dev3}}
				setDevice(s, dev2, func(d *Device) { d.Pool = poolC })
				setDevice(s, dev3, func(d *Device) { d.Pool = poolC })
			},
		},
		{
			name:  "PoolMembershipChanged removing from a dropped pool does not bring it back",
			setup: []Payload{ConfigApplied{Pools: []PoolSpec{{Resource: poolA, DeviceType: "netDevice"}}}},
			event: PoolMembershipChanged{Pool: poolB, Removed: []string{dev3}, Reason: "config applied"},
			want:  func(s *State) {},
		},
		{
			name:  "PoolMembershipChanged emptying a pool keeps the pool",
			event: PoolMembershipChanged{Pool: poolB, Removed: []string{dev3}},
			want: func(s *State) {
				setMembers(s, poolB)
				setDevice(s, dev3, func(d *Device) { d.Pool = "" })
			},
		},
		{
			name:  "PluginServing: serving, not yet registered",
			event: PluginServing{Pool: poolA, Socket: "a2.sock", Mode: "legacy"},
			want: func(s *State) {
				setRegistration(s, poolA, func(r *Registration) { r.Socket, r.Mode, r.Registered = "a2.sock", "legacy", false })
			},
		},
		{
			// A pool a reload dropped serves until it has stopped.
			name:  "PluginServing of a pool the config does not name changes nothing",
			event: PluginServing{Pool: poolC, Socket: "c.sock", Mode: "watcher"},
			want:  func(s *State) {},
		},
		{
			// Its Register may be answered after the reload is recorded.
			name:  "PluginRegistered of a pool the config does not name changes nothing",
			event: PluginRegistered{Pool: poolC, Socket: "c.sock", Mode: "watcher"},
			want:  func(s *State) {},
		},
		{
			// The pool's last device left meanwhile (seeds 442243, 444696).
			name:  "PluginRegistered after the pool withdrew changes nothing",
			setup: []Payload{PluginWithdrawn{Pool: poolA, Socket: "a.sock", Reason: "no devices"}},
			event: PluginRegistered{Pool: poolA, Socket: "a.sock", Mode: "watcher"},
			want:  func(s *State) {},
		},
		{
			name:  "PluginRegistered of a socket the pool serves no more changes nothing",
			setup: []Payload{SocketLost{Pool: poolA, Socket: "a.sock"}, PluginServing{Pool: poolA, Socket: "a2.sock", Mode: "watcher"}},
			event: PluginRegistered{Pool: poolA, Socket: "a.sock", Mode: "watcher"},
			want:  func(s *State) {},
		},
		{
			name:  "PluginRegistered clears the last error",
			setup: []Payload{RegistrationFailed{Pool: poolA, Error: "refused", Attempt: 1}},
			event: PluginRegistered{Pool: poolA, Socket: "a.sock", Mode: "watcher"},
			want: func(s *State) {
				setRegistration(s, poolA, func(r *Registration) { r.Registered, r.RegisteredAt, r.LastError = true, at(eventSeq), "" })
			},
		},
		{
			name:  "RegistrationFailed",
			event: RegistrationFailed{Pool: poolB, Socket: "b.sock", Mode: "watcher", Error: "refused", Attempt: 1},
			want: func(s *State) {
				setRegistration(s, poolB, func(r *Registration) { r.Registered, r.Failures, r.LastError = false, 1, "refused" })
			},
		},
		{
			name:  "RegistrationFailed of an unknown pool changes nothing",
			event: RegistrationFailed{Pool: poolC, Error: "refused"},
			want:  func(s *State) {},
		},
		{
			name:  "KubeletRestarted voids every registration, servers keep serving",
			event: KubeletRestarted{Socket: "kubelet.sock"},
			want: func(s *State) {
				s.Kubelet = KubeletState{Restarts: 1, LastRestart: at(eventSeq)}
				setRegistration(s, poolA, func(r *Registration) { r.Registered = false })
				setRegistration(s, poolB, func(r *Registration) { r.Registered = false })
			},
		},
		{
			name:  "KubeletStopped: the kubelet is down, every registration void",
			event: KubeletStopped{Socket: "kubelet.sock", Reason: "streams ended"},
			want: func(s *State) {
				s.Kubelet = KubeletState{Down: true, DownSince: at(eventSeq)}
				setRegistration(s, poolA, func(r *Registration) { r.Registered = false })
				setRegistration(s, poolB, func(r *Registration) { r.Registered = false })
			},
		},
		{
			name:  "KubeletStopped while down keeps the first stop",
			setup: []Payload{KubeletStopped{Socket: "kubelet.sock"}},
			event: KubeletStopped{Socket: "kubelet.sock", Reason: "socket removed"},
			want:  func(s *State) { s.Kubelet = KubeletState{Down: true, DownSince: at(eventSeq - 1)} },
		},
		{
			name:  "KubeletRestarted after a stop ends an outage",
			setup: []Payload{KubeletStopped{Socket: "kubelet.sock"}},
			event: KubeletRestarted{Socket: "kubelet.sock", StoppedAt: at(eventSeq - 1)},
			want: func(s *State) {
				s.Kubelet = KubeletState{Restarts: 1, LastRestart: at(eventSeq), Outages: 1, Downtime: at(eventSeq).Sub(at(eventSeq - 1)),
					LastOutage: Span{From: at(eventSeq - 1), To: at(eventSeq)}}
			},
		},
		{
			name:  "KubeletRestarted after a second stop adds that outage to the downtime",
			setup: []Payload{KubeletStopped{Socket: "kubelet.sock"}, KubeletRestarted{Socket: "kubelet.sock"}, KubeletStopped{Socket: "kubelet.sock"}},
			event: KubeletRestarted{Socket: "kubelet.sock", StoppedAt: at(eventSeq - 1)},
			want: func(s *State) {
				s.Kubelet = KubeletState{Restarts: 2, LastRestart: at(eventSeq), Outages: 2, Downtime: 2 * time.Second,
					LastOutage: Span{From: at(eventSeq - 1), To: at(eventSeq)}}
			},
		},
		{
			name:  "SocketLost: that pool neither serves nor is registered",
			event: SocketLost{Pool: poolB, Socket: "b.sock"},
			want: func(s *State) {
				setRegistration(s, poolB, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "SocketLost of an unknown pool changes nothing",
			event: SocketLost{Pool: poolC, Socket: "c.sock"},
			want:  func(s *State) {},
		},
		{
			name:  "DevicesAllocated",
			event: DevicesAllocated{Pool: poolA, DeviceIDs: []string{dev2}, Response: ContainerAllocation{Envs: map[string]string{"K": "V"}}},
			want: func(s *State) {
				s.Allocations[eventSeq] = Allocation{Seq: eventSeq, Pool: poolA, DeviceIDs: []string{dev2}, At: at(eventSeq)}
				s.Holders[dev2] = []uint64{eventSeq}
			},
		},
		{
			name:  "DevicesAllocated of a held device: two holders",
			event: DevicesAllocated{Pool: poolA, DeviceIDs: []string{dev2, dev1}},
			want: func(s *State) {
				s.Allocations[eventSeq] = Allocation{Seq: eventSeq, Pool: poolA, DeviceIDs: []string{dev2, dev1}, At: at(eventSeq)}
				s.Holders[dev1] = []uint64{allocSeq, eventSeq}
				s.Holders[dev2] = []uint64{eventSeq}
			},
		},
		{
			name:  "DevicesAllocated that supersedes a holder releases it, and another pool's holder stays",
			setup: []Payload{DevicesAllocated{Pool: poolB, DeviceIDs: []string{dev2}}},
			event: DevicesAllocated{Pool: poolA, DeviceIDs: []string{dev2, dev1}, Supersedes: []uint64{allocSeq, 77}, HeldElsewhere: []uint64{eventSeq - 1}},
			want: func(s *State) {
				delete(s.Allocations, allocSeq)
				s.Allocations[eventSeq] = Allocation{Seq: eventSeq, Pool: poolA, DeviceIDs: []string{dev2, dev1}, At: at(eventSeq)}
				s.Holders[dev1] = []uint64{eventSeq}
				s.Holders[dev2] = []uint64{eventSeq - 1, eventSeq}
			},
		},
		{
			name:  "AllocationConflict leaves the fold as it is",
			event: AllocationConflict{Pool: poolA, Device: dev1, Claims: []Claim{{AllocationSeq: allocSeq}, {Namespace: "ns", Pod: "p"}}, Reason: "reported twice"},
			want:  func(s *State) {},
		},
		{
			name:  "AllocationBound",
			event: AllocationBound{AllocationSeq: allocSeq, Pool: poolA, DeviceIDs: []string{dev1}, Namespace: "ns", Pod: "p", UID: "u", Container: "c"},
			want: func(s *State) {
				a := s.Allocations[allocSeq]
				a.Binding = &Binding{Namespace: "ns", Pod: "p", UID: "u", Container: "c", At: at(eventSeq)}
				s.Allocations[allocSeq] = a
			},
		},
		{
			name:  "AllocationBound of an unknown allocation changes nothing",
			event: AllocationBound{AllocationSeq: 77, Pool: poolA, Namespace: "ns", Pod: "p"},
			want:  func(s *State) {},
		},
		{
			name:  "DevicesReleased frees the devices",
			event: DevicesReleased{AllocationSeq: allocSeq, Pool: poolA, DeviceIDs: []string{dev1}, HeldFor: time.Minute},
			want: func(s *State) {
				delete(s.Allocations, allocSeq)
				delete(s.Holders, dev1)
			},
		},
		{
			name:  "DevicesReleased of one of two holders",
			setup: []Payload{DevicesAllocated{Pool: poolA, DeviceIDs: []string{dev1}}},
			event: DevicesReleased{AllocationSeq: allocSeq, Pool: poolA, DeviceIDs: []string{dev1}},
			want: func(s *State) {
				delete(s.Allocations, allocSeq)
				s.Holders[dev1] = []uint64{eventSeq - 1}
			},
		},
		{
			name:  "DevicesReleased of a lost allocation",
			setup: []Payload{DeviceRemoved{Address: dev1}},
			event: DevicesReleased{AllocationSeq: allocSeq, Pool: poolA, DeviceIDs: []string{dev1}},
			want: func(s *State) {
				delete(s.Allocations, allocSeq)
				delete(s.Holders, dev1)
			},
		},
		{
			name:  "DevicesReleased of an unknown allocation changes nothing",
			event: DevicesReleased{AllocationSeq: 77, Pool: poolA, DeviceIDs: []string{dev1}},
			want:  func(s *State) {},
		},
		{
			name:  "AllocationLeakSuspected marks the allocation",
			event: AllocationLeakSuspected{AllocationSeq: allocSeq, Pool: poolA, DeviceIDs: []string{dev1}, Age: 6 * time.Minute},
			want: func(s *State) {
				a := s.Allocations[allocSeq]
				a.LeakSuspected = true
				s.Allocations[allocSeq] = a
			},
		},
		{
			name:  "AllocationLeakSuspected of an unknown allocation changes nothing",
			event: AllocationLeakSuspected{AllocationSeq: 77, Pool: poolA},
			want:  func(s *State) {},
		},
		{
			name:  "AttributionChanged says since when",
			event: AttributionChanged{Available: false, Reason: "socket absent"},
			want: func(s *State) {
				s.Attribution = AttributionState{Available: false, Reason: "socket absent", Since: at(eventSeq)}
			},
		},
		{
			name:  "SnapshotTaken leaves the fold as it is",
			event: SnapshotTaken{Seq: 50, Size: 100},
			want:  func(s *State) {},
		},
		{
			name:  "EventsDropped leaves the fold as it is",
			event: EventsDropped{FromSeq: 1, ToSeq: 5, Count: 5},
			want:  func(s *State) {},
		},
		{
			name:  "EventLost leaves the fold as it is",
			event: EventLost{Type: "DevicesReleased", Reason: "its record fails its checksum"},
			want:  func(s *State) {},
		},
		{
			name:  "PluginWithdrawn: not serving, not registered",
			event: PluginWithdrawn{Pool: poolA, Socket: "/k/a.sock", Reason: "no devices"},
			want: func(s *State) {
				setRegistration(s, poolA, func(r *Registration) { r.Serving, r.Registered = false, false })
			},
		},
		{
			name:  "AllocationRecovered is a live allocation, bound to its container",
			event: AllocationRecovered{Pool: poolA, DeviceIDs: []string{"0000:3b:02.2"}, Namespace: "ns", Pod: "p", Container: "c", Reason: "lost"},
			want: func(s *State) {
				s.Allocations[eventSeq] = Allocation{Seq: eventSeq, Pool: poolA, DeviceIDs: []string{"0000:3b:02.2"}, At: at(eventSeq), Recovered: true,
					Binding: &Binding{Namespace: "ns", Pod: "p", Container: "c", At: at(eventSeq)}}
				s.Holders["0000:3b:02.2"] = append(s.Holders["0000:3b:02.2"], eventSeq)
			},
		},
		{
			name:  "LedgerDamaged adds its problem once",
			setup: []Payload{LedgerDamaged{Problem: "p1"}, DamageAcknowledged{Problems: []string{"p1"}}, LedgerDamaged{Problem: "p2"}},
			event: LedgerDamaged{Problem: "p2", Seq: 9},
			want:  func(s *State) {},
		},
		{
			name:  "LedgerDamaged after an acknowledgement is new damage",
			setup: []Payload{LedgerDamaged{Problem: "p1"}, DamageAcknowledged{Problems: []string{"p1"}}},
			event: LedgerDamaged{Problem: "p2"},
			want:  func(s *State) { s.Ledger = LedgerState{Damage: []string{"p2"}, Acknowledged: []string{"p1"}} },
		},
		{
			name:  "DamageAcknowledged leaves damage it does not name (recorded after the operator looked)",
			setup: []Payload{LedgerDamaged{Problem: "p1"}, LedgerDamaged{Problem: "p2"}},
			event: DamageAcknowledged{Problems: []string{"p1"}},
			want:  func(s *State) { s.Ledger = LedgerState{Damage: []string{"p2"}, Acknowledged: []string{"p1"}} },
		},
		{
			name:  "DamageAcknowledged moves every damage to the acknowledged",
			setup: []Payload{LedgerDamaged{Problem: "p1"}, DamageAcknowledged{Problems: []string{"p1"}}, LedgerDamaged{Problem: "p2"}, LedgerDamaged{Problem: "p1"}},
			event: DamageAcknowledged{Problems: []string{"p2", "p1"}, Note: "salvaged"},
			want:  func(s *State) { s.Ledger = LedgerState{Acknowledged: []string{"p2", "p1"}} },
		},
	}
	covered := map[Type]bool{}
	for _, tc := range tests {
		covered[tc.event.EventType()] = true
		t.Run(tc.name, func(t *testing.T) {
			s := fold(NewState(), baseEvents()...)
			for i, p := range tc.setup {
				s = Apply(s, ev(eventSeq-uint64(len(tc.setup)-i), p))
			}
			want := s.Clone()
			want.Seq, want.Time = eventSeq, at(eventSeq)
			tc.want(&want)
			// Every event here is the run's (ev's boot): its last.
			if want.Daemon.BootID == "boot-1" {
				want.Daemon.LastSeq, want.Daemon.LastAt = eventSeq, at(eventSeq)
			}
			e := ev(eventSeq, tc.event)
			assertState(t, Apply(s, e), want)
		})
	}
	for _, typ := range Types() {
		if !covered[typ] {
			t.Errorf("no Apply case for %s", typ)
		}
	}
}

// A node that reboots with its clock behind (an RTC kept in local time
// west of UTC, a board with none) records the kubelet back before the
// stop its last boot recorded: that outage lasted no time the ledger can
// tell, and must not take from the sum of the others, which replay
// prints as the kubelet's downtime.
func TestAKubeletBackBeforeItsStopAddsNoDowntime(t *testing.T) {
	const sock = "kubelet.sock"
	back := ev(41, KubeletRestarted{Socket: sock, StoppedAt: at(40)})
	back.Time = at(40).Add(-5 * time.Hour)
	s := fold(NewState(), ev(1, KubeletStopped{Socket: sock}), ev(31, KubeletRestarted{Socket: sock, StoppedAt: at(1)}),
		ev(40, KubeletStopped{Socket: sock}), back)
	want := KubeletState{Restarts: 2, LastRestart: back.Time, Outages: 2, Downtime: 30 * time.Second,
		LastOutage: Span{From: at(40), To: back.Time}}
	if !reflect.DeepEqual(s.Kubelet, want) {
		t.Errorf("kubelet %+v, want %+v", s.Kubelet, want)
	}
}

func setDevice(s *State, addr string, change func(d *Device)) {
	d := s.Devices[addr]
	change(&d)
	s.Devices[addr] = d
}

func setRegistration(s *State, pool string, change func(r *Registration)) {
	p := s.Pools[pool]
	change(&p.Registration)
	s.Pools[pool] = p
}

func setMembers(s *State, pool string, members ...string) {
	p := s.Pools[pool]
	p.Members = members
	s.Pools[pool] = p
}

// Apply keeps no reference to the event: changing the payload's slices after
// the event was applied leaves the state as it is.
func TestApplyCopiesTheEvent(t *testing.T) {
	s := fold(NewState(), baseEvents()...)
	f := facts(dev4)
	ids := []string{dev2}
	errs := []string{"bad"}
	added := []string{dev4}
	s = fold(s,
		ev(20, DeviceDiscovered{Device: f}),
		ev(21, DevicesAllocated{Pool: poolA, DeviceIDs: ids}),
		ev(22, ConfigRejected{Errors: errs}),
		ev(23, PoolMembershipChanged{Pool: poolC, Added: added}),
	)
	before := s.Clone()
	f.Interfaces[0], ids[0], errs[0], added[0] = "x", "x", "x", "x"
	assertState(t, s, before)
}

// A live event built around a pointer folds like its replayed value.
func TestApplyPointerPayloads(t *testing.T) {
	values, pointers := NewState(), NewState()
	for i, e := range baseEvents() {
		values = Apply(values, e)
		ptr := reflect.New(reflect.TypeOf(e.Payload))
		ptr.Elem().Set(reflect.ValueOf(e.Payload))
		e.Payload = ptr.Interface().(Payload)
		pointers = Apply(pointers, e)
		if !pointers.Equal(values) {
			t.Fatalf("event %d (%s) as a pointer folds differently", i+1, e.Type)
		}
	}
	s := Apply(values.Clone(), Envelope{Seq: 13, Payload: (*DeviceRemoved)(nil)})
	want := values.Clone()
	want.Seq, want.Time = 13, time.Time{}
	assertState(t, s, want)
}

func TestApplyKeepsMembersSorted(t *testing.T) {
	s := NewState()
	addrs := []string{"0000:af:00.1", "0000:3b:00.0", "0000:00:1f.6", "0000:3b:02.7", "0000:3b:02.10", "0000:00:02.0"}
	for i, a := range addrs {
		s = Apply(s, ev(uint64(i+1), PoolMembershipChanged{Pool: poolA, Added: []string{a}}))
	}
	s = Apply(s, ev(10, PoolMembershipChanged{Pool: poolA, Removed: []string{"0000:3b:02.7"}, Added: []string{"0000:00:00.0"}}))
	got := s.Pools[poolA].Members
	if !slices.IsSorted(got) || len(got) != len(addrs) || slices.Contains(got, "0000:3b:02.7") {
		t.Errorf("members %q, want the sorted set", got)
	}
}

// The run's last event is its own: an event another writer put in the
// ledger while no daemon ran (an offline acknowledgement) does not move
// the bounds a crash is recorded with.
func TestTheRunsLastEventIsItsOwn(t *testing.T) {
	s := fold(NewState(), baseEvents()...)
	other := New(DamageAcknowledged{}, at(20), "ledger-acknowledge")
	other.Seq = 20
	s = Apply(s, other)
	if s.Daemon.LastSeq != 12 || !s.Daemon.LastAt.Equal(at(12)) || s.Seq != 20 {
		t.Errorf("after another writer's event: the run's last #%d at %s (the ledger's #%d), want #12", s.Daemon.LastSeq, s.Daemon.LastAt, s.Seq)
	}
}

// Two pools record a device's move each in its own time, so the ledger
// may hold one pool's join before or after the other's leave. Whatever
// the order, a device names the pool whose members list it, or none: here
// dev2 goes from A to B and back, in each of the six orders that keep
// each pool's own records in order, and a config then drops B while it
// lists dev2.
func TestAMoveFoldsTheSameInAnyOrderOfItsPools(t *testing.T) {
	a := []Payload{
		PoolMembershipChanged{Pool: poolA, Removed: []string{dev2}},
		PoolMembershipChanged{Pool: poolA, Added: []string{dev2}},
	}
	b := []Payload{
		PoolMembershipChanged{Pool: poolB, Added: []string{dev2}},
		PoolMembershipChanged{Pool: poolB, Removed: []string{dev2}},
	}
	// consistent says whether dev2's pool is the one pool listing it.
	consistent := func(s State) (string, bool) {
		var listing []string
		for name, p := range s.Pools {
			if slices.Contains(p.Members, dev2) {
				listing = append(listing, name)
			}
		}
		got := s.Devices[dev2].Pool
		return got, len(listing) == 0 && got == "" || len(listing) > 0 && slices.Contains(listing, got)
	}
	for _, order := range []string{"aabb", "abab", "abba", "baab", "baba", "bbaa"} {
		t.Run(order, func(t *testing.T) {
			s := fold(NewState(), baseEvents()...)
			seq := s.Seq
			next := map[byte][]Payload{'a': a, 'b': b}
			for i := range order {
				seq++
				s = Apply(s, ev(seq, next[order[i]][0]))
				next[order[i]] = next[order[i]][1:]
				if got, ok := consistent(s); !ok {
					t.Fatalf("after %s: %s names pool %q; A lists %v, B %v", order[:i+1], dev2, got, s.Pools[poolA].Members, s.Pools[poolB].Members)
				}
			}
			if got := s.Devices[dev2].Pool; got != poolA {
				t.Errorf("after the trip %s is in pool %q, want %s", dev2, got, poolA)
			}
		})
	}
	t.Run("a config drops the pool it joined", func(t *testing.T) {
		s := fold(NewState(), baseEvents()...)
		s = Apply(s, ev(s.Seq+1, PoolMembershipChanged{Pool: poolB, Added: []string{dev2}})) // before A's leave
		s = Apply(s, ev(s.Seq+1, ConfigApplied{Path: "c.json", SHA256: "bb", Pools: []PoolSpec{{Resource: poolA, DeviceType: "netDevice"}}}))
		if got, ok := consistent(s); !ok || got != poolA {
			t.Errorf("%s names pool %q once B is dropped; A lists %v", dev2, got, s.Pools[poolA].Members)
		}
	})
}
