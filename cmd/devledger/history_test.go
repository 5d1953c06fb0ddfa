package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
)

// TestHistoryGolden pins the history queries: a device's life, a pod's and
// a namespace's allocations as stories, and who held what at a past time.
func TestHistoryGolden(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name string
		args []string
	}{
		{"dump_device_story_unhealthy", []string{"dump", "--device", "0000:3b:02.2"}},
		{"dump_device_story_removed", []string{"dump", "--device", "0000:3b:02.4"}},
		{"dump_device_story_conflict_leak", []string{"dump", "--device", "0000:3b:02.0"}},
		{"dump_pod", []string{"dump", "--pod", "dpdk-testpmd-7d9f"}},
		{"dump_pod_conflict", []string{"dump", "--pod", "telco/cnf-router-0"}},
		{"dump_namespace", []string{"dump", "--namespace", "telco"}},
		{"dump_namespace_jsonl", []string{"dump", "--namespace", "ml", "--format", "jsonl"}},
		{"dump_namespace_since", []string{"dump", "--namespace", "telco", "--since", "2026-11-24T13:00:00Z"}},
		{"replay_until_time_afternoon", []string{"replay", "--until-time", "2026-11-24T14:00:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{tc.args[0], "--db", db}, tc.args[1:]...)
			code, out, errOut := runCLI(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkGolden(t, tc.name, out)
		})
	}
}

// TestHistoryPodSelection: --pod picks every event of the pod's
// allocations, bound after they were made, and nothing else; a conflict
// naming the pod's container counts too. (A pod the ledger never names is
// bad input: TestDumpBadInput.)
func TestHistoryPodSelection(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		args     []string
		wantSeqs []int
	}{
		{[]string{"--pod", "dpdk-testpmd-7d9f"}, []int{20, 21, 36}},
		{[]string{"--pod", "telco/dpdk-testpmd-7d9f"}, []int{20, 21, 36}},
		{[]string{"--pod", "dpdk-testpmd-7d9f", "--namespace", "telco"}, []int{20, 21, 36}},
		{[]string{"--pod", "cnf-router-0"}, []int{49, 50, 51, 55}},
		{[]string{"--namespace", "ml"}, []int{22, 23, 58}},
		{[]string{"--namespace", "telco", "--pool", "intel.com/sriov_net"}, []int{49, 50, 55}},
		{[]string{"--namespace", "telco", "--device", "0000:3b:02.1", "--until", "2026-11-24T13:00:00Z"}, []int{20, 21, 36}},
		{[]string{"--namespace", "telco", "--type", "AllocationBound"}, []int{21, 48, 50}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "jsonl"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got []int
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var seq int
				if line != "" {
					fmt.Sscanf(line, `{"seq":%d`, &seq)
					got = append(got, seq)
				}
			}
			if !slices.Equal(got, tc.wantSeqs) {
				t.Errorf("seqs %v, want %v", got, tc.wantSeqs)
			}
		})
	}
}

// TestHistoryPodSelectionMemory: the first pass keeps the pod's
// allocations only, however many the log holds.
func TestHistoryPodSelectionMemory(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	envs := syntheticStory(synthOptions{devices: 32, events: 3000, seed: 7})
	writeLedger(t, db, envs)
	pods := map[string]int{}
	for _, e := range envs {
		if b, ok := e.Payload.(events.AllocationBound); ok {
			pods[b.Pod]++
		}
	}
	const pod = "pod-7"
	if pods[pod] == 0 || len(pods) < 20 {
		t.Fatalf("the synthetic story binds %d allocations to %s, %d pods in all", pods[pod], pod, len(pods))
	}
	l, err := store.Open(db, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sel, err := newPodSelection(pod, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := sel.collect(&priorStates{src: fileSource{l}}); err != nil {
		t.Fatal(err)
	}
	if len(sel.seqs) != pods[pod] {
		t.Errorf("the first pass kept %d allocations, want the pod's %d", len(sel.seqs), pods[pod])
	}
	if sel.lastSeq != uint64(len(envs)) {
		t.Errorf("the first pass ended at #%d, want #%d", sel.lastSeq, len(envs))
	}
}

func TestHistoryBadFlags(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"pod with two slashes", []string{"--pod", "a/b/c"}, "NAMESPACE/NAME"},
		{"pod with empty namespace", []string{"--pod", "/b"}, "NAMESPACE/NAME"},
		{"pod and namespace disagree", []string{"--pod", "telco/x", "--namespace", "ml"}, "different namespaces"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db}, tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("printed %q", out)
			}
			if !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("stderr %q does not mention %q", errOut, tc.wantErr)
			}
		})
	}
}

