package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
)

var diffT0 = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)

// diffBase is a node at seq 10: a running daemon, a config, three pools,
// seven devices and three live allocations.
func diffBase() events.State {
	t0 := diffT0
	s := events.NewState()
	s.Seq, s.Time = 10, t0
	s.Daemon = events.DaemonState{BootID: "boot-1", Version: "v1", StartedAt: t0, Running: true, Starts: 1}
	s.Config = events.ConfigState{Path: "/etc/devledger/config.json", SHA256: strings.Repeat("a", 64), AppliedAt: t0}
	registered := events.Registration{Mode: "legacy", Serving: true, Registered: true, RegisteredAt: t0}
	pool := func(name, typ string, members ...string) {
		s.Pools[name] = events.Pool{Spec: events.PoolSpec{Resource: name, DeviceType: typ}, Members: members, Registration: registered}
	}
	pool("intel.com/vf", "netDevice", "0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2")
	pool("intel.com/net", "netDevice", "0000:3b:02.3")
	pool("nvidia.com/gpu", "genericPCI", "0000:af:00.0", "0000:d8:00.0")
	dev := func(addr, vendor, driver, pool string) {
		s.Devices[addr] = events.Device{Facts: events.DeviceFacts{Address: addr, Vendor: vendor, Device: "1889", Driver: driver, VFIndex: -1},
			Present: true, Healthy: true, HealthSeq: 3, Pool: pool}
	}
	dev("0000:3b:00.0", "8086", "ice", "")
	dev("0000:3b:02.0", "8086", "vfio-pci", "intel.com/vf")
	dev("0000:3b:02.1", "8086", "vfio-pci", "intel.com/vf")
	dev("0000:3b:02.2", "8086", "vfio-pci", "intel.com/vf")
	dev("0000:3b:02.3", "8086", "iavf", "intel.com/net")
	dev("0000:af:00.0", "10de", "vfio-pci", "nvidia.com/gpu")
	dev("0000:d8:00.0", "10de", "vfio-pci", "nvidia.com/gpu")
	alloc := func(seq uint64, pool, addr string, b *events.Binding) {
		s.Allocations[seq] = events.Allocation{Seq: seq, Pool: pool, DeviceIDs: []string{addr}, At: t0, Binding: b}
		s.Holders[addr] = []uint64{seq}
	}
	alloc(7, "intel.com/vf", "0000:3b:02.0", nil)
	alloc(8, "nvidia.com/gpu", "0000:af:00.0", &events.Binding{Namespace: "ml", Pod: "trainer-0", Container: "trainer", At: t0})
	alloc(9, "intel.com/vf", "0000:3b:02.2", nil)
	return s
}

