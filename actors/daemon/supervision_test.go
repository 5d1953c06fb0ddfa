package daemon

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

const (
	vfioPool = "intel.com/sriov_vfio"
	netPool  = "intel.com/sriov_net"
)

// supervisionCtx is generous: CI runs -race on two cores.
func supervisionCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// crash makes the pool's allocator panic. Crash has no reply, so the ask
// ends by its short timeout; the panic happens all the same.
func crash(d *Daemon, pid *actor.PID, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	d.Ask(ctx, pid, &pool.Crash{Reason: reason})
}

func poolStatus(t testing.TB, ctx context.Context, d *Daemon, pid *actor.PID) *pool.Status {
	t.Helper()
	res, err := d.Ask(ctx, pid, &pool.Query{})
	if err != nil {
		t.Fatalf("query pool: %v", err)
	}
	return res.(*pool.Status)
}

// startSupervised starts a daemon on the SR-IOV tree with cfg and waits
// until the kubelet has pool registered; it returns the daemon's children.
func startSupervised(t *testing.T, cfg string, kopts kubelettest.Options, pool string) (*testNode, *Daemon, context.Context, *node.ChildPIDs) {
	t.Helper()
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kopts)
	d, ctx, kids := superviseNode(t, n, pool)
	return n, d, ctx, kids
}

// superviseNode starts the daemon of n and returns it once pool is
// registered, with its actors.
func superviseNode(t *testing.T, n *testNode, pool string) (*Daemon, context.Context, *node.ChildPIDs) {
	t.Helper()
	d := n.start(t)
	ctx := supervisionCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, pool); err != nil {
		t.Fatal(err)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d, ctx, kids
}

// crashAndWaitRegistered crashes pool and waits until the kubelet took a
// registration of it made after the crash.
func crashAndWaitRegistered(ctx context.Context, t *testing.T, n *testNode, d *Daemon, kids *node.ChildPIDs, pool string) {
	t.Helper()
	crashed := time.Now()
	crash(d, kids.Pools[pool], "test")
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{pool}, crashed); err != nil {
		t.Fatalf("the crashed pool %s was not registered again: %v", pool, err)
	}
}

// A panic in one pool's allocator restarts that allocator, which rebuilds
// its allocations from the ledger and registers again; the other pool
// keeps serving throughout, without being registered again.
func TestPoolCrashRestartsFromLedger(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := supervisionCtx(t)
	for _, res := range []string{vfioPool, netPool} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatal(err)
		}
	}
	const held = "0000:3b:01.2"
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{held}); err != nil {
		t.Fatal(err)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := poolStatus(t, ctx, d, kids.Pools[vfioPool])
	if len(before.Held[held]) != 1 {
		t.Fatalf("pool holds %v before the crash, want %s once", before.Held, held)
	}

	crashAndWaitRegistered(ctx, t, n, d, kids, vfioPool)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	after := poolStatus(t, ctx, d, kids.Pools[vfioPool])
	if len(after.Held[held]) != 1 || after.Held[held][0] != before.Held[held][0] || after.Members != 5 {
		t.Errorf("restarted pool: %d members, holds %v; want 5 members, %s held by #%d as before",
			after.Members, after.Held, held, before.Held[held][0])
	}

	// The other pool never stopped: the kubelet kept its registration and
	// it answers.
	for _, r := range n.kubelet.Registrations() {
		if r.Resource == netPool && r.Count > 1 {
			t.Errorf("%s was registered again (%+v): it should not have noticed", netPool, r)
		}
	}
	if _, err := n.kubelet.Allocate(ctx, netPool, []string{"0000:3b:01.0"}); err != nil {
		t.Errorf("Allocate on the other pool: %v", err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{"0000:3b:01.3"}); err != nil {
		t.Errorf("Allocate on the restarted pool: %v", err)
	}
	select {
	case err := <-d.Fatal():
		t.Fatalf("one crash failed the daemon: %v", err)
	default:
	}
}

// A pool that keeps crashing is stopped for good and the daemon fails
// loudly, naming the actor and the reason, rather than crash-loop quietly.
func TestRepeatedCrashesFailTheDaemon(t *testing.T) {
	_, d, ctx, kids := startSupervised(t, sriovConfig, kubelettest.Options{}, vfioPool)
	// One more crash than the backoff allows; the ones after the first wait
	// in the mailbox for each restart.
	for range 6 {
		crash(d, kids.Pools[vfioPool], "again")
	}
	select {
	case err := <-d.Fatal():
		for _, want := range []string{"pool-intel.com_sriov_vfio", "kept crashing", "injected crash: again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("fatal error %q does not say %q", err, want)
			}
		}
	case <-ctx.Done():
		t.Fatal("the daemon did not fail after repeated crashes")
	}
	if err := d.Stop(ctx, "fatal"); err != nil {
		t.Errorf("stop after the failure: %v", err)
	}
}

