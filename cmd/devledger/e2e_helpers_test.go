package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// The end-to-end tests build the real devledger binary once and run it as a
// child process against a fake sysfs tree and the kubelet stand-in. The
// build is lazy, so that `go test -run TestDump` does not pay for it; the
// binary lives in a temp dir that TestMain removes.

var (
	binDir    string
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devledger-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir for the devledger binary:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// e2eTimeout bounds every wait of an end-to-end test: generous, for -race
// on two cores; a passing test never waits that long.
const e2eTimeout = 60 * time.Second

// devledgerBinary builds the binary on first use (with -race when this test
// binary has it: the instrumented packages are in the build cache already)
// and returns its path.
func devledgerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "devledger")
		args := []string{"build", "-o", binPath}
		if raceEnabled() {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func e2eCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	t.Cleanup(cancel)
	return ctx
}

// e2eNode is one fake node: a sysfs tree, a kubelet stand-in, a config and a
// state dir, and the flags that point devledger run at them.
type e2eNode struct {
	roots    sysfsgen.Roots
	kubelet  *kubelettest.Kubelet
	config   string
	stateDir string
	devinfo  string
	// mode is the registration mode the daemon must use, legacy or
	// watcher; registration is the --registration flag (mode unless set).
	mode         string
	registration string
	// cwd, when set, is where the daemon runs, every path it is given
	// relative to it (nodeSpec.root).
	cwd string
	// kubeletView, when set, is where the daemon sees the stand-in's
	// kubelet dir, and is given it as --kubelet-dir: it runs in a mount
	// namespace of its own (root only), the view's parent a fresh tmpfs
	// there (nothing is made on the host), the dir bind-mounted at the
	// view.
	kubeletView string
}

// nodeSpec says what to build.
type nodeSpec struct {
	scenario string
	// config is a path relative to the package dir.
	config  string
	mode    string
	kubelet kubelettest.Options
	// root, when set, holds the whole node under plain names (node/sys,
	// kubelet, state, devinfo), and the daemon runs there with relative
	// paths: what it records names no temporary directory. It must be
	// short, for the sockets' paths.
	root string
}

func newE2ENode(t *testing.T, spec nodeSpec) *e2eNode {
	t.Helper()
	devledgerBinary(t)
	if spec.mode == "watcher" {
		spec.kubelet.PluginWatcher = true
	}
	if spec.kubelet.Logger == nil {
		l := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
		spec.kubelet.Logger = &l
	}
	cfg, err := filepath.Abs(spec.config)
	if err != nil {
		t.Fatal(err)
	}
	if spec.root != "" {
		roots, err := sysfsgen.BuildScenario(filepath.Join(spec.root, "node"), spec.scenario)
		if err != nil {
			t.Fatal(err)
		}
		return &e2eNode{roots: roots, kubelet: kubelettest.Start(t, filepath.Join(spec.root, "kubelet"), spec.kubelet), config: cfg,
			stateDir: filepath.Join(spec.root, "state"), devinfo: filepath.Join(spec.root, "devinfo"), mode: spec.mode, cwd: spec.root}
	}
	return &e2eNode{
		roots:   sysfsgen.TempScenario(t, spec.scenario),
		kubelet: kubelettest.Start(t, "", spec.kubelet),
		config:  cfg,
		// A dir that does not exist yet: run must create it, 0700. Its
		// parent is short, for the admin socket's path.
		stateDir: filepath.Join(kubelettest.ShortTempDir(t), "state"),
		devinfo:  filepath.Join(t.TempDir(), "devinfo"),
		mode:     spec.mode,
	}
}

// path is a path as the daemon is given it: relative to n.cwd when set.
func (n *e2eNode) path(p string) string {
	if n.cwd == "" {
		return p
	}
	rel, err := filepath.Rel(n.cwd, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return rel
}

// runArgs are the flags of devledger run for this node.
// cdiDir is where the node's daemon writes CDI specs, beside its
// device-info dir.
func (n *e2eNode) cdiDir() string { return filepath.Join(filepath.Dir(n.devinfo), "cdi") }

func (n *e2eNode) runArgs() []string {
	pciIDs, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "pci.ids.sample"))
	return []string{"run",
		"--config", n.path(n.config),
		"--sysfs-root", n.path(n.roots.Sysfs), "--dev-root", n.path(n.roots.Dev), "--proc-root", n.path(n.roots.Proc),
		"--pci-ids", pciIDs,
		"--kubelet-dir", cmp.Or(n.kubeletView, n.path(n.kubelet.Dir())), "--state-dir", n.path(n.stateDir), "--devinfo-dir", n.path(n.devinfo),
		"--cdi-spec-dir", n.path(n.cdiDir()),
		"--registration", cmp.Or(n.registration, n.mode),
		"--log-format", "json", "--log-level", "debug",
		// Nothing periodic: the ledger changes only when a test acts.
		"--scan-interval", "1h", "--probe-interval", "1h", "--kernel-events=false",
	}
}

