//go:build !linux

package storetest

import (
	"fmt"
	"runtime"
)

// mountTmpfs is Linux only: a tmpfs of a given size is how the tests
// fill a disk.
func mountTmpfs(dir string, size int) error {
	return fmt.Errorf("no tmpfs mounts on %s", runtime.GOOS)
}

func unmount(dir string) error { return nil }
