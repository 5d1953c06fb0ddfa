package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "devledger")
	if err := os.WriteFile(bin, []byte("stand-in binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(dir, "image")
	tarFile := filepath.Join(dir, "image.tar")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-binary", bin, "-pci-ids", "../../../../testdata/pci.ids.sample", "-version", "1.2.3",
		"-revision", "abc", "-layout", layoutDir, "-tarball", tarFile}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "ghcr.io/devledger/devledger:1.2.3 sha256:") {
		t.Errorf("stdout %q", stdout.String())
	}
	for _, p := range []string{filepath.Join(layoutDir, "index.json"), filepath.Join(layoutDir, "oci-layout"), tarFile} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}

// TestNoPCIIDs: without the database the build stops at once, exit 2,
// saying what to install.
func TestNoPCIIDs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "devledger")
	if err := os.WriteFile(bin, []byte("stand-in binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-binary", bin, "-pci-ids", filepath.Join(dir, "pci.ids"),
		"-layout", filepath.Join(dir, "image"), "-tarball", ""}, &stdout, &stderr)
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "no PCI ID database") || !strings.Contains(msg, "apt-get install pci.ids") {
		t.Errorf("stderr %q", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "image")); !os.IsNotExist(err) {
		t.Errorf("layout written after a failed build: %v", err)
	}
}
