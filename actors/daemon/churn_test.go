package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/actors/reconciler"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// The two vfio pools of the large tree's config (largeConfig), 448
// devices between them.
const (
	churnPool0 = "intel.com/intel_sriov_dpdk_numa0"
	churnPool1 = "intel.com/intel_sriov_dpdk_numa1"
)

// churnPod is a pod holding one device of one pool.
type churnPod struct{ name, pool, device string }

// churn is a CI or batch node: short pods, each given a device and gone a
// few pods later, with alive pods listed at once. Each cycle Allocates a
// device for a new pod, lists it in PodResources and in the kubelet's
// checkpoint, drops the oldest pod once more than alive are listed, and
// has the reconciler take one round.
type churn struct {
	tb      testing.TB
	ctx     context.Context
	d       *Daemon
	kubelet *kubelettest.Kubelet
	alive   int
	free    []churnPod // devices no pod holds, in the order they are given out
	live    []churnPod // oldest first
	cycles  int
}

func newChurn(ctx context.Context, tb testing.TB, d *Daemon, k *kubelettest.Kubelet, alive int) *churn {
	tb.Helper()
	c := &churn{tb: tb, ctx: ctx, d: d, kubelet: k, alive: alive}
	st := ledgerState(tb, d)
	m0, m1 := st.Pools[churnPool0].Members, st.Pools[churnPool1].Members
	for i := range max(len(m0), len(m1)) {
		if i < len(m0) {
			c.free = append(c.free, churnPod{pool: churnPool0, device: m0[i]})
		}
		if i < len(m1) {
			c.free = append(c.free, churnPod{pool: churnPool1, device: m1[i]})
		}
	}
	if len(c.free) <= alive {
		tb.Fatalf("%d devices for %d pods alive and one more", len(c.free), alive)
	}
	return c
}

func (c *churn) cycle() {
	c.tb.Helper()
	p := c.free[0]
	c.free = c.free[1:]
	if _, err := c.kubelet.Allocate(c.ctx, p.pool, []string{p.device}); err != nil {
		c.tb.Fatal(err)
	}
	p.name = fmt.Sprint("job-", c.cycles)
	c.cycles++
	c.live = append(c.live, p)
	if len(c.live) > c.alive {
		c.free = append(c.free, c.live[0])
		c.live = c.live[1:]
	}
	pods := make([]*podresourcesapi.PodResources, 0, len(c.live))
	entries := make([]kubelettest.CheckpointEntry, 0, len(c.live))
	for _, p := range c.live {
		pods = append(pods, kubelettest.PodHolding("ci", p.name, "build", p.pool, p.device))
		entries = append(entries, kubelettest.CheckpointEntry{PodUID: "uid-" + p.name, Container: "build", Resource: p.pool, DeviceIDs: []string{p.device}})
	}
	c.kubelet.SetCheckpointEntries(entries...)
	c.kubelet.SetPods(pods)
	reconcileNow(c.ctx, c.tb, c.d)
}

// churnHeld is what the actors hold of allocations.
type churnHeld struct{ reconciled, nodeHolds, poolHolds int }

