//go:build !unix

package registrar

import "os"

// fileID is false here: the daemon runs on Linux only.
func fileID(fi os.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
