package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// node is a fake machine for the daemon: a sysfs/devfs/procfs tree written
// by sysfsgen, the pool config that goes with it, and the daemon's state
// dir, which outlives daemon restarts within a test.
type node struct {
	sysfs, dev, proc string
	config           string
	stateDir         string
	devinfoDir       string
	// args are more flags for `devledger run`.
	args []string
}

// newNode writes the named sysfsgen scenario into a temp dir and takes its
// config from testdata/config/scan/.
func newNode(t testing.TB, scenario, config string) *node {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command(sysfsgenBin, "-scenario", scenario, "-out", filepath.Join(dir, "node")).CombinedOutput()
	if err != nil {
		t.Fatalf("sysfsgen -scenario %s: %v\n%s", scenario, err, out)
	}
	return &node{
		sysfs:      filepath.Join(dir, "node", "sys"),
		dev:        filepath.Join(dir, "node", "dev"),
		proc:       filepath.Join(dir, "node", "proc"),
		config:     filepath.Join(repoRoot, "testdata", "config", "scan", config),
		stateDir:   filepath.Join(dir, "state"),
		devinfoDir: filepath.Join(dir, "devinfo"),
	}
}

// daemon is one devledger run process.
type daemon struct {
	cmd     *exec.Cmd
	started time.Time
	// stopped is when signal sent its signal.
	stopped time.Time
	logPath string
	done    chan struct{}
	err     error // the process's exit, once done is closed
}

// startDaemon starts `devledger run` on the node with the given
// registration mode (legacy or watcher), the kubelet root being the
// namespace's /var/lib/kubelet. The process is killed at the end of the
// test if it still runs, and its log is printed if the test failed.
func startDaemon(t testing.TB, n *node, registration string) *daemon {
	t.Helper()
	return startDaemonAt(t, n, registration, "")
}

// startDaemonAt is startDaemon; with view, the daemon runs in a mount
// namespace of its own where the kubelet's root is bind-mounted at view,
// and is given that as --kubelet-dir, as a DaemonSet mounts the host's
// kubelet dir (elsewhere on k0s or MicroK8s) at /var/lib/kubelet: the
// paths it sees are not the kubelet's.
func startDaemonAt(t testing.TB, n *node, registration, view string) *daemon {
	t.Helper()
	logFile, err := os.CreateTemp(t.TempDir(), "devledger-*.log")
	if err != nil {
		t.Fatal(err)
	}
	kubeletDir := kubeletRoot
	if view != "" {
		kubeletDir = view
	}
	args := []string{"run",
		"--config", n.config,
		"--sysfs-root", n.sysfs, "--dev-root", n.dev, "--proc-root", n.proc,
		"--pci-ids", filepath.Join(repoRoot, "testdata", "pci.ids.sample"),
		"--kubelet-dir", kubeletDir,
		"--state-dir", n.stateDir,
		"--devinfo-dir", n.devinfoDir, "--cdi-spec-dir", filepath.Join(n.devinfoDir, "..", "cdi"),
		"--registration", registration,
		"--log-format", "json", "--log-level", "debug",
	}
	args = append(args, n.args...)
	cmd := exec.Command(devledgerBin, args...)
	if view != "" {
		// unshare and sh exec in turn: the process is the daemon's.
		cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--",
			"sh", "-c", `mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"`,
			"sh", view, kubeletRoot, devledgerBin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary that dies must not leave a daemon behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d := &daemon{cmd: cmd, logPath: logFile.Name(), done: make(chan struct{})}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start devledger: %v", err)
	}
	go func() {
		d.err = cmd.Wait()
		logFile.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() || os.Getenv(logsEnv) != "" {
			logTail(t, fmt.Sprintf("devledger run (pid %d)", cmd.Process.Pid), d.logPath)
		}
	})
	return d
}

// signal sends sig to the daemon and waits (at most timeout) for it to
// exit; it returns the exit code, -1 for a death by signal.
func (d *daemon) signal(t testing.TB, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	d.stopped = time.Now()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %v to devledger: %v", sig, err)
	}
	select {
	case <-d.done:
	case <-time.After(timeout):
		t.Fatalf("devledger still running %v after %v", timeout, sig)
	}
	var exit *exec.ExitError
	if errors.As(d.err, &exit) {
		return exit.ExitCode()
	}
	if d.err != nil {
		t.Fatalf("wait for devledger: %v", d.err)
	}
	return 0
}

