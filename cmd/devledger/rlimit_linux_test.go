package main

import (
	"fmt"
	"syscall"
	"unsafe"
)

// limitFileSize sets the soft RLIMIT_FSIZE of process pid with prlimit(2)
// and returns a function that restores the old limit. Writes at or past
// limit bytes then fail with EFBIG (the Go runtime ignores SIGXFSZ). It
// makes the ledger unwritable from outside the daemon: root ignores file
// permissions, but not this limit.
func limitFileSize(pid int, limit uint64) (restore func() error, err error) {
	var old syscall.Rlimit
	if err := prlimit(pid, nil, &old); err != nil {
		return nil, err
	}
	if err := prlimit(pid, &syscall.Rlimit{Cur: limit, Max: old.Max}, nil); err != nil {
		return nil, err
	}
	return func() error { return prlimit(pid, &old, nil) }, nil
}

func prlimit(pid int, set, get *syscall.Rlimit) error {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(syscall.RLIMIT_FSIZE),
		uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(get)), 0, 0)
	if errno != 0 {
		return fmt.Errorf("prlimit(%d, RLIMIT_FSIZE): %w", pid, errno)
	}
	return nil
}
