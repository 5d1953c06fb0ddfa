package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// Help goes to stdout with exit 0, so that `devledger run -h | less`
// shows it; with no command at all, the usage goes to stderr, exit 2.
func TestHelpOnStdout(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"run", "-h"}, {"dump", "--help"}, {"ledger", "backup", "-h"}} {
		code, stdout, stderr := runCLI(t, args...)
		if code != exitOK || !strings.HasPrefix(stdout, "usage: devledger") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %.40q, stderr %q", args, code, stdout, stderr)
		}
	}
	if code, stdout, stderr := runCLI(t); code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, "usage: devledger") {
		t.Errorf("no command: exit %d, stdout %q, stderr %.40q", code, stdout, stderr)
	}
	// help COMMAND is COMMAND -h; help of no such command is bad usage.
	// Flags after the names are not the command's to run: --note would
	// take -h for its value, and acknowledge.
	db := sampleCopy(t)
	for _, tc := range []struct{ help, cmd []string }{
		{[]string{"dump"}, []string{"dump"}},
		{[]string{"ledger", "backup"}, []string{"ledger", "backup"}},
		{[]string{"dump", "--db", db, "--pod"}, []string{"dump"}},
		{[]string{"ledger", "acknowledge", "--db", db, "--note"}, []string{"ledger", "acknowledge"}},
	} {
		_, want, _ := runCLI(t, append(tc.cmd, "-h")...)
		code, stdout, stderr := runCLI(t, append([]string{"help"}, tc.help...)...)
		if code != exitOK || stdout != want || stderr != "" {
			t.Errorf("help %q: exit %d, stdout %.60q, stderr %q; want %s -h's %.60q", tc.help, code, stdout, stderr, tc.cmd, want)
		}
	}
	if code, stdout, stderr := runCLI(t, "help", "nosuch"); code != exitUsage || stdout != "" || !strings.Contains(stderr, `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d, stdout %.40q, stderr %.60q", code, stdout, stderr)
	}
}

// A bad flag or value is said once, on stderr, with where to look.
func TestFlagErrorsOnce(t *testing.T) {
	for _, args := range [][]string{{"replay", "--until-seq", "-1"}, {"dump", "--nope"}, {"scan", "--format"}} {
		code, stdout, stderr := runCLI(t, args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != exitUsage || stdout != "" || len(lines) != 1 || !strings.Contains(stderr, "devledger "+args[0]+" -h") {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", args, code, stdout, stderr)
		}
	}
}

// version and --version say the same: the stamped version, the module's
// and the Go toolchain's.
func TestVersion(t *testing.T) {
	_, v, _ := runCLI(t, "version")
	_, flag, _ := runCLI(t, "--version")
	if !strings.HasPrefix(v, "devledger "+version+" (module ") || !strings.Contains(v, runtime.Version()) || flag != v {
		t.Errorf("version %q, --version %q", v, flag)
	}
}

// A command without flags says so in its help: no trailing space after
// its name, and no "flags:" heading with nothing under it.
func TestHelpOfACommandWithoutFlags(t *testing.T) {
	code, stdout, stderr := runCLI(t, "version", "-h")
	if want := "usage: devledger version\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("version -h: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, stdout, stderr, want)
	}
}

// dump takes the short device address scan takes.
func TestDumpShortDeviceAddress(t *testing.T) {
	db := sampleCopy(t)
	code, short, stderr := runCLI(t, "dump", "--db", db, "--device", "3B:02.1")
	_, full, _ := runCLI(t, "dump", "--db", db, "--device", "0000:3b:02.1")
	if code != exitOK || short != full || !strings.Contains(full, "discovered") {
		t.Errorf("--device 3B:02.1: exit %d, %q; the full address gives:\n%s", code, stderr, full)
	}
}

// ledgerTools are the commands that take --state-dir and --db, each with
// what else it needs: a backup or a compaction writes out; scan is given a config and
// sysfs under dir that are not there, so that it fails if it gets to them.
func ledgerTools(dir, out string) [][]string {
	return [][]string{
		{"dump"}, {"replay"},
		{"ledger", "backup", "--out", out},
		{"ledger", "compact", "--out", out},
		{"ledger", "acknowledge"},
		{"scan", "--config", filepath.Join(dir, "none.json"), "--sysfs-root", filepath.Join(dir, "none")},
	}
}

// --state-dir and --db each name a ledger: given both, a tool refuses
// rather than read (or, for acknowledge, write) one and ignore the other.
func TestStateDirAndDBRefused(t *testing.T) {
	db := sampleCopy(t)
	stateDir := t.TempDir()
	out := filepath.Join(t.TempDir(), "copy.db")
	for _, args := range ledgerTools(stateDir, out) {
		args = append(args, "--state-dir", stateDir, "--db", db)
		code, stdout, stderr := runCLI(t, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "--state-dir and --db: give one of them") {
			t.Errorf("%q: exit %d, stdout %.60q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup wrote %s: %v", out, err)
	}
}

// An empty --state-dir (a script's unset variable) names no state dir: a
// tool refuses rather than read, or for acknowledge write, the ledger.db
// of the directory it runs in.
func TestEmptyStateDirRefused(t *testing.T) {
	cwd := t.TempDir()
	writeSampleLedger(t, filepath.Join(cwd, ledgerFileName))
	before := mustRead(t, filepath.Join(cwd, ledgerFileName))
	t.Chdir(cwd)
	out := filepath.Join(t.TempDir(), "copy.db")
	for _, args := range ledgerTools(t.TempDir(), out) {
		args = append(args, "--state-dir", "")
		code, stdout, stderr := runCLI(t, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, `--state-dir "": names no state dir`) {
			t.Errorf("%q: exit %d, stdout %.60q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup wrote %s: %v", out, err)
	}
	if !bytes.Equal(mustRead(t, filepath.Join(cwd, ledgerFileName)), before) {
		t.Errorf("a tool wrote to the ledger of the directory it ran in")
	}
}

// An empty point, device or filter (a script's unset variable) names
// none: replay, scan and dump refuse it rather than answer another
// question (the state at the end, not at a time; the state, not a diff;
// every device, not one; the whole history, not a window) with exit 0.
func TestEmptyPointRefused(t *testing.T) {
	db := sampleCopy(t)
	roots, err := sysfsgen.BuildScenario(t.TempDir(), sysfsgen.ScenarioSRIOV)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--db", db, "--until-time", ""}, `--until-time "": names nothing`},
		{[]string{"replay", "--db", db, "--diff", "", "--format", "json"}, `--diff "": names nothing`},
		{[]string{"replay", "--db", db, "--diff=", "--until-seq", "5"}, `--diff "": names nothing`},
		{scanArgs(roots, scanConfigs["sriov"], "--explain", "", "--format", "json"), `--explain "": names nothing`},
		{[]string{"dump", "--db", db, "--since", ""}, `--since "": names nothing`},
		{[]string{"dump", "--db", db, "--until=", "--format", "jsonl"}, `--until "": names nothing`},
		{[]string{"dump", "--db", db, "--device", ""}, `--device "": names nothing`},
		{[]string{"dump", "--db", db, "--pool", "", "--stats"}, `--pool "": names nothing`},
		{[]string{"dump", "--db", db, "--pod", ""}, `--pod "": names nothing`},
		{[]string{"dump", "--db", db, "--namespace", ""}, `--namespace "": names nothing`},
		{[]string{"dump", "--db", db, "--iface", ""}, `--iface "": names nothing`},
		{[]string{"dump", "--db", db, "--pf", ""}, `--pf "": names nothing`},
		{[]string{"dump", "--db", db, "--type", ""}, `--type "": names nothing`},
		{[]string{"dump", "--db", db, "--stats", "--by", ""}, `--by "": names nothing`},
		{[]string{"dump", "--db", db, "--stats", "--by", "pod", "--every="}, `--every "": names nothing`},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %.60q, stderr %q; want exit 2 saying %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// An empty --db (a script's unset variable) names no copy: a tool refuses
// rather than read the state dir's ledger in its place.
func TestEmptyDBRefused(t *testing.T) {
	out := filepath.Join(t.TempDir(), "copy.db")
	for _, args := range ledgerTools(t.TempDir(), out) {
		args = append(args, "--db", "")
		code, stdout, stderr := runCLI(t, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, `--db "": names no ledger file`) {
			t.Errorf("%q: exit %d, stdout %.60q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup wrote %s: %v", out, err)
	}
}

// TestSalvageHintOnlyForAFileItRead: damage a reading tool met in a ledger
// file names salvage of that file; damage named after anything else (a
// daemon's admin socket, whose file salvage cannot open while it runs),
// and commands with a way out of their own, name none.
func TestSalvageHintOnlyForAFileItRead(t *testing.T) {
	dir := kubelettest.ShortTempDir(t)
	file := filepath.Join(dir, "ledger.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	damage := func(path string) error {
		return fmt.Errorf("read: %w", &store.CorruptError{Path: path, Seq: 7, Reason: "checksum mismatch"})
	}
	for _, c := range []struct {
		cmd  string
		err  error
		want string
	}{
		{"dump", damage(file), "  to copy every intact event: devledger ledger salvage --db " + file + " --out FILE"},
		{"replay", damage(file), "  to copy every intact event: devledger ledger salvage --db " + file + " --out FILE"},
		{"scan", damage(file), "  to copy every intact event: devledger ledger salvage --db " + file + " --out FILE"},
		{"dump", damage(sock), ""},
		{"dump", damage(filepath.Join(dir, "gone.db")), ""},
		{"ledger", damage(file), ""},
		{"dump", errors.New("read: broken pipe"), ""},
	} {
		if got := salvageHint(c.cmd, c.err); got != c.want {
			t.Errorf("salvageHint(%s, %v) = %q, want %q", c.cmd, c.err, got, c.want)
		}
	}
}