// logTail prints the last lines of a log file into the test log.
func logTail(t testing.TB, what, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s log %s: %v", what, path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	const keep = 80
	if len(lines) > keep {
		lines = lines[len(lines)-keep:]
	}
	t.Logf("last %d lines of the %s log:\n%s", len(lines), what, strings.Join(lines, "\n"))
}

// devledger runs a devledger subcommand to completion and returns its
// standard output.
func devledger(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := runDevledger(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runDevledger is devledger returning the failure, its standard error in
// the error's text.
func runDevledger(args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(devledgerBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("devledger %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// ledgerState is the part of `devledger replay --format json` the suite
// reads: the daemon's state folded from its ledger.
type ledgerState struct {
	Daemon struct {
		Running      bool   `json:"running"`
		Starts       int    `json:"starts"`
		Crashes      int    `json:"crashes"`
		KernelBootID string `json:"kernel_boot_id"`
		Reboots      int    `json:"reboots"`
	} `json:"daemon"`
	Kubelet struct {
		Restarts int  `json:"restarts"`
		Down     bool `json:"down"`
	} `json:"kubelet"`
	// Attribution is whether the kubelet's PodResources answered the
	// daemon's last List.
	Attribution struct {
		Available bool `json:"available"`
	} `json:"attribution"`
	Pools map[string]struct {
		Members      []string `json:"members"`
		Registration struct {
			Socket     string `json:"socket"`
			Mode       string `json:"mode"`
			Serving    bool   `json:"serving"`
			Registered bool   `json:"registered"`
			Failures   int    `json:"failures"`
			LastError  string `json:"last_error"`
		} `json:"registration"`
	} `json:"pools"`
	Allocations map[string]struct {
		Seq       uint64   `json:"seq"`
		Pool      string   `json:"pool"`
		DeviceIDs []string `json:"device_ids"`
		// Binding is the container PodResources attributed it to, and
		// its pod's UID as the device manager's checkpoint gives it.
		Binding *struct {
			Namespace string `json:"namespace"`
			Pod       string `json:"pod"`
			UID       string `json:"uid"`
			Container string `json:"container"`
		} `json:"binding"`
	} `json:"allocations"`
}

// replay folds the node's ledger with `devledger replay --format json`
// (offline, or through the admin socket while the daemon runs).
func replay(t testing.TB, stateDir string) ledgerState {
	t.Helper()
	s, err := readLedger(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readLedger is replay returning the failure: a daemon that is starting
// holds its ledger before its admin socket serves.
func readLedger(stateDir string) (ledgerState, error) {
	var s ledgerState
	out, err := runDevledger("replay", "--state-dir", stateDir, "--format", "json")
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return s, fmt.Errorf("devledger replay --format json: %w\n%s", err, out)
	}
	return s, nil
}

// waitLedger polls the ledger (through the running daemon's admin socket)
// until ok accepts it, and returns that state; a ledger that cannot be
// read (the daemon starting) is polled again. It fails the test after
// within, saying what it waited for.
func waitLedger(t testing.TB, r *rig, within time.Duration, what string, ok func(ledgerState) bool) ledgerState {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, err := readLedger(r.node.stateDir)
		if err == nil && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("ledger after %v, want %s: %v", within, what, err)
			}
			t.Fatalf("ledger after %v, want %s: daemon %+v, kubelet %+v, pools %+v", within, what, s.Daemon, s.Kubelet, s.Pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ledgerHolds polls the ledger for d and fails the test at the first state
// ok rejects: what must stay so for a while is checked all along, not once
// at the end.
func ledgerHolds(t testing.TB, r *rig, d time.Duration, what string, ok func(ledgerState) bool) {
	t.Helper()
	since := time.Now()
	for time.Since(since) < d {
		if s := replay(t, r.node.stateDir); !ok(s) {
			t.Fatalf("ledger %v into %v that should hold %s: daemon %+v, kubelet %+v, pools %+v",
				time.Since(since).Round(time.Millisecond), d, what, s.Daemon, s.Kubelet, s.Pools)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// allocated lists the device sets the ledger holds for a pool, each sorted.
func (s ledgerState) allocated(pool string) [][]string {
	var out [][]string
	for _, a := range s.Allocations {
		if a.Pool == pool {
			ids := slices.Clone(a.DeviceIDs)
			slices.Sort(ids)
			out = append(out, ids)
		}
	}
	return out
}
