package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// demoConfig is the sample node's configuration: the SR-IOV device plugin's
// schema, as a platform team would write it.
const demoConfig = `{
  "resourceList": [
    {
      "resourceName": "sriov_vfio",
      "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
      "allocatePolicy": "packed",
      "health": {"holdDown": "1s"}
    },
    {
      "resourceName": "sriov_net",
      "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}
    },
    {
      "resourcePrefix": "nvidia.com",
      "resourceName": "gpu",
      "deviceType": "genericPCI",
      "selectors": {"vendors": ["10de"], "drivers": ["vfio-pci"]}
    }
  ]
}
`

var demoPools = []string{"intel.com/sriov_vfio", "intel.com/sriov_net", "nvidia.com/gpu"}

// demoNode is the bundled sample node: the sriov scenario's two E810 cards
// with vfio-bound and iavf VFs, plus the gpu scenario's four H100s.
func demoNode() (sysfsgen.Node, error) {
	n, err := sysfsgen.Scenario(sysfsgen.ScenarioSRIOV)
	if err != nil {
		return n, err
	}
	g, err := sysfsgen.Scenario(sysfsgen.ScenarioGPU)
	if err != nil {
		return n, err
	}
	for _, f := range g.Functions {
		if f.Vendor == "10de" {
			n.Functions = append(n.Functions, f)
		}
	}
	return n, nil
}

// demo is `devledger demo`: the whole daemon on the sample node, with the
// kubelet stand-in in this process, told step by step.
type demo struct {
	out     io.Writer
	dir     string
	roots   sysfsgen.Roots
	kubelet *kubelettest.Kubelet
	// kubeletDir is the stand-in's temp dir, removed by cleanup.
	kubeletDir string
	state      string
	cfgPath    string
	logPath    string
	daemon     *exec.Cmd
	began      time.Time
	// flapped is the device whose driver the demo unbinds and binds
	// again: the one with a story to show afterwards.
	flapped string
	kept    bool // --keep: dir stays after the demo
}

func runDemo(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[--keep DIR]", stdout)
	keep := fs.String("keep", "", "keep the sample node, its ledger and the daemon's log in `DIR`, a new or empty directory (try dump and replay on it afterwards)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := daemonHere(); err != nil {
		return err
	}
	d := &demo{out: stdout, began: time.Now()}
	if *keep != "" {
		if err := keepDir(*keep); err != nil {
			return err
		}
		d.dir, d.kept = *keep, true
	} else {
		tmp, err := os.MkdirTemp("", "devledger-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		d.dir = tmp
	}
	// SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) end the
	// story early, and the demo cleans up as after any failure: the
	// daemon, in a group of its own that no terminal signals, is stopped,
	// the temp dirs removed. The handler stays until the cleanup is done.
	sigCtx, stopSignals := signalContext(syscall.SIGHUP)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sigCtx, 60*time.Second)
	defer cancel()
	// Deferred, so that a step that panics still stops the daemon, which
	// runs in a process group of its own and would outlive the demo.
	err := func() error { defer d.cleanup(); return d.run(ctx) }()
	if err != nil && sigCtx.Err() != nil {
		if *keep != "" {
			return fmt.Errorf("interrupted by %v; the daemon is stopped, what it did so far is kept in %s", context.Cause(sigCtx), d.dir)
		}
		return fmt.Errorf("interrupted by %v; the daemon is stopped and its files removed", context.Cause(sigCtx))
	}
	if err != nil {
		if *keep != "" {
			return fmt.Errorf("%w (daemon log: %s)", err, d.logPath)
		}
		d.logTail(stderr, 20)
		return err
	}
	if *keep != "" {
		// From the repository, as the README runs the demo: a bare
		// devledger is on no PATH after go run.
		d.say("")
		d.say("Kept in %s. Try:", d.dir)
		d.say("  go run ./cmd/devledger dump --state-dir %s --device %s", d.state, d.flapped)
		d.say("  go run ./cmd/devledger replay --state-dir %s --verify", d.state)
	}
	return nil
}

// keepDir makes dir for --keep. It must be new or empty: the demo builds a
// fresh node and ledger there, and neither adds to nor removes what a
// directory holds already.
func keepDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("--keep %s: %w", dir, err)
		}
		return nil
	case err != nil:
		return usageErrf("--keep %s: %v", dir, errnoOf(err))
	case len(entries) == 0:
		return nil
	}
	// The sample node and the ledger of an earlier run, perhaps one
	// interrupted before its ledger was made.
	if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "node" || e.Name() == "state" }) {
		return usageErrf("--keep %s: a previous demo is kept there; remove it first (rm -r %s) or name a new directory", dir, dir)
	}
	return usageErrf("--keep %s: the directory is not empty; name a new or empty directory", dir)
}

