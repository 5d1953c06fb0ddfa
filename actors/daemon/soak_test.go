package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/actors/reconciler"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// soakConfig is sriovConfig with link health on the vfio pool and a GPU
// pool that serves only while a GPU is plugged in.
const soakConfig = `{"resourceList": [
    {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
     "health": {"link": true, "holdDown": "0s", "probeInterval": "1h"}},
    {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}},
    {"resourceName": "gpu", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI", "selectors": {"vendors": ["10de"]}}
]}`

// soakHeld is what a long-running daemon must not pile up: goroutines,
// file descriptors, entries in the kubelet's socket dirs, and what its
// actors hold of allocations and registrations.
type soakHeld struct {
	goroutines, fds, socketDirEntries int
	nodeHolds, poolHolds, reconciled  int
	registrations                     int
}

func (h soakHeld) String() string {
	return fmt.Sprintf("%d goroutines, %d fds, %d entries in the kubelet's socket dirs, holds %d (node) %d (pool), %d live allocations (reconciler), %d pools (registrar)",
		h.goroutines, h.fds, h.socketDirEntries, h.nodeHolds, h.poolHolds, h.reconciled, h.registrations)
}

func soakMeasure(ctx context.Context, t *testing.T, n *testNode, d *Daemon) soakHeld {
	t.Helper()
	var h soakHeld
	h.goroutines = runtime.NumGoroutine()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	h.fds = len(fds)
	for _, dir := range []string{n.kubelet.DevicePluginDir(), n.kubelet.PluginsRegistryDir()} {
		ents, _ := os.ReadDir(dir)
		h.socketDirEntries += len(ents)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Ask(ctx, d.node, &node.Query{})
	if err != nil {
		t.Fatal(err)
	}
	h.nodeHolds = len(res.(*node.Status).Holds)
	h.poolHolds = len(poolStatus(t, ctx, d, kids.Pools[vfioPool]).Held)
	if res, err = d.Ask(ctx, kids.Reconciler, &reconciler.Query{}); err != nil {
		t.Fatal(err)
	}
	h.reconciled = len(res.(*reconciler.Status).Allocations)
	if res, err = d.Ask(ctx, kids.Registrar, &registrar.Query{}); err != nil {
		t.Fatal(err)
	}
	h.registrations = len(res.(*registrar.Status).Pools)
	return h
}

// A daemon runs for months: every cycle of what a busy node does (a pod
// given a device and deleted, a ListAndWatch stream opened and dropped, a
// link flap, a GPU plugged in and out, a pool dropped from the config and
// back, a kubelet restart, admin clients that leave mid-stream) must give
// back all it took. After a few cycles, as many more leave the daemon
// holding no more than it held before them.
func TestCyclesLeaveNothingBehind(t *testing.T) {
	for _, mode := range []string{"legacy", "watcher"} {
		t.Run(mode, func(t *testing.T) { cyclesLeaveNothingBehind(t, mode) })
	}
}

func cyclesLeaveNothingBehind(t *testing.T, mode string) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, soakConfig, kubelettest.Options{PluginWatcher: mode == "watcher"})
	n.opts.Registration = mode
	n.opts.ScanInterval, n.opts.ProbeInterval = time.Hour, time.Hour
	n.opts.ReconcileInterval, n.opts.LeakGrace = time.Hour, time.Hour
	d := n.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	served := []string{vfioPool, netPool}
	for _, p := range served {
		if _, err := n.kubelet.WaitRegistered(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	const gpu, gpuAddr, vf = "nvidia.com/gpu", "0000:d8:00.0", "0000:3b:01.2"
	pluginDir := n.kubelet.DevicePluginDir()
	if mode == "watcher" {
		pluginDir = n.kubelet.PluginsRegistryDir()
	}
	admin := grpcapi.AdminSocketPath(n.opts.StateDir)
	errLeft := errors.New("the client leaves")
	cycle := func(i int) {
		// A pod gets a device and is deleted: released by the reconciler.
		if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{vf}); err != nil {
			t.Fatal(err)
		}
		n.kubelet.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("soak", fmt.Sprint("pod-", i), "app", vfioPool, vf)})
		reconcileNow(ctx, t, d)
		n.kubelet.SetPods(nil)
		reconcileNow(ctx, t, d)

		// A ListAndWatch stream of a client other than the kubelet,
		// opened and dropped with its connection.
		socks := poolSockets(t, pluginDir, vfioPool)
		if len(socks) != 1 {
			t.Fatalf("sockets of %s: %v", vfioPool, socks)
		}
		conn, err := grpc.NewClient("unix://"+socks[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
		if err == nil {
			_, err = stream.Recv()
		}
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}

		// The link of the PF of vf flaps.
		flapLink(ctx, t, n, d, "ens785f0", vfioPool, []string{vf})

		// A GPU is plugged in, given to a pod and unplugged: its pool
		// serves, then is withdrawn.
		plugged := time.Now()
		if err := n.roots.Add(sysfsgen.Function{Address: gpuAddr, Vendor: "10de", Device: "2330", Class: "030200", Driver: "vfio-pci", IOMMUGroup: "300"}); err != nil {
			t.Fatal(err)
		}
		d.Send(&node.Rescan{Reason: "soak"})
		if _, err := n.kubelet.RegisteredAfter(ctx, []string{gpu}, plugged); err != nil {
			t.Fatal(err)
		}
		if _, err := n.kubelet.WaitDevices(ctx, gpu, func(ds []*pluginapi.Device) bool { return len(ds) == 1 }); err != nil {
			t.Fatal(err)
		}
		if _, err := n.kubelet.Allocate(ctx, gpu, []string{gpuAddr}); err != nil {
			t.Fatal(err)
		}
		if err := n.roots.Remove(gpuAddr); err != nil {
			t.Fatal(err)
		}
		d.Send(&node.Rescan{Reason: "soak"})
		if err := n.kubelet.WaitUnregistered(ctx, gpu); err != nil {
			t.Fatal(err)
		}
		waitLedger(ctx, t, d, "the GPU pool withdrawn", func(s events.State) bool { return !s.Pools[gpu].Registration.Serving })
		reconcileNow(ctx, t, d) // no pod holds the GPU: released

		// The net pool is dropped from the config, and comes back.
		n.reload(ctx, t, d, strings.Replace(soakConfig, `"sriov_net"`, `"sriov_other"`, 1))
		n.reload(ctx, t, d, soakConfig)

		// The kubelet restarts.
		restarted := time.Now()
		if err := n.kubelet.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := n.kubelet.RegisteredAfter(ctx, served, restarted); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, "ready after the kubelet restart", func() bool { return d.Ready(ctx) })

		// Admin clients that leave after the first record or bytes.
		if err := grpcapi.ReadRecordsFromAdmin(ctx, admin, 0, func([]byte) error { return errLeft }); !errors.Is(err, errLeft) {
			t.Fatalf("read records through the admin socket: %v", err)
		}
		if _, err := grpcapi.BackupFromAdmin(ctx, admin, leavingWriter{errLeft}); !errors.Is(err, errLeft) {
			t.Fatalf("back up through the admin socket: %v", err)
		}
		if _, err := d.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		cycle(i)
	}
	before := soakMeasure(ctx, t, n, d)
	const cycles = 8
	for i := 2; i < 2+cycles; i++ {
		cycle(i)
	}
	// Goroutines and connections end a moment after their cycle: wait for
	// them. A few goroutines come and go on their own (the dispatcher's
	// warm ones, timers), fewer than one per cycle. Each cycle ends with a
	// kubelet just restarted, which settles for a minute: the next
	// cycle's pod is not released meanwhile, nor is the GPU given to no
	// pod, until an Allocate of the same device supersedes them. So some
	// allocations stay live, as many after as before.
	const slack = cycles / 2
	settle, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	for {
		after := soakMeasure(ctx, t, n, d)
		within := after.goroutines <= before.goroutines+slack && after.fds <= before.fds+slack/2 &&
			after.socketDirEntries <= before.socketDirEntries &&
			after.nodeHolds <= before.nodeHolds && after.poolHolds <= before.poolHolds &&
			after.reconciled <= before.reconciled && after.registrations == before.registrations
		if within {
			return
		}
		select {
		case <-settle.Done():
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("after %d more cycles the daemon holds more:\nbefore: %s\nafter:  %s\n%s", cycles, before, after, stacks.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leavingWriter fails its first write: a client that leaves.
type leavingWriter struct{ err error }

func (w leavingWriter) Write([]byte) (int, error) { return 0, w.err }
