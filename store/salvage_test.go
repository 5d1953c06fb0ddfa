package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Salvage on the damaged corpus: the new ledger verifies, holds at each
// sequence either the very record of the sound ledger the corpus was made
// from (damaged/source.ledger) or an EventLost, and loses exactly what the
// damage destroyed.
func TestSalvage(t *testing.T) {
	corpus := filepath.Join("..", "testdata", "ledger")
	sound := readAllRaw(t, filepath.Join(corpus, "damaged", "source.ledger"))
	tests := []struct {
		name string
		lost [][2]uint64
	}{
		{name: "meta1-zeroed"}, // bbolt reads an old tree: the newer one is on the pages
		{name: "meta0-zeroed"},
		{name: "root-garbage"},
		{name: "freelist-garbage"},
		{name: "truncated-half"},
		{name: "events-page-garbage", lost: [][2]uint64{{21, 44}}},
		{name: "last-events-page-garbage", lost: [][2]uint64{{45, 58}}},
		{name: "event-byte-flipped", lost: [][2]uint64{{29, 29}}},
	}
	// As the file is read where it is not mapped (Windows): the same.
	for _, read := range []struct {
		name string
		fn   func(*os.File, int) ([]byte, func(), error)
	}{{"mapped", mapRegular}, {"read", readRegular}} {
		t.Run(read.name, func(t *testing.T) {
			defer func(was func(*os.File, int) ([]byte, func(), error)) { mapRegular = was }(mapRegular)
			mapRegular = read.fn
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					out := filepath.Join(t.TempDir(), "salvaged.db")
					rep, err := Salvage(filepath.Join(corpus, "damaged", tc.name+".db"), out)
					if err != nil {
						t.Fatal(err)
					}
					if rep.FirstSeq != 1 || rep.LastSeq != uint64(len(sound)) {
						t.Errorf("salvaged #%d-#%d, want #1-#%d", rep.FirstSeq, rep.LastSeq, len(sound))
					}
					var gotLost [][2]uint64
					for _, r := range rep.Lost {
						gotLost = append(gotLost, [2]uint64{r.From, r.To})
					}
					if len(gotLost) != len(tc.lost) || len(tc.lost) > 0 && gotLost[0] != tc.lost[0] {
						t.Errorf("lost %v, want %v", gotLost, tc.lost)
					}
					l := openVerified(t, out)
					n := 0
					var prev time.Time
					if err := l.Read(0, func(e events.Envelope) error {
						n++
						defer func() { prev = e.Time }()
						if _, lost := e.Payload.(events.EventLost); lost {
							if !inRanges(e.Seq, tc.lost) {
								t.Errorf("#%d lost, though it is intact", e.Seq)
							}
							// In the time of the event before it, so that the
							// ledger's times still run forward.
							if !e.Time.Equal(prev) {
								t.Errorf("lost #%d at %v, want %v, the time of the event before it", e.Seq, e.Time, prev)
							}
							return nil
						}
						if inRanges(e.Seq, tc.lost) {
							t.Errorf("#%d kept, though its page was destroyed", e.Seq)
						}
						raw := readRawAt(t, l, e.Seq)
						if string(raw) != string(sound[e.Seq-1]) {
							t.Errorf("#%d differs from the sound ledger's", e.Seq)
						}
						return nil
					}); err != nil {
						t.Fatal(err)
					}
					if n != len(sound) {
						t.Errorf("%d events in the salvaged ledger, want %d", n, len(sound))
					}
				})
			}
		})
	}

	if _, err := Salvage(filepath.Join(corpus, "damaged", "zeroed.db"), filepath.Join(t.TempDir(), "x.db")); err == nil {
		t.Error("a zeroed file was salvaged")
	}
	exists := filepath.Join(t.TempDir(), "exists.db")
	if err := os.WriteFile(exists, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Salvage(filepath.Join(corpus, "sample.db"), exists); err == nil {
		t.Error("salvaged over an existing file")
	}
}

func inRanges(seq uint64, rs [][2]uint64) bool {
	for _, r := range rs {
		if seq >= r[0] && seq <= r[1] {
			return true
		}
	}
	return false
}