// logTail writes the last n lines of the daemon's log to w: the log goes
// with the temp dir.
func (d *demo) logTail(w io.Writer, n int) {
	b, err := os.ReadFile(d.logPath)
	if err != nil || len(b) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	fmt.Fprintf(w, "the daemon's last log lines:\n%s\n", strings.Join(lines, "\n"))
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.out, "\n[%4.1fs] %s\n", time.Since(d.began).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	node, err := demoNode()
	if err != nil {
		return err
	}
	if d.roots, err = sysfsgen.Build(filepath.Join(d.dir, "node"), node); err != nil {
		return fmt.Errorf("build the sample node: %w", err)
	}
	d.state = filepath.Join(d.dir, "state")
	d.cfgPath = filepath.Join(d.dir, "config.json")
	d.logPath = filepath.Join(d.dir, "daemon.log")
	if err := os.WriteFile(d.cfgPath, []byte(demoConfig), 0o644); err != nil {
		return err
	}
	// Unix socket paths are short: the kubelet dir lives in a short temp
	// dir whatever --keep says.
	kdir, err := os.MkdirTemp("", "dlk")
	if err != nil {
		return err
	}
	d.kubeletDir = kdir
	if d.kubelet, err = kubelettest.New(kdir, kubelettest.Options{}); err != nil {
		return fmt.Errorf("start the kubelet stand-in: %w", err)
	}

	d.say("devledger demo: a sample node with two Intel E810 cards (8 VFs) and four NVIDIA H100s,")
	d.say("a kubelet stand-in in this process, and the devledger daemon as a child process.")
	d.step("Starting the daemon (config: %s)", d.cfgPath)
	if err := d.startDaemon(); err != nil {
		return err
	}
	if err := d.waitPools(ctx, time.Time{}); err != nil {
		return err
	}

	d.step("The kubelet asks for devices")
	vfs, err := d.allocate(ctx, "intel.com/sriov_vfio", 1)
	if err != nil {
		return err
	}
	gpus, err := d.allocate(ctx, "nvidia.com/gpu", 2)
	if err != nil {
		return err
	}
	if _, err := d.kubelet.Allocate(ctx, "intel.com/sriov_vfio", []string{"0000:99:00.0"}); err != nil {
		d.say("  A request for 0000:99:00.0, which the pool lacks, is refused: %s", grpcMessage(err))
	}

	// The kubelet checkpoints each container's devices with its pod's UID
	// (which PodResources does not give), as it allocates them.
	d.kubelet.SetCheckpointEntries(
		kubelettest.CheckpointEntry{PodUID: newPodUID(), Container: "testpmd", Resource: "intel.com/sriov_vfio", DeviceIDs: vfs},
		kubelettest.CheckpointEntry{PodUID: newPodUID(), Container: "main", Resource: "nvidia.com/gpu", DeviceIDs: gpus})

	d.step("The pods start: the kubelet's PodResources lists them, and the daemon binds each allocation to its pod")
	d.kubelet.SetPods([]*podresourcesapi.PodResources{
		kubelettest.PodHolding("telco", "dpdk-0", "testpmd", "intel.com/sriov_vfio", vfs...),
		kubelettest.PodHolding("ml", "trainer-0", "main", "nvidia.com/gpu", gpus...),
	})
	bound, err := d.liveAllocations(ctx, "every allocation bound to its pod", func(s events.State) bool {
		for _, a := range s.Allocations {
			if a.Binding == nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, a := range bound {
		d.say("  %s", a)
	}

	d.step("The pod's VF has its driver unbound on the node, then bound again")
	d.flapped = vfs[0]
	if err := d.unbindRebind(ctx, "intel.com/sriov_vfio", d.flapped, "vfio-pci"); err != nil {
		return err
	}

	d.step("The kubelet restarts (it empties device-plugins/, sockets and all)")
	if err := d.kubelet.Restart(); err != nil {
		return err
	}
	if err := d.waitPools(ctx, d.kubelet.BootedAt()); err != nil {
		return err
	}

	d.step("The daemon is killed (SIGKILL) and started again")
	// The pools may register again before the restart is durable, and the
	// kill would take it along: the history shown at the end has it.
	before, err := d.liveAllocations(ctx, "the kubelet's restart", func(s events.State) bool { return s.Kubelet.Restarts > 0 })
	if err != nil {
		return err
	}
	if err := d.daemon.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	d.daemon.Wait()
	d.say("  killed pid %d; the ledger holds %d live allocations", d.daemon.Process.Pid, len(before))
	restarted := time.Now()
	if err := d.startDaemon(); err != nil {
		return err
	}
	if err := d.waitPools(ctx, restarted); err != nil {
		return err
	}
	after, err := d.liveAllocations(ctx, "", nil)
	if err != nil {
		return err
	}
	if !slices.Equal(before, after) {
		return fmt.Errorf("live allocations differ after replay: before %v, after %v", before, after)
	}
	d.say("  replayed the ledger: the same %d live allocations, %s", len(after), strings.Join(after, "; "))

	d.step("The daemon stops (SIGTERM): it finishes in-flight calls, records the stop, snapshots, removes its sockets")
	if err := d.stopDaemon(); err != nil {
		return err
	}
	// Every pool's socket, whatever its prefix; the kubelet's own stays.
	socks, _ := filepath.Glob(filepath.Join(d.kubelet.DevicePluginDir(), "*.sock"))
	left := slices.DeleteFunc(socks, func(p string) bool { return filepath.Base(p) == "kubelet.sock" })
	d.say("  sockets left behind: %d", len(left))

	if d.kept {
		d.step("The history, as `go run ./cmd/devledger dump --state-dir %s` prints it", d.state)
	} else {
		d.step("The history, as `devledger dump` prints it (the ledger goes with the demo's temp dir; --keep DIR keeps it)")
	}
	if err := runDump([]string{"--state-dir", d.state}, d.out, d.out); err != nil {
		return err
	}
	d.step("Which pod had %s, and why did it go unhealthy? Its story, as dump --device %s tells it", d.flapped, d.flapped)
	if err := runDump([]string{"--state-dir", d.state, "--device", d.flapped}, d.out, d.out); err != nil {
		return err
	}
	d.step("Done in %.1fs", time.Since(d.began).Seconds())
	return nil
}

// demoExecutable is the devledger binary the demo starts as its daemon:
// this very program, except in tests, which build the binary.
var demoExecutable = os.Executable

func (d *demo) startDaemon() error {
	exe, err := demoExecutable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "run", "--config", d.cfgPath, "--sysfs-root", d.roots.Sysfs, "--dev-root", d.roots.Dev,
		"--proc-root", d.roots.Proc, "--pci-ids", filepath.Join(d.dir, "no-pci.ids"), "--kubelet-dir", d.kubelet.Dir(),
		"--state-dir", d.state, "--devinfo-dir", filepath.Join(d.dir, "devinfo"), "--cdi-spec-dir", filepath.Join(d.dir, "cdi"), "--registration", "legacy",
		"--log-format", "json", "--probe-interval", "250ms", "--scan-interval", "1s", "--reconcile-interval", "250ms",
		"--kernel-events=false") // the node is fake: the host's kernel events are not its
	cmd.Stdout, cmd.Stderr = logf, logf
	// A group of its own: Ctrl-C in a terminal signals the demo alone,
	// which stops the daemon itself, in order, before it cleans up.
	inOwnGroup(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start the daemon: %w", err)
	}
	logf.Close()
	d.daemon = cmd
	d.say("  pid %d, ledger %s, log %s", cmd.Process.Pid, filepath.Join(d.state, ledgerFileName), d.logPath)
	return nil
}

func (d *demo) stopDaemon() error {
	if d.daemon == nil || d.daemon.ProcessState != nil {
		return nil
	}
	if err := d.daemon.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	err := d.daemon.Wait()
	d.daemon = nil
	if err != nil {
		return fmt.Errorf("the daemon exited with %v", err)
	}
	return nil
}

// cleanup stops what the demo started and is still running: the daemon
// (SIGTERM to its process group, so that it records its stop; SIGKILL
// when it has not stopped in 10s) and the kubelet stand-in, whose temp
// dir it removes.
func (d *demo) cleanup() {
	if d.daemon != nil && d.daemon.ProcessState == nil {
		terminateGroup(d.daemon.Process)
		exited := make(chan struct{})
		go func() {
			d.daemon.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			killGroup(d.daemon.Process)
			<-exited
		}
	}
	if d.kubelet != nil {
		d.kubelet.Close()
	}
	if d.kubeletDir != "" {
		os.RemoveAll(d.kubeletDir)
	}
}

// waitPools waits until every pool is registered after since and says how
// long it took and what the kubelet sees.
func (d *demo) waitPools(ctx context.Context, since time.Time) error {
	from := since
	if from.IsZero() {
		from = d.began
	}
	regs, err := d.kubelet.RegisteredAfter(ctx, demoPools, since)
	if err != nil {
		return fmt.Errorf("waiting for the pools to register: %w", err)
	}
	for _, r := range regs {
		// The list of a fresh registration arrives just after it; until
		// then the kubelet shows the old endpoint's devices as unhealthy.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		devs, err := d.kubelet.WaitDevices(wctx, r.Resource, func(ds []*pluginapi.Device) bool {
			for _, dev := range ds {
				if dev.Health != pluginapi.Healthy {
					return false
				}
			}
			return len(ds) > 0
		})
		cancel()
		if err != nil {
			devs = d.kubelet.Devices(r.Resource)
		}
		healthy := 0
		for _, dev := range devs {
			if dev.Health == pluginapi.Healthy {
				healthy++
			}
		}
		d.say("  %-22s registered after %4dms: %d devices, %d healthy", r.Resource, r.At.Sub(from).Milliseconds(), len(devs), healthy)
	}
	return nil
}

