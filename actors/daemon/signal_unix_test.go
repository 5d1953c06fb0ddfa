//go:build unix

package daemon

import (
	"os"
	"syscall"
	"testing"
)

// sighup sends this process SIGHUP, as an operator's reload does.
func sighup(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}