// readAllRaw is every record of the ledger at path, by sequence - 1.
func readAllRaw(t *testing.T, path string) [][]byte {
	t.Helper()
	l, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out [][]byte
	if err := l.ReadRaw(0, func(seq uint64, rec []byte) error {
		if seq != uint64(len(out)+1) {
			return errors.New("a gap in the sound ledger")
		}
		out = append(out, append([]byte(nil), rec...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func readRawAt(t *testing.T, l *Log, seq uint64) []byte {
	t.Helper()
	var out []byte
	stop := errors.New("stop")
	if err := l.ReadRaw(seq, func(s uint64, rec []byte) error {
		out = append([]byte(nil), rec...)
		return stop
	}); err != nil && !errors.Is(err, stop) {
		t.Fatal(err)
	}
	return out
}

// A ledger whose oldest events retention dropped starts, salvaged, where
// it started: the dropped events stay dropped (though their pages still
// hold them), and the snapshot retention kept is copied, so the salvaged
// ledger replays to the same state.
// A first record that fails its checksum, with no snapshot before it, is
// lost: the salvaged ledger starts at #1, with an EventLost there, and
// replays.
func TestSalvageLosesADamagedFirstRecord(t *testing.T) {
	path := markedLedger(t, 30)
	flipInFile(t, path, marker(1))
	out := filepath.Join(t.TempDir(), "salvaged.db")
	rep, err := Salvage(path, out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstSeq != 1 || rep.LastSeq != 30 || len(rep.Lost) != 1 || rep.Lost[0].From != 1 || rep.Lost[0].To != 1 {
		t.Fatalf("salvage report %+v, want #1-#30 with #1 lost", rep)
	}
	l := openVerified(t, out)
	s, err := l.Replay(0)
	if err != nil || s.Seq != 30 {
		t.Fatalf("the salvaged ledger replays to #%d: %v", s.Seq, err)
	}
}

// A host with 16K or 64K pages makes ledgers of that page size. With both
// meta pages damaged bbolt reads nothing, and salvage finds the size from
// the pages themselves; with the first damaged, from the second.
func TestSalvageReadsTheLedgersPageSize(t *testing.T) {
	for _, pageSize := range []int{16 << 10, 64 << 10} {
		for _, metas := range []int{1, 2} {
			t.Run(fmt.Sprintf("%dK-%d-metas-damaged", pageSize>>10, metas), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "ledger.db")
				l, err := Open(path, Options{Node: "node-7", pageSize: pageSize})
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i <= 30; i++ {
					mustAppend(t, l, ev(i, events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}))
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for m := range metas {
					data[m*pageSize+pageHeader] ^= 0xff // the magic
				}
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				if got := salvagePageSize(data); got != pageSize {
					t.Errorf("page size %d, want %d", got, pageSize)
				}
				rep, err := Salvage(path, filepath.Join(t.TempDir(), "salvaged.db"))
				if err != nil {
					t.Fatal(err)
				}
				if rep.FirstSeq != 1 || rep.LastSeq != 30 || len(rep.Lost) != 0 {
					t.Fatalf("salvage report %+v, want #1-#30 with none lost", rep)
				}
			})
		}
	}
}

func TestSalvageKeepsTheSnapshotBeforeTheOldestEvent(t *testing.T) {
	out := filepath.Join(t.TempDir(), "salvaged.db")
	rep, err := Salvage(fixtureV1, out)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := Open(fixtureV1, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	snap, _ := orig.LatestSnapshotSeq(0)
	if rep.FirstSeq != orig.FirstSeq() || rep.Snapshot != snap || len(rep.Lost) != 0 {
		t.Fatalf("salvage report %+v; the fixture starts at #%d", rep, orig.FirstSeq())
	}
	l := openVerified(t, out)
	want, err := orig.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Error("the salvaged ledger replays to another state")
	}
}

// openVerified opens the salvaged ledger at path read-only, for the rest of
// the test, and fails it unless the ledger verifies.
func openVerified(t *testing.T, path string) *Log {
	t.Helper()
	l := openReadOnly(t, path)
	if _, err := l.Check(t.Context()); err != nil {
		t.Fatalf("the salvaged ledger does not verify: %v", err)
	}
	return l
}

// A writer's Open leaves the page graph out; CheckPages walks it in a read
// transaction and names the damage a reader's Open would have named.
func TestCheckPagesOfAWriter(t *testing.T) {
	for name, want := range map[string]string{"sample": "", "damaged/events-page-garbage": `page 3, in bucket "events", is damaged`} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "ledger", name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path, Options{LockTimeout: time.Second})
		if err != nil {
			t.Fatalf("%s: a writer's Open: %v", name, err)
		}
		// The stop's context ended: no walk, and no damage named.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.CheckPages(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: CheckPages after its context ended = %v, want context.Canceled", name, err)
		}
		err = l.CheckPages(context.Background())
		l.Close()
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: CheckPages = %v", name, err)
		case want != "" && (!errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: CheckPages = %v, want a CorruptError naming %s", name, err, want)
		}
	}
}

// uncommittedRetention is a closed ledger of envs (60) with a snapshot at
// 40, whose retention to that snapshot wrote its pages but never
// committed: the meta pages are as they were before it, as after a kill
// between bbolt's page writes and its meta write (or in a copy of the live
// file).
func uncommittedRetention(t *testing.T, envs []events.Envelope) string {
	t.Helper()
	ctx := context.Background()
	l := openTestLog(t)
	testClock(l)
	envs = mustAppend(t, l, envs...)
	if _, err := l.SaveSnapshot(ctx, foldAll(envs[:40]), "test"); err != nil {
		t.Fatal(err)
	}
	path := l.Meta().Path
	l.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := l.Retain(ctx, Retention{MaxBytes: 1}); err != nil || !ok || d.ToSeq != 40 {
		t.Fatalf("retain: %+v %v %v", d, ok, err)
	}
	l.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := os.Getpagesize()
	copy(after[:2*pageSize], before[:2*pageSize])
	if err := os.WriteFile(path, after, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A retention whose transaction never committed (bbolt wrote its pages,
// then the process died before the meta page; or a copy of the live file
// caught them) drops nothing: the file still holds every event, and so
// does what salvage makes of it, without the stray EventsDropped.
func TestSalvageIgnoresAnUncommittedRetention(t *testing.T) {
	path := uncommittedRetention(t, newHistory(5, 8).take(60))
	orig, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want, err := orig.Replay(0)
	first, last := orig.FirstSeq(), orig.LastSeq()
	orig.Close()
	if err != nil || first != 1 || last != 61 {
		t.Fatalf("the file without the retention's commit: #%d-#%d, %v", first, last, err)
	}

	out := filepath.Join(t.TempDir(), "salvaged.db")
	rep, err := Salvage(path, out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstSeq != 1 || rep.LastSeq != 61 || len(rep.Lost) != 0 {
		t.Fatalf("salvage report %+v, want #1-#61 with nothing lost", rep)
	}
	got, err := openVerified(t, out).Replay(0)
	if err != nil || !got.Equal(want) {
		t.Errorf("the salvaged ledger replays to another state (%v)", err)
	}
}

// The records of an append whose transaction never committed (bbolt wrote
// its pages; the process died before the meta page) are no events of the
// ledger, whether or not a record before them is damaged: its newest meta
// page is sound, and its counter says where it ends.
func TestSalvageLeavesOutAnUncommittedAppend(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		t.Run(fmt.Sprintf("record 10 damaged %v", damaged), func(t *testing.T) {
			path := markedLedger(t, 30)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			l, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var envs []events.Envelope
			for i := 31; i <= 40; i++ {
				envs = append(envs, ev(i, events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}))
			}
			if _, err := l.Append(context.Background(), envs...); err != nil {
				t.Fatal(err)
			}
			l.Close()
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			pageSize := os.Getpagesize()
			copy(after[:2*pageSize], before[:2*pageSize]) // its commit never landed
			if err := os.WriteFile(path, after, 0o600); err != nil {
				t.Fatal(err)
			}
			if damaged {
				flipInFile(t, path, marker(10))
			}
			rep, err := Salvage(path, filepath.Join(t.TempDir(), "salvaged.db"))
			if err != nil {
				t.Fatal(err)
			}
			if rep.LastSeq != 30 {
				t.Errorf("salvaged up to #%d, want #30: #31-#40 were never committed", rep.LastSeq)
			}
		})
	}
}

// A retention that never committed drops nothing either when a record
// before it is damaged (the tree's read stops there, and cannot say where
// the ledger starts): its EventsDropped lies past the counter, and the
// counter, read through the newest meta page, says it was never written.
func TestSalvageIgnoresAnUncommittedRetentionPastDamage(t *testing.T) {
	var envs []events.Envelope
	for i := 1; i <= 60; i++ {
		envs = append(envs, ev(i, events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}))
	}
	path := uncommittedRetention(t, envs)
	flipInFile(t, path, marker(1))
	rep, err := Salvage(path, filepath.Join(t.TempDir(), "salvaged.db"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstSeq != 1 || rep.LastSeq != 61 || rep.Events != 60 {
		t.Errorf("salvage report %+v, want #1-#61 with #1 lost alone", rep)
	}
}

// When the EventsDropped record of a retained ledger is damaged, salvage
// still starts the new ledger from the snapshot retention kept, intact
// before its first event, so that it replays; a cut at #1 leaves the
// new ledger starting at #2, which is no start from scratch.
func TestSalvageKeepsTheSnapshotOfADamagedDrop(t *testing.T) {
	for _, cut := range []int{40, 1} {
		t.Run(fmt.Sprintf("cut at #%d", cut), func(t *testing.T) {
			ctx := context.Background()
			l := openTestLog(t)
			testClock(l)
			h := newHistory(5, 8)
			envs := mustAppend(t, l, h.take(60)...)
			if _, err := l.SaveSnapshot(ctx, foldAll(envs[:cut]), "test"); err != nil {
				t.Fatal(err)
			}
			if d, ok, err := l.Retain(ctx, Retention{MaxBytes: 1}); err != nil || !ok || d.ToSeq != uint64(cut) {
				t.Fatalf("retain: %+v %v %v", d, ok, err)
			}
			for range 50 {
				mustAppend(t, l, h.take(10)...)
			}
			path := l.Meta().Path
			ro := reopen(t, l, Options{ReadOnly: true})
			want, err := ro.Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			ro.Close()
			flipInFile(t, path, "events over 1 bytes") // in the EventsDropped record

			out := filepath.Join(t.TempDir(), "salvaged.db")
			rep, err := Salvage(path, out)
			if err != nil {
				t.Fatal(err)
			}
			if rep.FirstSeq != uint64(cut+1) || rep.Snapshot != uint64(cut) || rep.SnapshotLost != 0 || len(rep.Lost) != 1 {
				t.Fatalf("salvage report %+v, want from #%d with the snapshot at #%d, one record lost", rep, cut+1, cut)
			}
			got, err := openVerified(t, out).Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			// The lost record changed nothing the fold keeps but the sequence.
			want.Seq, want.Time = got.Seq, got.Time
			if !got.Equal(want) {
				t.Error("the salvaged ledger replays to another state")
			}
		})
	}
}

// Salvage reads the file mapped: one cut short while it reads faults, and
// the fault is the salvage's error, not the process's end.
func TestAFileCutShortUnderSalvageIsItsError(t *testing.T) {
	path, data, _ := mappedCopy(t, markedLedger(t, 30))
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	found, snaps := map[uint64][][]byte{}, map[uint64][]byte{}
	err := whileMapped(path, func() error {
		salvagePages(data, found, map[uint64]events.Type{}, snaps)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "changed while it was read") || !strings.Contains(err.Error(), path) {
		t.Fatalf("salvage of a file cut short under it: %v, want an error naming it", err)
	}
	// bbolt's reads fault the same way on a page past the end; the store
	// calls that damage.
	func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if got := boltProblem(recover()); !strings.HasPrefix(got, "a damaged page points outside the file") {
				t.Errorf("a fault reads as %q", got)
			}
		}()
		t.Errorf("read %d past the end of the file", data[len(data)-1])
	}()
	// Not a fault: a panic of another kind goes on.
	defer func() {
		if p := recover(); p != "not a fault" {
			t.Errorf("recovered %v, want the panic that was not a fault", p)
		}
	}()
	whileMapped(path, func() error { panic("not a fault") })
}

// Salvage says what is wrong with a path that is no ledger file, and
// names the path once.
func TestSalvageOfNoFileSaysWhy(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.db")
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	for _, c := range []struct{ path, want string }{
		{dir, "a directory, not a ledger file"},
		{filepath.Join(dir, "missing.db"), "no such file"},
		{fifo, "not a regular file"}, // not waiting for a writer
	} {
		done := make(chan error, 1)
		go func() { _, err := Salvage(c.path, out); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("salvage of %s still waits after 5s", c.path)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("salvage of %s: %v, want %q", c.path, err, c.want)
			continue
		}
		if n := strings.Count(err.Error(), c.path); n != 1 {
			t.Errorf("salvage of %s names it %d times: %v", c.path, n, err)
		}
	}
	if _, err := os.Lstat(out); err == nil {
		t.Error("a salvage that failed wrote its output")
	}
}

// A ledger of a newer devledger's file format is no damage, and its pages
// are of a layout this build does not know: salvage refuses it, as the
// reading tools do, rather than copy what it finds on them into a ledger
// of this build's format.
func TestSalvageRefusesANewerFormat(t *testing.T) {
	path := markedLedger(t, 30)
	rewrite(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaFormat, []byte(strconv.Itoa(FormatVersion+1)))
	})
	out := filepath.Join(t.TempDir(), "salvaged.db")
	_, err := Salvage(path, out)
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), path) {
		t.Fatalf("salvage: %v, want ErrNewerFormat naming %s", err, path)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Error("a salvage of a newer format wrote a ledger")
	}
}

