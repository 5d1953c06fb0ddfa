package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	goldenfile "github.com/devledger/devledger/internal/golden"
	"github.com/devledger/devledger/store"
)

// runCLI runs one devledger command line in-process.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// checkGolden compares got with testdata/<name>.golden, rewriting it under
// -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name+".golden"), got)
}

// sampleCopy writes the sample story into a fresh ledger in a temp dir.
func sampleCopy(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	writeSampleLedger(t, path)
	return path
}

func TestDumpGolden(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name string
		args []string
	}{
		{"dump_table", nil},
		{"dump_device", []string{"--device", "0000:3b:02.1"}},
		{"dump_pool_limit", []string{"--pool", "nvidia.com/gpu", "--limit", "4"}},
		{"dump_jsonl_allocated", []string{"--format", "jsonl", "--type", "DevicesAllocated,DevicesReleased"}},
		{"dump_json_since", []string{"--format", "json", "--since", "2026-11-24T12:00:00Z", "--until", "2026-11-24T13:02:00Z"}},
		{"dump_no_match", []string{"--type", "ConfigRejected"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkGolden(t, tc.name, out)
		})
	}
}

// TestTablesOnATerminal: on a terminal, every table (dump, a story,
// replay, --diff, --stats) is cut to its width with a "…", and --wide
// cuts nothing; into a pipe nothing is cut, whatever the width.
func TestTablesOnATerminal(t *testing.T) {
	db := sampleCopy(t)
	commands := [][]string{
		{"dump", "--db", db},
		{"dump", "--db", db, "--device", "0000:3b:02.2"},
		{"dump", "--db", db, "--namespace", "telco"},
		{"dump", "--db", db, "--stats", "--by", "pool", "--every", "1h"},
		{"replay", "--db", db},
		{"replay", "--db", db, "--diff", "#1", "#40"},
	}
	const width = 60
	longest := func(out string) int {
		n := 0
		for _, line := range strings.Split(out, "\n") {
			n = max(n, utf8.RuneCountInString(line))
		}
		return n
	}
	for _, args := range commands {
		t.Run(strings.Join(args[3:], " "), func(t *testing.T) {
			_, piped, _ := runCLI(t, args...)
			if longest(piped) <= width {
				t.Fatalf("no line over %d columns to cut: the test shows nothing", width)
			}
			defer func(f func(io.Writer) int) { terminalWidth = f }(terminalWidth)
			terminalWidth = func(io.Writer) int { return width }
			code, out, errOut := runCLI(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if n := longest(out); n != width || !strings.Contains(out, "…\n") {
				t.Errorf("on a terminal of %d columns the longest line is %d:\n%s", width, n, out)
			}
			if strings.Count(out, "\n") != strings.Count(piped, "\n") {
				t.Errorf("cutting changed the number of lines")
			}
			if _, wide, _ := runCLI(t, append(args, "--wide")...); wide != piped {
				t.Errorf("--wide on a terminal differs from the piped output")
			}
		})
	}
	_, out, _ := runCLI(t, "dump", "--db", db)
	if !strings.Contains(out, "UNAVAILABLE: list pod resources: dial unix /var/lib/kubelet/pod-resources/kubelet.sock: connect: connection refused\n") {
		t.Errorf("piped, a long detail was cut:\n%s", out)
	}
}

// sampleEnvelopes are the sample story's events with their sequences.
func sampleEnvelopes(t *testing.T) []events.Envelope {
	t.Helper()
	envs := sampleStory()
	for i := range envs {
		envs[i].Seq = uint64(i + 1)
	}
	return envs
}

func TestDumpJSONLinesAreEnvelopes(t *testing.T) {
	_, out, _ := runCLI(t, "dump", "--db", sampleCopy(t), "--format", "jsonl")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(sampleStory()) {
		t.Fatalf("%d lines, want %d", len(lines), len(sampleStory()))
	}
	for i, line := range lines {
		var env map[string]any
		if err := json.Unmarshal([]byte(line), &env); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		for _, k := range []string{"seq", "time", "type", "version", "boot_id", "subject", "payload"} {
			if _, ok := env[k]; !ok {
				t.Errorf("line %d lacks %q", i+1, k)
			}
		}
		if int(env["seq"].(float64)) != i+1 {
			t.Errorf("line %d has seq %v", i+1, env["seq"])
		}
	}
}

// A copy read days after it was made, asked for its last hours, says
// where it ends rather than "(no events)" alone, which reads as a quiet
// node; a --since the events reach says nothing more.
func TestDumpSinceAfterTheLedgerEnds(t *testing.T) {
	db := sampleCopy(t)
	for _, tc := range []struct{ since, says string }{
		{"2h", " (2h counts back from now): its last event, #58, is at 2026-11-24T15:00:00Z"},
		{"2026-11-24T15:00:01Z", "the ledger ends before --since 2026-11-24T15:00:01Z: its last event, #58, is at 2026-11-24T15:00:00Z"},
		{"2026-11-24T07:00:01-08:00", "the ledger ends before --since 2026-11-24T15:00:01Z: its last event"},
		{"2026-11-24T15:00:00Z", ""},
	} {
		// A pod's story, read in two passes, says it as the whole
		// ledger's does; where the ledger reaches --since, a pod with
		// nothing after it is what "(no events)" says alone.
		for _, filter := range [][]string{nil, {"--pod", "cnf-router-0", "--namespace", "telco"}} {
			args := append([]string{"dump", "--db", db, "--since", tc.since}, filter...)
			code, stdout, stderr := runCLI(t, args...)
			switch {
			case code != exitOK:
				t.Errorf("%v: exit %d: %s", args[3:], code, stderr)
			case tc.says == "" && (stderr != "" || filter == nil && !strings.Contains(stdout, "DevicesReleased")):
				t.Errorf("%v: %q on stderr, want none; out:\n%s", args[3:], stderr, stdout)
			case tc.says != "" && (!strings.Contains(stderr, tc.says) || !strings.Contains(stdout, "(no events)")):
				t.Errorf("%v: %q on stderr, want %q", args[3:], stderr, tc.says)
			}
		}
	}
	// A ledger with no events has no last event to name.
	empty := filepath.Join(t.TempDir(), "empty.db")
	writeLedger(t, empty, nil)
	if code, stdout, stderr := runCLI(t, "dump", "--db", empty, "--since", "2h"); code != exitOK || stderr != "" || !strings.Contains(stdout, "(no events)") {
		t.Errorf("--since 2h on a ledger with no events: exit %d, %q on stderr; want 0, none:\n%s", code, stderr, stdout)
	}
}

// A point is held in UTC, as the tools print every time, whether given in
// another zone or as a duration before a now in the reading machine's.
func TestTimeFlagIsInUTC(t *testing.T) {
	pst := time.FixedZone("PST", -8*3600)
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, pst)
	for _, tc := range []struct{ value, want string }{
		{"2026-11-24T07:00:01-08:00", "2026-11-24T15:00:01Z"},
		{"2h", "2026-11-24T15:00:00Z"},
		{"1d", "2026-11-23T17:00:00Z"},
	} {
		got, err := parseTimeFlag("since", tc.value, now)
		if err != nil || got.Location() != time.UTC || got.Format(time.RFC3339) != tc.want {
			t.Errorf("parseTimeFlag(%q) = %v (%v), %v; want %s", tc.value, got, got.Location(), err, tc.want)
		}
	}
}