// allocate plays the kubelet admitting a pod: preferred allocation, then
// Allocate, and shows what the container gets.
func (d *demo) allocate(ctx context.Context, resource string, n int) ([]string, error) {
	var avail []string
	for _, dev := range d.kubelet.Devices(resource) {
		avail = append(avail, dev.ID)
	}
	pref, err := d.kubelet.GetPreferredAllocation(ctx, resource, avail, nil, n)
	if err != nil {
		return nil, fmt.Errorf("GetPreferredAllocation %s: %w", resource, err)
	}
	if len(pref.ContainerResponses) != 1 {
		return nil, fmt.Errorf("GetPreferredAllocation %s: %d container responses to one container request", resource, len(pref.ContainerResponses))
	}
	ids := pref.ContainerResponses[0].DeviceIDs
	start := time.Now()
	resp, err := d.kubelet.Allocate(ctx, resource, ids)
	if err != nil {
		return nil, fmt.Errorf("Allocate %s: %w", resource, err)
	}
	took := time.Since(start)
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("Allocate %s: %d container responses to one container request", resource, len(resp.ContainerResponses))
	}
	cr := resp.ContainerResponses[0]
	d.say("  %s: %s allocated in %s (durable in the ledger before the answer)", resource, strings.Join(ids, ","), took.Round(100*time.Microsecond))
	keys := make([]string, 0, len(cr.Envs))
	for k := range cr.Envs {
		if !strings.HasSuffix(k, "_INFO") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		d.say("    env %s=%s", k, cr.Envs[k])
	}
	for _, spec := range cr.Devices {
		d.say("    device %s", spec.HostPath)
	}
	return ids, nil
}

