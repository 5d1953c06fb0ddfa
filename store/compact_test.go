package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// retainedLedger writes n thousand events of a generated history into a
// new ledger of pageSize (0: the OS's), with a snapshot after each
// thousand, and 500 more; lets retention drop all before the last
// snapshot; and adds a meta key this build does not know, as a newer
// build might keep there.
// It returns the file, closed.
func retainedLedger(t *testing.T, n, pageSize int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, Options{Node: "node-7", BootID: "boot-test", pageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := newHistory(5, 64)
	var st events.State = events.NewState()
	for range n {
		for _, e := range mustAppend(t, l, h.take(1000)...) {
			st = events.Apply(st, e)
		}
		if _, err := l.SaveSnapshot(ctx, st, "test"); err != nil {
			t.Fatal(err)
		}
		if err := l.Read(st.Seq+1, func(e events.Envelope) error { st = events.Apply(st, e); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, l, h.take(500)...)
	if _, dropped, err := l.Retain(ctx, Retention{MaxBytes: 1}); err != nil || !dropped {
		t.Fatalf("retain: dropped %v, %v", dropped, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte("future_key"), []byte("kept")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openReadOnly opens path read-only for the test's length.
func openReadOnly(t *testing.T, path string) *Log {
	t.Helper()
	l, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// CompactTo of a ledger retention emptied writes a much smaller file
// that holds what the ledger holds, byte for byte: the events, the
// snapshot retention kept, the meta with a key this build does not know,
// each bucket's counter; in the ledger's page size.
func TestCompactToKeepsEverything(t *testing.T) {
	for _, pageSize := range []int{0, 16 << 10} {
		t.Run(fmt.Sprintf("page-size-%d", pageSize), func(t *testing.T) {
			path := retainedLedger(t, 8, pageSize)
			l := openReadOnly(t, path)
			out := filepath.Join(t.TempDir(), "compact.db")
			rep, err := l.CompactTo(t.Context(), out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d events (#%d-#%d), %d snapshots: %d bytes compacted to %d",
				rep.Check.Events, rep.Check.FirstSeq, rep.Check.LastSeq, rep.Check.Snapshots, rep.Before, rep.After)
			if rep.Before != l.SizeBytes() || rep.After*4 > rep.Before {
				t.Errorf("%d bytes compacted to %d: want a quarter at most", rep.Before, rep.After)
			}
			if rep.Check.FirstSeq < 8000 || rep.Check.LastSeq != l.LastSeq() || rep.Check.Snapshots == 0 {
				t.Errorf("report %+v: want the events retention kept, from a snapshot", rep.Check)
			}
			if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 1 {
				t.Errorf("out's dir holds %v, want the copy alone", left)
			}
			checkBolt(t, out)
			c := openReadOnly(t, out)
			if c.Meta().Node != "node-7" || !c.Meta().Created.Equal(l.Meta().Created) || c.FirstSeq() != l.FirstSeq() || c.LastSeq() != l.LastSeq() {
				t.Errorf("copy: %+v #%d-#%d; ledger: %+v #%d-#%d", c.Meta(), c.FirstSeq(), c.LastSeq(), l.Meta(), l.FirstSeq(), l.LastSeq())
			}
			if got, want := c.db.Info().PageSize, l.db.Info().PageSize; got != want {
				t.Errorf("page size %d, the ledger's %d", got, want)
			}
			raw := func(l *Log) map[uint64][]byte {
				recs := map[uint64][]byte{}
				if err := l.ReadRaw(0, func(seq uint64, rec []byte) error { recs[seq] = bytes.Clone(rec); return nil }); err != nil {
					t.Fatal(err)
				}
				return recs
			}
			want, got := raw(l), raw(c)
			if len(got) != len(want) {
				t.Errorf("%d records, the ledger %d", len(got), len(want))
			}
			for seq, rec := range want {
				if !bytes.Equal(got[seq], rec) {
					t.Errorf("#%d differs", seq)
				}
			}
			snap, ok, err := c.SnapshotAt(c.FirstSeq() - 1)
			if err != nil || !ok || snap.Seq != c.FirstSeq()-1 {
				t.Errorf("the snapshot retention kept, #%d: %v %v", c.FirstSeq()-1, ok, err)
			}
			var future []byte
			if err := c.view(func(tx *bolt.Tx) error {
				future = bytes.Clone(tx.Bucket(bucketMeta).Get([]byte("future_key")))
				return nil
			}); err != nil || string(future) != "kept" {
				t.Errorf("the meta key this build does not know: %q, %v", future, err)
			}
			// And the daemon goes on appending to it.
			c.Close()
			w, err := Open(out, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := mustAppend(t, w, ev(1, events.DeviceRemoved{Address: "0000:3b:00.1"})); got[0].Seq != l.LastSeq()+1 {
				t.Errorf("an append to the copy got #%d, want #%d", got[0].Seq, l.LastSeq()+1)
			}
		})
	}
}

// CompactTo refuses a ledger it cannot copy as sound, and writes nothing:
// not at out, and nothing left beside it.
func TestCompactToRefuses(t *testing.T) {
	damaged := func(name string) string { return filepath.Join("..", "testdata", "ledger", "damaged", name) }
	newer := filepath.Join(t.TempDir(), "newer.db")
	{
		l, err := Open(newer, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, ev(1, events.DeviceRemoved{Address: "0000:3b:00.1"}))
		l.Close()
		db, err := bolt.Open(newer, 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			e := ev(2, events.DeviceRemoved{Address: "0000:3b:00.1"})
			e.Seq = 2
			rec, err := events.Marshal(e)
			if err != nil {
				return err
			}
			rec = bytes.Replace(rec, []byte(events.TypeDeviceRemoved), []byte("DeviceRemove2"), 1)
			b := tx.Bucket(bucketEvents)
			if err := b.Put(seqKey(2), appendValue(nil, 2, rec)); err != nil {
				return err
			}
			return b.SetSequence(2)
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	for _, tc := range []struct {
		name, path string
		writer     bool
		out        func(dir string) string
		want       func(error) bool
		says       string
	}{
		{name: "a record that fails its checksum", path: damaged("event-byte-flipped.db"),
			want: func(err error) bool { return errors.Is(err, ErrCorrupt) }, says: "corrupt at seq 29: checksum mismatch"},
		{name: "a damaged meta page", path: damaged("meta1-zeroed.db"),
			want: func(err error) bool { return errors.Is(err, ErrCorrupt) }, says: "meta page 1 is damaged"},
		{name: "a damaged freelist", path: damaged("freelist-garbage.db"),
			want: func(err error) bool { return errors.Is(err, ErrCorrupt) }, says: "freelist"},
		{name: "events of a newer devledger", path: newer,
			want: func(err error) bool { return errors.Is(err, events.ErrUnknownType) }, says: "#2"},
		{name: "a ledger open for writing", writer: true,
			want: func(err error) bool { return err != nil }, says: "open for writing"},
		{name: "an out that exists", path: filepath.Join("..", "testdata", "ledger", "sample.db"), out: func(dir string) string {
			out := filepath.Join(dir, "compact.db")
			if err := os.WriteFile(out, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return out
		},
			want: func(err error) bool { return err != nil }, says: "it exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "compact.db")
			if tc.out != nil {
				out = tc.out(dir)
			}
			var l *Log
			if tc.writer {
				l = openTestLog(t)
			} else {
				var err error
				if l, err = Open(tc.path, Options{ReadOnly: true, LockTimeout: time.Second}); err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			before, _ := os.ReadDir(dir)
			_, err := l.CompactTo(t.Context(), out)
			if !tc.want(err) || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Errorf("err %v; want one that says %q", err, tc.says)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("left in out's dir: %v", after)
			}
		})
	}
}

// sameContents names the bucket and key where two files differ, and a
// bucket counter that differs: the check a copy must pass is one that
// can fail.
func TestSameContentsNamesTheDifference(t *testing.T) {
	sound := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(sound, Options{Node: "node-7"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		mustAppend(t, l, events.New(events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}, baseTime, "b"))
	}
	l.Close()
	// write is a copy of the sound file, changed.
	write := func(change func(tx *bolt.Tx) error) *Log {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, mustReadFile(t, sound), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.update(change); err != nil {
			t.Fatal(err)
		}
		l.Close()
		return openReadOnly(t, path)
	}
	same := func(*bolt.Tx) error { return nil }
	for _, tc := range []struct {
		name   string
		change func(tx *bolt.Tx) error
		says   string
	}{
		{"the same", same, ""},
		{"a value", func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaNode, []byte("node-8")) },
			"bucket meta: the value of key 6e6f6465 differs from the ledger's"},
		{"a key more", func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Put(seqKey(9), []byte("x")) },
			"bucket events: key 0000000000000009, which the ledger lacks"},
		{"a key less", func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Delete(seqKey(3)) },
			"bucket events: lacks key 0000000000000003"},
		{"a counter", func(tx *bolt.Tx) error { return tx.Bucket(bucketSnapshots).SetSequence(7) },
			"bucket snapshots: sequence 7, the ledger's 0"},
		{"a bucket more", func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err },
			"the bucket directory: key 78, which the ledger lacks"},
		{"a bucket more, first", func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("a")); return err },
			"the bucket directory: key 61, which the ledger lacks"},
		{"a key more, between", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put([]byte("a"), []byte("x"))
		}, "bucket meta: key 61, which the ledger lacks"},
		{"a bucket for a value", func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketMeta).Delete(metaNode); err != nil {
				return err
			}
			_, err := tx.Bucket(bucketMeta).CreateBucket(metaNode)
			return err
		}, "bucket meta: key 6e6f6465 is a bucket in one file and a value in the other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sameContents(write(same), write(tc.change))
			if tc.says == "" && err != nil || tc.says != "" && (err == nil || err.Error() != tc.says) {
				t.Errorf("%v; want %q", err, tc.says)
			}
		})
	}
}
