package storetest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FullDisk is a small tmpfs of a test's own, for what a node does when the
// disk under its state dir fills up.
type FullDisk struct {
	// Dir is the mount point.
	Dir    string
	filler string
}

// NewFullDisk mounts a tmpfs of size bytes in a temp dir and unmounts it in
// tb's Cleanup. Mounting needs root (CI runs as root); without it the test
// is skipped with the reason.
func NewFullDisk(tb testing.TB, size int) *FullDisk {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("mounting a small tmpfs to fill needs root")
	}
	dir := tb.TempDir()
	if err := mountTmpfs(dir, size); err != nil {
		tb.Skipf("cannot mount a tmpfs at %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unmount(dir); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return &FullDisk{Dir: dir, filler: filepath.Join(dir, "filler")}
}

// Fill writes a file into the mount until the disk is full: no block is
// free afterwards. A file that has blocks already keeps them (a tmpfs
// gives out blocks as they are first written).
func (f *FullDisk) Fill(tb testing.TB) {
	tb.Helper()
	fh, err := os.OpenFile(f.filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer fh.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := fh.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			tb.Fatalf("fill %s: %v", f.filler, err)
		}
	}
}

// Free removes what Fill wrote.
func (f *FullDisk) Free(tb testing.TB) {
	tb.Helper()
	if err := os.Remove(f.filler); err != nil {
		tb.Fatal(err)
	}
}