func TestHumanDuration(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{400 * time.Millisecond, "0s"},
		{45 * time.Second, "45s"},
		{12*time.Minute + 5*time.Second, "12m5s"},
		{12 * time.Minute, "12m"},
		{3*time.Hour + 12*time.Minute + 59*time.Second, "3h12m"},
		{3 * time.Hour, "3h"},
		{51 * time.Hour, "2d3h"},
		{48*time.Hour + 59*time.Minute, "2d"},
	}
	for _, tc := range cases {
		if got := humanDuration(tc.d); got != tc.want {
			t.Errorf("humanDuration(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// synthOptions shapes a synthetic story.
type synthOptions struct {
	// devices is the number of PCI functions; three in four join the vfio
	// pool, the rest the GPU pool.
	devices int
	// events is how many events the story has (a few more: an allocation's
	// events are never split).
	events int
	seed   uint64
}

// syntheticStory is a long, busy life of a node, the same for the same
// options: pods come and go on random devices (a few allocations never
// bound), health flaps, the kubelet restarts, the daemon restarts.
func syntheticStory(o synthOptions) []events.Envelope {
	rng := rand.New(rand.NewPCG(o.seed, 1))
	t := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	boot := "synth-boot-1"
	var out []events.Envelope
	emit := func(at time.Time, p events.Payload) {
		e := events.New(p, at, boot)
		e.Seq = uint64(len(out) + 1)
		out = append(out, e)
	}
	const vfio, gpu = "intel.com/sriov_vfio", "nvidia.com/gpu"
	addr := func(i int) string { return fmt.Sprintf("0000:%02x:%02x.%d", 0x3b+i/256, (i%256)/8, i%8) }
	poolOf := func(i int) string {
		if i%4 == 3 {
			return gpu
		}
		return vfio
	}
	emit(t, events.DaemonStarted{Version: "v0.2.0", Node: "synth-node", PID: 100})
	emit(t, events.ConfigApplied{Path: "/etc/devledger/config.json", SHA256: "00",
		Pools: []events.PoolSpec{{Resource: vfio, DeviceType: "netDevice"}, {Resource: gpu, DeviceType: "genericPCI"}}})
	members := map[string][]string{}
	for i := range o.devices {
		emit(t, events.DeviceDiscovered{Device: events.DeviceFacts{Address: addr(i), Vendor: "8086", Device: "1889",
			Class: "020000", Driver: "vfio-pci", NUMANode: i % 2, VFIndex: i % 8}})
		members[poolOf(i)] = append(members[poolOf(i)], addr(i))
	}
	for _, pool := range []string{vfio, gpu} {
		for chunk := range slices.Chunk(members[pool], 64) {
			emit(t, events.PoolMembershipChanged{Pool: pool, Added: chunk, Reason: "config applied"})
		}
	}

	// pending are events due later (releases, recoveries), by time.
	type pendingEvent struct {
		at time.Time
		p  events.Payload
	}
	var pending []pendingEvent
	later := func(at time.Time, p events.Payload) {
		i, _ := slices.BinarySearchFunc(pending, at, func(e pendingEvent, at time.Time) int { return e.at.Compare(at) })
		pending = slices.Insert(pending, i, pendingEvent{at, p})
	}
	// held and unhealthy are keyed by address.
	held := map[string]bool{}
	unhealthy := map[string]bool{}
	for step := 0; len(out) < o.events; step++ {
		t = t.Add(time.Duration(10+rng.IntN(300)) * time.Second)
		for len(pending) > 0 && !pending[0].at.After(t) {
			e := pending[0]
			pending = pending[1:]
			switch p := e.p.(type) {
			case events.DevicesReleased:
				delete(held, p.DeviceIDs[0])
			case events.DeviceHealthChanged:
				delete(unhealthy, p.Address)
			}
			emit(e.at, e.p)
		}
		switch r := rng.IntN(100); {
		case r < 2:
			a := addr(rng.IntN(o.devices))
			if unhealthy[a] {
				break
			}
			unhealthy[a] = true
			emit(t, events.DeviceHealthChanged{Address: a, Healthy: false, Reason: "link down"})
			later(t.Add(time.Duration(1+rng.IntN(90))*time.Minute), events.DeviceHealthChanged{Address: a, Healthy: true, Reason: "link up"})
		case r < 3 && step%7 == 0:
			emit(t, events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"})
		case r < 4 && step%11 == 0:
			emit(t, events.DaemonStopped{Reason: "SIGTERM", Clean: true})
			boot = fmt.Sprintf("synth-boot-%d", step)
			emit(t.Add(time.Minute), events.DaemonStarted{Version: "v0.2.0", Node: "synth-node", PID: 100 + step})
			t = t.Add(time.Minute)
		default:
			i := rng.IntN(o.devices)
			a := addr(i)
			if held[a] || unhealthy[a] {
				break
			}
			held[a] = true
			pool := poolOf(i)
			emit(t, events.DevicesAllocated{Pool: pool, DeviceIDs: []string{a}})
			seq := uint64(len(out))
			holdFor := time.Duration(5+rng.IntN(360)) * time.Minute
			reason := "no pod claimed it"
			if rng.IntN(100) > 0 {
				pod := fmt.Sprintf("pod-%d", rng.IntN(60))
				emit(t.Add(2*time.Second), events.AllocationBound{AllocationSeq: seq, Pool: pool, DeviceIDs: []string{a},
					Namespace: "ns-" + string(rune('a'+rng.IntN(4))), Pod: pod, Container: "main"})
				reason = "pod " + pod + " deleted"
			}
			later(t.Add(holdFor), events.DevicesReleased{AllocationSeq: seq, Pool: pool, DeviceIDs: []string{a}, HeldFor: holdFor, Reason: reason})
		}
	}
	return out
}

// writeLedger writes envs into a new ledger at path.
func writeLedger(t testing.TB, path string, envs []events.Envelope) {
	t.Helper()
	l, err := store.Open(path, store.Options{Node: "synth-node"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for chunk := range slices.Chunk(envs, 256) {
		chunk = slices.Clone(chunk)
		for i := range chunk {
			chunk[i].Seq = 0 // the store numbers them
		}
		if _, err := l.Append(context.Background(), chunk...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPodStoryFollowsItsDevices: a pod's story tells what befell its
// devices while it held them (health, a driver change, a move between
// pools, a config that moved one, the unplug), and nothing of the same
// devices before or after, or of devices it did not hold.
func TestPodStoryFollowsItsDevices(t *testing.T) {
	const vfio, net = "intel.com/sriov_vfio", "intel.com/sriov_net"
	const held, other = "0000:3b:02.1", "0000:3b:02.2"
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	l := &timeline{t0: t0}
	add := l.add
	vf := func(addr, driver string) events.DeviceFacts {
		return events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1889", Class: "020000", Driver: driver, PF: "0000:3b:00.0", VFIndex: 1}
	}
	add(events.DaemonStarted{Version: "v0.3.0", PID: 1})
	add(events.DeviceDiscovered{Device: vf(held, "vfio-pci")})
	add(events.DeviceDiscovered{Device: vf(other, "vfio-pci")})
	add(events.PoolMembershipChanged{Pool: vfio, Added: []string{held, other}, Reason: "daemon start"})
	add(events.DeviceHealthChanged{Address: held, Reason: "before the pod"}) // not the pod's
	add(events.DeviceHealthChanged{Address: held, Healthy: true, Reason: "probes passed"})
	a := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{held}})
	b := add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{held}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	want := []uint64{a, b}
	want = append(want, add(events.DeviceHealthChanged{Address: held, Reason: "driver unbound"}))
	add(events.DeviceHealthChanged{Address: other, Reason: "driver unbound"}) // not held
	want = append(want, add(events.DeviceChanged{Device: vf(held, "iavf"), Changed: []string{"driver"}}))
	want = append(want, add(events.ConfigApplied{Path: "c.json", SHA256: "ab", Changes: []events.PoolChange{
		{Pool: net, Change: "added", Joined: []string{held}}, {Pool: vfio, Change: "changed", Left: []string{held}}}}))
	want = append(want, add(events.PoolMembershipChanged{Pool: vfio, Removed: []string{held}, Reason: "reload: SIGHUP"}))
	want = append(want, add(events.PoolMembershipChanged{Pool: net, Added: []string{held}, Reason: "reload: SIGHUP"}))
	want = append(want, add(events.DeviceRemoved{Address: held, Reason: "gone from sysfs"}))
	want = append(want, add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{held}, HeldFor: time.Hour, Reason: "pod deleted"}))
	add(events.DeviceDiscovered{Device: vf(held, "iavf")}) // after the pod
	add(events.DeviceHealthChanged{Address: held, Reason: "after the pod"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	code, out, errOut := runCLI(t, "dump", "--db", db, "--pod", "telco/cnf-0", "--format", "jsonl")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := jsonlSeqs(t, out); !slices.Equal(got, want) {
		t.Errorf("the pod's story has events %v, want %v", got, want)
	}
	code, out, errOut = runCLI(t, "dump", "--db", db, "--pod", "telco/cnf-0")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "dump_pod_devices", out)
}

// An allocation the reconciler binds again (another pod's container holds
// it now) is each pod's for its own stretch: a pod's story and --stats
// --by pod give it what befell the device while that pod held it, not what
// came while the other did.
func TestAnAllocationBoundAgainIsEachPodsInItsTurn(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev)
	add := l.add
	a := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	toA := add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-a", Container: "main"})
	sickA := add(events.DeviceHealthChanged{Address: dev, Reason: "while pod-a held it"})
	wellA := add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "probes passed"})
	toB := add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-b", Container: "main"})
	sickB := add(events.DeviceHealthChanged{Address: dev, Reason: "while pod-b held it"})
	released := add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: time.Hour, Reason: "telco/pod-b/main no longer holds it"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	for pod, want := range map[string][]uint64{
		"telco/pod-a": {a, toA, sickA, wellA, toB, released},
		"telco/pod-b": {a, toA, toB, sickB, released},
	} {
		code, out, errOut := runCLI(t, "dump", "--db", db, "--pod", pod, "--format", "jsonl")
		if code != exitOK {
			t.Fatalf("--pod %s: exit %d: %s", pod, code, errOut)
		}
		if got := jsonlSeqs(t, out); !slices.Equal(got, want) {
			t.Errorf("--pod %s: events %v, want %v", pod, got, want)
		}
	}

	code, out, errOut := runCLI(t, "dump", "--db", db, "--stats", "--by", "pod", "--format", "json")
	if code != exitOK {
		t.Fatalf("--stats: exit %d: %s", code, errOut)
	}
	var doc statsDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]statsDocRow{}
	for _, r := range doc.Rows {
		got[r.Group] = r
	}
	// pod-a: the allocation, its binding and its health change; pod-b:
	// its binding, its health change and the release.
	if a, b := got["telco/pod-a"], got["telco/pod-b"]; a.Allocations != 1 || a.Unhealthy != 1 || a.Releases != 0 ||
		b.Allocations != 0 || b.Unhealthy != 1 || b.Releases != 1 {
		t.Errorf("--stats --by pod: pod-a %+v, pod-b %+v", a, b)
	}
}

// TestPodStoryTellsHowItsAllocationsEnded: a pod's story keeps the events
// that end or doubt its allocations although they are not its own: a leak
// suspected before the pod claimed the allocation, the allocation that
// superseded it, and a config that only took one of its devices out of a
// pool.
func TestPodStoryTellsHowItsAllocationsEnded(t *testing.T) {
	const vfio, gpu = "intel.com/sriov_vfio", "nvidia.com/gpu"
	const vf, card = "0000:3b:02.1", "0000:af:00.0"
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	l := &timeline{t0: t0}
	add := l.add
	add(events.DaemonStarted{Version: "v0.3.0", PID: 1})
	add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: vf, Vendor: "8086", Device: "1889", Driver: "vfio-pci"}})
	add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: card, Vendor: "10de", Device: "2330", Driver: "vfio-pci"}})
	add(events.PoolMembershipChanged{Pool: vfio, Added: []string{vf}, Reason: "daemon start"})
	add(events.PoolMembershipChanged{Pool: gpu, Added: []string{card}, Reason: "daemon start"})
	a := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{vf}})
	leak := add(events.AllocationLeakSuspected{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{vf}, Age: 5 * time.Minute, Reason: "no container has claimed it for 5m0s"})
	toA := add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{vf}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	b := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{vf}, Supersedes: []uint64{a}})
	add(events.AllocationBound{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{vf}, Namespace: "telco", Pod: "cnf-1", Container: "main"})
	c := add(events.DevicesAllocated{Pool: gpu, DeviceIDs: []string{card}})
	toC := add(events.AllocationBound{AllocationSeq: c, Pool: gpu, DeviceIDs: []string{card}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	config := add(events.ConfigApplied{Path: "c.json", SHA256: "ab", Changes: []events.PoolChange{{Pool: gpu, Change: "removed", Left: []string{card}}}})
	left := add(events.PoolMembershipChanged{Pool: gpu, Removed: []string{card}, Reason: "reload: SIGHUP"})
	released := add(events.DevicesReleased{AllocationSeq: c, Pool: gpu, DeviceIDs: []string{card}, HeldFor: time.Hour, Reason: "pod deleted"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	code, out, errOut := runCLI(t, "dump", "--db", db, "--pod", "telco/cnf-0", "--format", "jsonl")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got, want := jsonlSeqs(t, out), []uint64{a, leak, toA, b, c, toC, config, left, released}; !slices.Equal(got, want) {
		t.Errorf("the pod's story has events %v, want %v", got, want)
	}
	// The plain table names what the config moved.
	code, out, errOut = runCLI(t, "dump", "--db", db, "--type", "ConfigApplied")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "removed " + gpu + ": -" + card; !strings.Contains(out, want) {
		t.Errorf("dump --type ConfigApplied does not say %q:\n%s", want, out)
	}
}

// TestDeviceStoryNamesItsHolders: a device's story names what holds it
// when its health changes (an allocation no pod claims by its sequence,
// and not one a later allocation superseded), every claim of a conflict,
// and the plain table gives a release's time held to the second.
func TestDeviceStoryNamesItsHolders(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev)
	add := l.add
	a := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	add(events.DeviceHealthChanged{Address: dev, Reason: "link down"})
	add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "link up"})
	add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	b := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}, Supersedes: []uint64{a}})
	add(events.AllocationBound{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-1", Container: "main"})
	add(events.DeviceHealthChanged{Address: dev, Reason: "driver unbound"})
	add(events.AllocationConflict{Pool: vfio, Device: dev, Claims: []events.Claim{
		{AllocationSeq: b, Namespace: "telco", Pod: "cnf-1", Container: "main"}, {Namespace: "ml", Pod: "train-0", Container: "worker"}},
		Reason: "the kubelet reports the device in 2 containers"})
	add(events.DevicesReleased{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 90 * time.Second, Reason: "pod deleted"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	code, out, errOut := runCLI(t, "dump", "--db", db, "--device", dev)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		fmt.Sprintf("unhealthy: link down; held by #%d (unbound)\n", a),
		"unhealthy: driver unbound; held by telco/cnf-1/main\n",
		fmt.Sprintf("conflict between #%d telco/cnf-1/main and ml/train-0/worker: ", b),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the story does not say %q:\n%s", want, out)
		}
	}
	code, out, errOut = runCLI(t, "dump", "--db", db, "--type", "DevicesReleased")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "after 1m30s\n"; !strings.Contains(out, want) {
		t.Errorf("dump --type DevicesReleased does not say %q:\n%s", want, out)
	}
}

// TestDeviceStoryTellsTheAllocationThatEndedItsHold: the kubelet hands a
// finished init container's devices on to the pod's app container, and
// an app container that asks for fewer gets an Allocate of only some of
// them; that allocation supersedes the init container's whole, so the
// devices it does not name are free from then on. Their story must say
// so, not end on the init container's allocation as if it still held
// them, as the state (replay) does not.
func TestDeviceStoryTellsTheAllocationThatEndedItsHold(t *testing.T) {
	const vfio, reused, left = "intel.com/sriov_vfio", "0000:3b:02.1", "0000:3b:02.2"
	l := pooledVF(vfio, reused)
	add := l.add
	add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: left, Vendor: "8086", Device: "1889", Driver: "vfio-pci", PF: "0000:3b:00.0", VFIndex: 1}})
	add(events.PoolMembershipChanged{Pool: vfio, Added: []string{left}, Reason: "daemon start"})
	initAlloc := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{reused, left}})
	app := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{reused}, Supersedes: []uint64{initAlloc}})
	add(events.AllocationBound{AllocationSeq: app, Pool: vfio, DeviceIDs: []string{reused}, Namespace: "ml", Pod: "train-0", Container: "app"})
	sick := add(events.DeviceHealthChanged{Address: left, Reason: "link down"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	// Its PF's story too: the reused device has no PF.
	for _, which := range [][]string{{"--device", left}, {"--pf", "0000:3b:00.0"}} {
		code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "jsonl"}, which...)...)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", which, code, errOut)
		}
		if got, want := jsonlSeqs(t, out), []uint64{4, 5, initAlloc, app, sick}; !slices.Equal(got, want) {
			t.Errorf("%s: the story has events %v, want %v", which, got, want)
		}
	}
	code, out, errOut := runCLI(t, "dump", "--db", db, "--device", left)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := fmt.Sprintf("released (superseded by allocation #%d, of %s)\n", app, reused); !strings.Contains(out, want) {
		t.Errorf("the story does not say %q:\n%s", want, out)
	}
}

