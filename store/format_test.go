package store

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	goldenfile "github.com/devledger/devledger/internal/golden"
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
