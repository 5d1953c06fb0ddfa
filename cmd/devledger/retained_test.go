package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
)

// retainedCopy writes story into a new ledger, snapshots the
// state before event first and lets retention drop what the snapshot
// holds: the ledger keeps the events from first on, as on a node that has
// run for longer than --retain-age.
func retainedCopy(t *testing.T, story []events.Envelope, first uint64) string {
	t.Helper()
	db := filepath.Join(kubelettest.ShortTempDir(t), ledgerFileName) // beside an admin socket
	l, err := store.Open(db, store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Append(ctx, story...); err != nil {
		t.Fatal(err)
	}
	at, err := l.Replay(first - 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, at, "test"); err != nil {
		t.Fatal(err)
	}
	// The EventsDropped it appends is dated after the story's last event.
	d, ok, err := l.Retain(ctx, store.Retention{MaxBytes: 1, Now: retainedAt})
	if err != nil || !ok || d.ToSeq != first-1 {
		t.Fatalf("retain before #%d: %+v %v %v", first, d, ok, err)
	}
	return db
}

func byTime(a, b events.Envelope) int { return a.Time.Compare(b.Time) }

// retainedAt is when the tests' retention ran: after the sample story,
// the same day.
var retainedAt = time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)

// TestDumpAfterRetention: once retention dropped the oldest events, dump
// says of the events kept what it said of them before: it attributes them
// (to a pool, a pod, a PF or an interface, a holder) by the snapshot that
// retention kept, not by an empty node. For every cut of the sample story
// between two moments, the dump of the kept events equals the dump of the
// whole ledger from that moment on (--since).
func TestDumpAfterRetention(t *testing.T) {
	envs := sampleStory()
	full := sampleCopy(t)
	cuts := 0
	for i := 1; i < len(envs); i++ {
		before := slices.MaxFunc(envs[:i], byTime).Time
		if !slices.MinFunc(envs[i:], byTime).Time.After(before) {
			continue // --since cannot cut the story here
		}
		cuts++
		compareCut(t, full, envs, uint64(i+1), retainedArgSets)
	}
	if cuts < 20 {
		t.Fatalf("only %d cuts: the sample story changed", cuts)
	}
}

// compareCut checks that each dump of args says of a copy of envs that
// keeps the events from first on what it says of the whole ledger full
// (envs) from then on. Where the whole ledger's dump fails (nothing of it
// is left after the cut), only the error could differ, naming what the
// ledger keeps.
func compareCut(t *testing.T, full string, envs []events.Envelope, first uint64, argSets [][]string) {
	t.Helper()
	until := slices.MaxFunc(envs, byTime).Time.Format(time.RFC3339Nano)
	since := envs[first-1].Time.Format(time.RFC3339Nano)
	db := retainedCopy(t, envs, first)
	for _, args := range argSets {
		wantCode, want, wantErr := runCLI(t, append([]string{"dump", "--db", full, "--since", since, "--until", until}, args...)...)
		if wantCode != exitOK {
			continue
		}
		code, got, errOut := runCLI(t, append([]string{"dump", "--db", db, "--until", until}, args...)...)
		want, got = pageLosses.ReplaceAllString(want, ""), pageLosses.ReplaceAllString(got, "")
		want, got = spellStarts.ReplaceAllString(want, "($1"), spellStarts.ReplaceAllString(got, "($1")
		want, got = spellEnds.ReplaceAllString(want, "healthy again"), spellEnds.ReplaceAllString(got, "healthy again")
		if code != wantCode || got != want {
			t.Errorf("%v: kept from #%d (%s): exit %d (%s):\n%s\nwant, as the whole ledger says from then on (exit %d %s):\n%s",
				args, first, since, code, errOut, got, wantCode, wantErr, want)
		}
	}
}

