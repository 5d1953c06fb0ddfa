package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// markedLedger writes n events, each carrying a unique marker string, and
// returns the closed file's path.
func markedLedger(t *testing.T, n int) string {
	t.Helper()
	l := openTestLog(t)
	for i := 1; i <= n; i++ {
		mustAppend(t, l, ev(i, events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}))
	}
	path := l.Meta().Path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func marker(seq int) string { return fmt.Sprintf("marker-%05d", seq) }

// flipInFile flips one byte of every copy of needle in the file. bbolt
// copies pages on write, so freed pages may still hold old copies of a
// record; flipping them all is sure to hit the live one.
func flipInFile(t *testing.T, path, needle string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(needle))
		if i < 0 {
			break
		}
		b[off+i+len(needle)-1] ^= 0x01
		off += i + len(needle)
		n++
	}
	if n == 0 {
		t.Fatalf("%q not found in %s", needle, path)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFlippedByteInARecord(t *testing.T) {
	const n, bad = 60, 37
	path := markedLedger(t, n)
	flipInFile(t, path, marker(bad))

	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var got []uint64
	err = l.Read(0, func(e events.Envelope) error {
		got = append(got, e.Seq)
		return nil
	})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Seq != bad {
		t.Fatalf("read: %v, want a *CorruptError at seq %d", err, bad)
	}
	if len(got) != bad-1 || got[len(got)-1] != bad-1 {
		t.Fatalf("read delivered %d events before the bad one, want %d", len(got), bad-1)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("error %q should name the file and the checksum", err)
	}

	rawN := 0
	err = l.ReadRaw(0, func(uint64, []byte) error { rawN++; return nil })
	if !errors.As(err, &ce) || ce.Seq != bad || rawN != bad-1 {
		t.Fatalf("read raw: %v after %d records", err, rawN)
	}

	rep, err := l.Check(context.Background())
	if !errors.As(err, &ce) || ce.Seq != bad || rep.FirstBad != bad || rep.Events != bad-1 || len(rep.Problems) != 1 {
		t.Fatalf("check: %v, report %+v", err, rep)
	}
	if rep.FirstSeq != 1 || rep.LastSeq != n {
		t.Errorf("check bounds %d..%d", rep.FirstSeq, rep.LastSeq)
	}

	if _, err := l.Replay(0); !errors.As(err, &ce) || ce.Seq != bad {
		t.Fatalf("replay: %v", err)
	}
	if s, err := l.Replay(bad - 1); err != nil || s.Seq != bad-1 {
		t.Fatalf("replay up to the record before: %v", err)
	}
}

// rewrite edits the closed ledger with bbolt directly.
func rewrite(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFindsStructuralDamage(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(tx *bolt.Tx) error
		badSeq  uint64
		mention string
	}{
		{"a record moved under another key", func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketEvents)
			v := bytes.Clone(b.Get(seqKey(10)))
			return b.Put(seqKey(11), v)
		}, 11, "checksum"},
		{"a missing record", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).Delete(seqKey(20))
		}, 20, "missing"},
		{"missing records at the end", func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketEvents)
			b.Delete(seqKey(30))
			return b.Delete(seqKey(29))
		}, 29, "missing"},
		{"a record with a valid checksum that does not decode", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).Put(seqKey(5), appendValue(nil, 5, []byte{1, 2, 3}))
		}, 5, "decode"},
		{"a record that says another seq", func(tx *bolt.Tx) error {
			rec, _ := events.Marshal(events.Envelope{Seq: 8, Time: baseTime, Payload: events.KubeletRestarted{}})
			return tx.Bucket(bucketEvents).Put(seqKey(7), appendValue(nil, 7, rec))
		}, 7, "says seq 8"},
		{"the events counter behind the records", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).SetSequence(25)
		}, 26, "sequence counter (#25)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := markedLedger(t, 30)
			rewrite(t, path, tc.edit)
			l, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			rep, err := l.Check(context.Background())
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Seq != tc.badSeq || rep.FirstBad != tc.badSeq {
				t.Fatalf("check: %v (report %+v), want seq %d", err, rep, tc.badSeq)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("%q does not mention %q", err, tc.mention)
			}
			n := uint64(0)
			err = l.Read(0, func(events.Envelope) error { n++; return nil })
			if !errors.As(err, &ce) || ce.Seq != tc.badSeq || n != tc.badSeq-1 {
				t.Fatalf("read: %v after %d events", err, n)
			}
		})
	}
}

