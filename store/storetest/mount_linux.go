package storetest

import (
	"strconv"
	"syscall"
)

// mountTmpfs mounts a tmpfs of size bytes at dir.
func mountTmpfs(dir string, size int) error {
	return syscall.Mount("devledger-full", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size="+strconv.Itoa(size))
}

// unmount detaches the mount at dir.
func unmount(dir string) error { return syscall.Unmount(dir, syscall.MNT_DETACH) }