// TestPageAfterRetention: the history page of the events kept draws what
// the page of the whole ledger draws from then on, for what the sample
// story lacks: an allocation of two devices, one of which was removed
// while held (the bar of the other is not lost), and a recovered
// allocation bound again (its bar says who, not "recovered").
func TestPageAfterRetention(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(p events.Payload) {
		envs = append(envs, events.New(p, t0.Add(time.Duration(len(envs))*time.Minute), "boot-1"))
	}
	const pool = "example.com/gpu"
	devs := []string{"0000:af:00.0", "0000:b0:00.0", "0000:b1:00.0"}
	add(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 1, Registration: "legacy"})
	add(events.ConfigApplied{Path: "/etc/devledger/config.json", Pools: []events.PoolSpec{{Resource: pool, DeviceType: "genericPCI"}}})
	for _, addr := range devs {
		add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: addr, Vendor: "10de", Device: "2330", Driver: "vfio-pci", NUMANode: 0, VFIndex: -1}})
	}
	add(events.PoolMembershipChanged{Pool: pool, Added: devs, Reason: "config applied"})
	add(events.DevicesAllocated{Pool: pool, DeviceIDs: devs[:2]})
	pair := uint64(len(envs))
	add(events.AllocationBound{AllocationSeq: pair, Pool: pool, DeviceIDs: devs[:2], Namespace: "ml", Pod: "pair-0", Container: "main"})
	add(events.AllocationRecovered{Pool: pool, DeviceIDs: devs[2:], Namespace: "ml", Pod: "lost-0", Container: "main"})
	recovered := uint64(len(envs))
	add(events.AllocationBound{AllocationSeq: recovered, Pool: pool, DeviceIDs: devs[2:], Namespace: "ml", Pod: "found-0", Container: "main"})
	add(events.DeviceRemoved{Address: devs[1], Reason: "gone from sysfs"})
	cut := uint64(len(envs) + 1)
	add(events.DeviceHealthChanged{Address: devs[0], Healthy: false, Reason: "driver unbound (was vfio-pci)"})
	add(events.DevicesReleased{AllocationSeq: pair, Pool: pool, DeviceIDs: devs[:2], HeldFor: time.Hour, Reason: "pod ml/pair-0 deleted"})
	add(events.DevicesReleased{AllocationSeq: recovered, Pool: pool, DeviceIDs: devs[2:], HeldFor: time.Hour, Reason: "pod ml/found-0 deleted"})

	full := filepath.Join(t.TempDir(), ledgerFileName)
	writeLedger(t, full, envs)
	argSets := [][]string{
		{"--format", "html", "--pod", "ml/found-0"},
		{"--device", devs[0]},
		{"--pod", "ml/pair-0"},
		{"--stats", "--by", "pod"},
	}
	compareCut(t, full, envs, cut+1, argSets)
	// Here the snapshot's time is the removal's, so the page draws the
	// spell of the device gone since then as the whole ledger does; at
	// the later cut it starts at the snapshot's time (see
	// historyFold.prior).
	compareCut(t, full, envs, cut, append(argSets, []string{"--format", "html"}, []string{"--format", "html", "--pod", "ml/pair-0"}))
}

// retainedArgSets are the dumps compared before and after retention.
var retainedArgSets = [][]string{
	nil,
	{"--device", "0000:3b:02.1"},
	{"--device", "0000:d8:00.0"},
	{"--pod", "ml/trainer-0"},
	{"--pod", "telco/dpdk-testpmd-8b21"},
	{"--namespace", "telco"},
	{"--pf", "0000:3b:00.0"},
	{"--iface", "ens1f0"},
	{"--pool", "nvidia.com/gpu"},
	{"--stats", "--by", "pool"},
	{"--stats", "--by", "pod"},
	{"--stats", "--by", "device"},
	{"--stats", "--by", "pool", "--pool", "nvidia.com/gpu"},
	{"--stats", "--by", "pod", "--namespace", "ml"},
	// Not the whole page: a health spell open at the cut is drawn from
	// the snapshot's time (see historyFold.prior), and the GPU's is.
	{"--format", "html", "--pod", "ml/trainer-0"},
	{"--format", "html", "--pool", "intel.com/sriov_vfio"},
}

// pageLosses are what the history page cannot name once retention dropped
// it, besides the filters it names and its note of the cut: the node that
// a DaemonStarted names, in a lane's search keys the pods it went to
// before the window, and why a leak was suspected.
var pageLosses = regexp.MustCompile(`<p class="meta">Filters: [^<]*</p>|<p class="note">Retention dropped [^<]*</p>\n|(: | of )worker-3| data-find="[^"]*"|leak suspected: [^\n"]*`)