// The records salvage keeps are its own: the file may have a writer (a
// live daemon's ledger, its pages reused by each commit), and what was
// checked must be what is copied into the new ledger.
func TestSalvageKeepsTheRecordsItChecked(t *testing.T) {
	path, data, b := mappedCopy(t, markedLedger(t, 30))
	found := map[uint64][][]byte{}
	salvagePages(data, found, map[uint64]events.Type{}, map[uint64][]byte{})
	if len(found) != 30 {
		t.Fatalf("found %d records, want 30", len(found))
	}
	// A writer rewrites the file in place.
	if err := os.WriteFile(path, make([]byte, len(b)), 0o600); err != nil {
		t.Fatal(err)
	}
	for seq, recs := range found {
		for _, rec := range recs {
			if e, err := events.Unmarshal(rec); err != nil || e.Seq != seq {
				t.Fatalf("record #%d changed with the file under it: %v", seq, err)
			}
		}
	}
}

// mappedCopy copies the file at src to a new one, which it maps as
// salvage does until t ends; it returns the copy's path, the mapping and
// the bytes copied.
func mappedCopy(t *testing.T, src string) (path string, data, b []byte) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := mapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unmap)
	return path, data, b
}

// A ledger a newer devledger wrote to holds records this build cannot
// decode (a type it does not know, a schema version past its own): they
// are intact all the same, and salvage copies them as they are, rather
// than put an EventLost in their place as if no record of them were left.
func TestSalvageKeepsANewerDevledgersEvents(t *testing.T) {
	path := markedLedger(t, 30)
	newer := map[uint64][]byte{}
	rewrite(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		for seq := uint64(31); seq <= 33; seq++ {
			e := ev(int(seq), events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(int(seq))})
			e.Seq = seq
			rec, err := events.Marshal(e)
			if err != nil {
				return err
			}
			switch seq {
			case 31: // a type of the same length, as the layout stays
				rec = bytes.Replace(rec, []byte(events.TypeDeviceRemoved), []byte("DeviceRebound"), 1)
				newer[seq] = rec
			case 32: // the schema version after the type's name, one past this build's
				i := bytes.Index(rec, []byte(events.TypeDeviceRemoved)) + len(events.TypeDeviceRemoved)
				rec[i] = byte(events.CurrentVersion(events.TypeDeviceRemoved) + 1)
				newer[seq] = rec
			}
			if err := b.Put(seqKey(seq), appendValue(nil, seq, rec)); err != nil {
				return err
			}
		}
		return b.SetSequence(33)
	})
	flipInFile(t, path, marker(20))
	for seq, rec := range newer {
		if _, err := events.Unmarshal(rec); !errors.Is(err, events.ErrUnknownType) && !errors.Is(err, events.ErrUnknownVersion) {
			t.Fatalf("#%d reads as %v, want it unknown to this build", seq, err)
		}
	}

	out := filepath.Join(t.TempDir(), "salvaged.db")
	rep, err := Salvage(path, out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstSeq != 1 || rep.LastSeq != 33 || len(rep.Lost) != 1 || rep.Lost[0].From != 20 || rep.Lost[0].To != 20 {
		t.Errorf("salvage report %+v, want #1-#33 with #20 lost", rep)
	}
	l, err := Open(out, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq, want := range newer {
		if got := readRawAt(t, l, seq); !bytes.Equal(got, want) {
			t.Errorf("#%d in the salvaged ledger is not the newer devledger's record as written (%q)", seq, got)
		}
	}
}

// Where the file is read, not mapped (Windows), one cut short while it
// is read is the salvage's error, as a fault is where it is mapped.
func TestReadingAFileCutShortIsItsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := readRegular(f, 8192); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("a file of 4096 bytes read as 8192: %v, want it cut short", err)
	}
}
