package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
)

func TestReplayGolden(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name string
		args []string
	}{
		{"replay_end", nil},
		{"replay_verify", []string{"--verify"}},
		{"replay_until_seq", []string{"--until-seq", "22"}},
		{"replay_until_time", []string{"--until-time", "2026-11-24T10:00:00Z"}},
		{"replay_json_until_time", []string{"--format", "json", "--until-time", "2026-11-24T09:30:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"replay", "--db", db}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			out = strings.ReplaceAll(out, db, "LEDGER")
			checkGolden(t, tc.name, out)
		})
	}
}

// TestReplayAnswersWhoHeldTheDevice is the ledger's promise: the state at a
// past time says which pod held a device then.
func TestReplayAnswersWhoHeldTheDevice(t *testing.T) {
	db := sampleCopy(t)
	_, during, _ := runCLI(t, "replay", "--db", db, "--until-time", "2026-11-24T10:00:00Z")
	if !strings.Contains(during, "telco/dpdk-testpmd-7d9f/testpmd") {
		t.Errorf("at 10:00 the VF was held by telco/dpdk-testpmd-7d9f:\n%s", during)
	}
	_, after, _ := runCLI(t, "replay", "--db", db, "--until-time", "2026-11-24T12:30:00Z")
	if strings.Contains(after, "dpdk-testpmd") {
		t.Errorf("at 12:30 the VF was released:\n%s", after)
	}
}

// A time before the first event is not the empty ledger: replay says the
// ledger begins later, and when.
func TestReplayBeforeTheFirstEvent(t *testing.T) {
	db := sampleCopy(t)
	first := readLedgerFile(t, db)[0]
	at := first.Time.Add(-90 * time.Minute).Add(500 * time.Millisecond)
	code, out, errOut := runCLI(t, "replay", "--db", db, "--until-time", at.Format(time.RFC3339Nano))
	want := fmt.Sprintf("State at %s: last event none: before the first event (#1 at %s)", at.UTC().Format(time.RFC3339Nano), first.Time.UTC().Format(time.RFC3339Nano))
	if code != exitOK || !strings.Contains(out, want) {
		t.Errorf("replay to before #1: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}
}

// Once retention dropped the oldest events, replay and replay --diff
// through a running daemon's admin socket start from the snapshot that
// retention kept, and answer what the file's own replay answers; a point
// before the events kept is refused, not folded from nothing.
func TestLiveReplayAfterRetention(t *testing.T) {
	dir := kubelettest.ShortTempDir(t)
	db := filepath.Join(dir, ledgerFileName)
	writeSampleLedger(t, db)
	l, err := store.Open(db, store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at, err := l.Replay(40)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, at, "test"); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := l.Retain(ctx, store.Retention{MaxBytes: 1}); err != nil || !ok || d.ToSeq != 40 {
		t.Fatalf("retain: %+v %v %v", d, ok, err)
	}
	last := fmt.Sprint(l.LastSeq())
	l.Close()
	// --until-seq at the ledger's last event is the whole ledger, not a
	// point past its end.
	args := [][]string{{"replay"}, {"replay", "--until-seq", "45"}, {"replay", "--until-seq", last}, {"replay", "--diff", "#40..#50"}, {"replay", "--diff", "#44.."}}
	// The file is read as a copy (--db): of the state dir no daemon
	// holds, replay tells the run the ledger has running as ended.
	offline := make([]string, len(args))
	for i, a := range args {
		code, out, errOut := runCLI(t, append(a, "--db", db)...)
		if code != exitOK {
			t.Fatalf("%v on the file: exit %d: %s", a, code, errOut)
		}
		offline[i] = out
	}

	serveLedger(t, dir, db)
	for i, a := range args {
		code, live, errOut := runCLI(t, append(a, "--state-dir", dir)...)
		// Read from a copy, the run the ledger has running may be over;
		// through the socket, it serves.
		if i == 0 {
			live, offline[i] = withoutDaemonLine(live), withoutDaemonLine(offline[i])
		}
		if code != exitOK || live != offline[i] {
			t.Errorf("%v through the admin socket: exit %d: %s\n%s\nwant, as from the file:\n%s", a, code, errOut, live, offline[i])
		}
	}
	for _, a := range [][]string{{"replay", "--until-seq", "39"}, {"replay", "--diff", "#20..#50"}} {
		if code, _, errOut := runCLI(t, append(a, "--state-dir", dir)...); code == exitOK || !strings.Contains(errOut, "dropped") {
			t.Errorf("%v through the admin socket, before the events kept: exit %d: %s", a, code, errOut)
		}
	}
}

// With --format json, what --verify found goes to stderr: stdout is the
// JSON alone, whole, for a program to parse.
func TestReplayVerifyJSONParses(t *testing.T) {
	db := sampleCopy(t)
	for _, args := range [][]string{{"replay"}, {"replay", "--diff", "#10..#40"}} {
		code, stdout, stderr := runCLI(t, append(args, "--db", db, "--verify", "--format", "json")...)
		var v map[string]any
		if err := json.Unmarshal([]byte(stdout), &v); code != exitOK || err != nil || !strings.Contains(stderr, "verified") {
			t.Errorf("%v: exit %d, stdout does not parse (%v) or stderr does not say verified (%q):\n%s", args, code, err, stderr, stdout)
		}
	}
}

// withoutDaemonLine is replay's output without its Daemon line.
func withoutDaemonLine(out string) string {
	lines := strings.Split(out, "\n")
	return strings.Join(slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Daemon: ") }), "\n")
}

// TestReplayHeldForCountsToNowAtTheLatest: asked for the state at a point
// still to come (today's date, which stands for the day's end, or a time
// later than now), replay says how long each live allocation has been
// held until now: the ledger knows nothing later, and the end of today
// would count hours that have not passed.
func TestReplayHeldForCountsToNowAtTheLatest(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	now := time.Now().UTC()
	at := now.Add(-time.Minute)
	envs := []events.Envelope{
		events.New(events.DaemonStarted{Version: "v0.3.0", PID: 1}, at, "boot-1"),
		events.New(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}}, at, "boot-1"),
	}
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)

	for _, point := range []string{now.Add(24 * time.Hour).Format(time.RFC3339), now.Format(time.DateOnly)} {
		code, out, errOut := runCLI(t, "replay", "--db", db, "--until-time", point)
		if code != exitOK {
			t.Fatalf("replay --until-time %s: exit %d: %s", point, code, errOut)
		}
		row := regexp.MustCompile(`(?m)^#2 .* (\S+)\s+#2 \(unbound\)$`).FindStringSubmatch(out)
		if row == nil || !strings.HasPrefix(row[1], "1m") || strings.ContainsAny(row[1], "hd") {
			t.Errorf("replay --until-time %s: held for %q, want a minute (the allocation's age now):\n%s", point, row, out)
		}
	}
}