// spellStarts finds, in a story, when an unhealthy spell open where the
// story begins started, and spellEnds how long one that ends in it
// lasted: the events kept after a cut inside the spell do not say.
var (
	spellStarts = regexp.MustCompile(`(?m)^\(((?:unhealthy|removed) since #\d+) at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	spellEnds   = regexp.MustCompile(`healthy again after [0-9dhms]+`)
)

// TestPageSaysWhereTheEventsKeptBegin: after retention, the page says that
// it starts at the first event kept, not where the node's history did: an
// allocation made before the cut (the trainer's GPU, from 09:20) is drawn
// from the left edge. A window that starts after the cut draws nothing
// the cut changed, and says nothing of it.
func TestPageSaysWhereTheEventsKeptBegin(t *testing.T) {
	envs := sampleStory()
	first := slices.IndexFunc(envs, func(e events.Envelope) bool { return e.Time.Hour() == 10 }) + 1
	db := retainedCopy(t, envs, uint64(first))
	note := fmt.Sprintf(`<p class="note">Retention dropped the events before #%d: `, first)
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{"whole", nil, true},
		{"since before the cut", []string{"--since", "2026-11-24T09:00:00Z"}, true},
		{"since after the cut", []string{"--since", "2026-11-24T11:00:00Z"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "html"}, tc.args...)...)
			if code != exitOK || strings.Contains(out, note) != tc.want {
				t.Errorf("exit %d (%s): want the note %q: %t:\n%s", code, errOut, note, tc.want, out)
			}
		})
	}
	if _, out, _ := runCLI(t, "dump", "--db", sampleCopy(t), "--format", "html"); strings.Contains(out, "Retention dropped") {
		t.Errorf("the page of a whole ledger speaks of retention:\n%s", out)
	}
}

// TestLiveDumpAfterRetention: through a running daemon's admin socket, dump
// starts from the snapshot the daemon serves, and says what it says of the
// file.
func TestLiveDumpAfterRetention(t *testing.T) {
	envs := sampleStory()
	bound := slices.IndexFunc(envs, func(e events.Envelope) bool {
		b, ok := e.Payload.(events.AllocationBound)
		return ok && b.Pod == "trainer-0"
	})
	db := retainedCopy(t, envs, uint64(bound+2))
	dir := filepath.Dir(db)
	offline := make([]string, len(retainedArgSets))
	for i, args := range retainedArgSets {
		code, out, errOut := runCLI(t, append([]string{"dump", "--state-dir", dir}, args...)...)
		if code != exitOK {
			t.Fatalf("%v on the file: exit %d: %s", args, code, errOut)
		}
		offline[i] = out
	}
	serveLedger(t, dir, db)
	for i, args := range retainedArgSets {
		code, live, errOut := runCLI(t, append([]string{"dump", "--state-dir", dir}, args...)...)
		if code != exitOK || live != offline[i] {
			t.Errorf("%v through the admin socket: exit %d: %s\n%s\nwant, as from the file:\n%s", args, code, errOut, live, offline[i])
		}
	}
}

// TestDumpStoryAfterRetentionNamesTheHolder: a device's story says whom a
// health change befell, also when the allocation that holds the device
// was made before the events retention kept.
func TestDumpStoryAfterRetentionNamesTheHolder(t *testing.T) {
	envs := sampleStory()
	bound := slices.IndexFunc(envs, func(e events.Envelope) bool {
		b, ok := e.Payload.(events.AllocationBound)
		return ok && b.Pod == "trainer-0"
	})
	// The GPU fails while the trainer holds it, after the cut, before its
	// release (the story's last event).
	fails := events.New(events.DeviceHealthChanged{Address: "0000:af:00.0", Healthy: false, Reason: "driver unbound (was vfio-pci)"},
		time.Date(2026, 11, 24, 14, 50, 0, 0, time.UTC), "c2d4e6f8-boot-0002")
	story := slices.Insert(envs, len(envs)-1, fails)
	db := retainedCopy(t, story, uint64(bound+2))
	code, out, errOut := runCLI(t, "dump", "--db", db, "--device", "0000:af:00.0")
	if code != exitOK || !strings.Contains(out, "unhealthy: driver unbound (was vfio-pci); held by ml/trainer-0/trainer (uid 9c2b-01de)\n") {
		t.Errorf("exit %d (%s): the story does not name the trainer as the holder:\n%s", code, errOut, out)
	}
}

