package daemon

import "syscall"

// bindMount mounts the directory src at dst too.
func bindMount(src, dst string) error { return syscall.Mount(src, dst, "", syscall.MS_BIND, "") }

// unmount detaches the mount at dir.
func unmount(dir string) error { return syscall.Unmount(dir, syscall.MNT_DETACH) }
