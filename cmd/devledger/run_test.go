package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// run's help gives --config as what it is, optional: the image runs
// `/devledger run` with no config named, and run then reads the default
// places (TestRunWithoutConfig).
func TestRunHelpSaysConfigIsOptional(t *testing.T) {
	code, stdout, stderr := runCLI(t, "run", "-h")
	if want := "usage: devledger run [--config FILE] [flags]\n"; code != exitOK || !strings.HasPrefix(stdout, want) || stderr != "" {
		t.Errorf("run -h: exit %d, stderr %q, stdout does not begin with %q:\n%s", code, stderr, want, stdout)
	}
}

// A flag value run refuses is refused before the state dir or the
// ledger is made: a typo leaves nothing behind on the node.
func TestRunRefusesBadFlagsBeforeStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"registration", []string{"--registration", "bogus"}, `--registration "bogus": want auto, legacy or watcher`},
		{"scan interval", []string{"--scan-interval", "1ns"}, "--scan-interval 1ns: want at least 10ms"},
		{"scan interval zero", []string{"--scan-interval", "0"}, "--scan-interval 0s: want at least 10ms"},
		{"probe interval", []string{"--probe-interval", "1us"}, "--probe-interval 1µs: want at least 10ms"},
		{"reconcile interval", []string{"--reconcile-interval", "-30s"}, "--reconcile-interval -30s: want at least 10ms"},
		{"leak grace", []string{"--leak-grace", "-5m"}, "--leak-grace -5m0s: must be positive"},
		{"leak grace zero", []string{"--leak-grace", "0"}, "--leak-grace 0s: must be positive"},
		{"retain age", []string{"--retain-age", "-1h"}, "--retain-age -1h0m0s: must not be negative"},
		{"metrics addr without colon", []string{"--metrics-addr", "9108"}, `--metrics-addr "9108": want HOST:PORT or :PORT`},
		{"metrics addr port out of range", []string{"--metrics-addr", ":91080"}, `--metrics-addr ":91080": want HOST:PORT or :PORT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			args := append([]string{"run", "--config", filepath.Join("..", "..", "testdata", "config", "devledger.json"),
				"--sysfs-root", dir, "--kubelet-dir", filepath.Join(dir, "kubelet"), "--state-dir", state,
				"--devinfo-dir", "-", "--cdi-spec-dir", "-", "--kernel-events=false", "--log-format", "json"}, tc.args...)
			code, stdout, stderr := runCLI(t, args...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state dir made before the flags were checked: %v", err)
			}
		})
	}
}

// A --sysfs-root that names no directory (a typo, a mount missing from a
// manifest) is bad usage, as scan says of it: exit 2, before the state
// dir is made.
func TestRunRefusesMissingSysfsRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A path through the file names no directory either: the kernel
	// answers "not a directory", not "no such file".
	for _, root := range []string{filepath.Join(dir, "host", "sys"), file, filepath.Join(file, "sys")} {
		t.Run(filepath.Base(root), func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			type result struct {
				code           int
				stdout, stderr string
			}
			done := make(chan result, 1)
			go func() {
				code, stdout, stderr := runCLI(t, "run", "--config", filepath.Join("..", "..", "testdata", "config", "devledger.json"),
					"--sysfs-root", root, "--kubelet-dir", filepath.Join(dir, "kubelet"), "--state-dir", state,
					"--devinfo-dir", "-", "--cdi-spec-dir", "-", "--kernel-events=false", "--log-format", "json")
				done <- result{code, stdout, stderr}
			}()
			var code int
			var stdout, stderr string
			select {
			case r := <-done:
				code, stdout, stderr = r.code, r.stdout, r.stderr
			case <-time.After(30 * time.Second):
				t.Fatalf("run --sysfs-root %s still runs after 30s: it was taken", root)
			}
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, "--sysfs-root "+root) {
				t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state dir made before the sysfs root was checked: %v", err)
			}
		})
	}
}

// A --sysfs-root the flag check cannot stat for another reason than
// that it names no directory (here a symlink loop; for a user, a dir on
// the way it may not search) is left to the start, which names it: exit
// 1, before the state dir is made.
func TestRunNamesASysfsRootItCannotReach(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "sys")
	if err := os.Symlink("sys", root); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	code, stdout, stderr := runCLI(t, "run", "--config", filepath.Join("..", "..", "testdata", "config", "devledger.json"),
		"--sysfs-root", root, "--kubelet-dir", filepath.Join(dir, "kubelet"), "--state-dir", state,
		"--devinfo-dir", "-", "--cdi-spec-dir", "-", "--kernel-events=false", "--log-format", "json")
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "cannot reach "+root+" (--sysfs-root)") {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir made before the sysfs root was checked: %v", err)
	}
}

// A 32-bit build (armhf nodes run k3s) would panic as its first actors
// spawn, and a big-endian one (s390x) would find its own ledger damaged:
// run and demo stop at once, naming the architecture and what does run.
func TestDaemonOn32BitsOrBigEndianNamesWhatRunsThere(t *testing.T) {
	for _, arch := range []struct {
		name   string
		bits   int
		little bool
	}{{"arm", 32, true}, {"386", 32, true}, {"s390x", 64, false}} {
		err := daemonOn("linux", arch.name, arch.bits, arch.little)
		if err == nil || !strings.Contains(err.Error(), "64-bit little-endian") || !strings.Contains(err.Error(), "not linux/"+arch.name+":") {
			t.Errorf("linux/%s: %v, want it refused, naming linux/%s and 64-bit little-endian", arch.name, err, arch.name)
			continue
		}
		for _, cmd := range []string{"dump", "replay", "ledger"} {
			if !strings.Contains(err.Error(), cmd) {
				t.Errorf("linux/%s: %q does not name %s", arch.name, err, cmd)
			}
		}
	}
}

// Off Linux, run and demo stop at once, naming the OS as operators know
// it and every ledger command, which reads a copy there as on a node.
func TestDaemonOffLinuxNamesWhatRunsThere(t *testing.T) {
	if err := daemonOn("linux", "arm64", 64, true); err != nil {
		t.Errorf("on linux: %v", err)
	}
	for goos, name := range map[string]string{"darwin": "macOS", "windows": "Windows", "freebsd": "freebsd"} {
		err := daemonOn(goos, "arm64", 64, true)
		if err == nil || !strings.Contains(err.Error(), "not on "+name+":") {
			t.Errorf("on %s: %v, want it refused, naming %s", goos, err, name)
			continue
		}
		for cmd := range ledgerCommands {
			if !strings.Contains(err.Error(), cmd) {
				t.Errorf("on %s: %q does not name ledger %s", goos, err, cmd)
			}
		}
	}
}
