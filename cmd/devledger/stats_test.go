package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

func TestStatsGolden(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name string
		args []string
	}{
		{"stats_type", nil},
		{"stats_pool_hourly", []string{"--by", "pool", "--every", "1h"}},
		{"stats_pod", []string{"--by", "pod"}},
		{"stats_pod_namespace_hourly", []string{"--by", "pod", "--namespace", "telco", "--every", "1h"}},
		{"stats_device_json", []string{"--by", "device", "--format", "json"}},
		{"stats_type_json_daily", []string{"--format", "json", "--every", "1d"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--stats"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkGolden(t, tc.name, out)
		})
	}
}

func TestStatsBadUsage(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"jsonl", []string{"--stats", "--format", "jsonl"}, "--format jsonl: not with --stats"},
		{"html", []string{"--stats", "--format", "html"}, "--format html: not with --stats"},
		{"other format", []string{"--stats", "--format", "xml"}, "want table or json with --stats"},
		{"limit", []string{"--stats", "--limit", "3"}, "--limit: not with --stats"},
		{"unknown key", []string{"--stats", "--by", "node"}, `--by "node": want type, pool, device or pod`},
		{"bad every", []string{"--stats", "--every", "hourly"}, `--every "hourly"`},
		{"zero every", []string{"--stats", "--every", "0"}, "at least 1s"},
		{"sub-second every", []string{"--stats", "--every", "1500ms"}, "whole seconds"},
		{"negative every", []string{"--stats", "--every", "-1h"}, "--every"},
		{"by without stats", []string{"--by", "pool"}, "--by: only with --stats"},
		{"every without stats", []string{"--every", "1h"}, "--every: only with --stats"},
		{"unknown pool", []string{"--stats", "--by", "pool", "--pool", "intel.com/nope"}, "the ledger's pools: intel.com/sriov_net"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db}, tc.args...)...)
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

// statsDoc is the JSON of dump --stats, as a reader decodes it.
type statsDoc struct {
	By    string        `json:"by"`
	Every time.Duration `json:"every"`
	Rows  []statsDocRow `json:"rows"`
	Total statsDocRow   `json:"total"`
}

type statsDocRow struct {
	Bucket      string `json:"bucket,omitempty"`
	Group       string `json:"group,omitempty"`
	Events      int    `json:"events"`
	Allocations int    `json:"allocations"`
	Devices     int    `json:"devices"`
	Releases    int    `json:"releases"`
	Conflicts   int    `json:"conflicts"`
	Unhealthy   int    `json:"unhealthy"`
}

// statsStory is two hours of a node with pools A (three devices) and B
// (two), with allocations, bindings, a conflict, a release and health
// changes at known times; the sequences the story relies on are noted.
func statsStory() []events.Envelope {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	const boot = "stats-boot"
	const a, b = "example.com/a", "example.com/b"
	const d1, d2, d3, d4, d5 = "0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:02:00.0", "0000:02:00.1"
	var out []events.Envelope
	add := func(min int, p events.Payload) uint64 {
		out = append(out, events.New(p, t0.Add(time.Duration(min)*time.Minute), boot))
		return uint64(len(out))
	}
	add(0, events.DaemonStarted{Version: "test", PID: 1})
	add(0, events.PoolMembershipChanged{Pool: a, Added: []string{d1, d2, d3}})
	add(0, events.PoolMembershipChanged{Pool: b, Added: []string{d4, d5}})
	s1 := add(5, events.DevicesAllocated{Pool: a, DeviceIDs: []string{d1, d2}})
	add(6, events.AllocationBound{AllocationSeq: s1, Pool: a, DeviceIDs: []string{d1, d2}, Namespace: "ns", Pod: "pod-a", Container: "c"})
	// Bound only in the next hour: its allocation still counts under
	// pod-b in this one.
	s2 := add(10, events.DevicesAllocated{Pool: b, DeviceIDs: []string{d4}})
	// d3 is free: pool A's, no pod's.
	add(30, events.DeviceHealthChanged{Address: d3, Healthy: false, Reason: "gone"})
	// d1 is pod-a's.
	add(40, events.DeviceHealthChanged{Address: d1, Healthy: false, Reason: "gone"})
	// Never bound.
	s3 := add(60, events.DevicesAllocated{Pool: a, DeviceIDs: []string{d3}})
	add(70, events.AllocationConflict{Pool: a, Device: d3, Reason: "claimed twice",
		Claims: []events.Claim{{AllocationSeq: s3}, {Namespace: "ns", Pod: "pod-a", Container: "c"}}})
	add(80, events.AllocationBound{AllocationSeq: s2, Pool: b, DeviceIDs: []string{d4}, Namespace: "ns", Pod: "pod-b", Container: "c"})
	add(90, events.DevicesReleased{AllocationSeq: s1, Pool: a, DeviceIDs: []string{d1, d2}, HeldFor: 85 * time.Minute})
	add(105, events.AllocationRecovered{Pool: b, DeviceIDs: []string{d5}, Namespace: "ns", Pod: "pod-c", Container: "c", Reason: "kubelet"})
	// d1 is free again: pool A's, no pod's.
	add(110, events.DeviceHealthChanged{Address: d1, Healthy: true})
	add(115, events.DaemonStopped{Reason: "SIGTERM", Clean: true})
	return out
}

