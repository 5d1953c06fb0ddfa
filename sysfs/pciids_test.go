package sysfs

import (
	"compress/gzip"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// installSample copies the sample pci.ids into root at rel (gzipped when rel
// ends in .gz) and returns the path.
func installSample(t *testing.T, root, rel string) string {
	t.Helper()
	data, err := os.ReadFile(samplePCIIDs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if filepath.Ext(path) == ".gz" {
		zw := gzip.NewWriter(f)
		if _, err := zw.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPCIIDs checks where names come from and that a missing or broken
// database leaves names empty, logs one warning for any number of scans,
// and never fails a scan.
func TestPCIIDs(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	malformed := filepath.Join(t.TempDir(), "pci.ids")
	// pcidb indexes these lines without checking their length.
	if err := os.WriteFile(malformed, []byte("C 0\n8086\n\tx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notGzip := filepath.Join(t.TempDir(), "pci.ids.gz")
	if err := os.WriteFile(notGzip, []byte("8086  Intel\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		opts      func(t *testing.T) (Options, string)
		wantNames bool
	}{
		{"explicit path", func(t *testing.T) (Options, string) {
			return Options{PCIIDsPath: samplePCIIDs}, samplePCIIDs
		}, true},
		{"hwdata under the search root", func(t *testing.T) (Options, string) {
			root := t.TempDir()
			return Options{PCIIDsSearchRoot: root}, installSample(t, root, "usr/share/hwdata/pci.ids")
		}, true},
		{"gzipped in misc", func(t *testing.T) (Options, string) {
			root := t.TempDir()
			return Options{PCIIDsSearchRoot: root}, installSample(t, root, "usr/share/misc/pci.ids.gz")
		}, true},
		{"none under the search root", func(t *testing.T) (Options, string) {
			return Options{PCIIDsSearchRoot: t.TempDir()}, ""
		}, false},
		{"explicit path missing", func(t *testing.T) (Options, string) {
			return Options{PCIIDsPath: filepath.Join(t.TempDir(), "pci.ids")}, ""
		}, false},
		{"explicit path is a directory", func(t *testing.T) (Options, string) {
			return Options{PCIIDsPath: t.TempDir()}, ""
		}, false},
		{"malformed file", func(t *testing.T) (Options, string) {
			return Options{PCIIDsPath: malformed}, ""
		}, false},
		{"not really gzip", func(t *testing.T) (Options, string) {
			return Options{PCIIDsPath: notGzip}, ""
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts, wantSource := tc.opts(t)
			var logs logBuffer
			opts.Logger = logs.logger()
			r := testReader(t, roots, opts)
			for range 2 {
				devs := scanOK(t, r)
				if len(devs) != 5 {
					t.Fatalf("scan found %d functions, want 5", len(devs))
				}
				gpu := byAddress(devs)["0000:18:00.0"]
				if got := gpu.VendorName != "" && gpu.DeviceName != ""; got != tc.wantNames {
					t.Errorf("names %q %q, want names: %v", gpu.VendorName, gpu.DeviceName, tc.wantNames)
				}
				if gpu.ClassName != "Display controller" || gpu.SubclassName != "3D controller" {
					t.Errorf("class names %q %q must not depend on the database", gpu.ClassName, gpu.SubclassName)
				}
				if len(gpu.Warnings) != 0 {
					t.Errorf("a missing database must not warn per device: %q", gpu.Warnings)
				}
			}
			if got := r.PCIIDsSource(); got != wantSource {
				t.Errorf("PCIIDsSource() = %q, want %q", got, wantSource)
			}
			wantWarn := 0
			if !tc.wantNames {
				wantWarn = 1
			}
			if n := logs.count("warn", "no PCI ID database"); n != wantWarn {
				t.Errorf("%d warnings about the database over two scans, want %d", n, wantWarn)
			}
		})
	}
}

// TestPCIIDsNeverFetched checks that no pci.ids is downloaded even when the
// environment asks pcidb to: every HTTP(S) request is routed to a local
// listener that counts connections.
func TestPCIIDsNeverFetched(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	proxy := "http://" + ln.Addr().String()
	t.Setenv("HTTP_PROXY", proxy)
	t.Setenv("HTTPS_PROXY", proxy)
	t.Setenv("NO_PROXY", "")
	t.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "1")
	t.Setenv("HOME", t.TempDir())

	// Through loadPCIIDs directly with a path that does not exist: pcidb's
	// own discovery then finds nothing, the case where it would fetch.
	if _, err := loadPCIIDs(filepath.Join(t.TempDir(), "pci.ids")); err == nil {
		t.Error("loading a missing database succeeded")
	}
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	scanOK(t, testReader(t, roots, Options{}))
	if n := conns.Load(); n != 0 {
		t.Errorf("%d network connections while looking for pci.ids", n)
	}
}

// TestLoadMalformedPCIIDs checks that a pci.ids that makes pcidb's parser
// panic comes back as an error.
func TestLoadMalformedPCIIDs(t *testing.T) {
	for name, content := range map[string]string{
		"short class line":     "C 0\n",
		"device before vendor": "\t1234  x\n",
		"short vendor line":    "8086\n",
		"empty":                "",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pci.ids")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if db, err := loadPCIIDs(path); err == nil {
				t.Errorf("loadPCIIDs = %d vendors, want an error", len(db.vendors))
			}
		})
	}
}