// TestTimeFlagTakesWhatDatePrints: a point is taken as `date` writes it
// for RFC 3339 (`date -u --rfc-3339=seconds`: a space for the "T", which
// RFC 3339 allows) and as a bare date (`date -u +%F`), the UTC day: its
// start as --since, its whole as --until, as a time given to the second
// stands for that second.
func TestTimeFlagTakesWhatDatePrints(t *testing.T) {
	now := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ value, since, until string }{
		{"2026-12-01 05:00:00+00:00", "2026-12-01T05:00:00Z", "2026-12-01T05:00:00.999999999Z"},
		{"2026-12-01 06:00:00.5+01:00", "2026-12-01T05:00:00.5Z", "2026-12-01T05:00:00.5Z"},
		{"2026-12-01", "2026-12-01T00:00:00Z", "2026-12-01T23:59:59.999999999Z"},
	} {
		since, err := parseTimeFlag("since", tc.value, now)
		if err != nil || since.Format(time.RFC3339Nano) != tc.since {
			t.Errorf("parseTimeFlag(%q) = %v, %v; want %s", tc.value, since, err, tc.since)
		}
		until, err := parseUntilFlag("until", tc.value, now)
		if err != nil || until.Format(time.RFC3339Nano) != tc.until {
			t.Errorf("parseUntilFlag(%q) = %v, %v; want %s", tc.value, until, err, tc.until)
		}
	}
	for _, bad := range []string{"2026-12-01 05:00:00", "2026-12-01  05:00:00Z", "2026-12-1", "2026-12-01Z"} {
		if _, err := parseTimeFlag("since", bad, now); err == nil {
			t.Errorf("parseTimeFlag(%q) took it", bad)
		}
	}

	// A day's story, end to end: the allocation of 2026-11-24 10:30 and
	// nothing of the day after.
	db := sampleCopy(t)
	code, out, errOut := runCLI(t, "dump", "--db", db, "--since", "2026-11-24", "--until", "2026-11-24", "--type", "DevicesAllocated", "--format", "jsonl")
	if code != exitOK || !strings.Contains(out, `"type":"DevicesAllocated"`) {
		t.Errorf("dump of a day: exit %d (%s):\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "dump", "--db", db, "--since", "2026-11-25")
	if code != exitOK || !strings.Contains(out, "(no events)") {
		t.Errorf("dump from the day after: exit %d (%s):\n%s", code, errOut, out)
	}
}

// On a live node, read through the daemon's admin socket, nothing since
// --since is a quiet node, which "(no events)" says: the ledger has not
// ended, and a warning would say it had.
func TestDumpSinceOnALiveNodeNamesNoEnd(t *testing.T) {
	dir := kubelettest.ShortTempDir(t)
	db := filepath.Join(dir, ledgerFileName)
	writeSampleLedger(t, db)
	serveLedger(t, dir, db)
	code, stdout, stderr := runCLI(t, "dump", "--state-dir", dir, "--since", "2h")
	if code != exitOK || stderr != "" || !strings.Contains(stdout, "(no events)") {
		t.Errorf("dump --since 2h of a live node: exit %d, stderr %q, want none; out:\n%s", code, stderr, stdout)
	}
}

func TestDumpBadInput(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("this is not a ledger\n"), 0o644)
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o644)
	db := sampleCopy(t)

	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"missing file", []string{"dump", "--db", filepath.Join(dir, "nope.db")}, exitUsage, "no ledger at"},
		{"missing state dir", []string{"dump", "--state-dir", filepath.Join(dir, "nodir")}, exitUsage, "no ledger at"},
		{"text file", []string{"dump", "--db", text}, exitUsage, "not a devledger ledger"},
		{"empty file", []string{"dump", "--db", empty}, exitUsage, "empty"},
		{"unknown type", []string{"dump", "--db", db, "--type", "DeviceExploded"}, exitUsage, "DevicesAllocated"},
		{"bad since", []string{"dump", "--db", db, "--since", "yesterday"}, exitUsage, "--since"},
		{"bad format", []string{"dump", "--db", db, "--format", "xml"}, exitUsage, "table, json or jsonl"},
		{"bad device", []string{"dump", "--db", db, "--device", "3b:02"}, exitUsage, "PCI address"},
		{"unknown device", []string{"dump", "--db", db, "--device", "3b:1f.1"}, exitUsage, "the ledger's devices: 0000:3b:00.0, "},
		{"unknown pool", []string{"dump", "--db", db, "--pool", "intel.com/nope"}, exitUsage, "the ledger's pools: intel.com/sriov_net, intel.com/sriov_vfio, nvidia.com/gpu"},
		{"unknown pod", []string{"dump", "--db", db, "--pod", "Dpdk-testpmd-7d9f"}, exitUsage, "no allocation or conflict names it; the ledger's pods: "},
		{"unknown namespace, shown the namespaces", []string{"dump", "--db", db, "--namespace", "Telco"}, exitUsage, "--namespace Telco: no allocation or conflict names it; the ledger's namespaces: ml, telco"},
		{"unknown pod in a namespace", []string{"dump", "--db", db, "--pod", "ml/dpdk-testpmd-7d9f"}, exitUsage, "telco/dpdk-testpmd-7d9f"},
		{"unknown namespace", []string{"dump", "--db", db, "--namespace", "nope"}, exitUsage, "--namespace nope: no allocation"},
		{"since after until", []string{"dump", "--db", db, "--since", "1h", "--until", "2h"}, exitUsage, "no event can be in between"},
		{"time with no zone", []string{"dump", "--db", db, "--since", "2026-11-24T09:00:00"}, exitUsage, "add Z for UTC (2026-11-24T09:00:00Z)"},
		{"a state dir as --db", []string{"dump", "--db", dir}, exitUsage, "--state-dir " + dir + " reads the ledger"},
		{"a ledger file as --state-dir", []string{"dump", "--state-dir", db}, exitUsage, "--db " + db + " reads a ledger file"},
		{"replay a ledger file as --state-dir", []string{"replay", "--state-dir", db, "--verify"}, exitUsage, "--db " + db + " reads a ledger file"},
		{"backup a ledger file as --state-dir", []string{"ledger", "backup", "--state-dir", db, "--out", filepath.Join(dir, "copy.db")}, exitUsage, "--db " + db + " reads a ledger file"},
		{"acknowledge a ledger file as --state-dir", []string{"ledger", "acknowledge", "--state-dir", db}, exitUsage, "--db " + db + " reads a ledger file"},
		{"unknown interface", []string{"dump", "--db", db, "--iface", "nope0"}, exitUsage, "devledger dump: --iface nope0: no device"},
		{"unknown flag", []string{"dump", "--frobnicate"}, exitUsage, "frobnicate"},
		{"unknown command", []string{"frobnicate"}, exitUsage, "unknown command"},
		{"replay bad seq", []string{"replay", "--db", db, "--until-seq", "100000"}, exitUsage, "ends at"},
		{"replay negative age", []string{"replay", "--db", db, "--until-time", "-30m"}, exitUsage, "--until-time \"-30m\""},
		{"replay both bounds", []string{"replay", "--db", db, "--until-seq", "3", "--until-time", "1h"}, exitUsage, "one of them"},
		{"replay missing", []string{"replay", "--db", filepath.Join(dir, "nope.db")}, exitUsage, "no ledger at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, errOut)
			}
			if !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("stderr %q does not mention %q", errOut, tc.wantErr)
			}
		})
	}
	for _, p := range []string{filepath.Join(dir, "nope.db"), filepath.Join(dir, "nodir")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was created", p)
		}
	}
}

