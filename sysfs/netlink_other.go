//go:build !linux

package sysfs

import (
	"context"
	"fmt"
	"runtime"
)

// WatchKernel is Linux only: here it returns an error wrapping
// ErrWatchNotSupported, and the caller relies on polling.
func WatchKernel(ctx context.Context, opts WatchOptions) (<-chan KernelEvent, error) {
	return nil, fmt.Errorf("%w on %s", ErrWatchNotSupported, runtime.GOOS)
}
