package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWithoutConfig is the image's entrypoint on a node where the
// ConfigMap is not mounted: exit 2, naming the path and the ConfigMap,
// before anything is created in the state dir.
func TestRunWithoutConfig(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "etc", "devledger", "config.json")
	code, stdout, stderr := runCLI(t, "run", "--config", missing,
		"--state-dir", filepath.Join(dir, "state"), "--kubelet-dir", filepath.Join(dir, "kubelet"))
	if code != exitUsage {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitUsage, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	for _, want := range []string{"no config at " + missing, "devledger-config ConfigMap"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "state", "*")); len(matches) > 0 {
		t.Errorf("state dir written before the config was found: %v", matches)
	}
}