func churnMeasure(ctx context.Context, tb testing.TB, d *Daemon) churnHeld {
	tb.Helper()
	kids, err := d.Children(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var h churnHeld
	res, err := d.Ask(ctx, kids.Reconciler, &reconciler.Query{})
	if err != nil {
		tb.Fatal(err)
	}
	h.reconciled = len(res.(*reconciler.Status).Allocations)
	if res, err = d.Ask(ctx, d.node, &node.Query{}); err != nil {
		tb.Fatal(err)
	}
	h.nodeHolds = len(res.(*node.Status).Holds)
	for _, p := range []string{churnPool0, churnPool1} {
		h.poolHolds += len(poolStatus(tb, ctx, d, kids.Pools[p]).Held)
	}
	return h
}

// lineCounter counts the log lines written to it.
type lineCounter struct{ lines atomic.Int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	return len(p), nil
}

// startChurnNode starts a daemon on the large tree, logging to lines,
// with snapshots and size retention quick enough for a short run.
func startChurnNode(t *testing.T, lines *lineCounter) (*testNode, *Daemon) {
	t.Helper()
	cfg, _ := largeConfig(t)
	n := newTestNode(t, sysfsgen.ScenarioLarge, cfg, kubelettest.Options{})
	n.opts.Logger = zerolog.New(lines).Level(zerolog.InfoLevel)
	n.opts.ScanInterval, n.opts.ProbeInterval = time.Hour, time.Hour
	n.opts.ReconcileInterval, n.opts.LeakGrace = time.Hour, time.Hour
	n.opts.SnapshotEvery, n.opts.SnapshotCheck = 300, 20*time.Millisecond
	n.opts.RetainBytes = 64 << 10
	d := n.start(t)
	return n, d
}

// A node under churn: pods come and go, many alive at once, for weeks.
// Every cycle records the same few events and log lines, whatever came
// before it; what the actors hold follows the pods alive, not the pods
// there were; and retention keeps the ledger to its bound.
func TestChurnStaysBounded(t *testing.T) {
	lines := &lineCounter{}
	n, d := startChurnNode(t, lines)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range []string{churnPool0, churnPool1} {
		if _, err := n.kubelet.WaitRegistered(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	const alive, warm, cycles = 60, 90, 240
	c := newChurn(ctx, t, d, n.kubelet, alive)
	for range warm {
		c.cycle()
	}
	before := churnMeasure(ctx, t, d)
	want := churnHeld{reconciled: alive, nodeHolds: alive, poolHolds: alive}
	if before != want {
		t.Fatalf("with %d pods alive the actors hold %+v, want %+v", alive, before, want)
	}
	seq0, lines0 := d.ledger.LastSeq(), lines.lines.Load()
	for range cycles {
		c.cycle()
	}
	if after := churnMeasure(ctx, t, d); after != want {
		t.Errorf("after %d more cycles the actors hold %+v, want %+v", cycles, after, want)
	}
	// Allocated, bound, released; and the snapshots and retention that
	// the store records, a few for hundreds of cycles.
	events, logged := d.ledger.LastSeq()-seq0, lines.lines.Load()-lines0
	if perCycle := float64(events) / cycles; perCycle > 3.1 {
		t.Errorf("%d cycles recorded %d events, %.2f a cycle, want 3", cycles, events, perCycle)
	}
	if perCycle := float64(logged) / cycles; perCycle > 3.1 {
		t.Errorf("%d cycles logged %d lines, %.2f a cycle, want 3", cycles, logged, perCycle)
	}
	// Retention drops what a snapshot holds as the ledger passes its
	// bound: what is kept stays within a snapshot interval or two of it.
	waitFor(ctx, t, "retention to drop events", func() bool { return d.ledger.FirstSeq() > seq0 })
	if kept := d.ledger.LastSeq() - d.ledger.FirstSeq(); kept > 3*n.opts.SnapshotEvery {
		t.Errorf("the ledger keeps %d events, past its bound by more than two snapshot intervals (%d)", kept, n.opts.SnapshotEvery)
	}
}

// BenchmarkChurnCycle: one cycle of a CI node's churn (an Allocate, the
// pod listed, the oldest pod gone, a reconciler round that reads
// PodResources and the kubelet's checkpoint), with 10, 100 and 400 pods
// alive. It reports what a cycle costs the process (CPU, heap allocated,
// both sides of the stand-in kubelet included), the ledger's bytes and
// the log lines it writes, to show that they follow the pods alive and
// not the cycles before (run it with -benchtime 2000x and 8000x).
func BenchmarkChurnCycle(b *testing.B) {
	for _, alive := range []int{10, 100, 400} {
		b.Run(fmt.Sprint("alive=", alive), func(b *testing.B) { benchChurn(b, alive) })
	}
}

func benchChurn(b *testing.B, alive int) {
	cfg, _ := largeConfig(b)
	tree, err := sysfsgen.Scenario(sysfsgen.ScenarioLarge)
	if err != nil {
		b.Fatal(err)
	}
	n := newBenchNode(b, tree, cfg)
	lines := &lineCounter{}
	n.opts.Logger = zerolog.New(lines).Level(zerolog.InfoLevel)
	n.opts.ScanInterval, n.opts.ProbeInterval = time.Hour, time.Hour
	n.opts.ReconcileInterval, n.opts.LeakGrace = time.Hour, time.Hour
	d := n.start(b, churnPool0, churnPool1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c := newChurn(ctx, b, d, n.kubelet, alive)
	for range alive {
		c.cycle()
	}
	seq0, lines0, cpu0 := d.ledger.LastSeq(), lines.lines.Load(), processCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c.cycle()
	}
	b.StopTimer()
	var ledgerBytes int64
	if err := d.ledger.ReadRaw(seq0+1, func(_ uint64, rec []byte) error {
		ledgerBytes += int64(len(rec))
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	cycles := float64(b.N)
	b.ReportMetric(float64(processCPU(b)-cpu0)/cycles, "cpu-ns/cycle")
	b.ReportMetric(float64(ledgerBytes)/cycles, "ledger-B/cycle")
	b.ReportMetric(float64(lines.lines.Load()-lines0)/cycles, "log-lines/cycle")
}

// processCPU is the CPU time the process has used, from /proc.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		tb.Skip("no /proc/self/stat:", err)
	}
	// Fields 14 and 15 (utime, stime, in clock ticks) follow the
	// command's closing parenthesis.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		var v int64
		fmt.Sscan(s, &v)
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / 100)
}
