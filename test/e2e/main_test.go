package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// namespaceEnv marks the copy of the test binary that runs inside the
// private mount namespace.
const namespaceEnv = "DEVLEDGER_E2E_MOUNT_NAMESPACE"

// logsEnv, when set, prints the tails of the daemon's and the kubelet's logs
// for passing tests too (they are printed for failing ones anyway).
const logsEnv = "DEVLEDGER_E2E_LOGS"

// kubeletRoot is the directory the device manager and the plugin manager
// use; inside the namespace it is a tmpfs.
const kubeletRoot = "/var/lib/kubelet"

// Set by TestMain inside the namespace, read by the tests.
var (
	// skipReason, when not empty, is why no test can run here.
	skipReason string
	// setupErr is a failure to prepare the suite (mount, build): every test
	// fails with it.
	setupErr error
	// repoRoot is the devledger repository the binaries are built from.
	repoRoot string
	// devledgerBin and sysfsgenBin are the binaries built for this run.
	devledgerBin, sysfsgenBin string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if spec := os.Getenv(barePluginEnv); spec != "" {
		if err := serveBareProcess(spec); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: bare plugin: %v\n", err)
			return 1
		}
		return 0
	}
	if os.Getenv(namespaceEnv) == "" {
		reason, code := reexecInNamespace()
		if reason == "" {
			return code
		}
		skipReason = reason
		return m.Run()
	}
	routeKubeletLogs()
	binDir, err := os.MkdirTemp("", "devledger-e2e-bin-")
	if err != nil {
		setupErr = err
		return m.Run()
	}
	defer os.RemoveAll(binDir)
	setupErr = setUp(binDir)
	return m.Run()
}

// reexecInNamespace runs this test binary again, with the same arguments,
// inside a private mount namespace, and returns its exit code. When that is
// not possible it returns the reason instead, and the tests skip with it.
func reexecInNamespace() (reason string, code int) {
	if os.Geteuid() != 0 {
		return "the kubelet's device manager hard-codes /var/lib/kubelet; this suite mounts a tmpfs over it in a private mount namespace, which needs root (run as root, or in CI)", 0
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return "unshare (util-linux) not found: it is needed to give the kubelet's /var/lib/kubelet a private mount namespace", 0
	}
	// A probe first, so that a container without CAP_SYS_ADMIN skips with a
	// reason instead of failing every test.
	if out, err := exec.Command(unshare, "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot create a private mount namespace (%v: %s)", err, bytes.TrimSpace(out)), 0
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Sprintf("cannot find the test binary to re-execute: %v", err), 0
	}
	args := append([]string{"--mount", "--propagation", "private", "--", self}, os.Args[1:]...)
	cmd := exec.Command(unshare, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), namespaceEnv+"=1")
	// If go test kills this process (its -timeout), the copy dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return "", exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: run the suite in a private mount namespace: %v\n", err)
		return "", 1
	}
	return "", 0
}

// prebuiltEnv names a directory that holds devledger and sysfsgen built
// already; the suite then builds nothing.
const prebuiltEnv = "DEVLEDGER_BIN_DIR"

// setUp runs inside the namespace: it puts a tmpfs where the kubelet's root
// dir is and builds the binaries under test into binDir (or takes them from
// $DEVLEDGER_BIN_DIR).
func setUp(binDir string) error {
	if err := mountKubeletRoot(); err != nil {
		return err
	}
	root, err := findRepoRoot()
	if err != nil {
		return err
	}
	repoRoot = root
	if dir := os.Getenv(prebuiltEnv); dir != "" {
		// Built elsewhere, for a machine with no Go toolchain.
		devledgerBin = filepath.Join(dir, "devledger")
		sysfsgenBin = filepath.Join(dir, "sysfsgen")
		for _, bin := range []string{devledgerBin, sysfsgenBin} {
			if _, err := os.Stat(bin); err != nil {
				return fmt.Errorf("%s=%s: %w", prebuiltEnv, dir, err)
			}
		}
		return nil
	}
	devledgerBin = filepath.Join(binDir, "devledger")
	sysfsgenBin = filepath.Join(binDir, "sysfsgen")
	start := time.Now()
	build := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/devledger", "./testdata/sysfsgen/cmd/sysfsgen")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the binaries under test in %s: %v\n%s", repoRoot, err, out)
	}
	fmt.Fprintf(os.Stderr, "e2e: built devledger and sysfsgen in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// mountKubeletRoot mounts a tmpfs over /var/lib/kubelet. When the host has
// no such directory there is nothing to mount on, and creating one would
// change the host, so the tmpfs goes over /var/lib instead (hidden in this
// namespace only) and kubelet/ is made inside it.
func mountKubeletRoot() error {
	target := kubeletRoot
	if fi, err := os.Stat(kubeletRoot); err != nil || !fi.IsDir() {
		target = filepath.Dir(kubeletRoot)
	}
	// The namespace is private already (unshare --propagation private);
	// saying so again on / keeps a mount from leaking even if the unshare
	// in use defaulted otherwise.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private in the test's mount namespace: %w", err)
	}
	if err := syscall.Mount("devledger-e2e", target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=64m"); err != nil {
		return fmt.Errorf("mount a tmpfs over %s: %w", target, err)
	}
	return os.MkdirAll(kubeletRoot, 0o750)
}

// findRepoRoot walks up from the package dir to the devledger module.
func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/devledger/devledger\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no devledger module above %s", dir)
		}
	}
}

// requireSuite skips or fails the test when the suite could not be set up.
// Where DEVLEDGER_REQUIRE_E2E=1 (CI's .ci/run) it fails rather than skips:
// a runner that lost root or CAP_SYS_ADMIN would otherwise pass the suite
// having run none of it.
func requireSuite(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		if os.Getenv("DEVLEDGER_REQUIRE_E2E") == "1" {
			t.Fatal("DEVLEDGER_REQUIRE_E2E=1, but the suite cannot run here: " + skipReason)
		}
		t.Skip(skipReason)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

// kubeletLogs receives the klog output of the kubelet code. Each test points
// it at a file of its own (logKubeletTo); between tests it is discarded.
var kubeletLogs = &switchWriter{w: io.Discard}

// routeKubeletLogs sends klog (the device manager and plugin manager log
// through it, contextual or not) to kubeletLogs at verbosity 4.
func routeKubeletLogs() {
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(kubeletLogs), textlogger.Verbosity(4)))
	klog.SetLoggerWithOptions(logger, klog.ContextualLogger(true))
}

// switchWriter is an io.Writer whose target can change while goroutines of
// the kubelet code write to it.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}