func TestCheckCatchesATamperedSnapshot(t *testing.T) {
	l := openTestLog(t)
	h := newHistory(5, 12)
	envs := mustAppend(t, l, h.take(80)...)
	ctx := context.Background()
	if _, err := l.SaveSnapshot(ctx, foldAll(envs[:40]), "test"); err != nil {
		t.Fatal(err)
	}
	envs = append(envs, mustAppend(t, l, h.take(20)...)...)
	if _, err := l.SaveSnapshot(ctx, foldAll(envs[:70]), "test"); err != nil {
		t.Fatal(err)
	}
	if rep, err := l.Check(ctx); err != nil || rep.Snapshots != 2 || rep.Events != l.LastSeq() {
		t.Fatalf("sound ledger: %v, %+v", err, rep)
	}
	path := l.Meta().Path
	l.Close()

	// A snapshot whose checksum is right but whose state is not the fold:
	// one device went missing from it.
	rewrite(t, path, func(tx *bolt.Tx) error {
		s := foldAll(envs[:70])
		for addr := range s.Devices {
			delete(s.Devices, addr)
			break
		}
		rec, err := events.MarshalState(s)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketSnapshots).Put(seqKey(70), appendValue(nil, 70, rec))
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Check(ctx)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != 70 || !strings.Contains(err.Error(), "fold") {
		t.Fatalf("check: %v, want the snapshot at 70", err)
	}
	if rep.Snapshots != 1 || rep.Events != 70 {
		t.Errorf("report %+v", rep)
	}
}

func TestCheckCatchesAFlippedSnapshot(t *testing.T) {
	l := openTestLog(t)
	envs := mustAppend(t, l, newHistory(6, 12).take(50)...)
	if _, err := l.SaveSnapshot(context.Background(), foldAll(envs[:30]), "test"); err != nil {
		t.Fatal(err)
	}
	path := l.Meta().Path
	l.Close()
	flipInFile(t, path, `"boot_id":"boot-0001"`)
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var ce *CorruptError
	if _, err := ro.Check(context.Background()); !errors.As(err, &ce) || ce.Seq != 30 {
		t.Fatalf("check: %v", err)
	}
	// Reads pass over it, and say so: the replay folds every event from
	// the start instead, to the same state.
	if _, ok, err := ro.LatestSnapshot(0); ok || err != nil {
		t.Fatalf("latest snapshot: %v, %v; want none that can be read", ok, err)
	}
	st, err := ro.Replay(0)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if want := foldAll(readAll(t, ro, 0)); !st.Equal(want) {
		t.Error("replay past the damaged snapshot differs from the fold of the events")
	}
	if err := ro.Damage(); !errors.As(err, &ce) || ce.Seq != 30 || !strings.Contains(err.Error(), "snapshot: ") {
		t.Fatalf("damage: %v, want the snapshot at 30", err)
	}
	if n := len(ro.Damages()); n != 1 {
		t.Errorf("%d damages noted after two reads of one, want 1", n)
	}
}

// A snapshot written before Device.HealthSeq existed (format 1) holds no
// HealthSeq. A ledger upgraded with one is sound: Check compares it with
// the fold without HealthSeq, and replay starts from it, HealthSeq 0
// (older than anything after it); the format-2 snapshot a later daemon
// writes from that replay is sound too.
func TestCheckReadsAFormat1Snapshot(t *testing.T) {
	l := openTestLog(t)
	h := newHistory(5, 12)
	envs := mustAppend(t, l, h.take(60)...)
	ctx := context.Background()
	path := l.Meta().Path
	l.Close()
	old := foldAll(envs[:40])
	rewrite(t, path, func(tx *bolt.Tx) error {
		rec, err := events.MarshalState(old)
		if err != nil {
			return err
		}
		// As the previous version wrote it: format 1, no health_seq.
		rec = regexp.MustCompile(`,"health_seq":\d+`).ReplaceAll(rec, nil)
		rec = bytes.Replace(rec, []byte(`{"format":5,`), []byte(`{"format":1,`), 1)
		if bytes.Contains(rec, []byte("health_seq")) || !bytes.HasPrefix(rec, []byte(`{"format":1,`)) {
			return fmt.Errorf("the snapshot was not made a format-1 one: %.80s", rec)
		}
		return tx.Bucket(bucketSnapshots).Put(seqKey(40), appendValue(nil, 40, rec))
	})
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if rep, err := l.Check(ctx); err != nil || rep.Snapshots != 1 {
		t.Fatalf("check of an upgraded ledger: %v, %+v", err, rep)
	}
	s, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, s, "after the upgrade"); err != nil {
		t.Fatal(err)
	}
	if rep, err := l.Check(ctx); err != nil || rep.Snapshots != 2 {
		t.Fatalf("check with a format-2 snapshot after it: %v, %+v", err, rep)
	}
	// Tampering is still caught in a format-1 snapshot.
	l.Close()
	rewrite(t, path, func(tx *bolt.Tx) error {
		rec := []byte(`{"format":1,"state":{"seq":40}}`)
		return tx.Bucket(bucketSnapshots).Put(seqKey(40), appendValue(nil, 40, rec))
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Check(ctx); !strings.Contains(fmt.Sprint(err), "fold") {
		t.Errorf("check of an emptied format-1 snapshot: %v, want it not to match the fold", err)
	}
}

// A truncated file (a copy cut short, a disk that filled while copying) is
// named corrupt, with its size and the size its meta page counts, by Open,
// Check and Replay: never a SIGBUS or a SIGSEGV reading past its end.
func TestTruncatedLedgerIsCorrupt(t *testing.T) {
	path := markedLedger(t, 2000)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The file is larger than the pages in use (bbolt grows it ahead):
	// one page short of those is the smallest cut that loses one.
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	if err := l.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, size := range []int{8 << 10, len(full) / 2, int(used) - 4096} {
		t.Run(fmt.Sprintf("%d bytes of %d", size, len(full)), func(t *testing.T) {
			cut := t.TempDir() + "/cut.db"
			if err := os.WriteFile(cut, full[:size], 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(cut, Options{ReadOnly: true})
			if err == nil {
				_, err = l.Check(context.Background())
				if err == nil {
					_, err = l.Replay(0)
				}
				l.Close()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), cut) {
				t.Fatalf("got %v, want a corrupt ledger naming %s", err, cut)
			}
			t.Log(err)
		})
	}
}

// A zeroed meta page (a torn meta write) is named by Check, which does not
// hand the file to bbolt's own check: that one asserts in a goroutine no
// recover reaches, and the process dies.
func TestCheckNamesADamagedMetaPage(t *testing.T) {
	path := markedLedger(t, 50)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	size := os.Getpagesize()
	for id := range 2 {
		t.Run(fmt.Sprintf("page %d", id), func(t *testing.T) {
			b := bytes.Clone(full)
			clear(b[id*size : (id+1)*size])
			damaged := t.TempDir() + "/meta.db"
			if err := os.WriteFile(damaged, b, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(damaged, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err) // bbolt opens it through the other meta page
			}
			defer l.Close()
			_, err = l.Check(context.Background())
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("meta page %d is damaged", id)) {
				t.Fatalf("Check: %v, want meta page %d named", err, id)
			}
		})
	}
}

// A copy of the file made while the daemon wrote to it can read the
// meta page of one transaction and, where that transaction had its bucket
// directory, a page a later one wrote there: a page of events. That is
// damage, named as such and salvageable, not a file of someone else's.
func TestACopyWithEventsWhereTheBucketDirectoryWasIsDamage(t *testing.T) {
	const n = 200
	path := markedLedger(t, n)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	size := os.Getpagesize()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	meta, _, _ := (&Log{path: path}).newestMeta(f, size)
	f.Close()
	root := int(binary.LittleEndian.Uint64(meta[pageHeader+16:]))
	// The page of the first event, as bbolt would have written it over
	// the directory's: under the directory's page id.
	events := bytes.Index(b, []byte(marker(1))) / size
	copy(b[root*size:(root+1)*size], b[events*size:(events+1)*size])
	binary.LittleEndian.PutUint64(b[root*size:], uint64(root))
	torn := filepath.Join(t.TempDir(), "torn.db")
	if err := os.WriteFile(torn, b, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, ro := range []bool{true, false} {
		l, err := Open(torn, Options{ReadOnly: ro})
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotLedger) || !strings.Contains(err.Error(), "the bucket directory is damaged") {
			t.Errorf("open (read-only %v): %v, want the bucket directory named damaged", ro, err)
		}
	}
	rep, err := Salvage(torn, filepath.Join(t.TempDir(), "salvaged.db"))
	if err != nil || rep.Events != n || len(rep.Lost) != 0 {
		t.Fatalf("salvage: %v, %+v; want all %d events", err, rep, n)
	}
}

// retainedToASnapshot is a closed ledger of 60 events whose retention
// dropped 1..40 and kept the snapshot at 40, the only way forward; and the
// events appended.
func retainedToASnapshot(t *testing.T) (string, []events.Envelope) {
	t.Helper()
	l := openTestLog(t)
	testClock(l)
	ctx := context.Background()
	envs := mustAppend(t, l, newHistory(21, 16).take(60)...)
	if _, err := l.SaveSnapshot(ctx, foldAll(envs[:40]), "test"); err != nil {
		t.Fatal(err)
	}
	// Events 1..40 are old: they go, and the snapshot at 40 stays.
	if d, ok, err := l.Retain(ctx, Retention{MaxAge: time.Hour, Now: envs[40].Time.Add(time.Hour)}); err != nil || !ok || d.ToSeq != 40 {
		t.Fatalf("retain: %+v %v %v", d, ok, err)
	}
	path := l.Meta().Path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, envs
}

// A damaged snapshot that retention left as the only way forward (the
// events before it dropped) is named as the damage it is, not as history
// retention dropped.
func TestDamagedSnapshotPastRetentionIsNamed(t *testing.T) {
	path, _ := retainedToASnapshot(t)
	flipInFile(t, path, `"holders"`) // snapshots alone say it
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.Replay(0)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != 40 || errors.Is(err, ErrHistoryDropped) {
		t.Fatalf("replay: %v, want the damaged snapshot at 40 named", err)
	}
	if _, ok, err := ro.SnapshotAt(40); ok || !errors.As(err, &ce) || ce.Seq != 40 {
		t.Errorf("SnapshotAt(40): %v, %v; want the damaged snapshot at 40 named", ok, err)
	}
	if _, ok, err := ro.SnapshotAt(39); ok || err != nil {
		t.Errorf("SnapshotAt(39), where there is none: %v, %v; want false and no error", ok, err)
	}
}

// A snapshot of a newer format that retention left as the only way
// forward (a daemon rolled back) is named as such, and for both kinds of
// replay: not as history retention dropped, nor as damage.
func TestNewerSnapshotPastRetentionIsNamed(t *testing.T) {
	path, envs := retainedToASnapshot(t)
	rewrite(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSnapshots)
		v := b.Get(seqKey(40))
		rec, err := events.MarshalState(foldAll(envs[:40]))
		if err != nil || len(v) == 0 {
			return fmt.Errorf("no snapshot at 40: %v", err)
		}
		return b.Put(seqKey(40), appendValue(nil, 40, bytes.Replace(rec, []byte(`{"format":5,`), []byte(`{"format":6,`), 1)))
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for name, replay := range map[string]func() (events.State, error){
		"to the end":  func() (events.State, error) { return ro.Replay(0) },
		"to the time": func() (events.State, error) { return ro.ReplayUntilTime(envs[50].Time) },
	} {
		_, err := replay()
		if err == nil || errors.Is(err, ErrHistoryDropped) || errors.Is(err, ErrCorrupt) || !errors.Is(err, events.ErrSnapshotFormat) ||
			!strings.Contains(err.Error(), "#40") || !strings.Contains(err.Error(), "a newer devledger wrote it") {
			t.Errorf("replay %s: %v, want the snapshot at #40 named as a newer devledger's", name, err)
		}
	}
	if _, ok, err := ro.SnapshotAt(40); ok || errors.Is(err, ErrCorrupt) || !errors.Is(err, events.ErrSnapshotFormat) || !strings.Contains(err.Error(), "#40") {
		t.Errorf("SnapshotAt(40): %v, %v; want the snapshot at #40 named as a newer devledger's", ok, err)
	}
	if err := ro.Damage(); err != nil {
		t.Errorf("a newer snapshot noted as damage: %v", err)
	}
}

// A snapshot of a newer format (a daemon rolled back) is no damage: Check
// passes over it as CheckAll and replay do, and counts it apart.
func TestCheckPassesOverANewerSnapshot(t *testing.T) {
	l := openTestLog(t)
	ctx := context.Background()
	envs := mustAppend(t, l, newHistory(21, 16).take(60)...)
	for _, n := range []int{20, 40} {
		if _, err := l.SaveSnapshot(ctx, foldAll(envs[:n]), "test"); err != nil {
			t.Fatal(err)
		}
	}
	path := l.Meta().Path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rewrite(t, path, func(tx *bolt.Tx) error {
		rec, err := events.MarshalState(foldAll(envs[:40]))
		if err != nil {
			return err
		}
		return tx.Bucket(bucketSnapshots).Put(seqKey(40), appendValue(nil, 40, bytes.Replace(rec, []byte(`{"format":5,`), []byte(`{"format":6,`), 1)))
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Check(ctx)
	if err != nil || rep.Events != ro.LastSeq() || rep.Snapshots != 1 || rep.Newer != 1 || len(rep.Problems) > 0 {
		t.Errorf("check: %+v, %v; want every event, 1 snapshot verified and 1 of a newer format, no problem", rep, err)
	}
	if _, problems, err := ro.CheckAll(ctx, 32, nil); err != nil || len(problems) > 0 {
		t.Errorf("check all: %v, %v; want no problem", problems, err)
	}
}

// Age-based retention meets an event of a type a newer devledger wrote (a
// rollback): no damage, and not known to be old. It drops nothing from
// there on, and says nothing is wrong.
func TestRetentionStopsAtANewerEvent(t *testing.T) {
	l := openTestLog(t)
	testClock(l)
	ctx := context.Background()
	envs := mustAppend(t, l, newHistory(21, 16).take(30)...)
	if _, err := l.SaveSnapshot(ctx, foldAll(envs), "test"); err != nil {
		t.Fatal(err)
	}
	path := l.Meta().Path
	l.Close()
	rewrite(t, path, func(tx *bolt.Tx) error {
		// A type of the same length as one this build knows, as the
		// record's layout stays.
		e := events.New(events.KubeletRestarted{Socket: "kubelet.sock"}, envs[9].Time, "future-boot")
		e.Seq = envs[9].Seq
		rec, err := events.Marshal(e)
		if err != nil {
			return err
		}
		rec = bytes.Replace(rec, []byte(events.TypeKubeletRestarted), []byte("KubeletRebooted2"), 1)
		return tx.Bucket(bucketEvents).Put(seqKey(e.Seq), appendValue(nil, e.Seq, rec))
	})
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, dropped, err := l.Retain(ctx, Retention{MaxAge: time.Minute, Now: envs[29].Time.Add(time.Hour)})
	if err != nil || dropped || l.FirstSeq() != 1 {
		t.Errorf("retain past a newer event: %+v, dropped %v, %v; the ledger starts at #%d; want nothing dropped and no error", d, dropped, err, l.FirstSeq())
	}
}

// CheckAll goes on past a record it cannot read, and names every one,
// the one right after a bad one included; Check stops at the first.
func TestCheckAllGoesOnPastDamage(t *testing.T) {
	path := markedLedger(t, 60)
	// 21 before 22: a flip turns the marker's last digit into its
	// neighbour's (marker 21 into 20), which a later flip would hit too.
	flipInFile(t, path, marker(21))
	flipInFile(t, path, marker(22))
	flipInFile(t, path, marker(45))
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Check(ctx); err == nil {
		t.Fatal("Check found nothing")
	}
	rep, problems, err := l.CheckAll(ctx, 32, nil)
	if err != nil {
		t.Fatalf("CheckAll: %v", err)
	}
	var seqs []uint64
	for _, p := range problems {
		var ce *CorruptError
		if !errors.As(p, &ce) {
			t.Fatalf("problem %v is not a CorruptError", p)
		}
		seqs = append(seqs, ce.Seq)
	}
	if !slices.Equal(seqs, []uint64{21, 22, 45}) || rep.FirstBad != 21 {
		t.Errorf("problems at %v (first bad %d), want the flipped records [21 22 45]", seqs, rep.FirstBad)
	}
	if _, problems, _ := l.CheckAll(ctx, 1, nil); len(problems) != 1 {
		t.Errorf("CheckAll with limit 1 gave %d problems", len(problems))
	}
}

// Damage known already does not count against CheckAll's limit: a check
// that stopped at the problems an operator acknowledged would never find
// another.
func TestCheckAllLooksPastKnownDamage(t *testing.T) {
	path := markedLedger(t, 60)
	for _, seq := range []int{10, 20, 45} {
		flipInFile(t, path, marker(seq))
	}
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	_, all, err := l.CheckAll(ctx, 32, nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("CheckAll: %q, %v; want three problems", all, err)
	}
	_, problems, err := l.CheckAll(ctx, 2, func(p error) bool { return p.Error() == all[0].Error() })
	if err != nil || len(problems) != 3 {
		t.Errorf("CheckAll of two new problems, the first known: %q, %v; want all three", problems, err)
	}
}

// unreadableSnapshots are the two ways a stored snapshot cannot be read:
// bytes that fail their checksum, and a format newer than this build
// reads (a daemon rolled back after a newer one wrote it).
var unreadableSnapshots = []struct {
	name  string
	value func(seq uint64, rec []byte) []byte // the stored value of rec
}{
	{"damaged", func(seq uint64, rec []byte) []byte {
		v := appendValue(nil, seq, rec)
		v[len(v)-10] ^= 1
		return v
	}},
	{"newer format", func(seq uint64, rec []byte) []byte {
		return appendValue(nil, seq, bytes.Replace(rec, []byte(`{"format":5,`), []byte(`{"format":6,`), 1))
	}},
	// Builds that wrote format 3 added fields without a new number: a
	// shape this build does not know is a newer one, whatever its number.
	{"newer shape, known format", func(seq uint64, rec []byte) []byte {
		return appendValue(nil, seq, bytes.Replace(rec, []byte(`{"format":5,"state":{`), []byte(`{"format":3,"state":{"from_a_newer_build":1,`), 1))
	}},
}

// putSnapshot stores the fold of envs as a snapshot, as value makes it.
func putSnapshot(t *testing.T, l *Log, envs []events.Envelope, value func(uint64, []byte) []byte) {
	t.Helper()
	s := foldAll(envs)
	rec, err := events.MarshalState(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(rec, []byte(`{"format":5,"state":{`)) {
		t.Fatalf("a snapshot begins %.20s", rec)
	}
	v := value(s.Seq, rec)
	if err := l.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSnapshots).Put(seqKey(s.Seq), v) }); err != nil {
		t.Fatal(err)
	}
}

// Retention cuts only at a snapshot it can read: were it to cut at an
// unreadable newest one, the events and the older snapshot that rebuild
// the state would go, and the next start could replay nothing.
func TestRetentionPassesOverAnUnreadableSnapshot(t *testing.T) {
	for _, tc := range unreadableSnapshots {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := openTestLog(t)
			testClock(l)
			envs := mustAppend(t, l, newHistory(31, 16).take(60)...)
			if _, err := l.SaveSnapshot(ctx, foldAll(envs[:40]), "readable"); err != nil {
				t.Fatal(err)
			}
			envs = append(envs, readAll(t, l, l.LastSeq())...)
			putSnapshot(t, l, envs[:55], tc.value)
			want, err := l.Replay(0)
			if err != nil {
				t.Fatal(err)
			}
			d, dropped, err := l.Retain(ctx, Retention{MaxAge: time.Minute, Now: envs[len(envs)-1].Time.Add(time.Hour)})
			if err != nil || !dropped || d.ToSeq != 40 || d.SnapshotSeq != 40 {
				t.Fatalf("retain: %+v, dropped %v, %v; want 1..40, to the readable snapshot", d, dropped, err)
			}
			got, err := l.Replay(0)
			if err != nil {
				t.Fatalf("replay after retention: %v", err)
			}
			if want = events.Apply(want, readAll(t, l, l.LastSeq())[0]); !got.Equal(want) {
				t.Error("replay after retention differs from before it")
			}
		})
	}
}