func writeStatsLedger(t *testing.T, story []events.Envelope) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(path, store.Options{Node: "stats"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(context.Background(), story...); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStatsCounts checks the exact counts of a ledger whose story is
// known, through the JSON a script would read.
func TestStatsCounts(t *testing.T) {
	db := writeStatsLedger(t, statsStory())
	const h10, h11 = "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"
	const a, b = "example.com/a", "example.com/b"
	cases := []struct {
		name string
		args []string
		want statsDoc
	}{
		{"pool hourly", []string{"--by", "pool", "--every", "1h"}, statsDoc{By: "pool", Every: time.Hour,
			Rows: []statsDocRow{
				// Membership, allocation, binding and two health changes
				// of its devices.
				{Bucket: h10, Group: a, Events: 5, Allocations: 1, Devices: 2, Unhealthy: 2},
				{Bucket: h10, Group: b, Events: 2, Allocations: 1, Devices: 1},
				{Bucket: h11, Group: a, Events: 4, Allocations: 1, Devices: 1, Releases: 1, Conflicts: 1},
				{Bucket: h11, Group: b, Events: 2, Allocations: 1, Devices: 1},
			},
			Total: statsDocRow{Events: 13, Allocations: 4, Devices: 5, Releases: 1, Conflicts: 1, Unhealthy: 2}}},
		{"pod hourly", []string{"--by", "pod", "--every", "1h"}, statsDoc{By: "pod", Every: time.Hour,
			Rows: []statsDocRow{
				{Bucket: h10, Group: "ns/pod-a", Events: 3, Allocations: 1, Devices: 2, Unhealthy: 1},
				{Bucket: h10, Group: "ns/pod-b", Events: 1, Allocations: 1, Devices: 1},
				{Bucket: h11, Group: unboundGroup, Events: 2, Allocations: 1, Devices: 1, Conflicts: 1},
				{Bucket: h11, Group: "ns/pod-a", Events: 2, Releases: 1, Conflicts: 1},
				{Bucket: h11, Group: "ns/pod-b", Events: 1},
				{Bucket: h11, Group: "ns/pod-c", Events: 1, Allocations: 1, Devices: 1},
			},
			// The conflict counts once.
			Total: statsDocRow{Events: 9, Allocations: 4, Devices: 5, Releases: 1, Conflicts: 1, Unhealthy: 1}}},
		{"pod since the second hour", []string{"--by", "pod", "--since", h11}, statsDoc{By: "pod",
			Rows: []statsDocRow{
				{Group: unboundGroup, Events: 2, Allocations: 1, Devices: 1, Conflicts: 1},
				{Group: "ns/pod-a", Events: 2, Releases: 1, Conflicts: 1},
				{Group: "ns/pod-b", Events: 1},
				{Group: "ns/pod-c", Events: 1, Allocations: 1, Devices: 1},
			},
			Total: statsDocRow{Events: 5, Allocations: 2, Devices: 2, Releases: 1, Conflicts: 1}}},
		{"one pod", []string{"--by", "pod", "--pod", "ns/pod-a"}, statsDoc{By: "pod",
			Rows: []statsDocRow{
				{Group: "ns/pod-a", Events: 5, Allocations: 1, Devices: 2, Releases: 1, Conflicts: 1, Unhealthy: 1},
			},
			Total: statsDocRow{Events: 5, Allocations: 1, Devices: 2, Releases: 1, Conflicts: 1, Unhealthy: 1}}},
		{"one pool by type", []string{"--pool", b, "--type", "DevicesAllocated,AllocationRecovered"}, statsDoc{By: "type",
			Rows: []statsDocRow{
				{Group: "AllocationRecovered", Events: 1},
				{Group: "DevicesAllocated", Events: 1},
			},
			Total: statsDocRow{Events: 2}}},
		{"one device", []string{"--by", "device", "--device", "0000:01:00.0"}, statsDoc{By: "device",
			Rows: []statsDocRow{
				// Its membership, allocation (with d2), binding, release
				// and two health changes.
				{Group: "0000:01:00.0", Events: 6, Allocations: 1, Devices: 1, Releases: 1, Unhealthy: 1},
			},
			Total: statsDocRow{Events: 6, Allocations: 1, Devices: 1, Releases: 1, Unhealthy: 1}}},
		{"daily by type", []string{"--every", "1d", "--type", "DeviceHealthChanged"}, statsDoc{By: "type", Every: 24 * time.Hour,
			Rows:  []statsDocRow{{Bucket: "2026-01-01T00:00:00Z", Group: "DeviceHealthChanged", Events: 3}},
			Total: statsDocRow{Events: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--stats", "--format", "json"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got statsDoc
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v in\n%s", err, out)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v\n(output:\n%s)", got, tc.want, out)
			}
		})
	}
}

// Under --by device an allocation of two devices counts in both rows, and
// once in the total, whose DEVICES is still the rows' sum.
func TestStatsByDeviceTotal(t *testing.T) {
	db := writeStatsLedger(t, statsStory())
	_, out, errOut := runCLI(t, "dump", "--db", db, "--stats", "--by", "device", "--format", "json")
	var got statsDoc
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %q (stderr %q)", err, out, errOut)
	}
	var events, devices int
	for _, r := range got.Rows {
		events += r.Events
		devices += r.Devices
	}
	// Every event but the daemon's names a device; five name more than one.
	if got.Total.Events != 13 {
		t.Errorf("total events %d, want 13", got.Total.Events)
	}
	if events <= got.Total.Events {
		t.Errorf("rows sum to %d events, want more than the total %d", events, got.Total.Events)
	}
	if got.Total.Devices != 5 || devices != 5 {
		t.Errorf("devices: total %d, rows' sum %d, want 5 and 5", got.Total.Devices, devices)
	}
}

