package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	poolalloc "github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/benchbaseline"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/sysfs"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// startLedgerEvents is the size of BenchmarkStartLarge's ledger.
const startLedgerEvents = 1_000_000

// BenchmarkStartLarge: from the devledger process's start to every pool of
// the large tree's config (1,032 PCI functions, four pools) registered with
// the kubelet stand-in, with a ledger of a million events in the state dir
// (snapshots in place, the last 1,000 events before the end). Baseline: the
// startbaseline command, which only scans the same tree and registers the
// same pools. Each round copies the ledger afresh into a new state dir (the
// daemon appends to it) and starts both processes against stand-ins of
// their own, the order alternating.
//
//	x-baseline     median over rounds of ours / baseline; target <= 2
//	peak-rss-MiB   the daemon's largest peak RSS (VmHWM) over its life, stop included; target < 60
//
// The parent benchmark builds the binaries, the tree and the ledger once;
// its sub-benchmark runs the rounds, however often the harness asks.
func BenchmarkStartLarge(b *testing.B) {
	fx := newStartFixture(b, startLedgerEvents)
	b.Run(fmt.Sprintf("events=%d", fx.events), func(b *testing.B) {
		rounds := max(b.N, 5)
		var ours, base []startRun
		var ratios []float64
		b.ResetTimer()
		for r := range rounds {
			state := fx.freshStateDir(b)
			var o, g startRun
			if r%2 == 0 {
				o = fx.start(b, fx.daemon, state)
				g = fx.start(b, fx.baseline, "")
			} else {
				g = fx.start(b, fx.baseline, "")
				o = fx.start(b, fx.daemon, state)
			}
			os.RemoveAll(state)
			fx.checkReplayed(b, o.stderr)
			ours, base = append(ours, o), append(base, g)
			ratios = append(ratios, float64(o.took)/float64(g.took))
		}
		b.StopTimer()
		took := func(rs []startRun) []float64 {
			out := make([]float64, len(rs))
			for i, r := range rs {
				out[i] = float64(r.took) / float64(time.Millisecond)
			}
			return out
		}
		peak := func(rs []startRun, f func(startRun) int64) float64 {
			var m int64
			for _, r := range rs {
				m = max(m, f(r))
			}
			return float64(m) / 1024
		}
		b.ReportMetric(medianOf(took(ours)), "ours-p50-ms")
		b.ReportMetric(medianOf(took(base)), "baseline-p50-ms")
		b.ReportMetric(medianOf(ratios), "x-baseline")
		b.ReportMetric(peak(ours, func(r startRun) int64 { return r.peakKiB }), "peak-rss-MiB")
		b.ReportMetric(peak(ours, func(r startRun) int64 { return r.hwmKiB }), "registered-rss-MiB")
		b.ReportMetric(peak(base, func(r startRun) int64 { return r.peakKiB }), "baseline-peak-rss-MiB")
		b.ReportMetric(0, "ns/op")
	})
}

