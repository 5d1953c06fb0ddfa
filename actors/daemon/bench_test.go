package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/benchbaseline"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// Comparative benchmarks of the daemon (issue 4, "Speed"). Each measures
// the daemon and its baselines in the same run, in interleaved rounds (the
// order of the sides rotating from round to round), so that a disk or a
// scheduler that slows down for a while slows both; ratios are medians over
// rounds, so that one stalled round does not decide. Every benchmark runs a
// fixed minimum of operations whatever b.N says: `-benchtime 1x` measures
// something useful too.

// benchNode is a daemon's node for benchmarks: a fake sysfs tree (in
// memory, as sysfs is), a device-info dir in memory (as /var/run is), a
// kubelet stand-in and the daemon's options, logging at info level to
// nowhere (the log lines are formatted, as on a node).
type benchNode struct {
	roots   sysfsgen.Roots
	kubelet *kubelettest.Kubelet
	opts    Options
}

func newBenchNode(tb testing.TB, tree sysfsgen.Node, cfg string) *benchNode {
	tb.Helper()
	roots, err := sysfsgen.Build(benchbaseline.MemTempDir(tb), tree)
	if err != nil {
		tb.Fatal(err)
	}
	dir := kubelettest.ShortTempDir(tb)
	k := kubelettest.Start(tb, dir, kubelettest.Options{})
	cfgPath := filepath.Join(tb.TempDir(), "config.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	return &benchNode{roots: roots, kubelet: k, opts: Options{
		ConfigPath: cfgPath, SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, ProcRoot: roots.Proc,
		PCIIDsPath: filepath.Join(tb.TempDir(), "none"), KubeletDir: dir, StateDir: tb.TempDir(),
		DevinfoDir: filepath.Join(benchbaseline.MemTempDir(tb), "devinfo"), CDISpecDir: "-", Registration: "legacy", Version: "bench",
		Node: "bench-node", Logger: zerolog.New(io.Discard).Level(zerolog.InfoLevel),
	}}
}

// start starts the daemon and waits until every pool is registered.
func (n *benchNode) start(tb testing.TB, pools ...string) *Daemon {
	tb.Helper()
	d, err := Start(n.opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Stop(context.Background(), "benchmark over") })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.kubelet.RegisteredAfter(ctx, pools, time.Time{}); err != nil {
		tb.Fatal(err)
	}
	settle(tb, d)
	return d
}

// settle waits until the daemon's actors have handled what they had in
// their mailboxes (the first scan, the first health probe of every device),
// so that a measurement starts from a daemon at rest: an actor answers
// Touch only after the messages before it, and one that persists through a
// ledger.Persister answers Quiet only once what it persisted is applied
// (it answers Touch while it waits for the fsync).
func settle(tb testing.TB, d *Daemon) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kids, err := d.Children(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for _, pid := range []*actor.PID{kids.Scanner, kids.Health, kids.Reconciler, d.node} {
		// One that stops meanwhile (a node crash) drops its Quiet; a
		// restarted one answers it.
		q := &ledger.Quiet{Done: make(chan struct{})}
		d.system.Root.Send(pid, q)
		select {
		case <-q.Done:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			tb.Fatalf("settle %s: %v", pid.Id, ctx.Err())
		}
	}
	pids := []*actor.PID{kids.Scanner, kids.Health, kids.Registrar, kids.Sockets}
	for _, pid := range kids.Pools {
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		for {
			// A pool may stop meanwhile (withdrawn, or crashed and
			// restarting): a Touch it never takes is answered by a dead
			// letter or not at all. Gone from the children, it has
			// nothing left to settle.
			ask, cancelAsk := context.WithTimeout(ctx, 2*time.Second)
			_, err := d.Ask(ask, pid, &actor.Touch{})
			cancelAsk()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				tb.Fatalf("settle %s: %v", pid.Id, err)
			}
			now, cerr := d.Children(ctx)
			if cerr != nil {
				tb.Fatal(cerr)
			}
			pool := slices.ContainsFunc(slices.Collect(maps.Values(kids.Pools)), pid.Equal)
			if pool && !slices.ContainsFunc(slices.Collect(maps.Values(now.Pools)), pid.Equal) {
				break
			}
		}
	}
}