// TestDumpWithoutTheSnapshotBeforeTheEventsKept: a ledger that keeps its
// events from #N on but holds no readable snapshot at #N-1 (a salvage
// lost it, or its bytes are damaged) still dumps every event it keeps,
// told from the events alone, and warns that it was.
func TestDumpWithoutTheSnapshotBeforeTheEventsKept(t *testing.T) {
	const first = 30
	db := retainedCopy(t, sampleStory(), first)
	_, sound, _ := runCLI(t, "dump", "--db", db)
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("snapshots")).Delete(binary.BigEndian.AppendUint64(nil, first-1))
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	const warning = "warning: no readable snapshot holds the state before #30, the first event kept"
	code, out, errOut := runCLI(t, "dump", "--db", db)
	if code != exitOK || out != sound || !strings.Contains(errOut, warning) {
		t.Errorf("dump: exit %d (%s):\n%s\nwant every event, as with the snapshot:\n%s", code, errOut, out, sound)
	}
	for _, args := range [][]string{{"--stats", "--by", "pool"}, {"--format", "html"}, {"--device", "0000:af:00.0"}} {
		if code, _, errOut := runCLI(t, append([]string{"dump", "--db", db}, args...)...); code != exitOK || !strings.Contains(errOut, warning) {
			t.Errorf("dump %v: exit %d, and no warning: %s", args, code, errOut)
		}
	}
	if _, page, _ := runCLI(t, "dump", "--db", db, "--format", "html"); !strings.Contains(page, "The events before #30 are missing, and no snapshot this devledger can read stands for them") {
		t.Errorf("the page does not say that the start is missing:\n%s", page)
	}
	// Retention keeps the snapshot where it cuts: without it the start is
	// missing, which is damage, and no tool puts it on retention.
	for _, args := range [][]string{{"dump"}, {"replay"}} {
		code, _, errOut := runCLI(t, append(args, "--db", db)...)
		if strings.Contains(errOut, "dropped by retention") || !strings.Contains(errOut, "missing") {
			t.Errorf("%s: exit %d, %q: want the start named missing, not retention's doing", args[0], code, errOut)
		}
	}
}

// TestPageUntilBeforeTheEventsKept: a page that ends before the first
// event kept draws no device of the state retention kept, as it drew
// none before, and says that no event kept is that old.
func TestPageUntilBeforeTheEventsKept(t *testing.T) {
	db := retainedCopy(t, sampleStory(), 30)
	code, out, errOut := runCLI(t, "dump", "--db", db, "--until", "2026-11-24T09:00:00Z", "--format", "html")
	if code != exitOK || len(checkPage(t, out).lanes) > 0 || !strings.Contains(out, "No events at or before --until 2026-11-24T09:00:00Z: the ledger's first event, #30, ") {
		t.Errorf("exit %d (%s): the page draws devices, or does not say why it draws none:\n%s", code, errOut, out)
	}
}

// A replay to a time before the events retention kept says so, naming the
// time as it was given (to the second) and the oldest event kept.
func TestReplayUntilBeforeTheEventsKept(t *testing.T) {
	db := retainedCopy(t, sampleStory(), 30)
	code, out, errOut := runCLI(t, "replay", "--db", db, "--until-time", "2026-11-24T09:00:00Z")
	want := "replay " + db + " to 2026-11-24T09:00:00Z: history dropped by retention: the oldest event kept is #30"
	if code != exitFailure || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, %q, %q; want exit %d saying %q", code, out, errOut, exitFailure, want)
	}
}