func medianOf(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// startFixture is what every round of BenchmarkStartLarge shares.
type startFixture struct {
	daemonBin, baselineBin string
	roots                  sysfsgen.Roots
	configPath, pciIDs     string
	pools                  []string
	// ledger is the generated ledger, copied into each round's state dir.
	ledger string
	events uint64
	// pods hold the ledger's live allocations, as the stand-in's
	// PodResources tells: the daemon finds nothing to release.
	pods []*podresourcesapi.PodResources
}

func newStartFixture(b *testing.B, events int) *startFixture {
	b.Helper()
	began := time.Now()
	// $DEVLEDGER_BIN_DIR holds both built already, for a machine with no
	// Go toolchain; else one go command builds both, linking in parallel.
	dir := b.TempDir()
	bin := os.Getenv("DEVLEDGER_BIN_DIR")
	if bin == "" {
		bin = dir
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "../../internal/benchbaseline/startbaseline")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	fx := &startFixture{
		daemonBin:   filepath.Join(bin, "devledger"),
		baselineBin: filepath.Join(bin, "startbaseline"),
		configPath:  filepath.Join("..", "..", "testdata", "config", "scan", "large.json"),
		pciIDs:      filepath.Join("..", "..", "testdata", "pci.ids.sample"),
	}
	for _, p := range []*string{&fx.configPath, &fx.pciIDs} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			b.Fatal(err)
		}
		*p = abs
	}
	data, err := os.ReadFile(fx.configPath)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Parse(fx.configPath, data)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range cfg.Resources {
		fx.pools = append(fx.pools, r.FullName())
	}
	tree, err := sysfsgen.Scenario(sysfsgen.ScenarioLarge)
	if err != nil {
		b.Fatal(err)
	}
	if fx.roots, err = sysfsgen.Build(benchbaseline.MemTempDir(b), tree); err != nil {
		b.Fatal(err)
	}
	built := time.Now()

	// The ledger starts as the daemon's own first boot on this node wrote
	// it; a million events of pods coming and going follow.
	state := filepath.Join(dir, "state")
	first := fx.start(b, fx.daemon, state)
	fx.ledger = filepath.Join(state, "ledger.db")
	grown, err := extendLedger(fx.ledger, events, cfg, fx.roots)
	if err != nil {
		b.Fatal(err)
	}
	fx.events = grown.Seq
	for _, a := range grown.Allocations {
		pod, container := fmt.Sprintf("job-%d", a.Seq), "main"
		if a.Binding != nil {
			pod, container = a.Binding.Pod, a.Binding.Container
		}
		fx.pods = append(fx.pods, kubelettest.PodHolding("batch", pod, container, a.Pool, a.DeviceIDs...))
	}
	b.Logf("fixture: binaries and tree %s, first boot to registered %s, ledger of %d events %s",
		built.Sub(began).Round(time.Millisecond), first.took.Round(time.Millisecond), fx.events, time.Since(built).Round(time.Millisecond))
	return fx
}

// A launcher gives the command line of a process to start against a
// kubelet dir and a state dir.
type launcher func(kubeletDir, stateDir string) (bin string, args []string)

func (fx *startFixture) daemon(kubeletDir, stateDir string) (string, []string) {
	return fx.daemonBin, []string{"run", "--config", fx.configPath, "--sysfs-root", fx.roots.Sysfs, "--dev-root", fx.roots.Dev,
		"--proc-root", fx.roots.Proc, "--pci-ids", fx.pciIDs, "--kubelet-dir", kubeletDir, "--state-dir", stateDir,
		"--registration", "legacy", "--devinfo-dir", "-", "--cdi-spec-dir", "-", "--log-format", "json", "--log-level", "info"}
}

func (fx *startFixture) baseline(kubeletDir, _ string) (string, []string) {
	args := []string{"--sysfs-root", fx.roots.Sysfs, "--dev-root", fx.roots.Dev, "--pci-ids", fx.pciIDs, "--kubelet-dir", kubeletDir}
	for _, p := range fx.pools {
		args = append(args, "--resource", p)
	}
	return fx.baselineBin, args
}

// freshStateDir is a new state dir holding a copy of the ledger.
func (fx *startFixture) freshStateDir(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp(b.TempDir(), "state")
	if err != nil {
		b.Fatal(err)
	}
	src, err := os.Open(fx.ledger)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, "ledger.db"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	// On a node the ledger is on disk when the daemon starts; unsynced, the
	// copy would be written out by the daemon's first fsync, which would
	// then take as long as writing the whole file.
	if err := dst.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
	return dir
}

// startRun is one process start: the time to every pool registered, its
// peak RSS (VmHWM) then and over its life, and its log.
type startRun struct {
	took    time.Duration
	hwmKiB  int64
	peakKiB int64
	stderr  []byte
}