// diffCases change a and b (both diffBase to start with, b at seq 30) and
// say what diffStates must find. Those not alone change distinct subjects,
// so that all of them at once are every section of a diff.
var diffCases = []struct {
	name   string
	alone  bool
	change func(a, b *events.State)
	want   stateDiff
}{
	{name: "nothing", alone: true, change: func(a, b *events.State) {}},
	{
		name: "daemon crashed, restarted, stopped; the node rebooted",
		change: func(a, b *events.State) {
			b.Daemon = events.DaemonState{BootID: "boot-3", Version: "v2", Starts: 3, Crashes: 1, Running: false, KernelBootID: "k-2", Reboots: 1}
		},
		want: stateDiff{Daemon: &daemonDiff{Starts: 2, Stops: 2, Crashes: 1, Reboots: 1, Version: &change{From: "v1", To: "v2"}, RunningThen: true, RunningNow: false}},
	},
	{
		name:  "daemon restarted cleanly",
		alone: true,
		change: func(a, b *events.State) {
			b.Daemon = events.DaemonState{BootID: "boot-2", Version: "v1", Starts: 2, Running: true}
		},
		want: stateDiff{Daemon: &daemonDiff{Starts: 1, Stops: 1, RunningThen: true, RunningNow: true}},
	},
	{
		name: "config applied and rejected",
		change: func(a, b *events.State) {
			b.Config.SHA256 = strings.Repeat("b", 64)
			b.Config.Rejections = 2
			b.Config.LastError = []string{"pools[1]: selector matches nothing"}
		},
		want: stateDiff{Config: &configDiff{SHA256: &change{From: strings.Repeat("a", 64), To: strings.Repeat("b", 64)},
			Rejections: 2, LastError: []string{"pools[1]: selector matches nothing"}}},
	},
	{
		name: "kubelet restarted, then down",
		change: func(a, b *events.State) {
			b.Kubelet = events.KubeletState{Restarts: 2, LastRestart: diffT0.Add(20 * time.Minute), Outages: 1, Downtime: 90 * time.Second,
				Down: true, DownSince: diffT0.Add(50 * time.Minute)}
		},
		want: stateDiff{Kubelet: &kubeletDiff{Restarts: 2, LastRestart: diffT0.Add(20 * time.Minute), Outages: 1, Downtime: 90 * time.Second,
			Down: true, DownSince: diffT0.Add(50 * time.Minute)}},
	},
	{
		name: "attribution lost",
		change: func(a, b *events.State) {
			b.Attribution = events.AttributionState{Available: false, Reason: "connection refused", Since: diffT0.Add(30 * time.Minute)}
		},
		want: stateDiff{Attribution: &attributionDiff{WasAvailable: true, Available: false, Reason: "connection refused", Since: diffT0.Add(30 * time.Minute)}},
	},
	{
		name:  "attribution lost and back",
		alone: true,
		change: func(a, b *events.State) {
			a.Attribution = events.AttributionState{Available: true, Reason: "pod resources answered", Since: diffT0}
			b.Attribution = events.AttributionState{Available: true, Reason: "pod resources answered", Since: diffT0.Add(time.Minute)}
		},
		want: stateDiff{Attribution: &attributionDiff{WasAvailable: true, Available: true, Reason: "pod resources answered", Since: diffT0.Add(time.Minute)}},
	},
	{
		name: "ledger damage recorded and acknowledged",
		change: func(a, b *events.State) {
			a.Ledger = events.LedgerState{Damage: []string{"page 12 unreadable"}}
			b.Ledger = events.LedgerState{Damage: []string{"seq 40 torn"}, Acknowledged: []string{"page 12 unreadable"}}
		},
		want: stateDiff{Ledger: &ledgerDiff{Damaged: []string{"seq 40 torn"}, Acknowledged: []string{"page 12 unreadable"}}},
	},
	{
		name: "pools added, removed, changed",
		change: func(a, b *events.State) {
			b.Pools["example.com/fpga"] = events.Pool{Spec: events.PoolSpec{Resource: "example.com/fpga", DeviceType: "genericPCI"},
				Registration: events.Registration{Mode: "legacy", Serving: true}}
			delete(b.Pools, "nvidia.com/gpu")
			for _, addr := range []string{"0000:af:00.0", "0000:d8:00.0"} {
				d := b.Devices[addr]
				d.Pool = ""
				b.Devices[addr] = d
			}
			// 0000:3b:02.3 moves from intel.com/net to intel.com/vf.
			vf, net := b.Pools["intel.com/vf"], b.Pools["intel.com/net"]
			vf.Members = append(vf.Members, "0000:3b:02.3")
			vf.Registration = events.Registration{Mode: "legacy", Failures: 1, LastError: "kubelet refused"}
			net.Members = nil
			net.Spec.AllocatePolicy = "spread"
			b.Pools["intel.com/vf"], b.Pools["intel.com/net"] = vf, net
			d := b.Devices["0000:3b:02.3"]
			d.Pool = "intel.com/vf"
			b.Devices["0000:3b:02.3"] = d
		},
		want: stateDiff{
			Pools: []poolDiff{
				{Resource: "example.com/fpga", Added: true, Registration: &change{From: "", To: "serving, not registered"}},
				{Resource: "intel.com/net", Left: []string{"0000:3b:02.3"},
					Spec: &specDiff{From: events.PoolSpec{Resource: "intel.com/net", DeviceType: "netDevice"},
						To: events.PoolSpec{Resource: "intel.com/net", DeviceType: "netDevice", AllocatePolicy: "spread"}}},
				{Resource: "intel.com/vf", Joined: []string{"0000:3b:02.3"}, Registration: &change{From: "registered (legacy)", To: "failed: kubelet refused"},
					RegistrationFailures: 1},
				{Resource: "nvidia.com/gpu", Removed: true, Left: []string{"0000:af:00.0", "0000:d8:00.0"}},
			},
			Devices: []deviceDiff{
				{Address: "0000:3b:02.3", Pool: &change{From: "intel.com/net", To: "intel.com/vf"}},
				{Address: "0000:af:00.0", Pool: &change{From: "nvidia.com/gpu", To: ""}},
				{Address: "0000:d8:00.0", Pool: &change{From: "nvidia.com/gpu", To: ""}},
			},
		},
	},
	{
		name: "devices discovered, removed, judged, rebound",
		change: func(a, b *events.State) {
			b.Devices["0000:3b:02.4"] = events.Device{Facts: events.DeviceFacts{Address: "0000:3b:02.4", Vendor: "8086", Device: "1889", Driver: "iavf"},
				Present: true, Healthy: false, HealthReason: "no link", HealthSeq: 15}
			set := func(s *events.State, addr string, f func(d *events.Device)) {
				d := s.Devices[addr]
				f(&d)
				s.Devices[addr] = d
			}
			set(b, "0000:3b:02.1", func(d *events.Device) {
				d.Present, d.Healthy, d.HealthReason, d.HealthSeq = false, false, "removed: gone from sysfs", 12
			})
			set(b, "0000:af:00.0", func(d *events.Device) { d.Healthy, d.HealthReason, d.HealthSeq = false, "device gone from sysfs", 14 })
			set(a, "0000:3b:02.0", func(d *events.Device) { d.Healthy, d.HealthReason, d.HealthSeq = false, "driver unbound", 5 })
			set(b, "0000:3b:02.0", func(d *events.Device) { d.Healthy, d.HealthReason, d.HealthSeq = true, "probes passed", 16 })
			set(b, "0000:3b:02.2", func(d *events.Device) { d.HealthReason, d.HealthSeq = "probes passed for 10s hold-down", 17 })
			set(b, "0000:3b:00.0", func(d *events.Device) { d.Facts.Driver = "vfio-pci" })
		},
		want: stateDiff{Devices: []deviceDiff{
			{Address: "0000:3b:00.0", Driver: &change{From: "ice", To: "vfio-pci"}},
			{Address: "0000:3b:02.0", Health: &healthDiff{WasHealthy: false, WasReason: "driver unbound", Healthy: true, Reason: "probes passed", Seq: 16}},
			{Address: "0000:3b:02.1", Removed: true, RemovedReason: "gone from sysfs"},
			{Address: "0000:3b:02.2", Health: &healthDiff{WasHealthy: true, Healthy: true, Reason: "probes passed for 10s hold-down", Seq: 17}},
			{Address: "0000:3b:02.4", Discovered: true, Facts: &events.DeviceFacts{Address: "0000:3b:02.4", Vendor: "8086", Device: "1889", Driver: "iavf"},
				Health: &healthDiff{WasHealthy: true, Healthy: false, Reason: "no link", Seq: 15}},
			{Address: "0000:af:00.0", Health: &healthDiff{WasHealthy: true, Healthy: false, Reason: "device gone from sysfs", Seq: 14}},
		}},
	},
	{
		name: "allocations started, ended, bound, suspected",
		change: func(a, b *events.State) {
			delete(b.Allocations, 8)
			b.Allocations[18] = events.Allocation{Seq: 18, Pool: "intel.com/net", DeviceIDs: []string{"0000:3b:02.3"}, At: diffT0.Add(time.Hour),
				Binding: &events.Binding{Namespace: "telco", Pod: "router-0", Container: "router", At: diffT0.Add(time.Hour)}}
			a7 := b.Allocations[7]
			a7.Binding = &events.Binding{Namespace: "telco", Pod: "testpmd-1", Container: "testpmd", At: diffT0.Add(time.Minute)}
			b.Allocations[7] = a7
			a9 := b.Allocations[9]
			a9.LeakSuspected = true
			b.Allocations[9] = a9
		},
		want: stateDiff{Allocations: &allocationsDiff{
			Started: []allocationDiff{{Seq: 18, Pool: "intel.com/net", DeviceIDs: []string{"0000:3b:02.3"}, At: diffT0.Add(time.Hour), HeldBy: "telco/router-0/router",
				Binding: &events.Binding{Namespace: "telco", Pod: "router-0", Container: "router", At: diffT0.Add(time.Hour)}}},
			Ended: []allocationDiff{{Seq: 8, Pool: "nvidia.com/gpu", DeviceIDs: []string{"0000:af:00.0"}, At: diffT0, HeldBy: "ml/trainer-0/trainer",
				Binding: &events.Binding{Namespace: "ml", Pod: "trainer-0", Container: "trainer", At: diffT0}}},
			Changed: []allocationDiff{
				{Seq: 7, Pool: "intel.com/vf", DeviceIDs: []string{"0000:3b:02.0"}, At: diffT0, HeldBy: "telco/testpmd-1/testpmd", WasHeldBy: "#7 (unbound)",
					Binding: &events.Binding{Namespace: "telco", Pod: "testpmd-1", Container: "testpmd", At: diffT0.Add(time.Minute)}},
				{Seq: 9, Pool: "intel.com/vf", DeviceIDs: []string{"0000:3b:02.2"}, At: diffT0, HeldBy: "#9 (unbound, leak suspected)", WasHeldBy: "#9 (unbound)"},
			},
		}},
	},
}

