package benchbaseline

import (
	"os"
	"testing"
)

// memoryBackedRoot is where MemTempDir makes its dirs when it can.
const memoryBackedRoot = "/dev/shm"

// MemTempDir makes a dir for a fake sysfs tree on a memory-backed file
// system when the machine has one (/dev/shm), else in tb.TempDir(); it is
// removed in tb's Cleanup. On a node sysfs lives in memory: a fake tree on
// a disk-backed file system measures the disk's metadata path instead (on
// some machines building and scanning the large tree there is forty times
// slower), for the daemon and its baselines alike.
func MemTempDir(tb testing.TB) string {
	tb.Helper()
	if fi, err := os.Stat(memoryBackedRoot); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp(memoryBackedRoot, "devledger-bench-"); err == nil {
			tb.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return tb.TempDir()
}