// A drop cut to MaxDrop events whose one snapshot there cannot be read
// goes on to the next readable one, not further: stopping there would
// drop nothing, that pass and every pass after.
func TestRetentionInStepsPassesOverAnUnreadableSnapshot(t *testing.T) {
	for _, tc := range unreadableSnapshots {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := openTestLog(t)
			testClock(l)
			envs := mustAppend(t, l, newHistory(33, 16).take(70)...)
			putSnapshot(t, l, envs[:20], tc.value)
			for _, at := range []int{30, 50} {
				if _, err := l.SaveSnapshot(ctx, foldAll(envs[:at]), "readable"); err != nil {
					t.Fatal(err)
				}
			}
			d, dropped, err := l.Retain(ctx, Retention{MaxAge: time.Minute, Now: envs[len(envs)-1].Time.Add(time.Hour), MaxDrop: 10})
			if err != nil || !dropped || d.FromSeq != 1 || d.ToSeq != 30 || d.SnapshotSeq != 30 {
				t.Fatalf("retain: %+v, dropped %v, %v; want 1..30, to the next readable snapshot", d, dropped, err)
			}
		})
	}
}

// ReplayUntilTime passes over a snapshot it cannot read, as Replay does,
// and folds from the one before.
func TestReplayUntilTimePassesOverAnUnreadableSnapshot(t *testing.T) {
	for _, tc := range unreadableSnapshots {
		t.Run(tc.name, func(t *testing.T) {
			l := openTestLog(t)
			envs := mustAppend(t, l, newHistory(32, 16).take(60)...)
			putSnapshot(t, l, envs[:40], tc.value)
			got, err := l.ReplayUntilTime(envs[49].Time)
			if err != nil || !got.Equal(foldAll(envs[:50])) {
				t.Fatalf("ReplayUntilTime: seq %d, %v; want the fold to seq 50", got.Seq, err)
			}
		})
	}
}