func TestDiffStates(t *testing.T) {
	for _, tc := range diffCases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := diffBase(), diffBase()
			b.Seq, b.Time = 30, diffT0.Add(time.Hour)
			tc.change(&a, &b)
			a0, b0 := a.Clone(), b.Clone()

			got := diffStates(a, b)
			want := tc.want
			want.From, want.To, want.Events = diffPoint{Seq: 10, Time: diffT0}, diffPoint{Seq: 30, Time: diffT0.Add(time.Hour)}, 20
			if !reflect.DeepEqual(got, want) {
				t.Errorf("diff:\n%s\nwant:\n%s", diffJSON(t, got), diffJSON(t, want))
			}
			if got.empty() != (tc.name == "nothing") {
				t.Errorf("empty() = %v", got.empty())
			}
			scribble(&got)
			if !a.Equal(a0) || !b.Equal(b0) {
				t.Errorf("diffStates changed its input, or its result shares the input's memory")
			}
		})
	}
}

// scribble overwrites what a diff holds in slices and pointers, as a
// caller may.
func scribble(d *stateDiff) {
	for i := range d.Pools {
		for j := range d.Pools[i].Joined {
			d.Pools[i].Joined[j] = "x"
		}
		for j := range d.Pools[i].Left {
			d.Pools[i].Left[j] = "x"
		}
	}
	for _, dev := range d.Devices {
		if dev.Facts != nil {
			dev.Facts.Driver = "x"
		}
	}
	if d.Config != nil {
		for i := range d.Config.LastError {
			d.Config.LastError[i] = "x"
		}
	}
	if al := d.Allocations; al != nil {
		for _, list := range [][]allocationDiff{al.Started, al.Ended, al.Changed} {
			for _, a := range list {
				a.DeviceIDs[0] = "x"
				if a.Binding != nil {
					a.Binding.Pod = "x"
				}
			}
		}
	}
}

