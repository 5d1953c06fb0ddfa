package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

const sriovConfig = `{
  "resourceList": [
    {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}},
    {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}
  ]
}`

type testNode struct {
	roots   sysfsgen.Roots
	kubelet *kubelettest.Kubelet
	opts    Options
}

func newTestNode(t *testing.T, scenario, cfg string, kopts kubelettest.Options) *testNode {
	t.Helper()
	roots := sysfsgen.TempScenario(t, scenario)
	dir := kubelettest.ShortTempDir(t)
	k := kubelettest.Start(t, dir, kopts)
	state := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testNode{roots: roots, kubelet: k, opts: Options{
		ConfigPath: cfgPath, SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, ProcRoot: roots.Proc,
		PCIIDsPath: filepath.Join(t.TempDir(), "none"), KubeletDir: dir, StateDir: state,
		DevinfoDir: filepath.Join(t.TempDir(), "devinfo"), CDISpecDir: filepath.Join(t.TempDir(), "cdi"), Registration: "legacy", Version: "test",
		Node: "test-node", Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
		WatchConfig: true,
	}}
}

func (n *testNode) start(t *testing.T) *Daemon {
	t.Helper()
	d, err := Start(n.opts)
	if err != nil {
		t.Fatal(err)
	}
	// testing keeps a finished test's cleanups until its parent ends: one
	// that kept the daemon would keep its actor system (megabytes) through
	// a run of thousands of sequences.
	t.Cleanup(func() {
		d.Stop(context.Background(), "test over")
		d = nil
	})
	return d
}

