package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	out := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
	}{
		{"list", []string{"-list"}, 0, "sriov\n"},
		{"writes a scenario", []string{"-scenario", "virtio", "-out", out}, 0, filepath.Join(out, "sys")},
		{"again in the same place", []string{"-scenario", "virtio", "-out", out}, 1, ""},
		{"unknown scenario", []string{"-scenario", "nope", "-out", t.TempDir()}, 2, ""},
		{"no output directory", []string{"-scenario", "gpu"}, 2, ""},
		{"bad flag", []string{"-bogus"}, 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Fatalf("run(%q) = %d, want %d; stderr: %s", tc.args, code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), tc.stdout)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(out, "sys", "bus", "pci", "devices", "0000:00:03.0")); err != nil {
		t.Errorf("scenario not written: %v", err)
	}
}