// TestPodSelectionForgetsASupersededAllocation: the first pass keeps the
// allocations bound to other pods while they are live; one that an app
// container's allocation supersedes (an init container's, handed on) ends
// there and is not kept, as one released is not.
func TestPodSelectionForgetsASupersededAllocation(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev)
	for i := range 50 {
		pod := fmt.Sprintf("job-%d", i)
		init := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
		l.add(events.AllocationBound{AllocationSeq: init, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "batch", Pod: pod, Container: "init"})
		app := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}, Supersedes: []uint64{init}})
		l.add(events.AllocationBound{AllocationSeq: app, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "batch", Pod: pod, Container: "app"})
		l.add(events.DevicesReleased{AllocationSeq: app, Pool: vfio, DeviceIDs: []string{dev}, Reason: "pod gone"})
	}
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)
	lg, err := store.Open(db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	sel, err := newPodSelection("batch/job-0", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := sel.collect(&priorStates{src: fileSource{lg}}); err != nil {
		t.Fatal(err)
	}
	if n := len(sel.elsewhere); n != 0 {
		t.Errorf("the first pass kept %d allocations of other pods, all ended", n)
	}
}

// timeline is a ledger's events, one boot's, a minute apart from t0.
type timeline struct {
	t0   time.Time
	envs []events.Envelope
}

// pooledVF is a timeline that starts with a daemon start, the discovery of
// the vfio-pci VF dev and its joining pool, at 2026-11-30 09:00 UTC.
func pooledVF(pool, dev string) *timeline {
	l := &timeline{t0: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	l.add(events.DaemonStarted{Version: "v0.3.0", PID: 1})
	l.add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: dev, Vendor: "8086", Device: "1889", Driver: "vfio-pci"}})
	l.add(events.PoolMembershipChanged{Pool: pool, Added: []string{dev}, Reason: "daemon start"})
	return l
}

// add appends p and returns its sequence.
func (l *timeline) add(p events.Payload) uint64 {
	l.envs = append(l.envs, events.New(p, l.t0.Add(time.Duration(len(l.envs))*time.Minute), "boot-1"))
	return uint64(len(l.envs))
}