// TestReplaySaysSinceWhenADeviceIsUnhealthy: the DEVICES table says when
// an unhealthy device was judged so, and when a removed one went, from
// the ledger file and through a running daemon's admin socket alike; at
// a point before a later verdict, the verdict of that point; and no time
// it cannot tell, once retention dropped the verdict's event.
func TestReplaySaysSinceWhenADeviceIsUnhealthy(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(at time.Duration, p events.Payload) {
		envs = append(envs, events.New(p, t0.Add(at), "boot-1"))
	}
	vf := func(addr string) events.DeviceFacts {
		return events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1889", Class: "020000", Driver: "iavf", VFIndex: 0}
	}
	add(0, events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 1, Registration: "legacy"})
	add(time.Second, events.DeviceDiscovered{Device: vf("0000:3b:02.0")})
	add(2*time.Second, events.DeviceDiscovered{Device: vf("0000:3b:02.1")})
	add(time.Hour, events.DeviceHealthChanged{Address: "0000:3b:02.0", Reason: "link down"})
	add(2*time.Hour, events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "gone from sysfs"}) // #5
	add(3*time.Hour, events.DeviceHealthChanged{Address: "0000:3b:02.0", Healthy: true, Reason: "link up"})
	add(4*time.Hour, events.DeviceHealthChanged{Address: "0000:3b:02.0", Reason: "no carrier"}) // #7
	add(5*time.Hour, events.DaemonStopped{Reason: "SIGTERM"})
	dir := kubelettest.ShortTempDir(t)
	db := filepath.Join(dir, ledgerFileName)
	writeLedger(t, db, envs)

	removed := "  removed 2026-11-24T10:00:00Z: gone from sysfs\n"
	cases := []struct {
		args []string
		vf0  string // the HEALTH of 0000:3b:02.0
	}{
		{nil, "  unhealthy since 2026-11-24T12:00:00Z: no carrier\n"},
		{[]string{"--until-seq", "6"}, "  healthy\n"},
		{[]string{"--until-time", "2026-11-24T10:30:00Z"}, "  unhealthy since 2026-11-24T09:00:00Z: link down\n"},
	}
	row := func(out, addr string) string {
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, addr+" ") {
				return line
			}
		}
		return ""
	}
	offline := make([]string, len(cases))
	for i, tc := range cases {
		code, out, errOut := runCLI(t, append([]string{"replay", "--db", db}, tc.args...)...)
		if code != exitOK || !strings.Contains(row(out, "0000:3b:02.0"), tc.vf0) || !strings.Contains(row(out, "0000:3b:02.1"), removed) {
			t.Errorf("replay %v of the file: exit %d (%s), want %q and %q in:\n%s", tc.args, code, errOut, tc.vf0, removed, out)
		}
		offline[i] = out
	}

	// Through the admin socket the events are read in one pass, not
	// looked up: the same times, and none from past the point.
	func() {
		serveLedger(t, dir, db)
		for i, tc := range cases {
			code, live, errOut := runCLI(t, append([]string{"replay", "--state-dir", dir}, tc.args...)...)
			if code != exitOK || live != offline[i] {
				t.Errorf("replay %v through the admin socket: exit %d (%s)\n%s\nwant, as from the file:\n%s", tc.args, code, errOut, live, offline[i])
			}
		}
	}()
}