// The table has a column per count, aligned, and a TOTAL row last.
func TestStatsTable(t *testing.T) {
	db := writeStatsLedger(t, statsStory())
	_, out, _ := runCLI(t, "dump", "--db", db, "--stats", "--by", "pool", "--every", "1h")
	want := `BUCKET                POOL           EVENTS  ALLOCATIONS  DEVICES  RELEASES  CONFLICTS  UNHEALTHY
2026-01-01T10:00:00Z  example.com/a  5       1            2        0         0          2
2026-01-01T10:00:00Z  example.com/b  2       1            1        0         0          0
2026-01-01T11:00:00Z  example.com/a  4       1            1        1         1          0
2026-01-01T11:00:00Z  example.com/b  2       1            1        0         0          0
TOTAL                                13      4            5        1         1          2
`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	// No event matches: the header and a TOTAL of nothing.
	_, out, _ = runCLI(t, "dump", "--db", db, "--stats", "--type", "ConfigRejected")
	if want := "TYPE   EVENTS\nTOTAL  0\n"; out != want {
		t.Errorf("no events: got %q, want %q", out, want)
	}
}

func TestStatsBucketStart(t *testing.T) {
	cases := []struct {
		at    string
		every time.Duration
		want  string
	}{
		{"2026-01-01T10:59:59Z", time.Hour, "2026-01-01T10:00:00Z"},
		{"2026-01-01T11:00:00Z", time.Hour, "2026-01-01T11:00:00Z"},
		{"2026-01-01T10:44:00+02:00", 15 * time.Minute, "2026-01-01T08:30:00Z"},
		// Aligned to the Unix epoch, a Thursday, not to the zero time.
		{"2026-01-01T12:00:00Z", 7 * 24 * time.Hour, "2026-01-01T00:00:00Z"},
		{"2026-01-07T23:59:59Z", 7 * 24 * time.Hour, "2026-01-01T00:00:00Z"},
		{"1969-12-31T23:30:00Z", time.Hour, "1969-12-31T23:00:00Z"},
	}
	for _, tc := range cases {
		at, err := time.Parse(time.RFC3339, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if got := bucketName(bucketStart(at, tc.every)); got != tc.want {
			t.Errorf("bucketStart(%s, %s) = %s, want %s", tc.at, tc.every, got, tc.want)
		}
	}
}