// TestDeviceStoryNamesTheHolderWhereItBegins: a device's story whose
// events begin after the allocation that holds it (at --since, or at the
// events retention kept) says what held it there, also when no event of
// the device falls in the window, rather than reading as if nothing did.
func TestDeviceStoryNamesTheHolderWhereItBegins(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev) // #1-#3 from 09:00, a minute apart
	a := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	l.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}) // #6, 09:05
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "link down"})                   // #7, 09:06
	l.add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 4 * time.Minute})
	full := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, full, l.envs)
	cut := retainedCopy(t, l.envs, 6)

	const held = "(held by telco/cnf-0/main before #6)\n"
	cases := []struct {
		name string
		args []string
		want string // "" for no line saying what held it
	}{
		{"whole ledger", []string{"--db", full}, ""},
		{"since after the allocation", []string{"--db", full, "--since", "2026-11-30T09:05:00Z"}, held},
		{"window without an event of it", []string{"--db", full, "--since", "2026-11-30T09:05:00Z", "--until", "2026-11-30T09:05:30Z"}, held + "(no events)\n"},
		{"since after the release", []string{"--db", full, "--since", "2026-11-30T09:08:00Z"}, ""},
		{"window between its events", []string{"--db", full, "--since", "2026-11-30T09:06:30Z", "--until", "2026-11-30T09:06:40Z"},
			"(held by telco/cnf-0/main before #8)\n(unhealthy since #7 at 2026-11-30T09:06:00Z: link down; before #8)\n(no events)\n"},
		{"retention dropped the allocation", []string{"--db", cut}, held},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--device", dev}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if tc.want == "" {
				if strings.Contains(out, "(held by") {
					t.Errorf("the story names a holder where nothing held the device:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, "WHAT HAPPENED\n"+tc.want) {
				t.Errorf("the story does not begin with %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestPodSelectionKeepsNoNameOfEveryPod: what the first pass keeps of the
// pods it does not select (the allocations bound to them, the names for
// the error that lists some) stays bounded when every allocation of the
// log goes to a pod of its own, as batch jobs do; a pod the ledger never
// names is still an error that lists some names.
func TestPodSelectionKeepsNoNameOfEveryPod(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(db, store.Options{Node: "synth-node"})
	if err != nil {
		t.Fatal(err)
	}
	var devices []string
	for i := range 64 {
		devices = append(devices, fmt.Sprintf("0000:3b:%02x.%d", 2+i/8, i%8))
	}
	pools := map[string][]string{"intel.com/pool": devices}
	answer := func(string, []string) events.ContainerAllocation { return events.ContainerAllocation{} }
	h := storetest.NewPodHistory(3, pools, answer, "synth-boot", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if _, err := storetest.Grow(context.Background(), l, events.NewState(), h, 20_000, storetest.GrowOptions{}); err != nil {
		t.Fatal(err)
	}
	names, last := map[string]bool{}, ""
	if err := l.Read(0, func(e events.Envelope) error {
		if b, ok := e.Payload.(events.AllocationBound); ok {
			last = b.Namespace + "/" + b.Pod
			names[last] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pods := len(names)
	first := slices.Sorted(maps.Keys(names))[:someNamesShown]
	if pods < 4*maxSampledNames {
		t.Fatalf("the history binds %d pods, want many more than %d", pods, maxSampledNames)
	}
	for _, tc := range []struct{ name, pod, namespace, wantErr string }{
		{name: "the last pod", pod: last},
		{name: "an unknown pod", pod: "batch/nope", wantErr: fmt.Sprintf("the ledger's pods: %s and over %d more", strings.Join(first, ", "), maxSampledNames-someNamesShown)},
		{name: "an unknown namespace", namespace: "nope", wantErr: "the ledger's namespaces: batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := newPodSelection(tc.pod, tc.namespace)
			if err != nil {
				t.Fatal(err)
			}
			if err := sel.collect(&priorStates{src: fileSource{l}}); err != nil {
				t.Fatal(err)
			}
			if kept := len(sel.elsewhere) + len(sel.pods.names) + len(sel.namespaces.names); kept > 200+maxSampledNames {
				t.Errorf("the first pass kept %d allocations and names of others, of %d pods", kept, pods)
			}
			err = sel.unknown()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("unknown() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestReplayInsideADowntimeSaysTheRunHadStopped: a run crashes after its
// last event (at 09:04), its pid file last marked 09:06, and the next
// start records the crash at 10:00. replay --until-time at 09:30 folds
// a state that has the run running; it says the run was not, from the
// crash the next start recorded, read from the file and through a
// daemon's stream alike. Before its last-alive mark, or with no crash
// recorded after, the run reads as running. A tool's record between the
// two is read past.
func TestReplayInsideADowntimeSaysTheRunHadStopped(t *testing.T) {
	const pool, sock = "intel.com/sriov_vfio", "/var/lib/kubelet/device-plugins/intel.com_sriov_vfio.sock"
	l := pooledVF(pool, "0000:3b:02.1")
	l.add(events.PluginServing{Pool: pool, Socket: sock, Mode: "legacy"})
	l.add(events.PluginRegistered{Pool: pool, Socket: sock, Mode: "legacy"})
	l.add(events.DeviceHealthChanged{Address: "0000:3b:02.1", Healthy: false, Reason: "link down on ens1f0 (PF)"})
	last := l.add(events.DeviceHealthChanged{Address: "0000:3b:02.1", Healthy: true})
	t0 := l.t0
	crashed := events.New(events.DaemonCrashed{LastSeq: last, LastAlive: t0.Add(8 * time.Minute)}, t0.Add(time.Hour), "boot-1")
	restarted := events.New(events.DaemonStarted{Version: "v0.3.0", PID: 2}, t0.Add(time.Hour), "boot-1")
	envs := append(slices.Clone(l.envs), crashed, restarted)
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)
	const down = "NOT running: it started 2026-11-30T09:00:00Z and crashed or was killed, last alive 2026-11-30T09:08:00Z (as the next start recorded, #8)"

	for _, tc := range []struct {
		at         string
		want       string
		registered bool
	}{
		{"2026-11-30T09:30:00Z", down, false},
		{"2026-11-30T09:07:00Z", "running since 2026-11-30T09:00:00Z", true},  // before its last mark
		{"2026-11-30T10:30:00Z", "running since 2026-11-30T10:00:00Z", false}, // the next run, not registered yet
	} {
		code, stdout, stderr := runCLI(t, "replay", "--db", db, "--until-time", tc.at)
		if code != exitOK || !strings.Contains(stdout, tc.want) {
			t.Errorf("replay --until-time %s: exit %d, want %q in:\n%s%s", tc.at, code, tc.want, stdout, stderr)
		}
		at, err := time.Parse(time.RFC3339, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		var folded []events.Envelope
		for i, e := range envs {
			e.Seq = uint64(i + 1)
			folded = append(folded, e)
		}
		s, next, err := foldSourceAhead(sliceSource(folded), 0, at, crashLookahead)
		if err != nil {
			t.Fatal(err)
		}
		crash, seq := crashBefore(next, s, at)
		if (crash != nil) != (tc.want == down) || crash != nil && seq != 8 {
			t.Errorf("through a stream at %s: crash %+v at #%d", tc.at, crash, seq)
		}
		// The pool was served and registered only while a run was.
		if served := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(pool) + `\b.*registered \(legacy\)`).MatchString(stdout); served != tc.registered {
			t.Errorf("replay --until-time %s: pool registered %v, the run %q:\n%s", tc.at, served, tc.want, stdout)
		}
		// JSON says what the table says.
		code, stdout, stderr = runCLI(t, "replay", "--db", db, "--until-time", tc.at, "--format", "json")
		var st events.State
		if err := json.Unmarshal([]byte(stdout), &st); code != exitOK || err != nil {
			t.Fatalf("replay --until-time %s --format json: exit %d, %v: %s", tc.at, code, err, stderr)
		}
		if reg := st.Pools[pool].Registration; st.Daemon.Running != (tc.want != down) || reg.Registered != tc.registered ||
			tc.want == down && (st.Daemon.Crashes != 1 || st.Seq != last || !st.Daemon.StoppedAt.Equal(t0.Add(8*time.Minute))) {
			t.Errorf("replay --until-time %s --format json: running %v, registered %v, %d crashed, stopped at %v, at #%d; the run %q",
				tc.at, st.Daemon.Running, reg.Registered, st.Daemon.Crashes, st.Daemon.StoppedAt, st.Seq, tc.want)
		}
	}

	// replay --diff says the same of its ends, from the file and through
	// a daemon's stream.
	diffAt := func(t *testing.T, where ...string) {
		t.Helper()
		checkDiffRuns(t, pool, where, []diffRuns{
			{"2026-11-30T09:07:00Z..2026-11-30T09:30:00Z", true, false, 1, &change{From: "registered (legacy)", To: ""}},
			{"2026-11-30T09:30:00Z..2026-11-30T10:30:00Z", false, true, 0, nil},
			{"#5..2026-11-30T09:30:00Z", true, false, 1, &change{From: "registered (legacy)", To: ""}},
		})
	}
	diffAt(t, "--db", db)
	dir := kubelettest.ShortTempDir(t)
	live := filepath.Join(dir, ledgerFileName)
	writeLedger(t, live, envs)
	serveLedger(t, dir, live)
	diffAt(t, "--state-dir", dir)

	// No crash recorded after the point (the run went on, or the ledger
	// ends there): running.
	alive := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, alive, l.envs)
	if _, stdout, _ := runCLI(t, "replay", "--db", alive, "--until-time", "2026-11-30T09:30:00Z"); strings.Contains(stdout, "NOT running: it started 2026-11-30T09:00:00Z and crashed") {
		t.Errorf("a ledger with no crash recorded reads:\n%s", stdout)
	}

	// A tool's record (an acknowledgement at 09:45) between the run's
	// last event and the crash the next start recorded is read past, from
	// the file and through a daemon.
	ack := events.New(events.DamageAcknowledged{Problems: []string{"checksum mismatch at #3"}}, t0.Add(45*time.Minute), "tool")
	acked := append(slices.Clone(l.envs), ack, crashed, restarted)
	ackedDB := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, ackedDB, acked)
	ackedDir := kubelettest.ShortTempDir(t)
	writeLedger(t, filepath.Join(ackedDir, ledgerFileName), acked)
	serveLedger(t, ackedDir, filepath.Join(ackedDir, ledgerFileName))
	downPastAck := strings.Replace(down, "#8)", "#9)", 1)
	for _, where := range [][]string{{"--db", ackedDB}, {"--state-dir", ackedDir}} {
		code, stdout, stderr := runCLI(t, append([]string{"replay", "--until-time", "2026-11-30T09:30:00Z"}, where...)...)
		if code != exitOK || !strings.Contains(stdout, downPastAck) {
			t.Errorf("replay --until-time past an acknowledgement %v: exit %d, want %q in:\n%s%s", where, code, downPastAck, stdout, stderr)
		}
	}
}

// An offline ledger acknowledge, between a run's last event and the
// start that records its crash, is a point no daemon ran at: replay
// --until-seq there, and replay --diff to it, say the run had stopped,
// as --until-time at the same moment does, from the file and through a
// daemon's stream. At the run's own last event it was running.
func TestReplayAtAnEventOfADowntimeSaysTheRunHadStopped(t *testing.T) {
	const pool, sock = "intel.com/sriov_vfio", "/var/lib/kubelet/device-plugins/intel.com_sriov_vfio.sock"
	l := pooledVF(pool, "0000:3b:02.1")
	l.add(events.PluginServing{Pool: pool, Socket: sock, Mode: "legacy"})
	last := l.add(events.PluginRegistered{Pool: pool, Socket: sock, Mode: "legacy"}) // #5, at 09:04
	t0 := l.t0
	acked := events.New(events.DamageAcknowledged{Note: "offline"}, t0.Add(30*time.Minute), "ledger-acknowledge") // #6
	crashed := events.New(events.DaemonCrashed{BootID: "boot-1", LastSeq: last, LastAlive: t0.Add(6 * time.Minute)}, t0.Add(time.Hour), "boot-2")
	restarted := events.New(events.DaemonStarted{Version: "v0.3.0", PID: 2}, t0.Add(time.Hour), "boot-2")
	envs := append(slices.Clone(l.envs), acked, crashed, restarted)
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)
	dir := kubelettest.ShortTempDir(t)
	live := filepath.Join(dir, ledgerFileName)
	writeLedger(t, live, envs)
	serveLedger(t, dir, live)

	for _, where := range [][]string{{"--db", db}, {"--state-dir", dir}} {
		for _, tc := range []struct {
			until   string
			running bool
		}{
			{"5", true},
			{"6", false},
		} {
			code, stdout, stderr := runCLI(t, append([]string{"replay", "--until-seq", tc.until, "--format", "json"}, where...)...)
			var st events.State
			if err := json.Unmarshal([]byte(stdout), &st); code != exitOK || err != nil {
				t.Fatalf("replay --until-seq %s %v: exit %d, %v: %s", tc.until, where, code, err, stderr)
			}
			if reg := st.Pools[pool].Registration; st.Daemon.Running != tc.running || reg.Registered != tc.running {
				t.Errorf("replay --until-seq %s %v: running %v, registered %v; want %v", tc.until, where, st.Daemon.Running, reg.Registered, tc.running)
			}
		}
		code, stdout, stderr := runCLI(t, append([]string{"replay", "--diff", "#5..#6", "--format", "json"}, where...)...)
		var d stateDiff
		if err := json.Unmarshal([]byte(stdout), &d); code != exitOK || err != nil || d.Daemon == nil {
			t.Fatalf("replay --diff #5..#6 %v: exit %d, %v: %s%s", where, code, err, stdout, stderr)
		}
		if !d.Daemon.RunningThen || d.Daemon.RunningNow || d.Daemon.Crashes != 1 {
			t.Errorf("replay --diff #5..#6 %v: running then %v, now %v, %d crashed; want true, false, 1:\n%s",
				where, d.Daemon.RunningThen, d.Daemon.RunningNow, d.Daemon.Crashes, stdout)
		}
	}
}

// A state dir whose daemon was killed and whose ledger ends with a tool's
// record (an offline ledger acknowledge): the next start records the
// crash of that run all the same, so a point after the run was last
// alive and before the tool's record says it had stopped, as the end
// does, in replay and at either end of --diff. At its own last event
// it was running.
func TestReplayOfAStateDirEndingInAToolRecordFoldsTheCrashToCome(t *testing.T) {
	const pool, sock = "intel.com/sriov_vfio", "/var/lib/kubelet/device-plugins/intel.com_sriov_vfio.sock"
	l := pooledVF(pool, "0000:3b:02.1")
	l.add(events.PluginServing{Pool: pool, Socket: sock, Mode: "legacy"})
	l.add(events.PluginRegistered{Pool: pool, Socket: sock, Mode: "legacy"})                                        // #5, at 09:04
	acked := events.New(events.DamageAcknowledged{Note: "offline"}, l.t0.Add(30*time.Minute), "ledger-acknowledge") // #6
	dir := kubelettest.ShortTempDir(t)
	writeLedger(t, filepath.Join(dir, ledgerFileName), append(slices.Clone(l.envs), acked))

	for _, tc := range []struct {
		args    []string
		running bool
	}{
		{[]string{"--until-seq", "5"}, true},
		{[]string{"--until-time", "2026-11-30T09:20:00Z"}, false},
		{[]string{"--until-seq", "6"}, false},
		{nil, false},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"replay", "--state-dir", dir, "--format", "json"}, tc.args...)...)
		var st events.State
		if err := json.Unmarshal([]byte(stdout), &st); code != exitOK || err != nil {
			t.Fatalf("replay %v: exit %d, %v: %s", tc.args, code, err, stderr)
		}
		if reg := st.Pools[pool].Registration; st.Daemon.Running != tc.running || reg.Registered != tc.running {
			t.Errorf("replay %v: running %v, registered %v; want %v", tc.args, st.Daemon.Running, reg.Registered, tc.running)
		}
	}
	checkDiffRuns(t, pool, []string{"--state-dir", dir}, []diffRuns{
		{"#5..2026-11-30T09:20:00Z", true, false, 1, &change{From: "registered (legacy)", To: ""}},
		{"2026-11-30T09:20:00Z..", false, false, 0, nil},
	})
}

// replay --diff reads past tool records (offline acknowledgements) that
// lie past each end inside a downtime, to the crash the next start
// recorded, through a daemon's stream as from the file: an end inside
// the downtime reads as stopped however many such records follow it.
func TestDiffReadsPastToolRecordsInADowntime(t *testing.T) {
	const pool, sock = "intel.com/sriov_vfio", "/var/lib/kubelet/device-plugins/intel.com_sriov_vfio.sock"
	l := pooledVF(pool, "0000:3b:02.1")
	l.add(events.PluginServing{Pool: pool, Socket: sock, Mode: "legacy"})
	last := l.add(events.PluginRegistered{Pool: pool, Socket: sock, Mode: "legacy"}) // #5, at 09:04
	t0 := l.t0
	envs := append(slices.Clone(l.envs),
		events.New(events.DamageAcknowledged{Note: "first look"}, t0.Add(45*time.Minute), "ledger-acknowledge"),  // #6
		events.New(events.DamageAcknowledged{Note: "second look"}, t0.Add(50*time.Minute), "ledger-acknowledge"), // #7
		events.New(events.DaemonCrashed{BootID: "boot-1", LastSeq: last, LastAlive: t0.Add(6 * time.Minute)}, t0.Add(time.Hour), "boot-2"),
		events.New(events.DaemonStarted{Version: "v0.3.0", PID: 2}, t0.Add(time.Hour), "boot-2"))
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)
	dir := kubelettest.ShortTempDir(t)
	writeLedger(t, filepath.Join(dir, ledgerFileName), envs)
	serveLedger(t, dir, filepath.Join(dir, ledgerFileName))

	for _, where := range [][]string{{"--db", db}, {"--state-dir", dir}} {
		checkDiffRuns(t, pool, where, []diffRuns{
			// T2 before both records: the crash lies two past it.
			{"#5..2026-11-30T09:40:00Z", true, false, 1, &change{From: "registered (legacy)", To: ""}},
			{"#5..2026-11-30T09:47:00Z", true, false, 1, &change{From: "registered (legacy)", To: ""}},
			// T1 before both, T2 between them (stopped, as the case
			// above shows): T1's crash lies past the first event past
			// T2, and T1 reads stopped as T2 does.
			{"2026-11-30T09:30:00Z..2026-11-30T09:47:00Z", false, false, 0, nil},
		})
	}
}

// diffRuns is what replay --diff SPEC says of the daemon's runs and of
// a pool's registration between its ends.
type diffRuns struct {
	diff       string
	then, now  bool
	crashes    int
	registered *change
}

// checkDiffRuns runs replay --diff --format json on the ledger where
// names, for each of cases, and checks what it says of the runs and of
// pool's registration.
func checkDiffRuns(t *testing.T, pool string, where []string, cases []diffRuns) {
	t.Helper()
	for _, tc := range cases {
		code, stdout, stderr := runCLI(t, append([]string{"replay", "--diff", tc.diff, "--format", "json"}, where...)...)
		var d stateDiff
		if err := json.Unmarshal([]byte(stdout), &d); code != exitOK || err != nil {
			t.Fatalf("replay --diff %s %v: exit %d, %v: %s%s", tc.diff, where, code, err, stdout, stderr)
		}
		if d.Daemon == nil { // running at both ends alike, no run began or ended
			d.Daemon = &daemonDiff{}
		}
		var reg *change
		for _, p := range d.Pools {
			if p.Resource == pool {
				reg = p.Registration
			}
		}
		if d.Daemon.RunningThen != tc.then || d.Daemon.RunningNow != tc.now || d.Daemon.Crashes != tc.crashes || !reflect.DeepEqual(reg, tc.registered) {
			t.Errorf("replay --diff %s %v: running then %v, now %v, %d crashed, registration %+v; want %v, %v, %d, %+v:\n%s",
				tc.diff, where, d.Daemon.RunningThen, d.Daemon.RunningNow, d.Daemon.Crashes, reg, tc.then, tc.now, tc.crashes, tc.registered, stdout)
		}
	}
}

// failingSource serves its events, then fails, as a daemon's stream does
// when it meets a record it cannot read.
type failingSource struct {
	sliceSource
	err error
}

func (s failingSource) read(fn func(events.Envelope) error) error {
	if err := s.sliceSource.read(fn); err != nil {
		return err
	}
	return s.err
}

// TestReplayThroughADaemonReadsAheadOnlyWhatItCan: the look ahead for a
// crash reads past the point through a daemon's stream; a record there
// that the daemon cannot read ends the look ahead, not the replay, which
// stopped at the point before it did.
func TestReplayThroughADaemonReadsAheadOnlyWhatItCan(t *testing.T) {
	envs := sampleEnvelopes(t)
	if len(envs) < 3 {
		t.Fatalf("%d sample events", len(envs))
	}
	src := failingSource{sliceSource(envs), errors.New("the daemon says: record damaged")}
	want, err := foldSource(src, 2, time.Time{})
	if err != nil {
		t.Fatalf("fold to #2 alone: %v", err)
	}
	s, next, err := foldSourceAhead(src, 2, time.Time{}, crashLookahead)
	if err != nil || s.Seq != want.Seq || len(next) != len(envs)-2 {
		t.Errorf("fold to #2 reading ahead: state at #%d (want #%d), %d events ahead, error %v", s.Seq, want.Seq, len(next), err)
	}
	at := envs[1].Time
	if _, _, err := foldSourceAhead(src, 0, at, crashLookahead); err != nil && envs[len(envs)-1].Time.After(at) {
		t.Errorf("fold to %s reading ahead: %v", at, err)
	}
	// replay --diff alike: the record past T2 ends its look ahead.
	a, b, _, bNext, err := foldBetweenAhead(src, diffEnd{seq: 1, text: "#1"}, diffEnd{seq: 2, text: "#2"}, crashLookahead)
	if err != nil || a.Seq != 1 || b.Seq != want.Seq || len(bNext) != len(envs)-2 {
		t.Errorf("fold #1..#2 reading ahead: states at #%d and #%d (want #1 and #%d), %d events ahead, error %v", a.Seq, b.Seq, want.Seq, len(bNext), err)
	}
}

// TestPodStoryNamesWhatItHeldWhereItBegins: a pod's story whose events
// begin inside one of its allocations (at --since, or at the events
// retention kept) says what the pod held there, also when none of its
// events falls in the window: "(no events)" alone would read as if the
// pod held nothing then. A pod made again under the same name holds its
// own allocation; the one before it is over and is not named.
func TestPodStoryNamesWhatItHeldWhereItBegins(t *testing.T) {
	const vfio, dev, other = "intel.com/sriov_vfio", "0000:3b:02.1", "0000:3b:02.2"
	l := pooledVF(vfio, dev) // #1-#3 from 09:00, a minute apart
	l.add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: other, Vendor: "8086", Device: "1889", Driver: "vfio-pci"}})
	l.add(events.PoolMembershipChanged{Pool: vfio, Added: []string{other}, Reason: "daemon start"})
	a := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}}) // #6, 09:05
	l.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}) // #8, 09:07
	l.add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 3 * time.Minute})
	b := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev, other}}) // #10, 09:09
	l.add(events.AllocationBound{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev, other}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}) // #12, 09:11
	full := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, full, l.envs)
	cut := retainedCopy(t, l.envs, 8)

	const first = "(#6 held 0000:3b:02.1 for telco/cnf-0/main before #8)\n"
	cases := []struct {
		name string
		args []string
		want string // "" for no line saying what the pod held
	}{
		{"whole ledger", []string{"--db", full}, ""},
		{"since inside its first allocation", []string{"--db", full, "--since", "2026-11-30T09:06:30Z"},
			"(#6 held 0000:3b:02.1 for telco/cnf-0/main before #8)\n"},
		{"window without an event of it", []string{"--db", full, "--since", "2026-11-30T09:06:30Z", "--until", "2026-11-30T09:07:30Z"},
			"(#6 held 0000:3b:02.1 for telco/cnf-0/main before #8)\n(no events)\n"},
		{"between its two allocations", []string{"--db", full, "--since", "2026-11-30T09:08:30Z", "--until", "2026-11-30T09:08:40Z"}, ""},
		{"since inside the pod made again", []string{"--db", full, "--since", "2026-11-30T09:10:30Z"},
			"(#10 held 0000:3b:02.1,0000:3b:02.2 for telco/cnf-0/main before #12)\n(no events)\n"},
		{"by namespace", []string{"--db", full, "--namespace", "telco", "--since", "2026-11-30T09:06:30Z", "--until", "2026-11-30T09:07:30Z"},
			"(#6 held 0000:3b:02.1 for telco/cnf-0/main before #8)\n(no events)\n"},
		{"retention dropped the allocation", []string{"--db", cut}, first},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"dump"}, tc.args...)
			if !slices.Contains(args, "--namespace") {
				args = append(args, "--pod", "telco/cnf-0")
			}
			code, out, errOut := runCLI(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if tc.want == "" {
				if strings.Contains(out, " held ") {
					t.Errorf("the story names a hold where the pod held nothing:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, "WHAT HAPPENED\n"+tc.want) {
				t.Errorf("the story does not begin with %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestDeviceStorySaysItWasUnhealthyWhereItBegins: asked why a device was
// unhealthy at a time, a device's story whose window falls inside the
// spell (or begins after the events retention kept) says the device was
// unhealthy there, since when and why, rather than "(no events)" alone.
func TestDeviceStorySaysItWasUnhealthyWhereItBegins(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev) // #1-#3 from 09:00, a minute apart
	a := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	l.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "link down on ens1f0 (PF)"})    // #6, 09:05
	l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}) // #7, 09:06
	l.add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "probes passed for 30s"})
	l.add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 5 * time.Minute})
	l.add(events.DeviceRemoved{Address: dev, Reason: "gone from sysfs"})                   // #10, 09:09
	l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}) // #11, 09:10
	full := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, full, l.envs)
	cut := retainedCopy(t, l.envs, 7)

	const spell = "(unhealthy since #6 at 2026-11-30T09:05:00Z: link down on ens1f0 (PF); before #7)\n"
	cases := []struct {
		name string
		args []string
		want string // "" for no line saying it was unhealthy
	}{
		{"whole ledger", []string{"--db", full}, ""},
		{"window inside the spell", []string{"--db", full, "--since", "2026-11-30T09:05:30Z", "--until", "2026-11-30T09:06:30Z"},
			"(held by telco/cnf-0/main before #7)\n" + spell + "(no events)\n"},
		{"since after the spell", []string{"--db", full, "--since", "2026-11-30T09:07:30Z"}, ""},
		{"since after the device went", []string{"--db", full, "--since", "2026-11-30T09:09:30Z"},
			"(removed since #10 at 2026-11-30T09:09:00Z: gone from sysfs; before #11)\n(no events)\n"},
		{"retention cut inside the spell", []string{"--db", cut}, "(held by telco/cnf-0/main before #7)\n(unhealthy since #6: link down on ens1f0 (PF); before #7)\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--device", dev}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if tc.want == "" {
				if strings.Contains(out, " since #") {
					t.Errorf("the story says the device was unhealthy where it was not:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, "WHAT HAPPENED\n"+tc.want) {
				t.Errorf("the story does not begin with %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestStorySaysHowLongADeviceWasUnhealthy: asked for how long a device
// was unhealthy, a story says it where the device is healthy again,
// counted from the verdict that began the spell (not from a later
// unhealthy verdict with another reason), also when that verdict is
// before --since; not where the spell began before the events read.
func TestStorySaysHowLongADeviceWasUnhealthy(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev) // #1-#3 from 09:00, a minute apart
	a := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	l.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "link down on ens1f0 (PF)"})      // #6, 09:05
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "driver unbound (was vfio-pci)"}) // #7, 09:06
	l.add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "probes passed for 30s"})
	full := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, full, l.envs)
	cut := retainedCopy(t, l.envs, 7)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"device", []string{"--db", full, "--device", dev}, "healthy again after 2m: probes passed for 30s; held by telco/cnf-0/main\n"},
		{"since inside the spell", []string{"--db", full, "--device", dev, "--since", "2026-11-30T09:06:30Z"},
			"healthy again after 2m: probes passed for 30s; held by telco/cnf-0/main\n"},
		{"pod", []string{"--db", full, "--pod", "telco/cnf-0"}, "0000:3b:02.1 healthy again after 2m: probes passed for 30s; held by telco/cnf-0/main\n"},
		{"retention cut inside the spell", []string{"--db", cut, "--device", dev}, "healthy again: probes passed for 30s; held by telco/cnf-0/main\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.HasSuffix(out, "09:07:00  "+tc.want) {
				t.Errorf("the story does not end with %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestDeviceStoryNamesWhatAChangeMade: a device's story says what a change
// made of the facts an operator asks after (the driver, the interfaces,
// the names a newer PCI ID database gives), not only which changed: a
// device renamed there is the same device at the same address.
func TestDeviceStoryNamesWhatAChangeMade(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev) // #1-#3 from 09:00, a minute apart
	facts := events.DeviceFacts{Address: dev, Vendor: "8086", Device: "1889", Driver: "iavf", Interfaces: []string{"ens1f0v1"},
		VendorName: "Intel Corporation", DeviceName: "Ethernet Adaptive Virtual Function (E810)"}
	l.add(events.DeviceChanged{Device: facts, Changed: []string{"driver", "vfio_device", "interfaces"}})
	l.add(events.DeviceChanged{Device: facts, Changed: []string{"vendor_name", "device_name"}})
	facts.Interfaces = nil
	l.add(events.DeviceChanged{Device: facts, Changed: []string{"interfaces"}})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)
	code, out, errOut := runCLI(t, "dump", "--db", db, "--device", dev, "--since", "2026-11-30T09:03:00Z")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"09:03:00  changed driver, vfio_device, interfaces (driver now iavf; interfaces now ens1f0v1)\n",
		"09:04:00  changed vendor_name, device_name (vendor_name now \"Intel Corporation\"; device_name now \"Ethernet Adaptive Virtual Function (E810)\")\n",
		"09:05:00  changed interfaces (interfaces now -)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the story lacks %q:\n%s", want, out)
		}
	}
}