// No checksum covers the events counter: one behind the records would have
// the next append overwrite an acknowledged record. A writer refuses the
// file and leaves it as it was; a reader notes the damage at open.
func TestAWriterRefusesACounterBehindTheRecords(t *testing.T) {
	path := markedLedger(t, 30)
	rewrite(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).SetSequence(25) })

	l, err := Open(path, Options{BootID: "b"})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != 26 || !strings.Contains(err.Error(), path) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("writer open: %v, want a *CorruptError at seq 26 naming the file", err)
	}
	rewrite(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		for seq := 26; seq <= 30; seq++ {
			if !bytes.Contains(b.Get(seqKey(uint64(seq))), []byte(marker(seq))) {
				t.Errorf("#%d changed", seq)
			}
		}
		return nil
	})

	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Damage(); !errors.As(err, &ce) || ce.Seq != 26 {
		t.Errorf("reader's damage: %v", err)
	}
}

// A ledger that lost its first events, with no snapshot to stand for them,
// is damaged, not cut by retention (which keeps the snapshot it cuts at).
func TestCheckFindsAMissingStart(t *testing.T) {
	path := markedLedger(t, 30)
	rewrite(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		b.Delete(seqKey(1))
		return b.Delete(seqKey(2))
	})
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep, err := l.Check(context.Background())
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != 2 || rep.FirstBad != 2 || !strings.Contains(err.Error(), "before #3 are missing") {
		t.Fatalf("check: %v (report %+v), want the events before #3 missing", err, rep)
	}
	if _, err := l.Replay(0); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrHistoryDropped) {
		t.Fatalf("replay: %v, want damage, not a drop", err)
	}
}

