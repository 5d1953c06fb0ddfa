//go:build !unix

package sysfs

import (
	"runtime"
	"testing"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	t.Skipf("no FIFOs on %s", runtime.GOOS)
}