// TestSpellOfADeviceBackAfterItsRemoval: a spell ends where the fold
// makes the device healthy, and only there. A device removed, then
// found changed or discovered anew (the fold takes it as back, and
// healthy), also after a verdict while it was gone, is not still in the
// spell its removal began: a later one is counted from its own start. A
// device changed while it is there (a driver bound anew) stays in its
// spell.
func TestSpellOfADeviceBackAfterItsRemoval(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	facts := events.DeviceFacts{Address: dev, Vendor: "8086", Device: "1889", Driver: "iavf"}
	removed := events.DeviceRemoved{Address: dev, Reason: "gone from sysfs"}
	changed := events.DeviceChanged{Device: facts, Changed: []string{"driver"}}
	down := events.DeviceHealthChanged{Address: dev, Reason: "link down on ens1f0 (PF)"}
	for _, tc := range []struct {
		name string
		// before come after #1-#3 (09:00, a minute apart) and before
		// the spell told, whose verdict is the last of them.
		before []events.Payload
		since  string
		want   []string
	}{
		{"changed after its removal", []events.Payload{removed, changed, down}, "09:06", []string{ // #6, 09:05
			"(unhealthy since #6 at 2026-11-30T09:05:00Z: link down on ens1f0 (PF); before #7)\n",
			"09:07:00  healthy again after 2m: probes passed for 30s\n",
		}},
		{"discovered anew after its removal", []events.Payload{removed, events.DeviceDiscovered{Device: facts}, down}, "09:06", []string{
			"(unhealthy since #6 at 2026-11-30T09:05:00Z: link down on ens1f0 (PF); before #7)\n",
			"09:07:00  healthy again after 2m: probes passed for 30s\n",
		}},
		{"a verdict while it was gone", []events.Payload{removed, events.DeviceHealthChanged{Address: dev, Reason: "no such device"}, changed, down}, "09:07", []string{
			"(unhealthy since #7 at 2026-11-30T09:06:00Z: link down on ens1f0 (PF); before #8)\n",
			"09:08:00  healthy again after 2m: probes passed for 30s\n",
		}},
		{"changed while unhealthy", []events.Payload{down, changed}, "09:05", []string{ // #4, 09:03
			"(unhealthy since #4 at 2026-11-30T09:03:00Z: link down on ens1f0 (PF); before #6)\n",
			"09:06:00  healthy again after 3m: probes passed for 30s\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := pooledVF(vfio, dev)
			for _, p := range tc.before {
				l.add(p)
			}
			l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"})
			l.add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "probes passed for 30s"})
			db := filepath.Join(t.TempDir(), "ledger.db")
			writeLedger(t, db, l.envs)
			code, out, errOut := runCLI(t, "dump", "--db", db, "--device", dev, "--since", "2026-11-30T"+tc.since+":00Z")
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("the story lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// replay of a state dir at a time a run was alive, its next record
// after that time, folds no crash into it: a record of the same run, its
// stop, or the crash a later start recorded with the run last alive
// after the time asked for, each says the run went on past it. Only the
// ledger's last run can have ended unrecorded.
func TestReplayOfAStateDirFoldsNoCrashIntoARunThatWentOn(t *testing.T) {
	const pool, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	base := pooledVF(pool, dev) // #1-#3 from 09:00, a minute apart, boot-1
	at := func(p events.Payload, minute int, boot string) events.Envelope {
		return events.New(p, base.t0.Add(time.Duration(minute)*time.Minute), boot)
	}
	for _, tc := range []struct {
		name  string
		after []events.Envelope
	}{
		{"a record of the same run", []events.Envelope{
			at(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}, 30, "boot-1")}},
		{"its stop", []events.Envelope{at(events.DaemonStopped{Reason: "SIGTERM"}, 30, "boot-1")}},
		{"a later start's record of its crash", []events.Envelope{
			at(events.DaemonCrashed{BootID: "boot-1", LastSeq: 3, LastAlive: base.t0.Add(25 * time.Minute)}, 30, "boot-2"),
			at(events.DaemonStarted{Version: "v0.3.0", PID: 2}, 30, "boot-2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := kubelettest.ShortTempDir(t)
			writeLedger(t, filepath.Join(dir, ledgerFileName), slices.Concat(base.envs, tc.after))
			code, stdout, stderr := runCLI(t, "replay", "--state-dir", dir, "--format", "json", "--until-time", "2026-11-30T09:20:00Z")
			var st events.State
			if err := json.Unmarshal([]byte(stdout), &st); code != exitOK || err != nil {
				t.Fatalf("exit %d, %v: %s", code, err, stderr)
			}
			if !st.Daemon.Running || st.Seq != 3 {
				t.Errorf("at 09:20, state #%d: running %v; want #3, running (the run went on past 09:20)", st.Seq, st.Daemon.Running)
			}
		})
	}
}

// TestStoryOfAWindowBeforeTheEventsKept: a story whose window ends before
// the first event retention kept says nothing of what held the device or
// the pod, or of its health, then: the state before that event (the
// snapshot's) may have come about after the window, and the events that
// would tell were dropped. It warns that they were, rather than leave
// "(no events)" to read as a quiet spell.
func TestStoryOfAWindowBeforeTheEventsKept(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev)                                                  // #1-#3 from 09:00, a minute apart
	a := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}}) // #4, 09:03
	l.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "link down on ens1f0 (PF)"})    // #6, 09:05
	l.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}) // #7, 09:06
	l.add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "probes passed for 30s"})
	cut := retainedCopy(t, l.envs, 7)

	const warning = "retention dropped the events before #7, the first event kept (at 2026-11-30T09:06:00Z)"
	for _, args := range [][]string{
		{"--device", dev, "--since", "2026-11-30T09:01:00Z", "--until", "2026-11-30T09:02:00Z"},
		{"--device", dev, "--until", "2026-11-30T09:02:00Z"},
		{"--pod", "telco/cnf-0", "--since", "2026-11-30T09:01:00Z", "--until", "2026-11-30T09:02:00Z"},
		{"--pool", vfio, "--since", "2026-11-30T09:01:00Z", "--until", "2026-11-30T09:02:00Z", "--format", "jsonl"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", cut}, args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if strings.Contains(out, " held ") || strings.Contains(out, "held by") || strings.Contains(out, " since #") {
				t.Errorf("the story tells of a window retention dropped:\n%s", out)
			}
			if !strings.Contains(errOut, warning) {
				t.Errorf("no warning %q; stderr:\n%s", warning, errOut)
			}
		})
	}

	// A window the events kept reach into is told as before.
	code, out, errOut := runCLI(t, "dump", "--db", cut, "--device", dev, "--since", "2026-11-30T09:01:00Z", "--until", "2026-11-30T09:06:30Z")
	if code != exitOK || !strings.Contains(out, "(held by telco/cnf-0/main before #7)\n") || strings.Contains(errOut, warning) {
		t.Errorf("a window reaching into the events kept: exit %d (%s):\n%s", code, errOut, out)
	}
	// A ledger that kept every event dropped none before a window that
	// ends before its first.
	whole := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, whole, l.envs)
	code, out, errOut = runCLI(t, "dump", "--db", whole, "--device", dev, "--until", "2026-11-30T08:00:00Z")
	if code != exitOK || strings.Contains(errOut, "retention dropped") {
		t.Errorf("a window before the first event of a whole ledger: exit %d (%s):\n%s", code, errOut, out)
	}
}

