package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

func TestSnapshotsAndReplay(t *testing.T) {
	l := openTestLog(t)
	testClock(l)
	ctx := context.Background()
	h := newHistory(7, 24)
	envs := mustAppend(t, l, h.take(150)...)

	if s, ok, err := l.LatestSnapshot(0); err != nil || ok {
		t.Fatalf("latest snapshot of a ledger without one: %+v %v %v", s.Seq, ok, err)
	}
	seq, err := l.SaveSnapshot(ctx, foldAll(envs[:60]), "every 60")
	if err != nil || seq != 151 {
		t.Fatalf("save snapshot: seq %d, %v", seq, err)
	}
	taken := readAll(t, l, 151)[0]
	if p, ok := taken.Payload.(events.SnapshotTaken); !ok || p.Seq != 60 || p.Reason != "every 60" || p.Size == 0 || taken.BootID != "boot-test" {
		t.Fatalf("SnapshotTaken event: %+v", taken)
	}
	envs = append(envs, taken)
	envs = append(envs, mustAppend(t, l, h.take(49)...)...)
	if _, err := l.SaveSnapshot(ctx, foldAll(envs[:120]), "every 60"); err != nil {
		t.Fatal(err)
	}
	envs = append(envs, readAll(t, l, 201)...)

	for _, tc := range []struct {
		atOrBefore, want uint64
		ok               bool
	}{{0, 120, true}, {59, 0, false}, {60, 60, true}, {119, 60, true}, {120, 120, true}, {500, 120, true}} {
		s, ok, err := l.LatestSnapshot(tc.atOrBefore)
		if err != nil || ok != tc.ok || s.Seq != tc.want {
			t.Errorf("LatestSnapshot(%d) = seq %d, %v, %v; want %d, %v", tc.atOrBefore, s.Seq, ok, err, tc.want, tc.ok)
		}
		if seq, ok := l.LatestSnapshotSeq(tc.atOrBefore); ok != tc.ok || seq != tc.want {
			t.Errorf("LatestSnapshotSeq(%d) = %d, %v; want %d, %v", tc.atOrBefore, seq, ok, tc.want, tc.ok)
		}
		exact := tc.ok && tc.want == tc.atOrBefore
		if s, ok, err := l.SnapshotAt(tc.atOrBefore); err != nil || ok != exact || ok && s.Seq != tc.want {
			t.Errorf("SnapshotAt(%d) = seq %d, %v, %v; want %v", tc.atOrBefore, s.Seq, ok, err, exact)
		}
	}

	for _, until := range []uint64{1, 59, 60, 61, 119, 120, 150, 151, 200, 201} {
		want := foldAll(envs[:until])
		got, err := l.Replay(until)
		if err != nil || !got.Equal(want) || got.Seq != until {
			t.Errorf("Replay(%d): seq %d, %v; not the fold", until, got.Seq, err)
		}
	}
	if got, err := l.Replay(0); err != nil || !got.Equal(foldAll(envs)) {
		t.Errorf("Replay(0): %v", err)
	}
	if _, err := l.Replay(l.LastSeq() + 1); err == nil || !strings.Contains(err.Error(), "ends at seq") {
		t.Errorf("replay past the end: %v", err)
	}

	for _, i := range []int{0, 1, 59, 60, 61, 120, 149, 150, 200} {
		at := envs[i].Time
		// The state then: every event up to the first stamped after at (a
		// SnapshotTaken shares its time with the event before it).
		want := foldAll(envs)
		for j := range envs {
			if envs[j].Time.After(at) {
				want = foldAll(envs[:j])
				break
			}
		}
		got, err := l.ReplayUntilTime(at)
		if err != nil || !got.Equal(want) {
			t.Errorf("ReplayUntilTime(time of event %d) = seq %d, %v; want seq %d", i+1, got.Seq, err, want.Seq)
		}
	}
	if got, err := l.ReplayUntilTime(baseTime.Add(-time.Hour)); err != nil || got.Seq != 0 {
		t.Errorf("before the first event: seq %d, %v", got.Seq, err)
	}

	rep, err := l.Check(ctx)
	if err != nil || rep.Snapshots != 2 || rep.Events != uint64(len(envs)) || len(rep.Problems) != 0 || rep.FirstBad != 0 {
		t.Fatalf("check: %v %+v", err, rep)
	}
}

