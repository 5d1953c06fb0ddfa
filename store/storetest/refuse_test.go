package storetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// A ledger refusing writes fails every append and snapshot with ENOSPC
// naming its file, says it cannot record, and leaves the file byte for
// byte as it was; once there is room the next append goes through, and
// the file reads back every event acknowledged and no other.
func TestRefuseWritesFailsEveryWriteAndLeavesTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(path, store.Options{Node: "n", BootID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendOne := func(i int) error {
		_, err := l.Append(ctx, events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "test"}, time.Unix(int64(i), 0), "b"))
		return err
	}
	if err := appendOne(1); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	room := RefuseWrites(t, l)
	for i := range 3 {
		if err := appendOne(2 + i); !errors.Is(err, syscall.ENOSPC) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Fatalf("append %d with writes refused: %v, want ENOSPC naming %s", i, err, path)
		}
	}
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, st, "test"); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("snapshot with writes refused: %v, want ENOSPC", err)
	}
	if err := l.AppendFault(); !errors.Is(err, syscall.ENOSPC) || l.AppendFailures() != 3 {
		t.Errorf("AppendFault %v, %d failures; want ENOSPC and 3", err, l.AppendFailures())
	}
	if l.LastSeq() != 1 {
		t.Errorf("LastSeq %d with every write refused, want 1", l.LastSeq())
	}
	if during, err := os.ReadFile(path); err != nil || !bytes.Equal(during, before) {
		t.Errorf("the file changed while writes were refused (%v)", err)
	}

	room()
	if err := appendOne(9); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
	if err := l.AppendFault(); err != nil {
		t.Errorf("AppendFault after an append went through: %v", err)
	}
	var seqs []uint64
	if err := l.Read(0, func(e events.Envelope) error { seqs = append(seqs, e.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 2 || seqs[1] != 2 {
		t.Errorf("the ledger reads back #%v, want #1 and #2: the sequence rolls back with a refused write", seqs)
	}
}

// A nearly full disk refuses only the writes its predicate picks: here
// those appending more than one event, and the snapshots; the others go
// through, and the ledger holds exactly the events acknowledged.
func TestRefuseSomeWritesRefusesOnlyThoseItPicks(t *testing.T) {
	ctx := context.Background()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{Node: "n", BootID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	removed := func(i int) events.Envelope {
		return events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "test"}, time.Unix(int64(i), 0), "b")
	}
	var asked int
	room := RefuseSomeWrites(t, l, func(appended []events.Envelope) bool {
		asked++
		return len(appended) != 1
	})
	if _, err := l.Append(ctx, removed(1)); err != nil {
		t.Fatalf("a one-event append on a nearly full disk: %v", err)
	}
	if _, err := l.Append(ctx, removed(2), removed(3)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a two-event append: %v, want ENOSPC", err)
	}
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, st, "test"); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("snapshot: %v, want ENOSPC", err)
	}
	if _, err := l.Append(ctx, removed(4)); err != nil {
		t.Fatalf("a one-event append after refusals: %v", err)
	}
	if asked != 4 || l.LastSeq() != 2 || l.AppendFault() != nil {
		t.Errorf("asked %d times, LastSeq %d, AppendFault %v; want 4, 2 and none", asked, l.LastSeq(), l.AppendFault())
	}
	room()
	if _, err := l.Append(ctx, removed(5), removed(6)); err != nil {
		t.Fatalf("a two-event append once there is room: %v", err)
	}
}