// A pod deleted and made again under its name (a StatefulSet's db-0) is
// one pod to --pod NAMESPACE/NAME, and two to --pod UID where the ledger
// has their UIDs (the kubelet's checkpoint gave them): each UID's story
// is its own allocation, and what befell the device while it held it.
func TestDumpPodByUID(t *testing.T) {
	const vfio, dev, other = "intel.com/sriov_vfio", "0000:3b:02.1", "0000:3b:02.2"
	const uid1, uid2 = "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00", "0d3e7a42-81b6-4f0e-b3c9-5e6f7a8b9c01"
	l := pooledVF(vfio, dev)
	add := l.add
	add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: other, Vendor: "8086", Device: "1889", Driver: "vfio-pci"}})
	add(events.PoolMembershipChanged{Pool: vfio, Added: []string{other}, Reason: "config applied"})
	a := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	toA := add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "db", Pod: "db-0", UID: uid1, Container: "main"})
	endA := add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: time.Hour, Reason: "db/db-0/main no longer holds it"})
	b := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	toB := add(events.AllocationBound{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "db", Pod: "db-0", UID: uid2, Container: "main"})
	sickB := add(events.DeviceHealthChanged{Address: dev, Reason: "link down"})
	c := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{other}})
	add(events.AllocationBound{AllocationSeq: c, Pool: vfio, DeviceIDs: []string{other}, Namespace: "db", Pod: "db-1", Container: "main"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	for _, tc := range []struct {
		pod  string
		want []uint64
	}{
		{"db/db-0", []uint64{a, toA, endA, b, toB, sickB}},
		{uid1, []uint64{a, toA, endA}},
		{uid2, []uint64{b, toB, sickB}},
	} {
		code, out, errOut := runCLI(t, "dump", "--db", db, "--pod", tc.pod, "--format", "jsonl")
		if code != exitOK {
			t.Fatalf("--pod %s: exit %d: %s", tc.pod, code, errOut)
		}
		if got := jsonlSeqs(t, out); !slices.Equal(got, tc.want) {
			t.Errorf("--pod %s: events %v, want %v", tc.pod, got, tc.want)
		}
	}

	code, out, errOut := runCLI(t, "dump", "--db", db, "--pod", uid2)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "bound to db/db-0/main (uid " + uid2 + ")"; !strings.Contains(out, want) {
		t.Errorf("the story of %s does not say %q:\n%s", uid2, want, out)
	}
	// Where the story begins after the binding, it says what the pod of
	// that UID held there.
	code, out, errOut = runCLI(t, "dump", "--db", db, "--pod", uid2, "--since", "2026-11-30T09:10:00Z") // #11 on
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := fmt.Sprintf("(#%d held %s for db/db-0/main (uid %s) before #%d)\n", b, dev, uid2, sickB); !strings.Contains(out, want) {
		t.Errorf("the story of %s from #%d does not say %q:\n%s", uid2, sickB, want, out)
	}

	code, out, errOut = runCLI(t, "dump", "--db", db, "--pod", uid2, "--stats", "--by", "pod", "--format", "json")
	if code != exitOK {
		t.Fatalf("--stats: exit %d: %s", code, errOut)
	}
	var doc statsDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Rows) != 1 || doc.Rows[0].Group != "db/db-0" || doc.Rows[0].Allocations != 1 || doc.Rows[0].Unhealthy != 1 {
		t.Errorf("--stats --by pod --pod %s: rows %+v, want db/db-0 with 1 allocation and 1 unhealthy", uid2, doc.Rows)
	}

	const unknown = "00000000-0000-4000-8000-000000000000"
	if code, _, errOut := runCLI(t, "dump", "--db", db, "--pod", unknown); code != exitUsage || !strings.Contains(errOut, unknown) {
		t.Errorf("--pod %s, a UID no binding carries: exit %d (%s), want %d naming it", unknown, code, errOut, exitUsage)
	}
}

