package sysfs

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// samplePCIIDs is the hand-written pci.ids the tests take names from.
var samplePCIIDs = filepath.Join("..", "testdata", "pci.ids.sample")

// testReader returns a Reader over roots that never looks at the host: the
// PCI ID database is the sample unless opts names another, and the search
// root is an empty directory.
func testReader(t testing.TB, roots sysfsgen.Roots, opts Options) *Reader {
	t.Helper()
	opts.SysfsRoot = roots.Sysfs
	opts.DevRoot = roots.Dev
	if opts.PCIIDsSearchRoot == "" {
		opts.PCIIDsSearchRoot = t.TempDir()
	}
	return New(opts)
}

// sampleReader is testReader with the sample pci.ids.
func sampleReader(t testing.TB, roots sysfsgen.Roots) *Reader {
	t.Helper()
	return testReader(t, roots, Options{PCIIDsPath: samplePCIIDs})
}

// scanOK scans and fails the test on error.
func scanOK(t testing.TB, r *Reader) []Device {
	t.Helper()
	devs, err := r.Scan()
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return devs
}

// byAddress indexes devices by address.
func byAddress(devs []Device) map[string]Device {
	m := make(map[string]Device, len(devs))
	for _, d := range devs {
		m[d.Address] = d
	}
	return m
}

// logBuffer is a zerolog sink tests can read while a Reader writes to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count returns how many log lines at level contain substr.
func (l *logBuffer) count(level, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, `"level":"`+level+`"`) && strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func (l *logBuffer) logger() zerolog.Logger {
	return zerolog.New(l).Level(zerolog.DebugLevel)
}
