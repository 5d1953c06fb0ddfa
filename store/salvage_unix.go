//go:build unix

package store

import (
	"fmt"
	"os"
	"syscall"
)

// mapRegular maps the first size bytes of the regular file f read-only:
// the page scan keeps slices of the mapping, not copies of the records.
// A variable, so that tests can salvage through readRegular too.
var mapRegular = func(f *os.File, size int) (data []byte, unmap func(), err error) {
	data, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("map: %w", err)
	}
	return data, func() { syscall.Munmap(data) }, nil
}
