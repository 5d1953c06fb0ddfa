//go:build unix

package grpcapi

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownedByUs says whether the file fi describes belongs to this process's
// effective user.
func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// freeBytes is how many bytes this process may still write to the file
// system that holds dir.
func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