func diffJSON(t *testing.T, d stateDiff) string {
	t.Helper()
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDiffEverySection renders a diff with every kind of change.
func TestDiffEverySection(t *testing.T) {
	a, b := diffBase(), diffBase()
	b.Seq, b.Time = 30, diffT0.Add(time.Hour)
	for _, tc := range diffCases {
		if !tc.alone {
			tc.change(&a, &b)
		}
	}
	d := diffStates(a, b)
	if d.Daemon == nil || d.Config == nil || d.Kubelet == nil || d.Attribution == nil || d.Ledger == nil ||
		d.Pools == nil || d.Devices == nil || d.Allocations == nil {
		t.Fatalf("a section is missing:\n%s", diffJSON(t, d))
	}
	var out bytes.Buffer
	if err := printDiff(&out, d); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "diff_every_section", out.String())
}

func TestDiffGolden(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name string
		args []string
	}{
		// Config, pools, discoveries, allocations, a health change.
		{"diff_morning", []string{"--diff", "#1..2026-11-24T10:00:10Z"}},
		{"diff_morning_json", []string{"--diff", "#1..2026-11-24T10:00:10Z", "--format", "json"}},
		// A stop and a start, a kubelet restart, a removal, allocations
		// started and ended, a GPU failing, attribution lost.
		{"diff_afternoon", []string{"--diff", "2026-11-24T09:30:00Z..2026-11-24T14:41:00Z"}},
		{"diff_to_end", []string{"--diff", "2026-11-24T14:00:00Z.."}},
		{"diff_verify", []string{"--verify", "--diff", "#40..#58"}},
		{"diff_none", []string{"--diff", "2026-11-24T08:30:00Z..2026-11-24T08:45:00Z"}},
		// As the issue writes it: two words.
		{"diff_morning", []string{"--diff", "#1", "2026-11-24T10:00:10Z"}},
		{"diff_morning_json", []string{"--diff", "#1", "2026-11-24T10:00:10Z", "--format", "json"}},
		// The same point given in another zone: the same answer, in UTC.
		{"diff_morning", []string{"--diff", "#1..2026-11-24T15:30:10+05:30"}},
		{"diff_morning_json", []string{"--diff", "#1..2026-11-24T02:00:10-08:00", "--format", "json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"replay", "--db", db}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkGolden(t, tc.name, strings.ReplaceAll(out, db, "LEDGER"))
		})
	}
}

