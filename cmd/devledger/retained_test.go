package main

import (
	"context"
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
	until := slices.MaxFunc(envs, byTime).Time.Format(time.RFC3339Nano)
	cuts := 0
	for i := 1; i < len(envs); i++ {
		before := slices.MaxFunc(envs[:i], byTime).Time
		if !slices.MinFunc(envs[i:], byTime).Time.After(before) {
			continue // --since cannot cut the story here
		}
		cuts++
		first := uint64(i + 1)
		since := envs[i].Time.Format(time.RFC3339Nano)
		db := retainedCopy(t, envs, first)
		for _, args := range retainedArgSets {
			name := strings.Join(append([]string{"#" + since}, args...), " ")
			wantCode, want, wantErr := runCLI(t, append([]string{"dump", "--db", full, "--since", since, "--until", until}, args...)...)
			if wantCode != exitOK {
				// Nothing of it is left after the cut: only the error
				// differs, naming what the ledger keeps.
				continue
			}
			code, got, errOut := runCLI(t, append([]string{"dump", "--db", db, "--until", until}, args...)...)
			want, got = pageLosses.ReplaceAllString(want, ""), pageLosses.ReplaceAllString(got, "")
			if code != wantCode || got != want {
				t.Errorf("%s: kept from #%d: exit %d (%s):\n%s\nwant, as the whole ledger says from then on (exit %d %s):\n%s",
					name, first, code, errOut, got, wantCode, wantErr, want)
			}
		}
	}
	if cuts < 20 {
		t.Fatalf("only %d cuts: the sample story changed", cuts)
	}
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
// it, besides the filters it names: the node that a DaemonStarted names, in
// a lane's search keys the pods it went to before the window, and why a
// leak was suspected.
var pageLosses = regexp.MustCompile(`<p class="meta">Filters: [^<]*</p>|(: | of )worker-3| data-find="[^"]*"|leak suspected: [^\n"]*`)

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
	if code != exitOK || !strings.Contains(out, "unhealthy: driver unbound (was vfio-pci); held by ml/trainer-0/trainer\n") {
		t.Errorf("exit %d (%s): the story does not name the trainer as the holder:\n%s", code, errOut, out)
	}
}