// testClock makes the store stamp its own events (SnapshotTaken,
// EventsDropped) with the generated history's clock, one second per event.
func testClock(l *Log) {
	l.now = func() time.Time { return baseTime.Add(time.Duration(l.LastSeq()) * time.Second) }
}

func TestSaveSnapshotRefusesWhatIsNotAFold(t *testing.T) {
	l := openTestLog(t)
	envs := mustAppend(t, l, newHistory(8, 4).take(20)...)
	ctx := context.Background()
	past := foldAll(envs)
	past.Seq = 25
	wrongTime := foldAll(envs[:10])
	wrongTime.Time = wrongTime.Time.Add(time.Second)
	for name, s := range map[string]events.State{"empty": events.NewState(), "past the end": past, "wrong time": wrongTime} {
		if _, err := l.SaveSnapshot(ctx, s, "x"); err == nil {
			t.Errorf("%s: saved", name)
		}
	}
	if l.LastSeq() != 20 {
		t.Fatalf("refused snapshots appended events: last seq %d", l.LastSeq())
	}
}

// Each size pass goes on from the count the last one left (Log.sized):
// that count must be the size of the records it names, whatever came
// between, its own drops in steps and appends alike.
func TestRetentionCarriesItsCount(t *testing.T) {
	ctx := context.Background()
	l := openTestLog(t)
	h := newHistory(12, 24)
	rng := rand.New(rand.NewPCG(12, 24))
	size := func(from, to uint64) (n int64) {
		l.ReadRaw(from, func(seq uint64, rec []byte) error {
			if seq > to {
				return errStopFold
			}
			n += int64(crcSize + len(rec))
			return nil
		})
		return n
	}
	drops := 0
	for range 60 {
		mustAppend(t, l, h.take(1+rng.IntN(30))...)
		if rng.IntN(2) == 0 {
			st, err := l.Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.SaveSnapshot(ctx, st, "test"); err != nil {
				t.Fatal(err)
			}
		}
		bound := size(l.FirstSeq(), l.LastSeq()) * int64(60+rng.IntN(40)) / 100
		_, dropped, err := l.Retain(ctx, Retention{MaxBytes: bound, MaxDrop: 1 + rng.IntN(40)})
		if err != nil {
			t.Fatal(err)
		}
		if dropped {
			drops++
		}
		l.writeMu.Lock()
		carried := l.sized
		l.writeMu.Unlock()
		if carried.first != l.FirstSeq() || carried.last > l.LastSeq() || carried.bytes != size(carried.first, carried.last) {
			t.Fatalf("carried %+v; the ledger holds #%d-#%d, %d bytes up to #%d", carried, l.FirstSeq(), l.LastSeq(), size(carried.first, carried.last), carried.last)
		}
	}
	if drops < 10 {
		t.Errorf("%d passes dropped anything: the test did not test the drops", drops)
	}
}