func TestDiffBadInput(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"T2 before T1", []string{"--diff", "2026-11-24T10:00:00Z..2026-11-24T09:00:00Z"}, "T1 (2026-11-24T10:00:00Z) must come before T2 (2026-11-24T09:00:00Z)"},
		{"T1 equals T2", []string{"--diff", "2026-11-24T10:00:00Z..2026-11-24T10:00:00Z"}, "must come before"},
		{"durations reversed", []string{"--diff", "1h..2h"}, "must come before"},
		{"sequences reversed", []string{"--diff", "#30..#20"}, "T1 (#30) must come before T2 (#20)"},
		{"sequences equal", []string{"--diff", "#5..#5"}, "T1 (#5) must come before T2 (#5)"},
		{"sequence after time", []string{"--diff", "#50..2026-11-24T09:00:00Z"}, "T1 (#50) comes after T2 (2026-11-24T09:00:00Z, last event #20)"},
		{"bad time", []string{"--diff", "yesterday..1h"}, `"yesterday" is neither a time`},
		{"time with no zone", []string{"--diff", "#1..2026-11-24T09:00:00"}, `--diff "2026-11-24T09:00:00": a time with no zone is no point in time: add Z for UTC (2026-11-24T09:00:00Z)`},
		{"bad sequence", []string{"--diff", "#x..#5"}, `"#x" is not a sequence number`},
		{"sequence zero", []string{"--diff", "#0..#5"}, `"#0" is not a sequence number`},
		{"one point", []string{"--diff", "2026-11-24T09:00:00Z"}, "want T1..T2"},
		{"one point, shown the range it may mean", []string{"--diff", "2h"}, "(what changed since 2h: --diff 2h..)"},
		{"no T1", []string{"--diff", "..#5"}, "want T1..T2"},
		{"T2 past the end", []string{"--diff", "#1..#100"}, "#100 is past the end: the ledger ends at #58"},
		{"T1 past the end", []string{"--diff", "#100.."}, "#100 is past the end: the ledger ends at #58"},
		{"two words, then a third", []string{"--diff", "#1", "#5", "#7"}, `unexpected argument "#7"`},
		{"with until-seq", []string{"--diff", "#1..#5", "--until-seq", "3"}, "--diff and --until-seq"},
		{"with until-time", []string{"--until-time", "1h", "--diff", "#1..#5"}, "--diff and --until-seq/--until-time"},
		{"bad format", []string{"--diff", "#1..#5", "--format", "xml"}, "want table or json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"replay", "--db", db}, tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("stderr %q does not mention %q", errOut, tc.wantErr)
			}
			if out != "" {
				t.Errorf("printed %q", out)
			}
		})
	}
}

