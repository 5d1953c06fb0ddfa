package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/daemon"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

const (
	vfioPool = "intel.com/sriov_vfio"
	netPool  = "intel.com/sriov_net"
	vfioSpec = `{"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}}`
	netSpec  = `{"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}}`
)

// deferNode is a daemon on the SR-IOV sample node, its config file, its
// kubelet stand-in and where it keeps its ledger.
type deferNode struct {
	d        *daemon.Daemon
	kubelet  *kubelettest.Kubelet
	config   string
	stateDir string
	stopped  bool
}

func startDeferNode(t *testing.T, cfg string) *deferNode {
	t.Helper()
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	dir := kubelettest.ShortTempDir(t)
	n := &deferNode{kubelet: kubelettest.Start(t, dir, kubelettest.Options{}),
		config: filepath.Join(t.TempDir(), "config.json"), stateDir: t.TempDir()}
	if err := os.WriteFile(n.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(daemon.Options{
		ConfigPath: n.config, SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, ProcRoot: roots.Proc,
		PCIIDsPath: filepath.Join(t.TempDir(), "none"), KubeletDir: dir, StateDir: n.stateDir,
		DevinfoDir: filepath.Join(t.TempDir(), "devinfo"), CDISpecDir: filepath.Join(t.TempDir(), "cdi"),
		Registration: "legacy", Version: "test", Node: "test-node",
		// The test holds a pool's stop with a call: it must not time out.
		CallTimeout: time.Hour, ScanInterval: time.Hour,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	if err != nil {
		t.Fatal(err)
	}
	n.d = d
	t.Cleanup(func() { n.stop(t) })
	return n
}

func (n *deferNode) stop(t *testing.T) {
	t.Helper()
	if !n.stopped {
		n.stopped = true
		if err := n.d.Stop(context.Background(), "test over"); err != nil {
			t.Error(err)
		}
	}
}

// reload writes cfg to the config file and has the node apply it.
func (n *deferNode) reload(ctx context.Context, t *testing.T, cfg, reason string) {
	t.Helper()
	if err := os.WriteFile(n.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := n.d.Reload(ctx, reason); err != nil || !res.Applied {
		t.Fatalf("reload %q = %+v, %v", reason, res, err)
	}
}

// holdStop keeps the pool's server, registered on endpoint, from
// finishing its stop: a call whose request never comes is in flight until
// the returned release. It returns once the server has the call.
func holdStop(ctx context.Context, t *testing.T, endpoint string) (release func()) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	if _, err := conn.NewStream(sctx, &grpc.StreamDesc{ClientStreams: true}, "/v1beta1.DevicePlugin/Allocate"); err != nil {
		t.Fatal(err)
	}
	// A call answered on the same connection, after it: the server has
	// read the held one's headers.
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	release = func() {
		cancel()
		conn.Close()
	}
	t.Cleanup(release)
	return release
}

// waitPool waits for the pool name to run and have its first members
// applied (a Query waits for them), and returns its status.
func (n *deferNode) waitPool(ctx context.Context, t *testing.T, name string) *pool.Status {
	t.Helper()
	for {
		kids, err := n.d.Children(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pid := kids.Pools[name]; pid != nil {
			res, err := n.d.Ask(ctx, pid, &pool.Query{})
			if err == nil {
				return res.(*pool.Status)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for pool %s: %v", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// memberships stops the node and returns the pool's membership records.
func (n *deferNode) memberships(t *testing.T, name string) []events.PoolMembershipChanged {
	t.Helper()
	n.stop(t)
	l, err := store.Open(filepath.Join(n.stateDir, daemon.LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out []events.PoolMembershipChanged
	if err := l.Read(0, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.PoolMembershipChanged); ok && p.Pool == name {
			out = append(out, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A pool a reload adds while one of its name is still stopping starts
// once that one has stopped, for that reload: a reload that removed it
// meanwhile (after an earlier reload had added it) leaves no reason of
// its own behind.
func TestAPoolAddedBackWhileItsNameStopsStartsForTheLastReload(t *testing.T) {
	both := `{"resourceList": [` + vfioSpec + `, ` + netSpec + `]}`
	netOnly := `{"resourceList": [` + netSpec + `]}`
	n := startDeferNode(t, both)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := n.kubelet.WaitRegistered(ctx, vfioPool)
	if err != nil {
		t.Fatal(err)
	}
	n.waitPool(ctx, t, vfioPool)
	endpoint := reg.Endpoint
	if !filepath.IsAbs(endpoint) {
		t.Fatalf("endpoint %q is not a path", endpoint)
	}
	release := holdStop(ctx, t, endpoint)

	n.reload(ctx, t, netOnly, "drop 1") // the pool stops, held
	n.reload(ctx, t, both, "add 1")     // waits for it
	n.reload(ctx, t, netOnly, "drop 2")
	n.reload(ctx, t, both, "add 2")
	if kids, err := n.d.Children(ctx); err != nil || kids.Pools[vfioPool] != nil {
		t.Fatalf("%s runs while the one before it still stops (%v)", vfioPool, err)
	}
	release()
	if st := n.waitPool(ctx, t, vfioPool); st.Members == 0 {
		t.Fatalf("%s started with no members", vfioPool)
	}

	ms := n.memberships(t, vfioPool)
	if len(ms) == 0 {
		t.Fatal("no membership records")
	}
	last := ms[len(ms)-1]
	if len(last.Added) == 0 || !strings.HasPrefix(last.Reason, "reload: add 2") {
		t.Errorf("the pool's first record after it started again: added %v, reason %q; want its members, for \"reload: add 2\"", last.Added, last.Reason)
	}
}

// Devices placed in a pool while it waits for one of its name to stop
// are named in its first record with the pool they came from, as that
// pool's record names where they went.
func TestAPoolThatWaitedNamesWhereItsDevicesCameFrom(t *testing.T) {
	both := `{"resourceList": [` + vfioSpec + `, ` + netSpec + `]}`
	netOnly := `{"resourceList": [` + netSpec + `]}`
	// Above the net pool, the vfio pool takes its VFs too.
	wider := `{"resourceList": [` + strings.Replace(vfioSpec, `, "drivers": ["vfio-pci"]`, "", 1) + `, ` + netSpec + `]}`
	n := startDeferNode(t, both)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := n.kubelet.WaitRegistered(ctx, vfioPool)
	if err != nil {
		t.Fatal(err)
	}
	n.waitPool(ctx, t, vfioPool)
	net := n.waitPool(ctx, t, netPool)
	release := holdStop(ctx, t, reg.Endpoint)

	n.reload(ctx, t, netOnly, "drop") // the pool stops, held
	n.reload(ctx, t, wider, "wider")  // waits for it, taking the net VFs
	release()
	if st := n.waitPool(ctx, t, vfioPool); st.Members <= net.Members {
		t.Fatalf("%s started with %d members, want its own and %s's %d", vfioPool, st.Members, netPool, net.Members)
	}

	var moved []string
	for _, m := range n.memberships(t, netPool) {
		if strings.Contains(m.Reason, "moved to "+vfioPool) {
			moved = m.Removed
		}
	}
	if len(moved) == 0 {
		t.Fatalf("%s recorded no move to %s", netPool, vfioPool)
	}
	ms := n.memberships(t, vfioPool)
	last := ms[len(ms)-1]
	for _, addr := range moved {
		if !strings.Contains(last.Reason, addr) {
			t.Errorf("%s's first record does not say where %s came from: %q", vfioPool, addr, last.Reason)
		}
	}
	if !strings.Contains(last.Reason, "moved from "+netPool) {
		t.Errorf("%s's first record names no move from %s: %q", vfioPool, netPool, last.Reason)
	}
}