// start runs a process made by args against a fresh kubelet stand-in until
// every pool is registered, then stops it with SIGTERM.
func (fx *startFixture) start(b *testing.B, launch launcher, stateDir string) startRun {
	b.Helper()
	k, err := kubelettest.New(kubelettest.ShortTempDir(b), kubelettest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	k.SetPods(fx.pods)
	bin, args := launch(k.Dir(), stateDir)
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Process.Kill()
	regs, err := k.RegisteredAfter(ctx, fx.pools, began)
	if err != nil {
		b.Fatalf("%s: %v\n%s", cmd.Path, err, stderr.Bytes())
	}
	run := startRun{hwmKiB: vmHWM(cmd.Process.Pid)}
	for _, r := range regs {
		run.took = max(run.took, r.At.Sub(began))
	}
	// The peak over the whole life, stop included, is the last VmHWM read
	// before the process exits. getrusage's ru_maxrss will not do: Linux
	// carries the exec-ing process's high-water mark (this test binary's,
	// which shared its memory until exec) into the child's.
	exited := make(chan error, 1)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	go func() { exited <- cmd.Wait() }()
	run.peakKiB = run.hwmKiB
	for polling := true; polling; {
		select {
		case err := <-exited:
			if err != nil {
				b.Fatalf("%s after SIGTERM: %v\n%s", cmd.Path, err, stderr.Bytes())
			}
			polling = false
		case <-time.After(time.Millisecond):
			run.peakKiB = max(run.peakKiB, vmHWM(cmd.Process.Pid))
		}
	}
	run.stderr = stderr.Bytes()
	return run
}

// vmHWM is the process's peak resident set so far, in KiB (0 when unknown).
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// checkReplayed fails the benchmark unless the daemon's log says it
// replayed the whole generated ledger: a benchmark of an empty start would
// measure nothing.
func (fx *startFixture) checkReplayed(b *testing.B, log []byte) {
	b.Helper()
	for line := range bytes.Lines(log) {
		var rec struct {
			Msg string `json:"message"`
			Seq uint64 `json:"seq"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "ledger replayed" {
			if rec.Seq < fx.events {
				b.Fatalf("the daemon replayed up to seq %d, want %d", rec.Seq, fx.events)
			}
			return
		}
	}
	b.Fatalf("no \"ledger replayed\" line in the daemon's log:\n%s", log)
}

// extendLedger grows the ledger at path to total events (storetest.Grow:
// pods coming and going on the pools' devices, snapshots in place) and
// returns its fold. Allocations carry the answers the daemon gives for the
// tree's devices.
func extendLedger(path string, total int, cfg *config.Config, roots sysfsgen.Roots) (events.State, error) {
	var none events.State
	devs, err := sysfs.New(sysfs.Options{SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, PCIIDsPath: os.DevNull}).Scan()
	if err != nil {
		return none, err
	}
	byAddr := make(map[string]sysfs.Device, len(devs))
	for _, d := range devs {
		byAddr[d.Address] = d
	}
	l, err := store.Open(path, store.Options{})
	if err != nil {
		return none, err
	}
	defer l.Close()
	st, err := l.Replay(0)
	if err != nil {
		return none, err
	}
	resources := map[string]*config.Resource{}
	members := map[string][]string{}
	for i := range cfg.Resources {
		r := &cfg.Resources[i]
		p, ok := st.Pools[r.FullName()]
		if !ok || len(p.Members) == 0 {
			return none, fmt.Errorf("the first boot's ledger has no members for pool %s", r.FullName())
		}
		resources[r.FullName()], members[r.FullName()] = r, p.Members
	}
	single := map[string]events.ContainerAllocation{} // one device's answer, by pool and address
	env := poolalloc.Env{DevRoot: roots.Dev}
	answer := func(pool string, ids []string) events.ContainerAllocation {
		key := pool + " " + ids[0]
		if a, ok := single[key]; ok && len(ids) == 1 {
			return a
		}
		devs := make([]sysfs.Device, len(ids))
		for i, id := range ids {
			devs[i] = byAddr[id]
		}
		a, err := poolalloc.Respond(resources[pool], devs, env)
		if err != nil {
			panic(fmt.Sprintf("respond for %s %v: %v", pool, ids, err))
		}
		if len(ids) == 1 {
			single[key] = a
		}
		return a
	}
	h := storetest.NewPodHistory(42, members, answer, st.Daemon.BootID, st.Time)
	grown, err := storetest.Grow(context.Background(), l, st, h, uint64(total), storetest.GrowOptions{})
	if err != nil {
		return none, err
	}
	return grown, l.Close()
}
