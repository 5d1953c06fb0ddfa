//go:build !unix

package daemon

import (
	"runtime"
	"testing"
)

func sighup(t *testing.T) {
	t.Helper()
	t.Skipf("no SIGHUP to send on %s", runtime.GOOS)
}