// A writer's Open refuses a file whose freelist is damaged before bbolt
// opens it read-write: bbolt would take the file's lock, panic loading the
// freelist, and keep the lock (and the descriptor) for the rest of the
// process. The same process then opens the file read-only to report.
func TestAWriterRefusingADamagedFreelistKeepsNoLock(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "testdata", "ledger", "damaged", "freelist-garbage.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "the freelist, is damaged") {
		t.Fatalf("writer's open: %v, want the damaged freelist named", err)
	}
	ro, err := Open(path, Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("read-only open after the writer's was refused: %v", err)
	}
	ro.Close()
}

// A snapshot taken by a build whose fold kept the last 32 acknowledged
// problems (format 4) is no damage to a build that keeps more: the check
// compares it with the fold as that build folded it.
func TestAFormat4SnapshotOfMoreThan32AcknowledgedIsNoDamage(t *testing.T) {
	ctx := context.Background()
	l := openTestLog(t)
	var envs []events.Envelope
	var problems []string
	for i := 1; i <= 40; i++ {
		p := fmt.Sprintf("ledger x is corrupt: record %d fails its checksum", 1000+i)
		problems = append(problems, p)
		envs = append(envs, ev(i, events.LedgerDamaged{Problem: p, Seq: uint64(1000 + i)}))
	}
	envs = append(envs, ev(41, events.DamageAcknowledged{Problems: problems, Note: "looked"}))
	envs = mustAppend(t, l, envs...)
	old := foldAll(envs)
	old.Ledger.Acknowledged = old.Ledger.Acknowledged[len(old.Ledger.Acknowledged)-32:]
	rec, err := events.MarshalState(old)
	if err != nil {
		t.Fatal(err)
	}
	rec = bytes.Replace(rec, []byte(`{"format":5,`), []byte(`{"format":4,`), 1)
	path := l.Meta().Path
	l.Close()
	rewrite(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).Put(seqKey(41), appendValue(nil, 41, rec))
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, found, err := ro.CheckAll(ctx, 32, nil); err != nil || len(found) > 0 {
		t.Fatalf("check of a format-4 snapshot: %q, %v; want no damage", found, err)
	}
}

