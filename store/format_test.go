package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	goldenfile "github.com/devledger/devledger/internal/golden"
	bolt "go.etcd.io/bbolt"
)

// fixtureV1 is a ledger written by this package at format version 1 and
// committed: every later build must read it. It holds 60 generated events
// (newHistory(21, 16)), a snapshot at 40, and a retention that dropped
// seqs 1..20. Regenerate it with -update only if the generator changes; a
// change of the format itself needs a new fixture beside this one.
const fixtureV1 = "testdata/v1.ledger"

func writeFixtureV1(t *testing.T, path string) {
	os.Remove(path)
	l, err := Open(path, Options{Node: "fixture-node", BootID: "boot-fixture"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testClock(l)
	ctx := context.Background()
	envs := mustAppend(t, l, newHistory(21, 16).take(60)...)
	if _, err := l.SaveSnapshot(ctx, foldAll(envs[:40]), "fixture"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.Retain(ctx, Retention{MaxAge: time.Hour, Now: envs[20].Time.Add(time.Hour)}); err != nil || !ok {
		t.Fatalf("retain: %v %v", ok, err)
	}
}

func TestFormatV1FixtureStillReads(t *testing.T) {
	if goldenfile.Updating() {
		writeFixtureV1(t, fixtureV1)
	}
	// Work on a copy: a read-only open must not change the fixture, and a
	// test must not depend on that.
	b, err := os.ReadFile(fixtureV1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v1.ledger")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if m := l.Meta(); m.FormatVersion != 1 || m.Node != "fixture-node" || m.Created.IsZero() {
		t.Errorf("meta %+v", m)
	}
	rep, err := l.Check(context.Background())
	if err != nil || rep.FirstSeq != 21 || rep.LastSeq != 62 || rep.Snapshots != 1 || rep.Events != 42 {
		t.Fatalf("check: %v, %+v", err, rep)
	}

	want := newHistory(21, 16).take(60)
	for i := range want {
		want[i], _ = stamp(want[i], uint64(i+1))
		switch want[i].Type {
		case events.TypeDevicesAllocated, events.TypeKubeletRestarted, events.TypeConfigApplied:
			want[i].Version = 1 // written before version 2; read as it was written
		}
	}
	got := readAll(t, l, 0)
	if !reflect.DeepEqual(got[:40], want[20:]) {
		t.Errorf("events 21..60 differ from the generated history")
	}
	if p, ok := got[40].Payload.(events.SnapshotTaken); !ok || p.Seq != 40 || got[40].BootID != "boot-fixture" {
		t.Errorf("seq 61: %+v", got[40])
	}
	if p, ok := got[41].Payload.(events.EventsDropped); !ok || p.FromSeq != 1 || p.ToSeq != 20 || p.SnapshotSeq != 40 || p.Count != 20 {
		t.Errorf("seq 62: %+v", got[41])
	}

	s, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	wantState := events.Apply(events.Apply(foldAll(want), got[40]), got[41])
	// The fixture's snapshot predates HealthSeq: a verdict it holds has
	// none (0, older than any event after the snapshot).
	for addr, d := range wantState.Devices {
		if d.HealthSeq <= 40 {
			d.HealthSeq = 0
			wantState.Devices[addr] = d
		}
	}
	if !s.Equal(wantState) {
		t.Error("replayed state differs from the fold of the generated history")
	}
}

// A node upgraded in place keeps the snapshots its older build took, each
// the fold of that build. Where the fold's rules changed since within one
// snapshot format, the check must take the older rule's answer for a
// snapshot of that format, not call it damage: the daemon's check after
// start would record a LedgerDamaged for it and stay unready until an
// operator acknowledged what is no damage. Each case is a history an
// older build recorded, and what its fold then held that this one's does
// not (as its own replay of such a ledger shows); stored as the current
// format, the same snapshot is still a mismatch.
func TestCheckTakesAnOlderBuildsSnapshotAsItsFoldHeldIt(t *testing.T) {
	a := events.PoolSpec{Resource: "x.io/a", DeviceType: "genericPCI"}
	b := events.PoolSpec{Resource: "x.io/b", DeviceType: "genericPCI"}
	const dev = "0000:3b:01.0"
	for _, tc := range []struct {
		name    string
		format  int
		history []events.Payload
		// asItFolded makes this build's fold of history the older one's.
		asItFolded func(s *events.State, envs []events.Envelope)
	}{
		{
			name:   "a registration answered late",
			format: 3,
			history: []events.Payload{
				events.DaemonStarted{Version: "old"},
				events.ConfigApplied{Path: "c", SHA256: "1", Pools: []events.PoolSpec{a, b}},
				events.PluginServing{Pool: a.Resource, Socket: "a1.sock", Mode: "legacy"},
				events.PluginServing{Pool: b.Resource, Socket: "b1.sock", Mode: "legacy"},
				// The kubelet restarted: a serves a new socket, then the
				// answer to its Register on the old one comes.
				events.PluginServing{Pool: a.Resource, Socket: "a2.sock", Mode: "legacy"},
				events.PluginRegistered{Pool: a.Resource, Socket: "a1.sock", Mode: "legacy"},
				// A reload drops b, then the answer to its Register comes.
				events.ConfigApplied{Path: "c", SHA256: "2", Pools: []events.PoolSpec{a}},
				events.PluginRegistered{Pool: b.Resource, Socket: "b1.sock", Mode: "legacy"},
				events.DaemonStopped{Reason: "signal: SIGTERM", Clean: true},
			},
			asItFolded: func(s *events.State, envs []events.Envelope) {
				pa := s.Pools[a.Resource]
				pa.Registration.Socket, pa.Registration.RegisteredAt = "a1.sock", envs[5].Time
				s.Pools[a.Resource] = pa
				s.Pools[b.Resource] = events.Pool{Spec: events.PoolSpec{Resource: b.Resource},
					Registration: events.Registration{Socket: "b1.sock", Mode: "legacy", RegisteredAt: envs[7].Time}}
			},
		},
		{
			name:   "a device left one of two pools that listed it",
			format: 4,
			history: []events.Payload{
				events.DaemonStarted{Version: "old"},
				events.ConfigApplied{Path: "c", SHA256: "1", Pools: []events.PoolSpec{a, b}},
				events.DeviceDiscovered{Device: events.DeviceFacts{Address: dev, Vendor: "8086", Device: "1889", Driver: "vfio-pci"}},
				events.PoolMembershipChanged{Pool: a.Resource, Added: []string{dev}},
				// A move to b and back, while b restarted: a's leave and
				// join come before b's join and leave.
				events.PoolMembershipChanged{Pool: a.Resource, Removed: []string{dev}},
				events.PoolMembershipChanged{Pool: a.Resource, Added: []string{dev}},
				events.PoolMembershipChanged{Pool: b.Resource, Added: []string{dev}},
				events.PoolMembershipChanged{Pool: b.Resource, Removed: []string{dev}},
				events.DaemonStopped{Reason: "signal: SIGTERM", Clean: true},
			},
			asItFolded: func(s *events.State, _ []events.Envelope) {
				d := s.Devices[dev]
				d.Pool = ""
				s.Devices[dev] = d
			},
		},
	} {
		for _, format := range []int{tc.format, 5} {
			t.Run(fmt.Sprintf("%s, format %d", tc.name, format), func(t *testing.T) {
				l := openTestLog(t)
				var envs []events.Envelope
				for i, p := range tc.history {
					envs = append(envs, ev(i, p))
				}
				envs = mustAppend(t, l, envs...)
				fold := foldAll(envs)
				old := fold.Clone()
				tc.asItFolded(&old, envs)
				if old.Equal(fold) {
					t.Fatal("the older build's fold is this one's")
				}
				problems := checkWithSnapshot(t, l, old, format)
				if mismatch := len(problems) > 0; mismatch != (format == 5) {
					t.Errorf("check of the snapshot as format %d: %q; want a mismatch only as format 5", format, problems)
				}
			})
		}
	}
}

// Builds that wrote snapshot format 5 before this one took an outage of
// the kubelet whose end the clock stamped before its start (a node
// rebooted with its clock behind) from the downtime; this fold counts it
// as none. A snapshot such a build took right after (the stop's, at the
// upgrade) holds the lower sum, and the check must take it, not record
// damage and keep /readyz false; a higher one is still a mismatch.
func TestCheckTakesAnOlderBuildsDowntimeAfterAClockStep(t *testing.T) {
	for _, tc := range []struct {
		name     string
		downtime time.Duration
		mismatch bool
	}{{"lower, as an older build summed it", -5 * time.Hour, false}, {"higher", 5 * time.Hour, true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := openTestLog(t)
			stop := ev(1, events.KubeletStopped{Socket: "kubelet.sock"})
			back := ev(2, events.KubeletRestarted{Socket: "kubelet.sock", StoppedAt: stop.Time})
			back.Time = stop.Time.Add(-5 * time.Hour)
			envs := mustAppend(t, l, ev(0, events.DaemonStarted{Version: "old"}), stop, back,
				ev(3, events.DaemonStopped{Reason: "signal: SIGTERM", Clean: true}))
			snap := foldAll(envs)
			snap.Kubelet.Downtime = tc.downtime
			problems := checkWithSnapshot(t, l, snap, 5)
			if mismatch := len(problems) > 0; mismatch != tc.mismatch {
				t.Errorf("check of a snapshot with the downtime %s, the fold's %s: %q", tc.downtime, foldAll(envs).Kubelet.Downtime, problems)
			}
		})
	}
}

// checkWithSnapshot stores s as a snapshot of the given format and
// returns the problems CheckAll finds.
func checkWithSnapshot(t *testing.T, l *Log, s events.State, format int) []error {
	t.Helper()
	rec, err := events.MarshalState(s)
	if err != nil {
		t.Fatal(err)
	}
	rec = bytes.Replace(rec, []byte(`{"format":5,`), fmt.Appendf(nil, `{"format":%d,`, format), 1)
	if err := l.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).Put(seqKey(s.Seq), appendValue(nil, s.Seq, rec))
	}); err != nil {
		t.Fatal(err)
	}
	_, problems, err := l.CheckAll(context.Background(), 32, nil)
	if err != nil {
		t.Fatal(err)
	}
	return problems
}
