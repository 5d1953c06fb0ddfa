//go:build !linux

package main

import (
	"fmt"
	"runtime"
)

// limitFileSize is Linux only (prlimit(2)).
func limitFileSize(pid int, limit uint64) (restore func() error, err error) {
	return nil, fmt.Errorf("no prlimit on %s", runtime.GOOS)
}
