//go:build !unix

package grpcapi

import (
	"fmt"
	"os"
	"runtime"
)

// ownedByUs is false where a file's owner is not a unix user: no
// directory there is taken for a private one of ours. The daemon, which
// serves the sockets, runs on Linux only.
func ownedByUs(fi os.FileInfo) bool { return false }

// freeBytes is not known here: the daemon, whose admin socket spools
// backups, runs on Linux only.
func freeBytes(dir string) (uint64, error) {
	return 0, fmt.Errorf("free space of %s: not known on %s", dir, runtime.GOOS)
}