// TestCorruptRecord flips one byte inside a record on disk: dump prints
// everything before it and names the bad sequence, replay --verify too, and
// both exit 1.
func TestCorruptRecord(t *testing.T) {
	db := sampleCopy(t)
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	// Only the GPU allocation's record carries the GPU pool's variable (the
	// snapshot keeps no responses). bbolt copies pages on write, so stale
	// copies of the record may sit in free pages too: flip the byte in all.
	marker := []byte("PCIDEVICE_NVIDIA_COM_GPU")
	if bytes.Count(raw, marker) == 0 {
		t.Fatalf("no record carries %s", marker)
	}
	for i := bytes.Index(raw, marker); i >= 0; {
		raw[i+len(marker)-1] ^= 0x20
		j := bytes.Index(raw[i+1:], marker)
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if err := os.WriteFile(db, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var badSeq int
	for n, e := range sampleStory() {
		if a, ok := e.Payload.(events.DevicesAllocated); ok && a.Pool == "nvidia.com/gpu" {
			badSeq = n + 1
		}
	}

	code, out, errOut := runCLI(t, "dump", "--db", db, "--format", "jsonl")
	if code != exitFailure {
		t.Errorf("dump exit %d, want %d", code, exitFailure)
	}
	if got := strings.Count(out, "\n"); got != badSeq-1 {
		t.Errorf("dump printed %d events before the bad one, want %d", got, badSeq-1)
	}
	if want := "seq " + strconv.Itoa(badSeq); !strings.Contains(errOut, want) {
		t.Errorf("dump stderr %q does not name %q", errOut, want)
	}

	code, _, errOut = runCLI(t, "replay", "--db", db, "--verify")
	if code != exitFailure {
		t.Errorf("replay --verify exit %d, want %d", code, exitFailure)
	}
	if want := "seq " + strconv.Itoa(badSeq); !strings.Contains(errOut, want) {
		t.Errorf("replay stderr %q does not name %q", errOut, want)
	}
}

// TestDumpBehindAPF: --pf and --iface pick the events of a PF and its VFs
// (or of the function that has the interface), told as a story; names the
// ledger does not know are usage errors that list what it knows.
func TestDumpBehindAPF(t *testing.T) {
	db := sampleCopy(t)
	family := map[string]bool{"0000:3b:00.0": true}
	for i := range 5 {
		family[fmt.Sprintf("0000:3b:02.%d", i)] = true
	}
	var want []uint64
	for i, e := range sampleStory() {
		if slices.ContainsFunc(e.Devices(), func(a string) bool { return family[a] }) {
			want = append(want, uint64(i+1))
		}
	}
	for _, args := range [][]string{{"--pf", "0000:3b:00.0"}, {"--pf", "3b:00.0"}, {"--iface", "ens1f0"}, {"--iface", "ens1f0", "--pf", "0000:3b:00.0"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "jsonl"}, args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if got := jsonlSeqs(t, out); !slices.Equal(got, want) || len(want) < 10 {
				t.Errorf("events %v, want %v", got, want)
			}
		})
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--iface", "eth9"}, "--iface eth9: no device the ledger knows had it; its interfaces: ens1f0"},
		{[]string{"--pf", "0000:3b:02.1"}, "--pf 0000:3b:02.1: no VF the ledger knows names it as its PF; the PFs: 0000:3b:00.0"},
		{[]string{"--pf", "nonsense"}, "--pf: "},
	} {
		code, _, errOut := runCLI(t, append([]string{"dump", "--db", db}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errOut, exitUsage, tc.wantErr)
		}
	}
}