// unbindRebind unbinds a pooled device's driver, shows the kubelet seeing it
// unhealthy, rebinds it and shows it healthy again after the pool's
// hold-down.
func (d *demo) unbindRebind(ctx context.Context, resource, addr, driver string) error {
	health := func(want string) (time.Duration, error) {
		start := time.Now()
		_, err := d.kubelet.WaitDevices(ctx, resource, func(ds []*pluginapi.Device) bool {
			for _, dev := range ds {
				if dev.ID == addr {
					return dev.Health == want
				}
			}
			return false
		})
		return time.Since(start), err
	}
	if err := d.roots.Unbind(addr); err != nil {
		return err
	}
	took, err := health(pluginapi.Unhealthy)
	if err != nil {
		return fmt.Errorf("waiting for %s to turn unhealthy: %w", addr, err)
	}
	d.say("  unbound %s from %s: the kubelet sees it Unhealthy %dms later (it stays in its pool)", addr, driver, took.Milliseconds())
	if err := d.roots.Bind(addr, driver); err != nil {
		return err
	}
	if took, err = health(pluginapi.Healthy); err != nil {
		return fmt.Errorf("waiting for %s to recover: %w", addr, err)
	}
	d.say("  bound it to %s again: Healthy %dms later, after the pool's 1s hold-down", driver, took.Milliseconds())
	return nil
}

// liveAllocations are the live allocations the ledger holds, read through
// the running daemon's admin socket as `devledger dump` reads them, once
// its fold passes until (nil: at once); each with the container it is
// bound to. A fold that has not passed until after five seconds of asking
// fails the step, naming what it waited for.
func (d *demo) liveAllocations(ctx context.Context, what string, until func(events.State) bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var s events.State
	for {
		src, err := openSource(&ledgerFlags{stateDir: d.state})
		if err != nil {
			return nil, err
		}
		s, err = foldSource(src, 0, time.Time{})
		src.close()
		if err != nil {
			return nil, err
		}
		if until == nil || until(s) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the ledger does not show %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out []string
	for _, seq := range sortedKeys(s.Allocations) {
		a := s.Allocations[seq]
		holder := "unbound"
		if b := a.Binding; b != nil {
			holder = "held by " + podRef(b.Namespace, b.Pod, b.Container, b.UID)
		}
		out = append(out, fmt.Sprintf("#%d %s %s, %s", seq, a.Pool, strings.Join(a.DeviceIDs, ","), holder))
	}
	return out, nil
}

// newPodUID is a UID as the API server gives a pod: a random UUID.
func newPodUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func grpcMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "desc = "); i >= 0 {
		return msg[i+len("desc = "):]
	}
	return msg
}
