package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/devledger/devledger/actors/daemon"
)

// TestRunPermissionDenied starts devledger run where it lacks the access it
// needs to a directory: it must stop at once with exit 1 and one JSON log
// line that names each path and the access it needs, before the ledger or
// its pid file is made.
func TestRunPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root passes every mode check, so the modes below would deny
		// nothing: play a user that the owner's mode bits apply to.
		t.Log("running as root: access is judged by the owner's mode bits")
		accessible = ownerBitsAccess
		t.Cleanup(func() { accessible = realAccess })
	}
	cases := []struct {
		name  string
		extra []string
		// setup takes the rights away, returning the error the daemon
		// must log; l holds the layout's paths.
		setup func(t *testing.T, l permLayout) string
	}{
		{
			name: "device-plugins not writable",
			setup: func(t *testing.T, l permLayout) string {
				chmod(t, l.devicePlugins, 0o500)
				return "cannot write " + l.devicePlugins + " (the kubelet's device-plugins dir): permission denied; devledger must run as root or with read and write access to " + l.devicePlugins
			},
		},
		{
			name:  "plugins_registry not writable in watcher mode",
			extra: []string{"--registration", "watcher"},
			setup: func(t *testing.T, l permLayout) string {
				mkdir(t, l.pluginsRegistry)
				chmod(t, l.pluginsRegistry, 0o500)
				return "cannot write " + l.pluginsRegistry + " (the kubelet's plugins_registry dir): permission denied; devledger must run as root or with read and write access to " + l.pluginsRegistry
			},
		},
		{
			name:  "auto mode picks the watcher when plugins_registry is there",
			extra: []string{"--registration", "auto"},
			setup: func(t *testing.T, l permLayout) string {
				mkdir(t, l.pluginsRegistry)
				chmod(t, l.pluginsRegistry, 0o300)
				return "cannot read " + l.pluginsRegistry + " (the kubelet's plugins_registry dir): permission denied; devledger must run as root or with read and write access to " + l.pluginsRegistry
			},
		},
		{
			name: "state dir cannot be created",
			setup: func(t *testing.T, l permLayout) string {
				parent := filepath.Dir(l.state)
				chmod(t, parent, 0o500)
				return "cannot create " + l.state + " (--state-dir) in " + parent + ": permission denied; devledger must run as root or with write access to " + parent
			},
		},
		{
			name: "state dir not writable",
			setup: func(t *testing.T, l permLayout) string {
				mkdir(t, l.state)
				chmod(t, l.state, 0o500)
				return "cannot write " + l.state + " (--state-dir): permission denied; devledger must run as root or with read and write access to " + l.state
			},
		},
		{
			name: "devinfo dir cannot be created",
			setup: func(t *testing.T, l permLayout) string {
				parent := filepath.Dir(l.devinfo)
				chmod(t, parent, 0o500)
				return "cannot create " + l.devinfo + " (--devinfo-dir) in " + parent + ": permission denied; devledger must run as root or with write access to " + parent
			},
		},
		{
			name:  "CDI spec dir not writable with --use-cdi",
			extra: []string{"--use-cdi"},
			setup: func(t *testing.T, l permLayout) string {
				mkdir(t, l.cdi)
				chmod(t, l.cdi, 0o500)
				return "cannot write " + l.cdi + " (--cdi-spec-dir): permission denied; devledger must run as root or with write access to " + l.cdi
			},
		},
		{
			name: "sysfs root not readable",
			setup: func(t *testing.T, l permLayout) string {
				chmod(t, l.sysfs, 0o100)
				return "cannot read " + l.sysfs + " (--sysfs-root): permission denied; devledger must run as root or with read access to " + l.sysfs
			},
		},
		{
			name: "two at once, both named",
			setup: func(t *testing.T, l permLayout) string {
				chmod(t, l.devicePlugins, 0o500)
				mkdir(t, l.state)
				chmod(t, l.state, 0o100)
				return "cannot read or write " + l.state + " (--state-dir): permission denied; " +
					"cannot write " + l.devicePlugins + " (the kubelet's device-plugins dir): permission denied; " +
					"devledger must run as root or with that access to each"
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newPermLayout(t)
			want := tc.setup(t, l)
			args := append([]string{"run", "--config", l.config, "--sysfs-root", l.sysfs,
				"--kubelet-dir", l.kubelet, "--state-dir", l.state, "--devinfo-dir", l.devinfo, "--cdi-spec-dir", l.cdi,
				"--registration", "legacy", "--log-format", "json", "--kernel-events=false"}, tc.extra...)
			code, stdout, stderr := runCLI(t, args...)
			if code != exitFailure {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d lines on stderr, want the one that says why:\n%s", len(lines), stderr)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatalf("not a JSON line: %q", lines[0])
			}
			if line["level"] != "error" || line["message"] != "devledger run cannot start" {
				t.Errorf("the line %v is not the start failure at error level", line)
			}
			if line["error"] != want {
				t.Errorf("error\n  %v\nwant\n  %s", line["error"], want)
			}
			// Nothing half-made: no ledger, no pid file, no socket.
			for _, dir := range []string{l.state, l.devicePlugins} {
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					t.Errorf("%s left in %s", e.Name(), dir)
				}
			}
		})
	}
}