func TestIsPodUID(t *testing.T) {
	for s, want := range map[string]bool{
		"6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00": true,  // the API server's
		"8c1d4f0a6f0c1b9e3d2a4c559a512b7e":     true,  // a static pod's (the kubelet's hash)
		"6F0C1B9E-3D2A-4C55-9A51-2B7E8C1D4F00": false, // the API server writes lower case
		"6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f0":  false,
		"6f0c1b9e03d2a-4c55-9a51-2b7e8c1d4f00": false,
		"6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4fg0": false,
		"8c1d4f0a6f0c1b9e3d2a4c559a512b7":      false,
		"8c1d4f0a6f0c1b9e3d2a4c559a512b7g":     false, // 32 characters, not all hex
		"db-0":                                 false,
		"":                                     false,
	} {
		if got := isPodUID(s); got != want {
			t.Errorf("isPodUID(%q) = %v, want %v", s, got, want)
		}
	}
}

// Where a story names the holder of a device (a health change while it
// was held, and the holdings at the start of a --since window), it names
// it as the binding does, with the pod's UID where the ledger has it:
// a pod made again under its name is another holder.
func TestStoriesNameTheHolderWithItsUID(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	const uid = "0d3e7a42-81b6-4f0e-b3c9-5e6f7a8b9c01"
	l := pooledVF(vfio, dev)
	a := l.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}})
	l.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "db", Pod: "db-0", UID: uid, Container: "main"})
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "link down"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)
	since := l.envs[len(l.envs)-1].Time.Format(time.RFC3339)

	holder := "db/db-0/main (uid " + uid + ")"
	for _, args := range [][]string{
		{"--pod", uid},
		{"--pod", "db/db-0"},
		{"--device", dev},
		{"--pod", "db/db-0", "--since", since},
		{"--device", dev, "--since", since},
	} {
		code, out, errOut := runCLI(t, append([]string{"dump", "--db", db}, args...)...)
		if code != exitOK {
			t.Fatalf("dump %v: exit %d: %s", args, code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			if (strings.Contains(line, "held by") || strings.Contains(line, " held ")) && !strings.Contains(line, holder) {
				t.Errorf("dump %v names the holder without its UID: %q, want %q", args, line, holder)
			}
		}
		if !strings.Contains(out, "held by "+holder) && !strings.Contains(out, "for "+holder) {
			t.Errorf("dump %v does not name the holder %q:\n%s", args, holder, out)
		}
	}
}