// A pool that crashes and restarts keeps the verdicts it had: it was
// spawned with its members' health of the time, and rebuilds the rest
// from the ledger.
func TestPoolRestartKeepsItsVerdicts(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, healthConfig, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := waitCtx(t)
	const net, vf = "intel.com/sriov_net", "0000:3b:01.0"
	waitHealth(ctx, t, n.kubelet, net, vf, pluginapi.Healthy)
	if err := n.roots.SetLinkDown("ens785f0"); err != nil { // its PF
		t.Fatal(err)
	}
	waitHealth(ctx, t, n.kubelet, net, vf, pluginapi.Unhealthy)
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := poolStatus(t, ctx, d, kids.Pools[net])
	crashAndWaitRegistered(ctx, t, n, d, kids, net)
	// The restarted pool's first list, and the members it asked for.
	list, err := n.kubelet.WaitDevices(ctx, net, func(ds []*pluginapi.Device) bool { return len(ds) == before.Members })
	if err != nil {
		t.Fatal(err)
	}
	after := poolStatus(t, ctx, d, kids.Pools[net])
	if after.Healthy != before.Healthy || after.Members != before.Members {
		t.Errorf("after the restart %d of %d members healthy, before %d of %d", after.Healthy, after.Members, before.Healthy, before.Members)
	}
	for _, x := range list {
		if x.ID == vf && x.Health != pluginapi.Unhealthy {
			t.Errorf("the restarted pool lists %s %s; its PF's link is still down", vf, x.Health)
		}
	}
}