// sliceSource serves events as a daemon's admin socket would.
type sliceSource []events.Envelope

func (s sliceSource) read(fn func(events.Envelope) error) error {
	for _, e := range s {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (s sliceSource) close() error { return nil }

func (s sliceSource) snapshot(uint64) (events.State, bool, error) { return events.State{}, false, nil }

// TestDiffFoldBetweenMatchesFile: the one pass over a daemon's events folds
// both ends to what the file's replays give.
func TestDiffFoldBetweenMatchesFile(t *testing.T) {
	lf := ledgerFlags{db: sampleCopy(t)}
	l, err := openLedger(&lf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	src := sliceSource(sampleEnvelopes(t))
	for _, spec := range []string{
		"#1..2026-11-24T10:00:10Z",
		"2026-11-24T09:30:00Z..2026-11-24T14:41:00Z",
		"2026-11-24T14:00:00Z..",
		"#20..#21",
		"2026-11-24T07:00:00Z..#3",
		"2026-11-24T15:30:00Z..2026-11-24T16:00:00Z",
		"#58..",
	} {
		t.Run(spec, func(t *testing.T) {
			from, to, err := parseDiffRange(spec, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			fa, fb, err := diffLedgerFile(&bytes.Buffer{}, l, lf.db, false, from, to)
			if err != nil {
				t.Fatal(err)
			}
			sa, sb, err := foldBetween(src, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if !sa.Equal(fa) || !sb.Equal(fb) {
				t.Errorf("folded from the stream: #%d and #%d; from the file: #%d and #%d", sa.Seq, sb.Seq, fa.Seq, fb.Seq)
			}
		})
	}
	for spec, wantErr := range map[string]string{
		"#1..#100":                  "#100 is past the end: the ledger ends at #58",
		"#50..2026-11-24T09:00:00Z": "T1 (#50) comes after T2 (2026-11-24T09:00:00Z, last event #20)",
		"2026-11-24T10:00:00Z..#20": "T1 (2026-11-24T10:00:00Z) comes after T2 (#20)",
		"2026-11-24T09:00:01Z..#20": "",
	} {
		from, to, err := parseDiffRange(spec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = foldBetween(src, from, to)
		var ce *codeError
		if wantErr == "" {
			// T1 after #20's time, before #21's: both ends are #20.
			if err != nil {
				t.Errorf("%s: %v", spec, err)
			}
			continue
		}
		if !errors.As(err, &ce) || ce.code != exitUsage || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want a usage error that says %q", spec, err, wantErr)
		}
	}
}

// TestDiffBlankLines: a diff that has no line about the node itself (only
// pools, devices or allocations changed) leaves one blank line after its
// heading, as one with such lines does, not two.
func TestDiffBlankLines(t *testing.T) {
	db := sampleCopy(t)
	for from := 1; from < len(sampleStory()); from++ {
		spec := fmt.Sprintf("#%d..#%d", from, from+1)
		code, out, errOut := runCLI(t, "replay", "--db", db, "--diff", spec)
		if code != exitOK || strings.Contains(out, "\n\n\n") {
			t.Errorf("--diff %s: exit %d (%s), two blank lines in a row:\n%s", spec, code, errOut, out)
		}
	}
}