// permLayout is a node's directories in a temp dir, all usable to begin
// with: the state dir and the devinfo dir do not exist yet (the daemon
// makes them).
type permLayout struct {
	config, sysfs, kubelet, devicePlugins, pluginsRegistry, state, devinfo, cdi string
}

func newPermLayout(t *testing.T) permLayout {
	t.Helper()
	root := t.TempDir()
	// An invalid config: a daemon that got past the access check would
	// stop at once with exit 2, after it made its ledger, rather than run.
	config, err := filepath.Abs(filepath.Join("testdata", "e2e", "bad.json"))
	if err != nil {
		t.Fatal(err)
	}
	l := permLayout{
		config:  config,
		sysfs:   filepath.Join(root, "sys"),
		kubelet: filepath.Join(root, "kubelet"),
		state:   filepath.Join(root, "lib", "state"),
		devinfo: filepath.Join(root, "run", "devinfo"),
		cdi:     filepath.Join(root, "run", "cdi"),
	}
	l.devicePlugins = filepath.Join(l.kubelet, "device-plugins")
	l.pluginsRegistry = filepath.Join(l.kubelet, "plugins_registry")
	for _, dir := range []string{l.sysfs, l.devicePlugins, filepath.Dir(l.state), filepath.Dir(l.devinfo)} {
		mkdir(t, dir)
	}
	return l
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// chmod sets dir's mode, and gives the owner its rights back when the test
// ends, so that the temp dir can be removed.
func chmod(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
}

var realAccess = accessible

// ownerBitsAccess judges access by the owner's mode bits alone, as the
// kernel does for a user who owns the file and has no capabilities.
func ownerBitsAccess(path string, mode uint32) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if owner := uint32(fi.Mode().Perm() >> 6); owner&mode != mode {
		return syscall.EACCES
	}
	return nil
}

// The CDI spec dir is needed, and checked at start, when a pool of the
// config answers with CDI names, as much as with --use-cdi.
func TestNeededDirsTakeTheCDISpecDirWhenAPoolUsesCDI(t *testing.T) {
	dir := t.TempDir()
	write := func(name, cdi string) string {
		path := filepath.Join(dir, name)
		src := `{"resourceList": [{"resourceName": "a", "selectors": {"drivers": ["vfio-pci"]}},
			{"resourceName": "b", "selectors": {"drivers": ["iavf"]}` + cdi + `}]}`
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name, config string
		useCDI, want bool
	}{
		{"no pool uses CDI", write("plain.json", ""), false, false},
		{"one pool sets cdi.enabled", write("cdi.json", `, "cdi": {"enabled": true}`), false, true},
		{"--use-cdi", write("plain2.json", ""), true, true},
		{"a config that does not load, with --use-cdi", filepath.Join("testdata", "e2e", "bad.json"), true, true},
		{"a config that does not load", filepath.Join("testdata", "e2e", "bad.json"), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o daemon.Options
			o.ConfigPath, o.ConfigOptions.UseCDI, o.CDISpecDir = tc.config, tc.useCDI, "/var/run/cdi"
			got := slices.ContainsFunc(neededDirs(o), func(d neededDir) bool { return d.role == "--cdi-spec-dir" })
			if got != tc.want {
				t.Errorf("the CDI spec dir needed: %v, want %v", got, tc.want)
			}
		})
	}
}
