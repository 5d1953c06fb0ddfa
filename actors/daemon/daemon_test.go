package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
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
		DevinfoDir: filepath.Join(t.TempDir(), "devinfo"), Registration: "legacy", Version: "test",
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
	t.Cleanup(func() { d.Stop(context.Background(), "test over") })
	return d
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
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := l.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
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