// The check after start reads every record: it leaves their size for
// retention's first pass, which then reads none of them again. A check
// that found damage leaves nothing.
func TestACheckLeavesItsCountToRetention(t *testing.T) {
	ctx := context.Background()
	l := openTestLog(t)
	mustAppend(t, l, newHistory(13, 8).take(50)...)
	if _, problems, err := l.CheckAll(ctx, 32, nil); err != nil || len(problems) > 0 {
		t.Fatal(problems, err)
	}
	var fresh bytesCounted
	if err := l.view(func(tx *bolt.Tx) error { return fresh.count(ctx, tx, 0) }); err != nil {
		t.Fatal(err)
	}
	l.writeMu.Lock()
	left := l.sized
	l.writeMu.Unlock()
	if left != fresh || left.last != 50 {
		t.Errorf("the check left %+v, the records count %+v", left, fresh)
	}

	path := markedLedger(t, 30)
	flipInFile(t, path, marker(10))
	d, err := Open(path, Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, problems, err := d.CheckAll(ctx, 32, nil); err != nil || len(problems) == 0 {
		t.Fatalf("the check of a damaged record: %v, %v", problems, err)
	}
	if d.sized != (bytesCounted{}) {
		t.Errorf("a check that found damage left %+v", d.sized)
	}
}

// Dropping in steps (MaxDrop) ends where one pass ends, over snapshots a
// newer build wrote too: by age, at the same first event; by size, no
// earlier (each step's EventsDropped adds to the size the next counts).
// Either way every event kept replays to the fold.
func TestRetentionInStepsEndsWhereOnePassEnds(t *testing.T) {
	ctx := context.Background()
	stepped := 0 // seeds whose drop took more than one step
	for seed := uint64(1); seed <= 16; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		batches := make([]int, 4+rng.IntN(8))
		unreadable := make([]bool, len(batches)) // a snapshot of a newer build
		for i := range batches {
			batches[i], unreadable[i] = 3+rng.IntN(40), rng.IntN(3) == 0
		}
		build := func() (*Log, []events.Envelope) {
			l := openTestLog(t)
			testClock(l)
			h := newHistory(seed, 16)
			var envs []events.Envelope
			for i, n := range batches {
				envs = append(envs, mustAppend(t, l, h.take(n)...)...)
				if unreadable[i] {
					putSnapshot(t, l, envs, unreadableSnapshots[1].value)
					continue
				}
				if _, err := l.SaveSnapshot(ctx, foldAll(envs), "test"); err != nil {
					t.Fatal(err)
				}
				envs = append(envs, readAll(t, l, l.LastSeq())...)
			}
			return l, envs
		}
		one, envs := build()
		var r Retention
		byAge := seed%2 == 0
		if byAge {
			r = Retention{MaxAge: time.Minute, Now: envs[rng.IntN(len(envs))].Time.Add(time.Minute)}
		} else {
			var total int64
			one.ReadRaw(0, func(_ uint64, rec []byte) error { total += int64(crcSize + len(rec)); return nil })
			r = Retention{MaxBytes: total * int64(10+rng.IntN(80)) / 100}
		}
		if _, _, err := one.Retain(ctx, r); err != nil {
			t.Fatal(err)
		}
		steps, _ := build()
		r.MaxDrop = 1 + rng.IntN(30)
		calls := 0
		for dropped := true; dropped; calls++ {
			var err error
			if _, dropped, err = steps.Retain(ctx, r); err != nil {
				t.Fatal(err)
			}
			if calls > len(envs) {
				t.Fatalf("seed %d: %d calls and still dropping", seed, calls)
			}
		}
		if calls > 2 {
			stepped++
		}
		if a, b := one.FirstSeq(), steps.FirstSeq(); byAge && a != b || !byAge && b < a {
			t.Errorf("seed %d (%+v): one pass kept from #%d, steps from #%d", seed, r, a, b)
		}
		last := envs[len(envs)-1].Seq
		for name, l := range map[string]*Log{"one pass": one, "steps": steps} {
			if got, err := l.Replay(last); err != nil || !got.Equal(foldAll(envs)) {
				t.Errorf("seed %d, %s: replay to #%d after retention: %v", seed, name, last, err)
			}
		}
	}
	if stepped < 4 {
		t.Errorf("%d seeds dropped in more than one step: the test did not test steps", stepped)
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	// 300 events one second apart, snapshots at 100 and 200.
	build := func(t *testing.T) (*Log, []events.Envelope) {
		l := openTestLog(t)
		testClock(l)
		h := newHistory(9, 24)
		envs := mustAppend(t, l, h.take(100)...)
		for _, at := range []int{100, 200} {
			if _, err := l.SaveSnapshot(ctx, foldAll(envs[:at]), "test"); err != nil {
				t.Fatal(err)
			}
			envs = append(envs, readAll(t, l, l.LastSeq())...)
			envs = append(envs, mustAppend(t, l, h.take(99)...)...)
		}
		return l, envs
	}
	timeOf := func(envs []events.Envelope, seq uint64) time.Time { return envs[seq-1].Time }

	// The size bound counts in a read transaction, then the write one
	// adds what came since, or counts anew when retention ran between.
	countNow := func(t *testing.T, l *Log) (c bytesCounted) {
		if err := l.view(func(tx *bolt.Tx) error { return c.count(ctx, tx, 0) }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	sizeFrom := func(l *Log, seq uint64) (n int64) {
		l.ReadRaw(seq, func(_ uint64, rec []byte) error { n += int64(crcSize + len(rec)); return nil })
		return n
	}
	t.Run("by size, with events appended after the count", func(t *testing.T) {
		l, _ := build(t)
		counted := countNow(t, l)
		mustAppend(t, l, newHistory(11, 24).take(30)...)
		d, dropped, err := l.retain(ctx, Retention{MaxBytes: sizeFrom(l, 101), Now: time.Now()}, counted)
		if err != nil || !dropped || d.FromSeq != 1 || d.ToSeq != 100 {
			t.Fatalf("dropped %v %+v, %v; want 1..100, the events after the count counted", dropped, d, err)
		}
	})
	t.Run("by size, with events dropped after the count", func(t *testing.T) {
		l, envs := build(t)
		counted := countNow(t, l)
		if _, dropped, err := l.Retain(ctx, Retention{MaxAge: time.Hour, Now: timeOf(envs, 151).Add(time.Hour)}); err != nil || !dropped {
			t.Fatalf("retain by age: %v, %v", dropped, err)
		}
		if d, dropped, err := l.retain(ctx, Retention{MaxBytes: sizeFrom(l, 0), Now: time.Now()}, counted); err != nil || dropped {
			t.Fatalf("dropped %v %+v, %v; want nothing, the events kept counted anew", dropped, d, err)
		}
	})

	// MaxDrop cuts a large drop into several, each at a snapshot: the
	// newest within MaxDrop events, else the first past them.
	for _, tc := range []struct {
		maxDrop int
		why     string
	}{{50, "no snapshot within 50 events: the first past them"}, {150, "the newest snapshot within 150 events"}} {
		t.Run(fmt.Sprintf("by size, at most %d at a time", tc.maxDrop), func(t *testing.T) {
			l, envs := build(t)
			r := Retention{MaxBytes: 1, MaxDrop: tc.maxDrop}
			for i, want := range [][2]uint64{{1, 100}, {101, 200}} {
				d, dropped, err := l.Retain(ctx, r)
				if err != nil || !dropped || d.FromSeq != want[0] || d.ToSeq != want[1] || d.SnapshotSeq != want[1] {
					t.Fatalf("call %d: dropped %v %+v, %v; want %d..%d (%s)", i+1, dropped, d, err, want[0], want[1], tc.why)
				}
			}
			if d, dropped, err := l.Retain(ctx, r); err != nil || dropped {
				t.Fatalf("third call: dropped %v %+v, %v; want nothing past the newest snapshot", dropped, d, err)
			}
			if got, err := l.Replay(300); err != nil || !got.Equal(foldAll(envs[:300])) {
				t.Errorf("replay to 300 after the drops: %v", err)
			}
		})
	}

	t.Run("nothing without a snapshot", func(t *testing.T) {
		l := openTestLog(t)
		mustAppend(t, l, newHistory(10, 4).take(50)...)
		if _, dropped, err := l.Retain(ctx, Retention{MaxAge: time.Nanosecond, MaxBytes: 1}); err != nil || dropped {
			t.Fatalf("dropped %v, %v", dropped, err)
		}
	})

	tests := []struct {
		name             string
		r                func(l *Log, envs []events.Envelope) Retention
		from, to         uint64
		snapshotsLeft    int
		reasonMentions   string
		replayFromBefore uint64 // a seq that can no longer be replayed
	}{
		{"by age, up to the middle: cut at the snapshot before", func(l *Log, envs []events.Envelope) Retention {
			// Events of seqs 1..150 are more than an hour older than Now;
			// 101..150 stay, for the snapshot at 100 to replay them.
			return Retention{MaxAge: time.Hour, Now: timeOf(envs, 151).Add(time.Hour)}
		}, 1, 100, 2, "older than 1h0m0s", 99},
		{"by age, everything old stops at the newest snapshot", func(l *Log, envs []events.Envelope) Retention {
			return Retention{MaxAge: time.Minute, Now: timeOf(envs, 300).Add(time.Hour)}
		}, 1, 200, 1, "older than", 199},
		{"by size", func(l *Log, envs []events.Envelope) Retention {
			return Retention{MaxBytes: 1}
		}, 1, 200, 1, "over 1 bytes", 150},
		{"by size, exactly at a snapshot", func(l *Log, envs []events.Envelope) Retention {
			// What the events after seq 100 take: everything before goes.
			var keep int64
			l.ReadRaw(101, func(_ uint64, rec []byte) error { keep += int64(crcSize + len(rec)); return nil })
			return Retention{MaxBytes: keep}
		}, 1, 100, 2, "over", 99},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, envs := build(t)
			before, err := l.Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			last := l.LastSeq()
			d, dropped, err := l.Retain(ctx, tc.r(l, envs))
			if err != nil || !dropped {
				t.Fatalf("retain: %v, dropped %v", err, dropped)
			}
			if d.FromSeq != tc.from || d.ToSeq != tc.to || d.Count != tc.to-tc.from+1 || d.SnapshotSeq != tc.to || d.Bytes <= 0 {
				t.Errorf("dropped %+v, want %d..%d", d, tc.from, tc.to)
			}
			if !strings.Contains(d.Reason, tc.reasonMentions) {
				t.Errorf("reason %q does not mention %q", d.Reason, tc.reasonMentions)
			}
			if l.FirstSeq() != tc.to+1 || l.LastSeq() != last+1 {
				t.Errorf("bounds %d..%d after retention", l.FirstSeq(), l.LastSeq())
			}
			got := readAll(t, l, 0)
			if got[0].Seq != tc.to+1 {
				t.Errorf("read starts at %d", got[0].Seq)
			}
			note := got[len(got)-1]
			if p, ok := note.Payload.(events.EventsDropped); !ok || p != d {
				t.Errorf("last event %+v, want EventsDropped %+v", note, d)
			}

			after, err := l.Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			before = events.Apply(before, note)
			if !after.Equal(before) {
				t.Error("replay after retention differs from before it")
			}
			if _, err := l.Replay(tc.replayFromBefore); !errors.Is(err, ErrHistoryDropped) {
				t.Errorf("replay to %d, before the history kept: %v", tc.replayFromBefore, err)
			}
			// Every event kept can be replayed to, by seq and by time.
			for _, seq := range []uint64{tc.to, tc.to + 1, tc.to + 50, last} {
				if got, err := l.Replay(seq); err != nil || !got.Equal(foldAll(envs[:seq])) {
					t.Errorf("replay to %d, kept: %v", seq, err)
				}
				if got, err := l.ReplayUntilTime(timeOf(envs, seq)); err != nil || got.Seq < seq {
					t.Errorf("replay to the time of %d, kept: seq %d, %v", seq, got.Seq, err)
				}
			}
			rep, err := l.Check(ctx)
			if err != nil || rep.Snapshots != tc.snapshotsLeft || rep.FirstSeq != tc.to+1 {
				t.Errorf("check after retention: %v, %+v", err, rep)
			}

			// Retaining again with the same limits drops nothing more.
			if _, dropped, err := l.Retain(ctx, tc.r(l, envs)); err != nil || dropped {
				t.Errorf("second retain: dropped %v, %v", dropped, err)
			}

			// The log goes on, and a reopened ledger knows where it starts.
			l = reopen(t, l, Options{})
			if l.FirstSeq() != tc.to+1 {
				t.Errorf("first seq after reopen %d", l.FirstSeq())
			}
			mustAppend(t, l, ev(0, events.KubeletRestarted{Socket: "s"}))
			if _, err := l.Check(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// An event stamped while the clock ran ahead (years ahead at a boot, then
// stepped back) is not old until the clock passes its time again, and the
// age bound keeps the events after it meanwhile: the cut never passes an
// event it does not know is old.
func TestRetentionByAgeStopsAtAnEventStampedAhead(t *testing.T) {
	ctx := context.Background()
	l := openTestLog(t)
	testClock(l)
	h := newHistory(9, 24)
	envs := mustAppend(t, l, h.take(100)...)
	snapshot := func() {
		t.Helper()
		if _, err := l.SaveSnapshot(ctx, foldAll(envs), "test"); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, readAll(t, l, l.LastSeq())...)
	}
	snapshot() // at 100
	ahead := h.take(1)[0]
	ahead.Time = ahead.Time.AddDate(3, 0, 0)
	envs = append(envs, mustAppend(t, l, ahead)...)
	envs = append(envs, mustAppend(t, l, h.take(98)...)...)
	snapshot() // at 200
	last := envs[len(envs)-1].Time

	for _, tc := range []struct {
		now  time.Time
		want uint64
	}{{last.Add(24 * time.Hour), 100}, {ahead.Time.Add(2 * time.Hour), 200}} {
		d, dropped, err := l.Retain(ctx, Retention{MaxAge: time.Hour, Now: tc.now})
		if err != nil || !dropped || d.ToSeq != tc.want {
			t.Errorf("retain at %s: dropped %v %+v, %v; want up to #%d (#102 is stamped %s)", tc.now, dropped, d, err, tc.want, ahead.Time)
		}
	}
}

// TestLongReplay covers the two-stage fold that long replays take.
func TestLongReplay(t *testing.T) {
	const n = 3*pipelineMin + 100
	l := openTestLog(t)
	envs := mustAppend(t, l, newHistory(12, 64).take(n)...)
	for _, until := range []uint64{0, pipelineMin + 1, n - 1} {
		want := foldAll(envs)
		if until != 0 {
			want = foldAll(envs[:until])
		}
		if got, err := l.Replay(until); err != nil || !got.Equal(want) {
			t.Errorf("Replay(%d): seq %d, %v", until, got.Seq, err)
		}
	}
	at := envs[2*pipelineMin].Time
	if got, err := l.ReplayUntilTime(at); err != nil || !got.Equal(foldAll(envs[:2*pipelineMin+1])) {
		t.Errorf("ReplayUntilTime: seq %d, %v", got.Seq, err)
	}

	path := l.Meta().Path
	l.Close()
	const bad = 2*pipelineMin + 7
	rewrite(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		v := bytes.Clone(b.Get(seqKey(bad)))
		v[len(v)-1] ^= 0x80
		return b.Put(seqKey(bad), v)
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var ce *CorruptError
	if _, err := ro.Replay(0); !errors.As(err, &ce) || ce.Seq != bad {
		t.Fatalf("replay over a bad record: %v", err)
	}
	if got, err := ro.Replay(bad - 1); err != nil || !got.Equal(foldAll(envs[:bad-1])) {
		t.Fatalf("replay up to the bad record: %v", err)
	}
}

func TestReadPassesCallbackPanicsThrough(t *testing.T) {
	l := openTestLog(t)
	mustAppend(t, l, ev(0, events.KubeletRestarted{}))
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want the callback's own panic", p)
		}
		// The Log is still usable after the panic unwound the read.
		if got := readAll(t, l, 0); len(got) != 1 {
			t.Fatalf("read after the panic: %d events", len(got))
		}
	}()
	l.Read(0, func(events.Envelope) error { panic("boom") })
}
