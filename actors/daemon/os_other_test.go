//go:build !linux

package daemon

import (
	"fmt"
	"runtime"
)

func bindMount(src, dst string) error { return fmt.Errorf("no bind mounts on %s", runtime.GOOS) }

func unmount(dir string) error { return nil }