// TestDumpBehindOneOfTwoPFs: on a node of two PFs, each with a VF that
// has a netdev, --iface with --pf picks the family when the interface is
// the PF's own, and refuses an interface of the other family rather than
// show the PF's family and ignore --iface.
func TestDumpBehindOneOfTwoPFs(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(p events.Payload) uint64 {
		envs = append(envs, events.New(p, t0.Add(time.Duration(len(envs))*time.Second), "boot-1"))
		return uint64(len(envs))
	}
	pf := func(addr, ifname string) events.DeviceFacts {
		return events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1592", Class: "020000", Driver: "ice",
			VFIndex: -1, Interfaces: []string{ifname}}
	}
	vf := func(addr, pfAddr, pfIface string) events.DeviceFacts {
		return events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1889", Class: "020000", Driver: "iavf",
			PF: pfAddr, PFInterface: pfIface, Interfaces: []string{pfIface + "v0"}}
	}
	add(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 1, Registration: "legacy"})
	devs := []events.DeviceFacts{
		pf("0000:3b:00.0", "ens1f0"), vf("0000:3b:02.0", "0000:3b:00.0", "ens1f0"),
		pf("0000:3b:00.1", "ens1f1"), vf("0000:3b:0a.0", "0000:3b:00.1", "ens1f1"),
	}
	seqsOf := map[string][]uint64{}
	for _, d := range devs {
		seqsOf[d.Address] = append(seqsOf[d.Address], add(events.DeviceDiscovered{Device: d}))
	}
	for _, d := range devs {
		seqsOf[d.Address] = append(seqsOf[d.Address], add(events.DeviceHealthChanged{Address: d.Address, Healthy: false, Reason: "link down"}))
	}
	family := func(addrs ...string) []uint64 {
		var seqs []uint64
		for _, a := range addrs {
			seqs = append(seqs, seqsOf[a]...)
		}
		slices.Sort(seqs)
		return seqs
	}
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)

	for _, tc := range []struct {
		args []string
		want []uint64
	}{
		{[]string{"--iface", "ens1f1", "--pf", "0000:3b:00.1"}, family("0000:3b:00.1", "0000:3b:0a.0")},
		{[]string{"--iface", "ens1f0", "--pf", "0000:3b:00.0"}, family("0000:3b:00.0", "0000:3b:02.0")},
		{[]string{"--iface", "ens1f1v0"}, family("0000:3b:0a.0")},
	} {
		code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "jsonl"}, tc.args...)...)
		if code != exitOK {
			t.Errorf("%v: exit %d: %s", tc.args, code, errOut)
			continue
		}
		if got := jsonlSeqs(t, out); !slices.Equal(got, tc.want) {
			t.Errorf("%v: events %v, want %v", tc.args, got, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--iface", "ens1f1", "--pf", "0000:3b:00.0"},
		{"--iface", "ens1f1v0", "--pf", "0000:3b:00.0"},
		{"--iface", "ens1f0", "--pf", "0000:3b:00.1"},
	} {
		want := "devledger dump: --iface " + args[1] + " and --pf " + args[3] + ": the interface is not the PF's"
		code, out, errOut := runCLI(t, append([]string{"dump", "--db", db}, args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, %q:\n%s\nwant exit %d and %q", args, code, errOut, out, exitUsage, want)
		}
	}
}

// jsonlSeqs returns the sequence numbers of dump --format jsonl's output.
func jsonlSeqs(t *testing.T, out string) []uint64 {
	t.Helper()
	var seqs []uint64
	if strings.TrimSpace(out) == "" {
		return nil
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct{ Seq uint64 }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

// A health change names no pool: --pool selects those of its members, in
// the pool the device was in then (docs/operations.md's unhealthy-devices
// alert runs dump --pool P --type DeviceHealthChanged). In the sample run
// a device goes unhealthy in intel.com/sriov_net (unbound from iavf),
// moves to intel.com/sriov_vfio, and is healthy there.
func TestDumpPoolSelectsTheHealthChangesOfItsMembers(t *testing.T) {
	l, err := store.Open(sampleLedgerPath, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Each health change's pool, by the membership changes before it.
	want := map[string][]uint64{}
	member := map[string]string{}
	err = l.Read(0, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.PoolMembershipChanged:
			for _, a := range p.Removed {
				delete(member, a)
			}
			for _, a := range p.Added {
				member[a] = p.Pool
			}
		case events.DeviceHealthChanged:
			if pool := member[p.Address]; pool != "" {
				want[pool] = append(want[pool], e.Seq)
			}
		}
		return nil
	})
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(want["intel.com/sriov_net"]) == 0 || len(want["intel.com/sriov_vfio"]) == 0 {
		t.Fatalf("the sample has no health change in both pools: %v", want)
	}
	for pool, seqs := range want {
		code, out, errOut := runCLI(t, "dump", "--db", sampleLedgerPath, "--pool", pool, "--type", "DeviceHealthChanged", "--format", "jsonl")
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", pool, code, errOut)
		}
		if got := jsonlSeqs(t, out); !slices.Equal(got, seqs) {
			t.Errorf("dump --pool %s --type DeviceHealthChanged: %v, want %v", pool, got, seqs)
		}
		// --stats counts the same events.
		code, out, errOut = runCLI(t, "dump", "--db", sampleLedgerPath, "--pool", pool, "--type", "DeviceHealthChanged", "--stats", "--format", "json")
		if code != exitOK {
			t.Fatalf("%s --stats: exit %d: %s", pool, code, errOut)
		}
		var doc statsDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Total.Events != len(seqs) {
			t.Errorf("dump --pool %s --type DeviceHealthChanged --stats: %d events, want %d", pool, doc.Total.Events, len(seqs))
		}
	}
}

// The tools print event times to the second, so a time written to the
// second, as an end (dump --until, replay --until-time, --diff), is the
// whole of that second: copied from their output, it keeps the events of
// that second. A time with a fraction ("." or "," before it) is taken as
// written.
func TestAnEndGivenToTheSecondKeepsThatSecond(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 400_000_000, time.UTC) // 09:00:00.4
	envs := []events.Envelope{
		events.New(events.DaemonStarted{Version: "v0.3.0", PID: 1}, t0, "boot-1"),
		events.New(events.DeviceDiscovered{Device: events.DeviceFacts{Address: "0000:3b:02.1", Vendor: "8086", Device: "1889", Driver: "vfio-pci"}}, t0.Add(time.Second), "boot-1"),
	}
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)

	for until, want := range map[string][]uint64{
		"2026-11-30T09:00:01Z":      {2},
		"2026-11-30T10:00:01+01:00": {2},
		"2026-11-30T09:00:01.3Z":    nil,
		// An end at the event's own instant takes it in.
		"2026-11-30T09:00:01.4Z": {2},
		// A decimal comma, which time.Parse takes as ISO 8601 does.
		"2026-11-30T09:00:01,3Z": nil,
		// Lowercase, as RFC 3339 allows.
		"2026-11-30t09:00:01z": {2},
	} {
		code, out, errOut := runCLI(t, "dump", "--db", db, "--since", "2026-11-30T09:00:01Z", "--until", until, "--format", "jsonl")
		if code != exitOK {
			t.Fatalf("dump --until %s: exit %d: %s", until, code, errOut)
		}
		var got []uint64
		if strings.TrimSpace(out) != "" {
			got = jsonlSeqs(t, out)
		}
		if !slices.Equal(got, want) {
			t.Errorf("dump --since 2026-11-30T09:00:01Z --until %s: events %v, want %v", until, got, want)
		}
	}
	for until, want := range map[string]string{
		"2026-11-30T09:00:01Z":   "State at 2026-11-30T09:00:01Z: last event #2",
		"2026-11-30T09:00:01.3Z": "last event #1",
		"2026-11-30T09:00:01,3Z": "State at 2026-11-30T09:00:01.3Z: last event #1",
	} {
		code, out, errOut := runCLI(t, "replay", "--db", db, "--until-time", until)
		if code != exitOK {
			t.Fatalf("replay --until-time %s: exit %d: %s", until, code, errOut)
		}
		if head, _, _ := strings.Cut(out, "\n"); !strings.Contains(head, want) {
			t.Errorf("replay --until-time %s: %q, want it to say %q", until, head, want)
		}
	}
	code, out, errOut := runCLI(t, "replay", "--db", db, "--diff", "2026-11-30T09:00:00Z..2026-11-30T09:00:01Z")
	if code != exitOK {
		t.Fatalf("replay --diff: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "0000:3b:02.1") {
		t.Errorf("replay --diff over the second of #2 does not show its device:\n%s", out)
	}
}

// A rejected config's line counts its errors in words that agree with the
// count.
func TestARejectedConfigCountsItsErrors(t *testing.T) {
	for errs, want := range map[int]string{1: "1 error: e1", 2: "2 errors: e1"} {
		p := events.ConfigRejected{Path: "config.json"}
		for i := range errs {
			p.Errors = append(p.Errors, fmt.Sprintf("e%d", i+1))
		}
		if got := describe(events.Envelope{Seq: 1, Payload: p}); got != want {
			t.Errorf("%d errors: %q, want %q", errs, got, want)
		}
	}
}