// A pool restarted after a crash starts from the members its last
// incarnation had, not from those it was spawned with: a device that moved
// away since is not offered again, even for a moment, and the ledger shows
// no membership change for the restart. (The pool advertises itself
// empty, else it would be withdrawn when its device left.)
func TestRestartedPoolKeepsItsLastMembers(t *testing.T) {
	cfg := strings.Replace(oneVFIOConfig, `"resourceName": "one_vfio",`, `"resourceName": "one_vfio", "advertiseEmpty": true,`, 1)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.ScanInterval = time.Hour
	d := n.start(t)
	ctx := supervisionCtx(t)
	const one, dev = "intel.com/one_vfio", "0000:3b:01.2"
	if _, err := n.kubelet.WaitRegistered(ctx, one); err != nil {
		t.Fatal(err)
	}
	if err := n.roots.Bind(dev, "iavf"); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.Rescan{Reason: "test"})
	waitLedger(ctx, t, d, "the move", func(s events.State) bool {
		return s.Devices[dev].Pool == netPool && len(s.Pools[one].Members) == 0
	})
	// The pool the device left records that on its own, without waiting:
	// the restart is judged by what comes after that record.
	for left := false; !left; {
		if err := d.rec.Log().Read(1, func(e events.Envelope) error {
			if m, ok := e.Payload.(events.PoolMembershipChanged); ok && m.Pool == one && slices.Contains(m.Removed, dev) {
				left = true
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never recorded that %s left", one, dev)
		}
		time.Sleep(5 * time.Millisecond)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seq := d.rec.Log().LastSeq()
	crashAndWaitRegistered(ctx, t, n, d, kids, one)
	if st := poolStatus(t, ctx, d, kids.Pools[one]); st.Members != 0 {
		t.Errorf("the restarted pool has %d members, want none", st.Members)
	}
	if err := d.rec.Log().Read(seq+1, func(e events.Envelope) error {
		if m, ok := e.Payload.(events.PoolMembershipChanged); ok && m.Pool == one {
			t.Errorf("seq %d: the restart changed %s's members: %+v", e.Seq, one, m)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A crashed pool registers again even when the kubelet is slow to notice
// that the old server's ListAndWatch ended (here 2s): the new server serves
// under a new socket name, which the kubelet holds nothing for, so nothing
// is refused and nothing waits for the kubelet to notice.
func TestCrashedPoolRegistersAgainWithASlowKubelet(t *testing.T) {
	n, d, ctx, kids := startSupervised(t, sriovConfig, kubelettest.Options{NoticeDelay: 2 * time.Second}, vfioPool)
	before, err := n.kubelet.WaitRegistered(ctx, vfioPool)
	if err != nil {
		t.Fatal(err)
	}
	crashAndWaitRegistered(ctx, t, n, d, kids, vfioPool)
	after, err := n.kubelet.WaitRegistered(ctx, vfioPool)
	if err != nil {
		t.Fatal(err)
	}
	if after.Endpoint == before.Endpoint || filepath.Dir(after.Endpoint) != filepath.Dir(before.Endpoint) {
		t.Errorf("the restarted pool registered %s, want a new socket beside %s", after.Endpoint, before.Endpoint)
	}
	for _, r := range n.kubelet.Rejections() {
		t.Errorf("the kubelet refused a Register: %+v", r)
	}
	if _, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 }); err != nil {
		t.Errorf("the kubelet does not list the restarted pool's devices: %v", err)
	}
}

// A node that crashes after a reload comes back with the config the reload
// applied, not the one the daemon started with: the pools it serves are
// the reloaded config's, and nothing is moved back.
func TestNodeCrashKeepsTheReloadedConfig(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	d := n.start(t)
	ctx := supervisionCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	n.reload(ctx, t, d, dpdkConfig)
	const dpdk = "intel.com/dpdk"
	if _, err := n.kubelet.WaitRegistered(ctx, dpdk); err != nil {
		t.Fatal(err)
	}
	seq := d.rec.Log().LastSeq()
	crashed := time.Now()
	d.Send(&node.Crash{Reason: "test"})
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{dpdk, netPool}, crashed); err != nil {
		t.Fatal(err)
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(kids.Pools)); !slices.Equal(got, []string{dpdk, netPool}) {
		t.Errorf("after the crash the node serves %v, want the reloaded config's pools", got)
	}
	if err := d.rec.Log().Read(seq+1, func(e events.Envelope) error {
		if m, ok := e.Payload.(events.PoolMembershipChanged); ok && len(m.Added) > 0 && m.Pool == vfioPool {
			t.Errorf("#%d: %s, gone with the reload, took devices again: %s", e.Seq, vfioPool, m.Reason)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A crashed registrar knows no pool: it asks for them again, and every pool
// serves on a new socket and registers anew (in watcher mode, the kubelet's
// plugin watcher finds the new sockets). The kubelet restart that follows
// still finds every pool, and the crash alone records no restart.
func TestACrashedRegistrarRegistersEveryPoolAgain(t *testing.T) {
	for _, mode := range []string{"legacy", "watcher"} {
		t.Run(mode, func(t *testing.T) { crashedRegistrarRegistersEveryPoolAgain(t, mode) })
	}
}

func crashedRegistrarRegistersEveryPoolAgain(t *testing.T, mode string) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{PluginWatcher: mode == "watcher"})
	n.opts.Registration = mode
	d, ctx, kids := superviseNode(t, n, vfioPool)
	if _, err := n.kubelet.WaitRegistered(ctx, netPool); err != nil {
		t.Fatal(err)
	}
	crashed, seq := time.Now(), d.rec.Log().LastSeq()
	d.system.Root.Send(kids.Registrar, &registrar.Crash{Reason: "test"})
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{vfioPool, netPool}, crashed); err != nil {
		t.Fatalf("after the registrar's crash: %v", err)
	}
	// In watcher mode the kubelet registers a pool of itself: the
	// registrar's records may come after. Wait for them.
	if restarts := waitRegistrarRecords(ctx, t, d, seq, 0); restarts != 0 {
		t.Errorf("the registrar's crash recorded %d kubelet restarts", restarts)
	}
	restarted, seq := time.Now(), d.rec.Log().LastSeq()
	if err := n.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{vfioPool, netPool}, restarted); err != nil {
		t.Fatalf("after a kubelet restart that followed the registrar's crash: %v", err)
	}
	for res, want := range map[string]int{vfioPool: 5, netPool: 3} {
		if _, err := n.kubelet.WaitDevices(ctx, res, func(ds []*pluginapi.Device) bool { return len(ds) == want }); err != nil {
			t.Errorf("the restarted kubelet does not list %s's %d devices: %v", res, want, err)
		}
	}
	if restarts := waitRegistrarRecords(ctx, t, d, seq, 1); restarts != 1 {
		t.Errorf("the ledger records %d kubelet restarts, want the one", restarts)
	}
}

// The kubelet's plugin watcher registers sockets concurrently, so a
// registration it began before the pool moved to a new socket can finish
// after the new one's: the kubelet's endpoint is then the retired socket,
// which it drops as soon as it sees that socket gone. The registrar takes
// the late acknowledgement as the kubelet's newest, and the pool registers
// again on a socket of its own; the kubelet lists its devices healthy.
func TestALateRegistrationOfARetiredSocketIsRenewed(t *testing.T) {
	held, release := make(chan string, 1), make(chan struct{})
	var holdOnce sync.Once
	kopts := kubelettest.Options{PluginWatcher: true, BeforeConnect: func(resource, socket string) {
		hold := false
		if resource == netPool {
			holdOnce.Do(func() { hold = true })
		}
		if hold {
			held <- socket
			<-release
		}
	}}
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kopts)
	n.opts.Registration = "watcher"
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the kubelet's
	d := n.start(t)
	ctx := supervisionCtx(t)
	var first string
	select {
	case first = <-held:
	case <-ctx.Done():
		t.Fatal("the kubelet never connected to the pool")
	}
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A restarted registrar has every pool serve on a new socket.
	d.system.Root.Send(kids.Registrar, &registrar.Crash{Reason: "test"})
	second, err := n.kubelet.WaitRegistered(ctx, netPool)
	if err != nil {
		t.Fatal(err)
	}
	if second.Endpoint == first {
		t.Fatalf("the held registration of %s was taken", first)
	}
	releaseOnce.Do(func() { close(release) })

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waitFor(wctx, t, "the pool registered on a third socket, its devices healthy", func() bool {
		regs := n.kubelet.Registrations()
		last := regs[len(regs)-1]
		for _, r := range regs {
			if r.Resource == netPool {
				last = r
			}
		}
		if last.Endpoint == first || last.Endpoint == second.Endpoint || !n.kubelet.Connected(netPool) {
			return false
		}
		healthy := 0
		for _, dev := range n.kubelet.Devices(netPool) {
			if dev.GetHealth() == pluginapi.Healthy {
				healthy++
			}
		}
		return healthy == 3 && poolStatus(t, ctx, d, kids.Pools[netPool]).Socket == last.Endpoint
	})
}

// A relative --kubelet-dir is the same directory as its absolute path:
// the plugin watcher reports, and a stream tells, the socket it came in on
// by its absolute path, which the registrar must know its pools' sockets by.
func TestARelativeKubeletDirRegisters(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{PluginWatcher: true})
	n.opts.Registration = "watcher"
	t.Chdir(filepath.Dir(n.opts.KubeletDir))
	n.opts.KubeletDir = filepath.Base(n.opts.KubeletDir)
	d := n.start(t)
	ctx := supervisionCtx(t)
	waitRegistrarRecords(ctx, t, d, 0, 0)
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sock := poolStatus(t, ctx, d, kids.Pools[netPool]).Socket; !filepath.IsAbs(sock) {
		t.Errorf("the pool serves on %s, want an absolute path", sock)
	}
}

// waitRegistrarRecords waits until the ledger holds, after seq, at least
// want KubeletRestarted events and a PluginRegistered of both pools after
// the last of them (the registrar records in order), and counts the
// KubeletRestarted events after seq.
func waitRegistrarRecords(ctx context.Context, t *testing.T, d *Daemon, seq uint64, want int) (restarts int) {
	t.Helper()
	waitFor(ctx, t, "the registrar's records of both pools", func() bool {
		registered := map[string]bool{}
		restarts = 0
		if err := d.rec.Log().Read(seq+1, func(e events.Envelope) error {
			switch p := e.Payload.(type) {
			case events.KubeletRestarted:
				restarts++
				clear(registered)
			case events.PluginRegistered:
				registered[p.Pool] = true
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return restarts >= want && registered[vfioPool] && registered[netPool]
	})
	return restarts
}

// Two reloads move a device to pool b and back to a while b restarts
// after a crash: a records its leave and its join before b, back, records
// its own join and leave. The fold still has the device in a, and a
// restart while the device is unbound (being rebound) keeps it there, as
// it keeps any unbound device in the pool the ledger says it is in.
func TestAMoveThereAndBackWhileAPoolRestartsKeepsTheDevicesPool(t *testing.T) {
	const a, b, m = "intel.com/a", "intel.com/b", "0000:3b:01.2"
	// Each pool takes m, and a device of its own; the first listed gets m.
	pools := map[string]string{
		"a": `{"resourceName": "a", "selectors": {"drivers": ["vfio-pci", "iavf"], "pciAddresses": ["0000:3b:01.2", "0000:3b:01.3"]}}`,
		"b": `{"resourceName": "b", "selectors": {"drivers": ["vfio-pci", "iavf"], "pciAddresses": ["0000:3b:01.2", "0000:3b:01.0"]}}`,
	}
	config := func(first, second string) string {
		return `{"resourceList": [` + pools[first] + `, ` + pools[second] + `]}`
	}
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, config("a", "b"), kubelettest.Options{})
	n.opts.WatchConfig = false
	d, ctx, kids := superviseNode(t, n, a)
	if _, err := n.kubelet.WaitRegistered(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitLedger(ctx, t, d, "m in a", func(s events.State) bool { return s.Devices[m].Pool == a })
	crash(d, kids.Pools[b], "test")
	for _, cfg := range []string{config("b", "a"), config("a", "b")} {
		if err := os.WriteFile(n.opts.ConfigPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if res, err := d.Reload(ctx, "test"); err != nil || !res.Applied {
			t.Fatalf("reload: %+v, %v", res, err)
		}
	}
	trips := func() (joins, leaves int) {
		t.Helper()
		if err := d.rec.Log().Read(0, func(e events.Envelope) error {
			if p, ok := e.Payload.(events.PoolMembershipChanged); ok && p.Pool == b {
				joins += len(slices.DeleteFunc(slices.Clone(p.Added), func(s string) bool { return s != m }))
				leaves += len(slices.DeleteFunc(slices.Clone(p.Removed), func(s string) bool { return s != m }))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return joins, leaves
	}
	s := waitLedger(ctx, t, d, "b recorded m's join and leave", func(s events.State) bool {
		joins, leaves := trips()
		return joins > 0 && joins == leaves && slices.Contains(s.Pools[a].Members, m)
	})
	if got := s.Devices[m].Pool; got != a {
		t.Errorf("after the trip the ledger has %s in pool %q, want %s", m, got, a)
	}

	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if err := n.roots.Unbind(m); err != nil {
		t.Fatal(err)
	}
	last := d.rec.Log().LastSeq()
	d = n.start(t)
	if _, err := n.kubelet.WaitRegistered(ctx, a); err != nil {
		t.Fatal(err)
	}
	s = waitLedger(ctx, t, d, "both pools serve again", func(s events.State) bool {
		return s.Pools[a].Registration.Serving && s.Pools[b].Registration.Serving
	})
	if err := d.rec.Log().Read(last+1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.PoolMembershipChanged); ok && slices.Contains(slices.Concat(p.Added, p.Removed), m) {
			t.Errorf("a restart with %s unbound recorded #%d: %s +%v -%v (%s)", m, e.Seq, p.Pool, p.Added, p.Removed, p.Reason)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.Pools[a].Members, m) {
		t.Errorf("after the restart %s is not in %s (it names pool %q)", m, a, s.Devices[m].Pool)
	}
}

// A restarted node starts from the ledger, which has every allocation
// recorded before it: a pool's AllocationRecorded still in its mailbox
// from before the crash changes nothing. (Folded again, the allocation
// it names, superseded since, held its device once more.)
func TestARestartedNodeIgnoresAnAllocationItReplayed(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	d, ctx, _ := superviseNode(t, n, vfioPool)
	devs, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatal(err)
	}
	dev := devs[0].ID
	for range 2 { // the second supersedes the first
		if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
			t.Fatal(err)
		}
	}
	var first events.Envelope
	if err := d.rec.Log().Read(1, func(e events.Envelope) error {
		if a, ok := e.Payload.(events.DevicesAllocated); ok && first.Seq == 0 && slices.Equal(a.DeviceIDs, []string{dev}) {
			first = e
		}
		return nil
	}); err != nil || first.Seq == 0 {
		t.Fatalf("the first allocation of %s: %v", dev, err)
	}
	want := ledgerState(t, d).Holders[dev]
	if len(want) != 1 || want[0] == first.Seq {
		t.Fatalf("the ledger's holders of %s: %v; want the second allocation only", dev, want)
	}
	crashed := time.Now()
	d.Send(&node.Crash{Reason: "test"})
	d.Send(&pool.AllocationRecorded{Pool: vfioPool, Event: first})
	if _, err := n.kubelet.RegisteredAfter(ctx, []string{vfioPool, netPool}, crashed); err != nil {
		t.Fatal(err)
	}
	res, err := d.Ask(ctx, d.node, &node.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(*node.Status).Holds[dev]; !slices.Equal(got, want) {
		t.Errorf("after the crash the node holds %s by %v, the ledger by %v", dev, got, want)
	}
}

// An Allocate whose events the disk holds, once their commit has begun,
// past the call's grace: the kubelet hears DeadlineExceeded, and once the
// allocation lands its pool releases it. Every actor (pool, node,
// reconciler) then agrees with the ledger, where it is not live.
func TestAnAllocateThatLandsAfterTheKubeletGaveUpIsReleasedEverywhere(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	n.opts.CallTimeout = time.Second
	d, ctx, kids := superviseNode(t, n, vfioPool)
	devs, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatal(err)
	}
	dev := devs[0].ID
	free := func() int {
		res, err := d.Ask(ctx, kids.Pools[vfioPool], &pool.Query{})
		if err != nil {
			t.Fatal(err)
		}
		return res.(*pool.Status).Free
	}
	log := d.rec.Log()
	// The writer is held while the Allocate's events queue; a second
	// hold, queued behind them, holds the batch that begins their commit.
	first := holdWriter(ctx, t, log)
	wasFree := free()
	allocated := make(chan error, 1)
	go func() {
		_, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev})
		allocated <- err
	}()
	waitFor(ctx, t, "the Allocate in flight", func() bool { return free() < wasFree })
	held, second := queueHold(ctx, t, log, log.LastSeq(), func(e events.Envelope) bool { return e.Type == events.TypeDevicesAllocated })
	first()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the Allocate's events were not committed in the batch held")
	}
	if err := <-allocated; status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("an Allocate whose commit the disk held past its grace: %v, want DeadlineExceeded", err)
	}
	second()
	waitFor(ctx, t, "the pool's release of the allocation", func() bool {
		released := false
		if err := log.Read(1, func(e events.Envelope) error {
			if r, ok := e.Payload.(events.DevicesReleased); ok && slices.Equal(r.DeviceIDs, []string{dev}) {
				released = true
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return released
	})
	if held := ledgerState(t, d).Holders[dev]; len(held) > 0 {
		t.Errorf("the ledger's holders of %s: %v, want none", dev, held)
	}
	if diff := converge(t, n, d, []string{vfioPool, netPool}, 5*time.Second); diff != "" {
		t.Errorf("after the pool released an allocation the kubelet gave up on, live state differs from the fold of the ledger:\n%s", diff)
	}
}