// Once retention dropped the event that removed a device, replay says it
// was removed and why, with no time, from the file and through the admin
// socket.
func TestReplaySaysNoTimeOfAVerdictRetentionDropped(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	dir := kubelettest.ShortTempDir(t)
	db := filepath.Join(dir, ledgerFileName)
	writeLedger(t, db, []events.Envelope{
		events.New(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 1, Registration: "legacy"}, t0, "boot-1"),
		events.New(events.DeviceDiscovered{Device: events.DeviceFacts{Address: "0000:3b:02.1", Vendor: "8086", Device: "1889"}}, t0.Add(time.Second), "boot-1"),
		events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "gone from sysfs"}, t0.Add(time.Hour), "boot-1"),
		events.New(events.DaemonStopped{Reason: "SIGTERM"}, t0.Add(2*time.Hour), "boot-1"),
	})
	l, err := store.Open(db, store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at, err := l.Replay(3)
	if err == nil {
		_, err = l.SaveSnapshot(ctx, at, "test")
	}
	if err != nil {
		t.Fatal(err)
	}
	if d, ok, err := l.Retain(ctx, store.Retention{MaxBytes: 1}); err != nil || !ok || d.ToSeq != 3 {
		t.Fatalf("retain: %+v %v %v", d, ok, err)
	}
	l.Close()
	check := func(how string, args ...string) {
		code, out, errOut := runCLI(t, append([]string{"replay"}, args...)...)
		if code != exitOK || !strings.Contains(out, "  removed: gone from sysfs\n") {
			t.Errorf("replay %s: exit %d (%s), want the removal without a time:\n%s", how, code, errOut, out)
		}
	}
	check("of the file", "--db", db)
	serveLedger(t, dir, db)
	check("through the admin socket", "--state-dir", dir)
}

// A verdict that came after a device's removal (a probe in flight as it
// went) holds the device's health: replay says the device is removed, not
// the verdict's reason as its health, nor the verdict's time as when it
// went; from the file and through the admin socket alike.
func TestReplaySaysRemovedOfAVerdictAfterTheRemoval(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		verdict events.DeviceHealthChanged
	}{
		{"unhealthy", events.DeviceHealthChanged{Address: "0000:3b:02.1", Reason: "gone from sysfs"}},
		{"healthy", events.DeviceHealthChanged{Address: "0000:3b:02.1", Healthy: true, Reason: "probes passed for 10s"}},
		{"healthy with no reason", events.DeviceHealthChanged{Address: "0000:3b:02.1", Healthy: true}},
	}
	want := []string{"0000:3b:02.1", "8086:1889", "-", "0", "-", "-", "removed"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := kubelettest.ShortTempDir(t)
			db := filepath.Join(dir, ledgerFileName)
			writeLedger(t, db, []events.Envelope{
				events.New(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 1, Registration: "legacy"}, t0, "boot-1"),
				events.New(events.DeviceDiscovered{Device: events.DeviceFacts{Address: "0000:3b:02.1", Vendor: "8086", Device: "1889"}}, t0.Add(time.Second), "boot-1"),
				events.New(events.DeviceRemoved{Address: "0000:3b:02.1"}, t0.Add(time.Hour), "boot-1"),
				events.New(tc.verdict, t0.Add(2*time.Hour), "boot-1"),
				events.New(events.DaemonStopped{Reason: "SIGTERM"}, t0.Add(3*time.Hour), "boot-1"),
			})
			check := func(how string, args ...string) {
				code, out, errOut := runCLI(t, append([]string{"replay"}, args...)...)
				var row []string
				for line := range strings.Lines(out) {
					if strings.HasPrefix(line, "0000:3b:02.1 ") {
						row = strings.Fields(line)
					}
				}
				if code != exitOK || !slices.Equal(row, want) {
					t.Errorf("replay %s: exit %d (%s), want the device removed, with no reason or time:\n%s", how, code, errOut, out)
				}
			}
			check("of the file", "--db", db)
			serveLedger(t, dir, db)
			check("through the admin socket", "--state-dir", dir)
		})
	}
}