// socketPath is the pool's socket in this node's mode: the one socket of
// the pool's names there (a pool serves under a new name for every
// server). While a socket is being replaced there may be none or two for a
// moment; it waits up to a second for one. With none, it returns a path
// that does not exist.
func (n *e2eNode) socketPath(t *testing.T, resource string) string {
	t.Helper()
	dir := n.kubelet.DevicePluginDir()
	if n.mode == "watcher" {
		dir = n.kubelet.PluginsRegistryDir()
	}
	var found []string
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		found = found[:0]
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Type() == os.ModeSocket && pool.IsSocketName(resource, e.Name()) {
				found = append(found, filepath.Join(dir, e.Name()))
			}
		}
		if len(found) == 1 {
			return found[0]
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if len(found) > 1 {
		t.Errorf("%s: %d sockets of the pool in %s, want one: %v", resource, len(found), dir, found)
		return found[0]
	}
	return filepath.Join(dir, pool.SocketBase(resource)+".none.sock")
}

func (n *e2eNode) ledgerPath() string { return filepath.Join(n.stateDir, ledgerFileName) }

// start runs devledger run (plus extra flags) and returns at once.
func (n *e2eNode) start(t *testing.T, extra ...string) *daemonProc {
	t.Helper()
	args := append(n.runArgs(), extra...)
	if n.kubeletView == "" {
		return startProcIn(t, n.cwd, args...)
	}
	// unshare and sh exec in turn: the process is the daemon's.
	cmd := binaryCmd(t, args...)
	cmd.Args = append([]string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount -t tmpfs tmpfs "$(dirname "$1")" && mkdir "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"`,
		"sh", n.kubeletView, n.kubelet.Dir()}, cmd.Args...)
	cmd.Path, cmd.Err = exec.LookPath("unshare")
	return startCmdIn(t, n.cwd, args[0], cmd)
}

// startRegistered starts the daemon and waits until the kubelet has every
// pool registered and the ledger says so. It returns the process and the
// ledger's last sequence then: what follows is the test's doing.
func (n *e2eNode) startRegistered(t *testing.T, pools []string, extra ...string) (*daemonProc, uint64) {
	t.Helper()
	p := n.start(t, extra...)
	ctx := e2eCtx(t)
	for _, res := range pools {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatalf("%v\n%s", err, p.stderr.String())
		}
	}
	envs := n.waitLedger(t, "every pool registered", func(envs []events.Envelope) bool {
		return hasAll(since(envs, bootStart(envs)), events.TypePluginRegistered, pools)
	})
	return p, lastSeq(envs)
}

// binaryCmd is the binary with args. A -race binary would sleep a second
// before every exit (the race runtime's atexit_sleep_ms), which adds up
// over the many short dump and replay runs.
func binaryCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(devledgerBinary(t), args...)
	if _, set := os.LookupEnv("GORACE"); !set {
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	}
	return cmd
}

// daemonProc is a devledger process.
type daemonProc struct {
	cmd    *exec.Cmd
	stderr *logBuffer
	done   chan struct{}
	state  *os.ProcessState
}

// startProc starts the binary with args. The process is killed, if still
// running, when the test ends; its log is printed if the test failed, and
// a data race it reported fails the test.
func startProc(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	return startProcIn(t, "", args...)
}

// startProcIn is startProc in the directory dir ("": this one), as node
// worker-1 when dir is set.
func startProcIn(t *testing.T, dir string, args ...string) *daemonProc {
	t.Helper()
	return startCmdIn(t, dir, args[0], binaryCmd(t, args...))
}

// startCmdIn is startProcIn of cmd, which runs the binary's command sub.
func startCmdIn(t *testing.T, dir, sub string, cmd *exec.Cmd) *daemonProc {
	t.Helper()
	p := &daemonProc{cmd: cmd, stderr: newLogBuffer(), done: make(chan struct{})}
	if dir != "" {
		p.cmd.Dir = dir
		if p.cmd.Env == nil {
			p.cmd.Env = os.Environ()
		}
		p.cmd.Env = append(p.cmd.Env, "NODE_NAME=worker-1")
	}
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start devledger: %v", err)
	}
	go func() {
		p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		log := p.stderr.String()
		if strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("devledger %s reported a data race:\n%s", sub, log)
		} else if t.Failed() {
			t.Logf("devledger %s (pid %d) log:\n%s", sub, p.cmd.Process.Pid, log)
		}
	})
	return p
}

func (p *daemonProc) pid() int { return p.cmd.Process.Pid }

// signal sends sig to the process.
func (p *daemonProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it).
func (p *daemonProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.state.ExitCode()
	case <-time.After(e2eTimeout):
		t.Fatalf("devledger did not exit within %s\n%s", e2eTimeout, p.stderr.String())
		return 0
	}
}

// kill SIGKILLs the process and waits for it to go.
func (p *daemonProc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	if code := p.wait(t); code != -1 {
		t.Fatalf("SIGKILL: exit code %d, want death by signal", code)
	}
}

// logBuffer collects a process's output and wakes waiters on every write.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the output contains s.
func (b *logBuffer) waitFor(ctx context.Context, s string) error {
	for {
		b.mu.Lock()
		found, ch := strings.Contains(b.buf.String(), s), b.changed
		b.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q in the daemon's log: %w", s, ctx.Err())
		}
	}
}

// cli runs one devledger command to completion.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := binaryCmd(t, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("devledger %s: %v", args[0], err)
	}
	return code, out.String(), errOut.String()
}

// cliOK runs a devledger command that must succeed and returns its stdout.
func cliOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != exitOK {
		t.Fatalf("devledger %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// ledgerEvents reads the node's whole ledger the way dump does: the file
// when no daemon holds it, else through the daemon's admin socket.
func (n *e2eNode) ledgerEvents(t *testing.T) []events.Envelope {
	t.Helper()
	envs, err := n.readLedger()
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

func (n *e2eNode) readLedger() ([]events.Envelope, error) {
	src, err := openSource(&ledgerFlags{stateDir: n.stateDir})
	if err != nil {
		return nil, err
	}
	defer src.close()
	var envs []events.Envelope
	err = src.read(func(e events.Envelope) error {
		envs = append(envs, e)
		return nil
	})
	return envs, err
}

// waitLedger polls the ledger until ok holds for its events and returns
// them. Polling is the only way to watch another process's ledger; the
// deadline, not a sleep, bounds it.
func (n *e2eNode) waitLedger(t *testing.T, what string, ok func([]events.Envelope) bool) []events.Envelope {
	t.Helper()
	ctx := e2eCtx(t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		envs, err := n.readLedger()
		if err == nil && ok(envs) {
			return envs
		}
		last = err
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s in the ledger: %v (last read error: %v)\n%s", what, ctx.Err(), last, describeEnvs(envs))
		}
	}
}

func describeEnvs(envs []events.Envelope) string {
	var b strings.Builder
	for _, e := range envs {
		fmt.Fprintf(&b, "  #%d %s %s\n", e.Seq, e.Type, e.Subject)
	}
	return b.String()
}

// since returns the events after seq.
func since(envs []events.Envelope, seq uint64) []events.Envelope {
	i, _ := slices.BinarySearchFunc(envs, seq+1, func(e events.Envelope, s uint64) int {
		switch {
		case e.Seq < s:
			return -1
		case e.Seq > s:
			return 1
		}
		return 0
	})
	return envs[i:]
}

// lastSeq is the sequence of the ledger's newest event, 0 when empty.
func lastSeq(envs []events.Envelope) uint64 {
	if len(envs) == 0 {
		return 0
	}
	return envs[len(envs)-1].Seq
}

// poolsWith returns the pools that have an event of type typ in envs.
func poolsWith(envs []events.Envelope, typ events.Type) map[string]int {
	out := map[string]int{}
	for _, e := range envs {
		if e.Type == typ {
			out[e.Pool()]++
		}
	}
	return out
}

// hasAll says whether every pool has an event of type typ in envs.
func hasAll(envs []events.Envelope, typ events.Type, pools []string) bool {
	got := poolsWith(envs, typ)
	for _, p := range pools {
		if got[p] == 0 {
			return false
		}
	}
	return true
}

// bootStart returns the seq of the last DaemonStarted.
func bootStart(envs []events.Envelope) uint64 {
	for i := len(envs) - 1; i >= 0; i-- {
		if envs[i].Type == events.TypeDaemonStarted {
			return envs[i].Seq
		}
	}
	return 0
}

// deviceView is a device as the kubelet sees it, for comparisons.
type deviceView struct {
	ID     string
	Health string
	NUMA   []int64 // nil: no topology
}

func viewDevices(devs []*pluginapi.Device) []deviceView {
	out := make([]deviceView, 0, len(devs))
	for _, d := range devs {
		v := deviceView{ID: d.ID, Health: d.Health}
		if d.Topology != nil {
			v.NUMA = []int64{}
			for _, n := range d.Topology.Nodes {
				v.NUMA = append(v.NUMA, n.ID)
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b deviceView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// checkGoldenE2E is checkGolden for testdata/e2e/<name>.golden.
func checkGoldenE2E(t *testing.T, name, got string) {
	t.Helper()
	checkGolden(t, filepath.Join("e2e", name), got)
}

// jsonIndent renders v as indented JSON with a final newline.
func jsonIndent(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// sockets lists the unix sockets in dir (and a leftover private dir of
// ours, which must never outlive a listen).
func sockets(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 || strings.HasPrefix(e.Name(), ".devledger-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// raceEnabled says whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