// waitReady waits until the daemon's registrar holds every pool registered
// with the current kubelet: its Register calls have all been answered.
func waitReady(tb testing.TB, d *Daemon) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !d.Ready(ctx) {
		if ctx.Err() != nil {
			tb.Fatal("the daemon's pools are not all registered after 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

// dialPlugin is a client of a DevicePlugin socket, as the kubelet dials it.
func dialPlugin(tb testing.TB, socket string) pluginapi.DevicePluginClient {
	tb.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func allocateOne(ctx context.Context, c pluginapi.DevicePluginClient, id string) (*pluginapi.AllocateResponse, error) {
	return c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
}

// percentile is the q-quantile (0..1) of ds, which it sorts.
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// allocBenchNode is a node with 16 PFs of 255 VFs each, all bound to
// vfio-pci, each VF in an IOMMU group of its own: a pool of 4,080 devices,
// more than the 3,301 Allocates of `-benchtime 1x`, so that no device is
// handed out twice and no AllocationConflict is recorded (longer runs go
// round the pool again and do; the metric "conflicts" counts them).
func allocBenchNode() sysfsgen.Node {
	var n sysfsgen.Node
	group := 100
	for p := range 16 {
		pf := sysfsgen.Function{
			Address: fmt.Sprintf("0000:%02x:00.0", 0x20+4*p), Vendor: "8086", Device: "1592", Class: "020000",
			Driver: "ice", NUMANode: p / 4, IOMMUGroup: strconv.Itoa(group),
			TotalVFs: 256, VFOffset: 8, VFStride: 1, VFDevice: "1889",
			Interfaces: []sysfsgen.Interface{{Name: fmt.Sprintf("ens%df0", p+1)}},
		}
		for range 255 {
			group++
			pf.VFs = append(pf.VFs, sysfsgen.Function{Driver: "vfio-pci", IOMMUGroup: strconv.Itoa(group)})
		}
		group++
		n.Functions = append(n.Functions, pf)
	}
	n.VFIO = true
	return n
}

// allocBenchConfig is one vfio pool of every VF. genericPCI writes no
// device-info file: the path measured is gRPC, the pool actor and the
// ledger.
const allocBenchConfig = `{"resourceList": [{"resourceName": "vf", "resourcePrefix": "bench.devledger.io",
  "deviceType": "genericPCI", "selectors": [{"vendors": ["8086"], "devices": ["1889"]}]}]}`

const allocBenchPool = "bench.devledger.io/vf"

// BenchmarkAllocateE2E: Allocate of one device by a gRPC client over the
// pool's unix socket, answered once DevicesAllocated is durable in the
// ledger. Baselines: a bare gRPC DevicePlugin server answering from memory
// over a unix socket, and a bare bbolt Update (with its fsyncs) putting the
// bytes of the DevicesAllocated record. The concurrent speedup's baseline
// is the two joined: a bare server whose Allocate appends the record
// through one writer that commits whatever is queued in one Update
// (storetest.BareGroup), the least a group-committing plugin does. Each
// round runs, in rotating order, a run of sequential Allocates, as many
// bare gRPC calls, bare Updates and calls to the joined baseline, then
// runs of Allocates from 8 concurrent clients to ours and to it.
//
//	x-baseline          median over rounds of ours p50 / (gRPC p50 + Update p50); target <= 1.3
//	p99-x-baseline      ours p99 / (gRPC p99 + Update p99), over all samples
//	concurrent-speedup  median over rounds of 8-client throughput / sequential throughput; target >= 4
//	bare-concurrent-speedup  the same for the joined baseline
//	speedup-x-bare      median over rounds of ours speedup / its speedup
//	concurrent-events/commit  how many Allocates shared a ledger commit with 8 clients (bare-: its commits)
func BenchmarkAllocateE2E(b *testing.B) {
	const (
		rounds       = 15
		clients      = 8
		perClientOps = 25
	)
	seqPerRound := max(b.N/rounds, 20)
	n := newBenchNode(b, allocBenchNode(), allocBenchConfig)
	d := n.start(b, allocBenchPool)
	ctx := context.Background()
	devs, err := n.kubelet.WaitDevices(ctx, allocBenchPool, func(ds []*pluginapi.Device) bool { return len(ds) > 0 })
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, len(devs))
	for i, dv := range devs {
		ids[i] = dv.ID
	}
	var next atomic.Int64
	nextID := func() string { return ids[int(next.Add(1)-1)%len(ids)] }

	reg, err := n.kubelet.WaitRegistered(ctx, allocBenchPool)
	if err != nil {
		b.Fatal(err)
	}
	socket := reg.Endpoint
	ours := dialPlugin(b, socket)
	conc := make([]pluginapi.DevicePluginClient, clients)
	for i := range conc {
		conc[i] = dialPlugin(b, socket)
	}

	// Warm up, and take the answer and the ledger record of one real
	// Allocate for the baselines, so that they move the same bytes.
	seq0 := d.rec.Log().LastSeq()
	answer, err := allocateOne(ctx, ours, nextID())
	if err != nil {
		b.Fatal(err)
	}
	var record []byte
	if err := d.rec.Log().ReadRaw(seq0+1, func(seq uint64, rec []byte) error {
		if e, err := events.Unmarshal(rec); err == nil && e.Type == events.TypeDevicesAllocated && record == nil {
			record = slices.Clone(rec)
		}
		return nil
	}); err != nil || record == nil {
		b.Fatalf("no DevicesAllocated record after seq %d: %v", seq0, err)
	}
	bare, err := benchbaseline.Serve(filepath.Join(kubelettest.ShortTempDir(b), "bare.sock"),
		&benchbaseline.DevicePlugin{Answer: answer.ContainerResponses[0]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(bare.Stop)
	bareClient := dialPlugin(b, bare.Path())
	updater := storetest.NewBareUpdater(b, b.TempDir())
	group := storetest.NewBareGroup(b, b.TempDir())
	joined, err := benchbaseline.Serve(filepath.Join(kubelettest.ShortTempDir(b), "joined.sock"),
		&benchbaseline.DevicePlugin{Answer: answer.ContainerResponses[0], Commit: func() error { return group.Append(record) }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(joined.Stop)
	joinedClient := dialPlugin(b, joined.Path())
	joinedConc := make([]pluginapi.DevicePluginClient, clients)
	for i := range joinedConc {
		joinedConc[i] = dialPlugin(b, joined.Path())
	}
	var key uint64
	for range 5 {
		if _, err := allocateOne(ctx, bareClient, ids[0]); err != nil {
			b.Fatal(err)
		}
		key++
		if err := updater.Put(binary.BigEndian.AppendUint64(nil, key), record); err != nil {
			b.Fatal(err)
		}
		if _, err := allocateOne(ctx, joinedClient, ids[0]); err != nil {
			b.Fatal(err)
		}
	}

	// Sequential sides alternate operation by operation, so that each
	// sees the same disk and the same cold scheduler: a gRPC call that
	// follows an fsync wait costs more than one of a hot loop of calls, and
	// ours always follows one.
	seqOps := []func(*[]time.Duration) error{
		func(o *[]time.Duration) error {
			start := time.Now()
			_, err := allocateOne(ctx, ours, nextID())
			*o = append(*o, time.Since(start))
			return err
		},
		func(g *[]time.Duration) error {
			start := time.Now()
			_, err := allocateOne(ctx, bareClient, ids[0])
			*g = append(*g, time.Since(start))
			return err
		},
		func(p *[]time.Duration) error {
			key++
			k := binary.BigEndian.AppendUint64(nil, key)
			start := time.Now()
			err := updater.Put(k, record)
			*p = append(*p, time.Since(start))
			return err
		},
		func(j *[]time.Duration) error {
			start := time.Now()
			_, err := allocateOne(ctx, joinedClient, ids[0])
			*j = append(*j, time.Since(start))
			return err
		},
	}
	var concEvents, concCommits uint64
	concurrent := func(cs []pluginapi.DevicePluginClient, id func() string) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for _, c := range cs {
			wg.Go(func() {
				for range perClientOps {
					if _, err := allocateOne(ctx, c, id()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	oursConcurrent := func() time.Duration {
		seq, commits := d.rec.Log().LastSeq(), d.rec.Log().Commits()
		defer func() {
			concEvents += d.rec.Log().LastSeq() - seq
			concCommits += d.rec.Log().Commits() - commits
		}()
		return concurrent(conc, nextID)
	}
	var joinedAppends, joinedCommits int
	joinedConcurrent := func() time.Duration {
		commits, appends := group.Batches()
		defer func() {
			c, a := group.Batches()
			joinedCommits, joinedAppends = joinedCommits+c-commits, joinedAppends+a-appends
		}()
		return concurrent(joinedConc, func() string { return ids[0] })
	}
	throughput := func(ops int, wall time.Duration) float64 { return float64(ops) / wall.Seconds() }
	sum := func(ds []time.Duration) (t time.Duration) {
		for _, x := range ds {
			t += x
		}
		return t
	}
	var allOurs, allGRPC, allPut []time.Duration
	var ratios, speedups, bareSpeedups, speedupRatios []float64
	b.ResetTimer()
	for r := range rounds {
		samples := make([][]time.Duration, len(seqOps))
		var concWall, joinedWall time.Duration
		if r%2 == 1 {
			concWall, joinedWall = oursConcurrent(), joinedConcurrent()
		}
		for k := range seqPerRound {
			for i := range seqOps {
				j := (i + k + r) % len(seqOps)
				if err := seqOps[j](&samples[j]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if r%2 == 0 {
			joinedWall, concWall = joinedConcurrent(), oursConcurrent()
		}
		o, g, p, j := samples[0], samples[1], samples[2], samples[3]
		ratios = append(ratios, float64(percentile(o, 0.5))/float64(percentile(g, 0.5)+percentile(p, 0.5)))
		speedup := throughput(clients*perClientOps, concWall) / throughput(len(o), sum(o))
		bareSpeedup := throughput(clients*perClientOps, joinedWall) / throughput(len(j), sum(j))
		speedups, bareSpeedups = append(speedups, speedup), append(bareSpeedups, bareSpeedup)
		speedupRatios = append(speedupRatios, speedup/bareSpeedup)
		allOurs, allGRPC, allPut = append(allOurs, o...), append(allGRPC, g...), append(allPut, p...)
	}
	b.StopTimer()

	oursP50, gP50, pP50 := percentile(allOurs, 0.5), percentile(allGRPC, 0.5), percentile(allPut, 0.5)
	oursP99, gP99, pP99 := percentile(allOurs, 0.99), percentile(allGRPC, 0.99), percentile(allPut, 0.99)
	b.ReportMetric(float64(oursP50), "ours-p50-ns")
	b.ReportMetric(float64(oursP99), "ours-p99-ns")
	b.ReportMetric(float64(gP50), "grpc-p50-ns")
	b.ReportMetric(float64(pP50), "fsync-p50-ns")
	b.ReportMetric(float64(gP50+pP50), "baseline-p50-ns")
	b.ReportMetric(float64(gP99+pP99), "baseline-p99-ns")
	b.ReportMetric(median(ratios), "x-baseline")
	b.ReportMetric(float64(oursP99)/float64(gP99+pP99), "p99-x-baseline")
	b.ReportMetric(median(speedups), "concurrent-speedup")
	b.ReportMetric(median(bareSpeedups), "bare-concurrent-speedup")
	b.ReportMetric(median(speedupRatios), "speedup-x-bare")
	b.ReportMetric(float64(concEvents)/float64(concCommits), "concurrent-events/commit")
	b.ReportMetric(float64(joinedAppends)/float64(joinedCommits), "bare-concurrent-events/commit")
	conflicts := 0
	if err := d.rec.Log().Read(seq0, func(e events.Envelope) error {
		if e.Type == events.TypeAllocationConflict {
			conflicts++
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(conflicts), "conflicts")
	b.ReportMetric(0, "ns/op")
}

// largeConfig is the large tree's config of the scan tests: four pools
// (two vfio pools split by NUMA node, an iavf netDevice pool, the vfio
// GPUs). It returns the file's content and the pools' resource names.
func largeConfig(tb testing.TB) (string, []string) {
	tb.Helper()
	path := filepath.Join("..", "..", "testdata", "config", "scan", "large.json")
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		tb.Fatal(err)
	}
	var pools []string
	for _, r := range cfg.Resources {
		pools = append(pools, r.FullName())
	}
	return string(data), pools
}

// restartRegistered restarts the stand-in and returns the time from its new
// kubelet.sock to the last of pools registered again.
func restartRegistered(tb testing.TB, k *kubelettest.Kubelet, pools []string) time.Duration {
	tb.Helper()
	if err := k.Restart(); err != nil {
		tb.Fatal(err)
	}
	since := k.BootedAt()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	regs, err := k.RegisteredAfter(ctx, pools, since)
	if err != nil {
		tb.Fatal(err)
	}
	var last time.Time
	for _, r := range regs {
		if r.At.After(last) {
			last = r.At
		}
	}
	return last.Sub(since)
}

// BenchmarkKubeletRestart: from the stand-in's new kubelet.sock (a kubelet
// restart, which deletes the pools' sockets first) to every pool of the
// large tree's config registered again. Baseline: a bare fsnotify watcher
// that re-creates each pool's socket (a bare DevicePlugin server behind it)
// and calls Register for all pools at once, the moment kubelet.sock
// appears, against a stand-in of its own. Rounds alternate which side
// restarts first.
//
//	x-baseline  median over rounds of ours / baseline; target <= 2
func BenchmarkKubeletRestart(b *testing.B) {
	rounds := max(b.N, 25)
	cfg, pools := largeConfig(b)
	tree, err := sysfsgen.Scenario(sysfsgen.ScenarioLarge)
	if err != nil {
		b.Fatal(err)
	}
	n := newBenchNode(b, tree, cfg)
	d := n.start(b, pools...)

	kb := kubelettest.Start(b, "", kubelettest.Options{})
	var base []benchbaseline.Pool
	for _, res := range pools {
		srv, err := benchbaseline.Serve(filepath.Join(kb.DevicePluginDir(), pool.SocketBase(res)+".sock"), &benchbaseline.DevicePlugin{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Stop)
		base = append(base, benchbaseline.Pool{Resource: res, Server: srv})
	}
	reregistered := make(chan error, 1)
	rr, err := benchbaseline.WatchAndReregister(kb.RegistrationSocket(), base, func(err error) { reregistered <- err })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := benchbaseline.RegisterAll(ctx, kb.RegistrationSocket(), base); err != nil {
		b.Fatal(err)
	}

	var ours, baseline []time.Duration
	var ratios []float64
	b.ResetTimer()
	for r := range rounds {
		var o, g time.Duration
		if r%2 == 0 {
			o = restartRegistered(b, n.kubelet, pools)
			g = restartRegistered(b, kb, pools)
		} else {
			g = restartRegistered(b, kb, pools)
			o = restartRegistered(b, n.kubelet, pools)
		}
		// Both sides must be done with this restart before the next: a
		// Register still waiting for its answer would fail when the
		// stand-in restarts again (the stand-in counts a pool registered
		// before it answers).
		b.StopTimer()
		if err := <-reregistered; err != nil {
			b.Fatalf("baseline re-registration: %v", err)
		}
		waitReady(b, d)
		settle(b, d)
		b.StartTimer()
		ours, baseline = append(ours, o), append(baseline, g)
		ratios = append(ratios, float64(o)/float64(g))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(ours, 0.5)), "ours-p50-ms")
	b.ReportMetric(ms(percentile(ours, 1)), "ours-max-ms")
	b.ReportMetric(ms(percentile(baseline, 0.5)), "baseline-p50-ms")
	b.ReportMetric(median(ratios), "x-baseline")
	b.ReportMetric(0, "ns/op")
}