// A key damaged into one past the events' counter, amid the records, is
// named where it lies: the counter, and the records after it, are sound.
func TestADamagedKeyAmidTheRecordsIsNotTheCounter(t *testing.T) {
	const n, bad = 30, 12
	path := markedLedger(t, n)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Every copy of #12's key (bbolt's freed pages keep old ones) becomes
	// 2^56+12: the record's checksum, over its key, fails too.
	hits := 0
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(marker(bad)))
		if i < 0 {
			break
		}
		if k := bytes.LastIndex(b[max(0, off+i-100):off+i], seqKey(bad)); k >= 0 {
			b[max(0, off+i-100)+k] = 0x01
			hits++
		}
		off += i + 1
	}
	if hits == 0 {
		t.Fatalf("the key of #%d not found in %s", bad, path)
	}
	damaged := filepath.Join(t.TempDir(), "key.db")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(damaged, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var read uint64
	err = l.Read(0, func(e events.Envelope) error { read = e.Seq; return nil })
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != bad || read != bad-1 || strings.Contains(err.Error(), "counter") {
		t.Fatalf("read: %v after #%d, want the record at #%d missing, after #%d", err, read, bad, bad-1)
	}
	if _, err := l.Check(context.Background()); !errors.As(err, &ce) || ce.Seq != bad {
		t.Fatalf("check: %v, want the record at #%d missing", err, bad)
	}
}

// A ledger cut short under the writer (an operator's truncate, a copy
// back over it) faults the append that meets it and bbolt's rollback too,
// which then never releases bbolt's writer lock. Every later append, and
// Close, must still return: a failed one answers the request that caused
// it, a hung one answers nothing.
func TestAFileCutShortUnderTheWriterFailsWithoutAHang(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, Options{Node: "node-7", BootID: "boot-test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 50; i++ {
		mustAppend(t, l, ev(i, events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}))
	}
	// The meta pages stay; the freelist and every data page go.
	if err := os.Truncate(path, 2*int64(l.db.Info().PageSize)); err != nil {
		t.Skipf("cannot cut the file short under its writer here: %v", err)
	}
	returns := func(what string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return in 10s", what)
			return nil
		}
	}
	for i := range 3 {
		err := returns(fmt.Sprintf("append %d", i+1), func() error {
			_, err := l.Append(context.Background(), ev(100+i, events.DeviceRemoved{Address: "0000:3b:00.1"}))
			return err
		})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("append %d to a file cut short: %v, want it corrupt", i+1, err)
		}
	}
	if err := returns("close", l.Close); err == nil {
		t.Error("close of a writer that lost bbolt's lock: nil, want an error saying so")
	}
}