// replayStopped replays the ledger a stopped daemon left in stateDir.
func replayStopped(t *testing.T, stateDir string) events.State {
	t.Helper()
	l, err := store.Open(filepath.Join(stateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDaemonServesAndRecords(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	for _, res := range []string{"intel.com/sriov_vfio", "intel.com/sriov_net"} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
	}
	devs, err := n.kubelet.WaitDevices(ctx, "intel.com/sriov_vfio", func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatalf("vfio pool devices: %v (have %d)", err, len(devs))
	}
	resp, err := n.kubelet.Allocate(ctx, "intel.com/sriov_vfio", []string{devs[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs["PCIDEVICE_INTEL_COM_SRIOV_VFIO"]; got != devs[0].ID {
		t.Errorf("env = %q, want %q", got, devs[0].ID)
	}
	if _, err := n.kubelet.Allocate(ctx, "intel.com/sriov_vfio", []string{"0000:99:00.0"}); err == nil {
		t.Errorf("Allocate of an unknown device succeeded")
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"intel.com/sriov_vfio", "intel.com/sriov_net"} {
		if left := poolSockets(t, n.kubelet.DevicePluginDir(), res); len(left) > 0 {
			t.Errorf("sockets of %s left behind after stop: %v", res, left)
		}
	}
	st := replayStopped(t, n.opts.StateDir)
	if len(st.Allocations) != 1 {
		t.Errorf("replayed %d live allocations, want 1", len(st.Allocations))
	}
	if st.Daemon.Running {
		t.Errorf("replayed daemon still running after a clean stop")
	}
	if p := st.Pools["intel.com/sriov_vfio"]; len(p.Members) != 5 {
		t.Errorf("replayed vfio pool has %d members, want 5", len(p.Members))
	}
}

// A stop whose deadline has already passed still writes the ledger's last
// words: DaemonStopped (not clean: the actors were not waited for) and a
// snapshot, each in the time a stop always keeps for them.
func TestStopPastItsDeadlineStillRecords(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	if _, err := n.kubelet.WaitRegistered(waitCtx(t), "intel.com/sriov_vfio"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var stopped *events.DaemonStopped
	var snapshot bool
	if err := l.Read(0, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.DaemonStopped:
			stopped = &p
		case events.SnapshotTaken:
			snapshot = stopped != nil
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stopped == nil || stopped.Clean || stopped.Reason != "test" {
		t.Errorf("DaemonStopped %+v; want one, not clean, reason test", stopped)
	}
	if !snapshot {
		t.Error("no snapshot after DaemonStopped")
	}
}

// A stop with time to spare gives its last writes that time, not only the
// 2 s it keeps for them past its deadline: a disk slower than that on a
// loaded node still gets DaemonStopped and the snapshot written.
func TestStopGivesItsLastWritesTheTimeItHas(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	wait := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(wait, vfioPool); err != nil {
		t.Fatal(err)
	}
	release := holdWriter(wait, t, d.rec.Log())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(ctx, "test") }()
	time.Sleep(2*stopRecordBudget + time.Second) // the disk holds the writes past the budget
	release()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop with a 20 s deadline, its writes held for %v: %v", 2*stopRecordBudget+time.Second, err)
	}
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var stoppedRec, snapshot bool
	if err := l.Read(0, func(e events.Envelope) error {
		switch e.Payload.(type) {
		case events.DaemonStopped:
			stoppedRec = true
		case events.SnapshotTaken:
			snapshot = stoppedRec
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !stoppedRec || !snapshot {
		t.Errorf("DaemonStopped recorded %v, a snapshot after it %v; want both", stoppedRec, snapshot)
	}
}

// poolSockets lists the sockets of resource's names in dir.
func poolSockets(t testing.TB, dir, resource string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Type() == os.ModeSocket && pool.IsSocketName(resource, e.Name()) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// A metrics address in use stops the start before any actor runs: a clear
// error naming the flag, no panic, DaemonStopped closing the run it opened,
// and no PID file left behind.
func TestStartWithMetricsAddrInUse(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	n.opts.MetricsAddr = taken.Addr().String()
	d, err := Start(n.opts)
	if err == nil {
		d.Stop(context.Background(), "test over")
		t.Fatal("Start served with its metrics address taken")
	}
	if !strings.Contains(err.Error(), "--metrics-addr "+n.opts.MetricsAddr) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.opts.StateDir, PIDFileName)); !os.IsNotExist(err) {
		t.Errorf("PID file: %v, want it removed", err)
	}
	st := replayStopped(t, n.opts.StateDir)
	if st.Daemon.Running || st.Daemon.Starts != 1 {
		t.Errorf("replayed daemon: %+v, want one start, stopped", st.Daemon)
	}
	if res := n.kubelet.Registrations(); len(res) > 0 {
		t.Errorf("pools registered by a daemon that did not start: %v", res)
	}
}

// A state dir is created for root alone; one that exists keeps its mode,
// unless others can write to it.
func TestStateDirMode(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh")
	if err := stateDir(fresh, ""); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("new state dir: %v, %v; want mode 0700", fi.Mode(), err)
	}
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := stateDir(shared, ""); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o755 {
		t.Errorf("existing state dir's mode changed to %v", fi.Mode().Perm())
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := stateDir(open, ""); err == nil || !strings.Contains(err.Error(), open) || !strings.Contains(err.Error(), "others write") {
		t.Errorf("world-writable state dir: %v", err)
	}
}

// The ledger is never kept in the kubelet's socket dirs, by any path to
// them: the kubelet would remove the admin socket (an older one the ledger
// too) or take it for a plugin's. A dir of its own below them is taken.
func TestStateDirIsNotTheKubelets(t *testing.T) {
	kdir := t.TempDir()
	plugins, registry := node.DevicePluginDir(kdir), node.PluginsRegistryDir(kdir)
	if err := os.Mkdir(plugins, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(plugins, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{plugins, "device-plugins"},
		{plugins + "/", "device-plugins"},
		{link, "device-plugins"},
		{registry, "plugins_registry"}, // not made yet
	} {
		_, err := Start(Options{StateDir: tc.dir, KubeletDir: kdir, SysfsRoot: t.TempDir(), Logger: zerolog.Nop()})
		if err == nil || !strings.Contains(err.Error(), tc.dir) || !strings.Contains(err.Error(), "the kubelet's "+tc.want+" dir") {
			t.Errorf("Start with --state-dir %s: %v; want it refused as the kubelet's %s dir", tc.dir, err, tc.want)
		}
	}
	// A hostPath of device-plugins/ mounted at the state dir's path: the
	// same dir, by no path that leads to it.
	if os.Geteuid() == 0 {
		bound := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(bound, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := bindMount(plugins, bound); err != nil {
			t.Logf("no bind mount (%v): the hostPath case is not checked", err)
		} else {
			t.Cleanup(func() {
				if err := unmount(bound); err != nil {
					t.Errorf("unmount %s: %v", bound, err)
				}
			})
			if err := stateDir(bound, kdir); err == nil || !strings.Contains(err.Error(), "the kubelet's device-plugins dir") {
				t.Errorf("--state-dir %s, device-plugins/ mounted there: %v; want it refused", bound, err)
			}
		}
	}
	if left, err := os.ReadDir(plugins); err != nil || len(left) != 0 {
		t.Errorf("a refused start left %v in device-plugins/ (%v)", left, err)
	}
	if _, err := os.Stat(registry); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused start made plugins_registry/: %v", err)
	}
	if err := stateDir(filepath.Join(plugins, "devledger"), kdir); err != nil {
		t.Errorf("a dir of its own in device-plugins/: %v", err)
	}
	// The plugin watcher walks the dirs below plugins_registry/ too.
	below := filepath.Join(registry, "devledger")
	if err := stateDir(below, kdir); err == nil || !strings.Contains(err.Error(), "below the kubelet's plugins_registry dir") {
		t.Errorf("--state-dir %s: %v; want it refused as below plugins_registry", below, err)
	}
	if err := os.Mkdir(registry, 0o750); err != nil {
		t.Fatal(err)
	}
	regLink := filepath.Join(t.TempDir(), "registry")
	if err := os.Symlink(registry, regLink); err != nil {
		t.Fatal(err)
	}
	if err := stateDir(filepath.Join(regLink, "devledger"), kdir); err == nil || !strings.Contains(err.Error(), "below the kubelet's plugins_registry dir") {
		t.Errorf("--state-dir %s: %v; want it refused as below plugins_registry", filepath.Join(regLink, "devledger"), err)
	}
}

// A stop that comes while the daemon is still starting (a SIGTERM during a
// rollout) is clean: the node, stopping, took a scan that came meanwhile
// and spawned a pool it then waited for forever, and the stop ran out its
// deadline.
func TestStopRightAfterStartIsClean(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	for i := range 12 {
		d, err := Start(n.opts)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%3) * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = d.Stop(ctx, fmt.Sprintf("round %d", i))
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stops := 0
	if err := l.Read(0, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DaemonStopped); ok {
			stops++
			if !p.Clean {
				t.Errorf("%s: the stop was not clean", p.Reason)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stops != 12 {
		t.Errorf("%d stops recorded, want 12", stops)
	}
}

// A clean stop takes the admin socket away: one left there is what a
// killed daemon leaves (docs/operations.md), and nothing answers on it.
func TestStopRemovesTheAdminSocket(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	sock := grpcapi.AdminSocketPath(n.opts.StateDir)
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the running daemon's admin socket: %v", err)
	}
	if err := d.Stop(waitCtx(t), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the admin socket after a clean stop: %v, want it gone", err)
	}
}

// A stop that comes while the check after start reads a big ledger cuts
// the check short rather than spend on it the stop's time before SIGKILL:
// at millions of events it takes seconds. The next start checks again.
func TestStopCutsTheLedgerCheckShort(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d, err := Start(n.opts)
	if err != nil {
		t.Fatal(err)
	}
	boot := d.rec.BootID()
	if err := d.Stop(waitCtx(t), "to grow the ledger"); err != nil {
		t.Fatal(err)
	}
	// History the start skips (a snapshot follows it) and the check reads.
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{Node: n.opts.Node})
	if err != nil {
		t.Fatal(err)
	}
	ctx := waitCtx(t)
	for range 10 {
		batch := make([]events.Envelope, 10_000)
		for i := range batch {
			batch[i] = events.New(events.ConfigRejected{Path: n.opts.ConfigPath, Errors: []string{"resourceList[0]: filler"}}, time.Now(), boot)
		}
		if _, err := l.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, st, "the test grew the ledger"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.DebugLevel)
	n.opts.SnapshotCheck = time.Millisecond // the check begins at once
	if d, err = Start(n.opts); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(logs.String(), `"checking the ledger"`) {
		if ctx.Err() != nil {
			d.Stop(context.Background(), "test over")
			t.Fatal("the check after start did not begin")
		}
		time.Sleep(time.Millisecond)
	}
	if err := d.Stop(ctx, "stop during the check"); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Contains(out, `"ledger checked"`) {
		t.Error("the stop waited for the check of the whole ledger")
	}
	if !strings.Contains(out, "ledger check cut short by the stop") {
		t.Error("no line says the check was cut short")
	}
	if strings.Contains(out, `"level":"error"`) {
		t.Errorf("the cut check logged an error:\n%s", out)
	}
}

// A ledger an older build wrote names each pool's definition as that build
// wrote it: without the fields added since, and with the pool's place in
// the file. A start on the same config file, the upgrade, records no
// ConfigApplied: nothing changed.
func TestAStartOnAnOlderBuildsDefinitionsRecordsNoConfig(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	if err := n.start(t).Stop(waitCtx(t), "to age the ledger"); err != nil {
		t.Fatal(err)
	}
	st := replayStopped(t, n.opts.StateDir)
	older := events.ConfigApplied{Path: st.Config.Path, SHA256: st.Config.SHA256}
	for i, res := range []string{"intel.com/sriov_vfio", "intel.com/sriov_net"} {
		spec := st.Pools[res].Spec
		spec.Definition = strings.Replace(strings.Replace(spec.Definition, `"AdvertiseEmpty":false,`, "", 1),
			`"Path":""`, fmt.Sprintf(`"Path":"resourceList[%d]"`, i), 1)
		if !strings.Contains(spec.Definition, `"Path":"resourceList[`) || strings.Contains(spec.Definition, `"AdvertiseEmpty"`) {
			t.Fatalf("the older build's definition of %s is not one: %s", res, spec.Definition)
		}
		older.Pools = append(older.Pools, spec)
	}
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(waitCtx(t), events.New(older, time.Now(), "0lderb0075")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	applied := replayStopped(t, n.opts.StateDir).Config.AppliedAt
	if err := n.start(t).Stop(waitCtx(t), "upgraded"); err != nil {
		t.Fatal(err)
	}
	if now := replayStopped(t, n.opts.StateDir); !now.Config.AppliedAt.Equal(applied) {
		t.Errorf("the start recorded a ConfigApplied at %s over the older build's of %s: %s",
			now.Config.AppliedAt, applied, now.Pools["intel.com/sriov_vfio"].Spec.Definition)
	}
}
