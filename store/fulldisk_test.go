package store_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
)

// On a full disk an append fails with the disk's error and writes nothing;
// the log says it cannot record (AppendFault) and counts the failure, and
// once there is room again the next append succeeds and clears the fault.
// The log says when the ledger stops recording and when it records again,
// once each.
func TestAppendFaultOnAFullDisk(t *testing.T) {
	disk := storetest.NewFullDisk(t, 1<<20)
	logs := &actortest.Log{}
	l, err := store.Open(filepath.Join(disk.Dir, "ledger.db"), store.Options{Node: "n", BootID: "b", Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	appendOne := func(i int) error {
		_, err := l.Append(ctx, events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: strings.Repeat("x", 200)},
			time.Unix(int64(i), 0), "b"))
		return err
	}
	if err := appendOne(0); err != nil {
		t.Fatal(err)
	}
	if l.AppendFault() != nil || l.AppendFailures() != 0 {
		t.Fatalf("fault %v, %d failures before the disk filled", l.AppendFault(), l.AppendFailures())
	}
	disk.Fill(t)
	var failed error
	for i := 1; i < 2000 && failed == nil; i++ {
		failed = appendOne(i)
	}
	if failed == nil {
		t.Fatal("2000 appends to a full disk succeeded")
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Errorf("append on a full disk: %v, want ENOSPC", failed)
	}
	if err := l.AppendFault(); err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("AppendFault = %v, want the disk's error", err)
	}
	if n := l.AppendFailures(); n != 1 {
		t.Errorf("AppendFailures = %d, want 1", n)
	}
	stuck := l.LastSeq()
	if err := appendOne(9000); err == nil {
		t.Fatal("append on a disk still full succeeded")
	}
	if l.LastSeq() != stuck || l.AppendFailures() != 2 {
		t.Errorf("a failed append moved the ledger to %d (from %d), failures %d", l.LastSeq(), stuck, l.AppendFailures())
	}
	disk.Free(t)
	if err := appendOne(9001); err != nil {
		t.Fatalf("append after the disk was freed: %v", err)
	}
	if err := l.AppendFault(); err != nil {
		t.Errorf("AppendFault after a good append: %v", err)
	}
	if err := appendOne(9002); err != nil {
		t.Fatal(err)
	}
	const stopped, again = "the ledger cannot record", "the ledger records again"
	if s, a := logs.Count("error", stopped), logs.Count("info", again); s != 1 || a != 1 {
		t.Errorf("logged %d lines that the ledger cannot record and %d that it records again, want 1 and 1:\n%s", s, a, logs)
	}
	// Every acknowledged event reads back, and nothing else.
	n := 0
	if err := l.Read(0, func(e events.Envelope) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := int(stuck) + 2; n != want {
		t.Errorf("read %d events, want %d: those acknowledged before the disk was full, and the two after", n, want)
	}
}

// A salvage the disk cuts short leaves nothing under the name it was to
// write: a new ledger holding only the first part of what was salvaged
// would verify as sound, and read as the whole.
func TestSalvageCutShortByAFullDiskLeavesNoLedger(t *testing.T) {
	src := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(src, store.Options{Node: "n", BootID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		envs := make([]events.Envelope, 500)
		for j := range envs {
			envs[j] = events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: strings.Repeat("x", 200)},
				time.Unix(int64(i*500+j), 0), "b")
		}
		if _, err := l.Append(context.Background(), envs...); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	disk := storetest.NewFullDisk(t, 256<<10)
	out := filepath.Join(disk.Dir, "salvaged.db")
	_, err = store.Salvage(src, out)
	if !errors.Is(err, syscall.ENOSPC) || !strings.HasPrefix(err.Error(), "salvage into "+out+": ") {
		t.Fatalf("salvage onto a full disk: %v, want ENOSPC, named after %s", err, out)
	}
	if _, err := os.Lstat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a salvage that failed left %s (%v)", out, err)
	}
	if left, _ := os.ReadDir(disk.Dir); len(left) != 0 {
		t.Errorf("a salvage that failed left %d files in %s: %v", len(left), disk.Dir, left)
	}
}
