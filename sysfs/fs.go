package sysfs

import (
	"errors"
	"io"
	"os"
)

// fileSystem is the four operations a scan performs. osFS is the only
// production implementation; tests wrap it to record what a scan touches.
type fileSystem interface {
	// readFile reads the file at path into buf and returns how many bytes
	// it read. A file that fills buf is reported with n == len(buf).
	readFile(path string, buf []byte) (int, error)
	readlink(path string) (string, error)
	// readDirNames lists the names in a directory, in no particular order.
	readDirNames(path string) ([]string, error)
	// stat follows symlinks and reports whether path exists.
	stat(path string) error
}

// osFS reads the real file system.
type osFS struct{}

// readFile takes a single read: the kernel hands over a whole sysfs
// attribute (at most a page) in one read(2), so there is no second read to
// wait for EOF, and none of the stat and buffer allocation os.ReadFile
// spends on sizing a buffer.
func (osFS) readFile(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	n, err := f.Read(buf)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return n, err
}

func (osFS) readlink(path string) (string, error) { return os.Readlink(path) }

func (osFS) readDirNames(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return names, err
}

func (osFS) stat(path string) error {
	_, err := os.Stat(path)
	return err
}