// olderSnapshotOnly is a ledger that keeps the sample story's events from
// first on, whose snapshot at first-1 this build cannot read (spoil
// rewrites it: a newer devledger's, or damaged bytes), beside a readable
// older snapshot at older that no longer has its events after it.
func olderSnapshotOnly(t *testing.T, first, older uint64, spoil func(v []byte) []byte) string {
	t.Helper()
	db := filepath.Join(kubelettest.ShortTempDir(t), ledgerFileName) // beside an admin socket
	l, err := store.Open(db, store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Append(ctx, sampleStory()...); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{older, first - 1} {
		at, err := l.Replay(seq)
		if err == nil {
			_, err = l.SaveSnapshot(ctx, at, "test")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Retention removes the snapshots before its cut: keep the older one
	// to put back.
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var kept []byte
	err = bdb.View(func(tx *bolt.Tx) error {
		kept = slices.Clone(tx.Bucket([]byte("snapshots")).Get(binary.BigEndian.AppendUint64(nil, older)))
		return nil
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil || kept == nil {
		t.Fatalf("the snapshot at #%d: %v", older, err)
	}
	if l, err = store.Open(db, store.Options{Node: "worker-3"}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := l.Retain(ctx, store.Retention{MaxBytes: 1, Now: retainedAt})
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil || !ok || d.ToSeq != first-1 {
		t.Fatalf("retain before #%d: %+v %v %v", first, d, ok, err)
	}
	if bdb, err = bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("snapshots"))
		if err := b.Put(binary.BigEndian.AppendUint64(nil, older), kept); err != nil {
			return err
		}
		key := binary.BigEndian.AppendUint64(nil, first-1)
		return b.Put(key, spoil(slices.Clone(b.Get(key))))
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestToolsRefuseAnOlderSnapshotForTheOneBeforeTheEventsKept: when the
// snapshot before the first event kept cannot be read (a newer
// devledger's, or damaged) and an older one can, the tools do not fold
// the events kept onto the older state (the events between are gone):
// dump tells the events from the events alone and warns, and replay
// refuses, each naming the snapshot and why it cannot be read, from the
// file as through a running daemon's admin socket.
func TestToolsRefuseAnOlderSnapshotForTheOneBeforeTheEventsKept(t *testing.T) {
	const first, older = 30, 20
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	newer := func(v []byte) []byte {
		rec := regexp.MustCompile(`^\{"format":\d+,`).ReplaceAll(v[4:], []byte(`{"format":99,`))
		key := binary.BigEndian.AppendUint64(nil, first-1)
		sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, rec)
		return append(binary.BigEndian.AppendUint32(nil, sum), rec...)
	}
	damaged := func(v []byte) []byte {
		v[len(v)/2] ^= 0xff
		return v
	}
	const warning = "warning: no readable snapshot holds the state before #30, the first event kept"
	const missing = "the events before #30 are missing, and no snapshot this build reads at #29 stands for them"
	for _, tc := range []struct {
		name      string
		spoil     func([]byte) []byte
		dumpCode  int
		dumpWhy   []string // in the warning, for the file
		replayErr string
	}{
		{"newer", newer, exitOK, []string{
			"the snapshot at #29: unsupported snapshot format 99",
			"a newer devledger wrote it",
			"read the ledger with that version, or take the events from #30 on alone",
		}, "the snapshot at #29: unsupported snapshot format 99"},
		{"damaged", damaged, exitFailure, []string{
			"the snapshot at #29, which stands for the events before #30, is damaged: ",
			"corrupt at seq 29: snapshot: ",
		}, "corrupt at seq 29: snapshot: "}, // shown, then the damage named
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := olderSnapshotOnly(t, first, older, tc.spoil)
			// checkDump checks what dump said; via names how it read.
			checkDump := func(via string, code int, out, errOut string) {
				t.Helper()
				warned, _, _ := strings.Cut(errOut, "\n")
				if code != tc.dumpCode || !strings.Contains(warned, warning) || strings.Contains(errOut, missing) {
					t.Errorf("dump%s: exit %d, %q; want exit %d and the warning %q, not that the events are missing", via, code, errOut, tc.dumpCode, warning)
				}
				for _, why := range tc.dumpWhy {
					if !strings.Contains(warned, why) {
						t.Errorf("dump%s: the warning %q does not say %q", via, warned, why)
					}
				}
				if !regexp.MustCompile(`(?m)^ +30 +\d\d:\d\d:\d\d `).MatchString(out) {
					t.Errorf("dump%s does not show the events kept:\n%s", via, out)
				}
			}
			code, out, errOut := runCLI(t, "dump", "--db", db)
			// Damage in the file it read names the way out; through a
			// daemon, which holds the file, the rest is the same.
			fileSaid, hinted := strings.CutSuffix(errOut, "  to copy every intact event: devledger ledger salvage --db "+db+" --out FILE\n")
			if hinted != (tc.dumpCode == exitFailure) {
				t.Errorf("dump: exit %d, names salvage: %v:\n%s", code, hinted, errOut)
			}
			checkDump("", code, out, errOut)
			// The store's replay of the file refuses too, naming the
			// snapshot it could not read.
			code, out, errOut = runCLI(t, "replay", "--db", db)
			if code != exitFailure || out != "" || !strings.Contains(errOut, tc.replayErr) {
				t.Errorf("replay: exit %d, %q:\n%s\nwant exit %d naming %q", code, errOut, out, exitFailure, tc.replayErr)
			}
			code, out, errOut = runCLI(t, "replay", "--db", db, "--diff", "#30..#31")
			if code != exitFailure || out != "" || !strings.Contains(errOut, tc.replayErr) {
				t.Errorf("replay --diff: exit %d, %q:\n%s\nwant exit %d naming %q", code, errOut, out, exitFailure, tc.replayErr)
			}
			// Through a running daemon's admin socket the tools say the
			// same, with the same exit codes.
			serveLedger(t, filepath.Dir(db), db)
			code, out, errOut = runCLI(t, "dump", "--state-dir", filepath.Dir(db))
			checkDump(" through the admin socket", code, out, errOut)
			if errOut != fileSaid {
				t.Errorf("dump through the admin socket says\n%s\nand from the file\n%s", errOut, fileSaid)
			}
			for _, args := range [][]string{{"replay"}, {"replay", "--diff", "#30..#31"}} {
				code, out, errOut = runCLI(t, append(args, "--state-dir", filepath.Dir(db))...)
				if code != exitFailure || out != "" || !strings.Contains(errOut, tc.replayErr) || strings.Contains(errOut, missing) {
					t.Errorf("%v through the admin socket: exit %d, %q:\n%s\nwant exit %d naming %q", args, code, errOut, out, exitFailure, tc.replayErr)
				}
			}
		})
	}
}
