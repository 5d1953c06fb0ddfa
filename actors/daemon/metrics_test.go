package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyz waits for the daemon serving metrics at base to say it is
// ready.
func waitReadyz(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	waitReadyzSays(t, ctx, base, http.StatusOK, "ok")
}

// readyWithMetrics starts a daemon on the SR-IOV node with cfg, serving
// its metrics, and waits until /readyz says ok; base is the metrics URL.
func readyWithMetrics(t *testing.T, cfg string) (d *Daemon, ctx context.Context, base string) {
	t.Helper()
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, cfg, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	d = n.start(t)
	ctx = waitCtx(t)
	base = "http://" + d.metricsAddr
	waitReadyz(t, ctx, base)
	return d, ctx, base
}

// sendMetricsRequest opens a connection to d's metrics server and writes
// req on it, byte for byte; the connection is closed when the test ends.
func sendMetricsRequest(t *testing.T, d *Daemon, req string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", d.metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A client that keeps its connection open after a request and sends no
// other is cut off once the idle timeout passes: on the host network,
// connections left open would hold the daemon's file descriptors.
func TestMetricsServerClosesIdleConnections(t *testing.T) {
	defer func(was time.Duration) { metricsIdleTimeout = was }(metricsIdleTimeout)
	metricsIdleTimeout = 200 * time.Millisecond
	d, _, _ := readyWithMetrics(t, sriovConfig)
	conn := sendMetricsRequest(t, d, "GET /healthz HTTP/1.1\r\nHost: devledger\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz = %d, close %v: want 200 on a kept connection", resp.StatusCode, resp.Close)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("reading an idle kept-alive connection: %v, want EOF (closed by the server)", err)
	}
}

// A request that announces a body and never sends it is cut off once the
// read timeout passes: the server reads a body the handler left unread
// before it answers, and without a bound it would wait for good, holding
// a connection and its buffers for each such client on the host network.
func TestMetricsServerCutsOffABodyThatNeverComes(t *testing.T) {
	defer func(was time.Duration) { metricsReadTimeout = was }(metricsReadTimeout)
	metricsReadTimeout = 200 * time.Millisecond
	d, _, _ := readyWithMetrics(t, sriovConfig)
	conn := sendMetricsRequest(t, d, "GET /healthz HTTP/1.1\r\nHost: devledger\r\nContent-Length: 64\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("reading the answer to a request whose body never comes: %v, want one, then the connection closed", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("after the answer: %v, want EOF (closed by the server)", err)
	}
}

// A request whose header is far larger than a scraper's is refused (431)
// before the server buffers it: the port is open on the host network.
// net/http reads 4 KiB past MaxHeaderBytes before it refuses, so the
// bound docs/operations.md gives is 12 KiB: a header just under it is
// served, one just over it refused.
func TestMetricsServerRefusesAHugeHeader(t *testing.T) {
	d, _, _ := readyWithMetrics(t, sriovConfig)
	for _, tc := range []struct {
		name string
		pad  int
		want int
	}{
		{"under 12 KiB", 11 << 10, http.StatusOK},
		{"over 12 KiB", 13 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"64 KiB", 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", d.metricsAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			req := "GET /healthz HTTP/1.1\r\nHost: devledger\r\nX-Pad: " + strings.Repeat("a", tc.pad) + "\r\n\r\n"
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("/healthz with a %d-byte header = %d, want %d", tc.pad, resp.StatusCode, tc.want)
			}
		})
	}
}

func TestMetricsHealthAndReadiness(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{Delayed: true})
	n.opts.MetricsAddr = "127.0.0.1:0"
	n.opts.WatchConfig = false // the test reloads itself
	d := n.start(t)
	ctx := waitCtx(t)
	base := "http://" + d.metricsAddr

	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}
	// No kubelet yet: nothing is registered, so not ready, and /readyz
	// names every pool that waits, not the first alone.
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") ||
		!strings.Contains(body, "intel.com/sriov_vfio") || !strings.Contains(body, "intel.com/sriov_net") {
		t.Errorf("/readyz without a kubelet = %d %q, want 503 naming both pools", code, body)
	}
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`devledger_pool_registered{pool="intel.com/sriov_vfio"} 0`,
		`devledger_pool_registered{pool="intel.com/sriov_net"} 0`,
		`devledger_config_last_reload_successful 1`,
		`devledger_config_last_reload_timestamp_seconds 1.`,
		`devledger_ledger_append_failures_total 0`,
		`devledger_ledger_append_failing 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics of a fresh daemon lacks %q", want)
		}
	}
	if err := n.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, ctx, base)
	if _, err := n.kubelet.Allocate(context.Background(), "intel.com/sriov_vfio", []string{"0000:3b:01.2"}); err != nil {
		t.Fatal(err)
	}
	// Registration is acknowledged before its PluginRegistered is in the
	// ledger (the registrar writes after the pool's PluginServing), and
	// the counter follows the ledger: wait for it.
	for {
		_, body = httpGet(t, base+"/metrics")
		if strings.Contains(body, `devledger_registrations_total{pool="intel.com/sriov_net"} 1`) &&
			strings.Contains(body, `devledger_registrations_total{pool="intel.com/sriov_vfio"} 1`) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("registrations never counted: %v\n%s", ctx.Err(), body)
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, want := range []string{
		`devledger_allocations_total{pool="intel.com/sriov_vfio"} 1`,
		`devledger_pool_devices{health="healthy",pool="intel.com/sriov_vfio"} 5`,
		`devledger_pool_devices{health="unhealthy",pool="intel.com/sriov_vfio"} 0`,
		`devledger_registrations_total{pool="intel.com/sriov_net"} 1`,
		`devledger_allocate_duration_seconds_count{code="OK",pool="intel.com/sriov_vfio"} 1`,
		`devledger_ledger_sequence `,
		`devledger_ledger_size_bytes `,
		`devledger_build_info{goversion="` + runtime.Version() + `",version="test"} 1`,
		// A pool's counters exist from its start, at zero.
		`devledger_leak_suspects_total{pool="intel.com/sriov_net"} 0`,
		`devledger_allocations_total{pool="intel.com/sriov_net"} 0`,
		`devledger_registration_failures_total{pool="intel.com/sriov_vfio"} 0`,
		`devledger_ledger_oldest_event_timestamp_seconds 1.`,
		`devledger_replay_duration_seconds `,
		`devledger_pool_registered{pool="intel.com/sriov_vfio"} 1`,
		`devledger_pool_allocated_devices{pool="intel.com/sriov_vfio"} 1`,
		`devledger_pool_free_devices{pool="intel.com/sriov_vfio"} 4`,
		`devledger_pool_allocated_devices{pool="intel.com/sriov_net"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The sequence follows the ledger, also what the store records itself.
	if err := d.snapshot(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	last := d.rec.Log().LastSeq() // the snapshot's SnapshotTaken, or later
	_, body = httpGet(t, base+"/metrics")
	var seq uint64
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, "devledger_ledger_sequence "); ok {
			seq, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	if seq < last {
		t.Errorf("/metrics says devledger_ledger_sequence %d after a snapshot recorded #%d", seq, last)
	}

	// A config that is rejected shows; the daemon keeps the one in force.
	if err := os.WriteFile(n.opts.ConfigPath, []byte(`{"resourceList": [{"resourceName": ""}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Reload(ctx, "test"); err != nil || len(res.Rejected) == 0 {
		t.Fatalf("reload of a bad config: %+v, %v", res, err)
	}
	if _, body = httpGet(t, base+"/metrics"); !strings.Contains(body, "devledger_config_last_reload_successful 0") {
		t.Errorf("/metrics after a rejected config lacks devledger_config_last_reload_successful 0")
	}
}

// Retention bounds the ledger while the daemon runs: once a snapshot holds
// the oldest events, those over the size bound are dropped and the drop is
// recorded; a restart replays to the state the daemon had.
func TestRetentionBoundsTheLedger(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.SnapshotEvery, n.opts.SnapshotCheck, n.opts.RetainBytes = 5, 10*time.Millisecond, 1
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"0000:3b:01.2", "0000:3b:01.3"} {
		if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
			t.Fatal(err)
		}
	}
	var dropped events.EventsDropped
	for dropped.Count == 0 { // wait for a drop
		if err := d.rec.Log().Read(0, func(e events.Envelope) error {
			if p, ok := e.Payload.(events.EventsDropped); ok {
				dropped = p
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("retention never dropped anything")
		case <-time.After(20 * time.Millisecond):
		}
	}
	live, err := d.rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	// Each drop takes up where the one before stopped, and the ledger
	// starts after the last.
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// (A drop's own event may be dropped by a later one.)
	next := uint64(0)
	if err := l.Read(0, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.EventsDropped); ok {
			if next != 0 && p.FromSeq != next {
				t.Errorf("#%d drops #%d-#%d, want from #%d", e.Seq, p.FromSeq, p.ToSeq, next)
			}
			next = p.ToSeq + 1
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if first := l.FirstSeq(); first != next || first <= 1 {
		t.Errorf("the ledger starts at #%d, its drops end at #%d", first, next-1)
	}
	l.Close()
	st := replayStopped(t, n.opts.StateDir)
	if len(st.Allocations) != len(live.Allocations) || len(st.Allocations) != 2 {
		t.Errorf("after retention and a stop: %d live allocations, %d before; want 2", len(st.Allocations), len(live.Allocations))
	}
}

// A node that boots with its clock ahead reads every event before the
// boot as older than the age bound until NTP steps the clock back, minutes
// later: the age bound waits an hour after each start, so a start drops
// no history by age then. Here the events of the first run are older than
// the bound at the second start, as under a clock ahead by more than the
// bound; once the wait is over, they go.
func TestRetentionByAgeWaitsAfterAStart(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.SnapshotEvery, n.opts.SnapshotCheck = 5, 10*time.Millisecond
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	dropsAndSnapshots := func(d *Daemon, after uint64) (drops []events.EventsDropped, snapshots int) {
		if err := d.rec.Log().Read(0, func(e events.Envelope) error {
			switch p := e.Payload.(type) {
			case events.EventsDropped:
				drops = append(drops, p)
			case events.SnapshotTaken:
				if e.Seq > after {
					snapshots++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return drops, snapshots
	}

	n.opts.RetainAge = time.Nanosecond
	d = n.start(t)
	began := d.rec.Log().LastSeq()
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	// The first tick after the start retains; a snapshot taken at a
	// later tick (one of any two) comes after it.
	devs := []string{"0000:3b:01.2", "0000:3b:01.3"}
	for i := 0; ; i++ {
		drops, snapshots := dropsAndSnapshots(d, began)
		if len(drops) > 0 {
			t.Fatalf("a start dropped %+v by age at once", drops)
		}
		if snapshots >= 2 {
			break
		}
		if _, err := n.kubelet.Allocate(ctx, vfioPool, devs[i%2:i%2+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}

	n.opts.retainAgeSettle = time.Nanosecond
	d = n.start(t)
	waitFor(ctx, t, "a drop by age once the start's wait is over", func() bool {
		drops, _ := dropsAndSnapshots(d, 0)
		return len(drops) > 0 && strings.Contains(drops[0].Reason, "older than")
	})
}

// A pass with much to drop (here a bound set on a ledger of several
// snapshots) drops it in steps, one EventsDropped each, each taking up
// where the one before stopped: the Allocates between the steps do not
// wait for the whole drop.
func TestRetentionDropsABacklogInSteps(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.SnapshotEvery, n.opts.SnapshotCheck = 5, 10*time.Millisecond
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	snapshots := func(d *Daemon) (n int) {
		for seq := d.rec.Log().LastSeq(); ; n++ {
			s, ok := d.rec.Log().LatestSnapshotSeq(seq)
			if !ok || s <= 1 {
				return n + min(int(s), 1)
			}
			seq = s - 1
		}
	}
	for i := 0; snapshots(d) < 4; i++ {
		dev := []string{"0000:3b:01.2", "0000:3b:01.3"}[i%2]
		if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}

	// No snapshot in this run: the retention at start drops it all, in
	// steps.
	n.opts.SnapshotEvery, n.opts.RetainBytes, n.opts.retainChunk = 1_000_000, 1, 1
	d = n.start(t)
	var drops []events.EventsDropped
	waitFor(ctx, t, "drops up to the newest snapshot", func() bool {
		drops = drops[:0]
		if err := d.rec.Log().Read(0, func(e events.Envelope) error {
			if p, ok := e.Payload.(events.EventsDropped); ok {
				drops = append(drops, p)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		newest, _ := d.rec.Log().LatestSnapshotSeq(0)
		return len(drops) > 0 && drops[len(drops)-1].SnapshotSeq == newest
	})
	if len(drops) < 2 {
		t.Errorf("drops %+v: want several, one snapshot interval each", drops)
	}
	for i := 1; i < len(drops); i++ {
		if drops[i].FromSeq != drops[i-1].ToSeq+1 {
			t.Errorf("drop %d is #%d-#%d, the one before ended at #%d", i, drops[i].FromSeq, drops[i].ToSeq, drops[i-1].ToSeq)
		}
	}
}

// /readyz names the pools the kubelet has not registered, with their
// count, and no more than a few of them: a node of 256 pools with no
// kubelet yet answers in one short line, not 256 names.
func TestReadyzNamesSomeOfManyPoolsNotRegistered(t *testing.T) {
	var pools []grpcapi.AdminPoolStatus
	for i := range 256 {
		pools = append(pools, grpcapi.AdminPoolStatus{Resource: fmt.Sprintf("intel.com/sriov_vf_range_%03d", i)})
	}
	pools = append(pools, grpcapi.AdminPoolStatus{Resource: "intel.com/typo", NoDevices: true})
	for _, tc := range []struct {
		name  string
		pools []grpcapi.AdminPoolStatus
		want  string
	}{
		{"none", nil, ""},
		{"one", pools[:1], "pool intel.com/sriov_vf_range_000 is not registered with the kubelet"},
		{"two", pools[:2], "2 of 2 pools served are not registered with the kubelet: intel.com/sriov_vf_range_000, intel.com/sriov_vf_range_001"},
		{"two of three", append([]grpcapi.AdminPoolStatus{{Resource: "intel.com/sriov_net", Registered: true}}, pools[:2]...),
			"2 of 3 pools served are not registered with the kubelet: intel.com/sriov_vf_range_000, intel.com/sriov_vf_range_001"},
		{"eight", pools[:8], "8 of 8 pools served are not registered with the kubelet: intel.com/sriov_vf_range_000, " +
			"intel.com/sriov_vf_range_001, intel.com/sriov_vf_range_002, intel.com/sriov_vf_range_003, intel.com/sriov_vf_range_004, " +
			"intel.com/sriov_vf_range_005, intel.com/sriov_vf_range_006, intel.com/sriov_vf_range_007"},
		{"256", pools, "256 of 256 pools served are not registered with the kubelet: intel.com/sriov_vf_range_000, " +
			"intel.com/sriov_vf_range_001, intel.com/sriov_vf_range_002, intel.com/sriov_vf_range_003, intel.com/sriov_vf_range_004, " +
			"intel.com/sriov_vf_range_005, intel.com/sriov_vf_range_006, intel.com/sriov_vf_range_007 and 248 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if err := unregistered(tc.pools); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("unregistered = %q, want %q", got, tc.want)
			}
		})
	}
}

// /healthz asks every actor, pools included: one whose mailbox no longer
// turns makes it fail, named, and it is 200 again once that one answers.
func TestHealthzNamesAnActorThatDoesNotAnswer(t *testing.T) {
	d, ctx, base := readyWithMetrics(t, sriovConfig)
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pid  *actor.PID
	}{{"pool " + vfioPool, kids.Pools[vfioPool]}, {"health checker", kids.Health}, {"config watcher", kids.ConfigWatch}} {
		proc, ok := d.system.ProcessRegistry.Get(c.pid)
		if !ok {
			t.Fatalf("no %s", c.name)
		}
		proc.SendSystemMessage(c.pid, &actor.SuspendMailbox{})
		code, body := httpGet(t, base+"/healthz")
		proc.SendSystemMessage(c.pid, &actor.ResumeMailbox{})
		if code != http.StatusServiceUnavailable || !strings.Contains(body, c.name+" (no answer in time)") {
			t.Errorf("/healthz with the %s's mailbox stopped = %d %q, want 503 naming it", c.name, code, body)
		}
		if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz once the %s answers = %d %q", c.name, code, body)
		}
	}
	// One that stopped is told from one that hangs.
	if err := d.system.Root.PoisonFuture(kids.ConfigWatch).Wait(); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "config watcher (stopped)") {
		t.Errorf("/healthz with the config watcher stopped = %d %q, want 503 saying it stopped", code, body)
	}
}

// With the disk under the state dir full, Allocate fails with Unavailable,
// /readyz says the ledger cannot record and the metrics show it, while
// /healthz stays true (the daemon is not wedged). Once there is room it is
// ready again by itself, with no Allocate to try the disk: the daemon
// retries the ledger at its snapshot checks.
func TestReadyzFollowsTheLedgersAppends(t *testing.T) {
	disk := storetest.NewFullDisk(t, 2<<20)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	n.opts.StateDir = filepath.Join(disk.Dir, "state")
	n.opts.SnapshotCheck = 20 * time.Millisecond
	d := n.start(t)
	ctx := waitCtx(t)
	base := "http://" + d.metricsAddr
	waitReadyz(t, ctx, base)
	listed, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) > 1 })
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, dv := range listed {
		devs = append(devs, dv.ID)
	}
	if _, err := n.kubelet.Allocate(ctx, vfioPool, devs[:1]); err != nil {
		t.Fatal(err)
	}

	disk.Fill(t)
	var failed error
	for i := 0; i < 2000 && failed == nil; i++ {
		_, failed = n.kubelet.Allocate(ctx, vfioPool, devs[i%len(devs):i%len(devs)+1])
	}
	if status.Code(failed) != codes.Unavailable || !strings.Contains(failed.Error(), "no space left") {
		t.Fatalf("Allocate on a full disk: %v, want Unavailable naming the disk's error", failed)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "the ledger cannot record") {
		t.Errorf("/readyz with a full disk = %d %q, want 503 naming the ledger", code, body)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with a full disk = %d %q, want 200", code, body)
	}
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{"devledger_ledger_append_failing 1", "devledger_ledger_append_failures_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics with a full disk lacks %q", want)
		}
	}

	disk.Free(t)
	waitReadyz(t, ctx, base)
	if _, err := n.kubelet.Allocate(ctx, vfioPool, devs[:1]); err != nil {
		t.Fatalf("Allocate once the disk has room: %v", err)
	}
	_, body = httpGet(t, base+"/metrics")
	if !strings.Contains(body, "devledger_ledger_append_failing 0") {
		t.Errorf("/metrics still says the ledger is failing")
	}
}

// A full disk is one incident in the log however many appends it fails:
// a line when the ledger stops recording and one when it records again,
// both naming the file, though an Allocate (not the daemon's retry at its
// snapshot check) is the first append that goes through; and a line for
// each Allocate it fails.
func TestAFullDiskLogsWhenTheLedgerRecordsAgain(t *testing.T) {
	disk := storetest.NewFullDisk(t, 2<<20)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.StateDir = filepath.Join(disk.Dir, "state")
	n.opts.SnapshotCheck = time.Hour // no retry of its own: an Allocate tries the disk
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	n.start(t)
	ctx := waitCtx(t)
	listed, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) > 1 })
	if err != nil {
		t.Fatal(err)
	}
	dev := []string{listed[0].ID}

	disk.Fill(t)
	failures := 0
	for i := 0; i < 2000 && failures < 3; i++ { // bbolt fills its free pages first
		if _, err := n.kubelet.Allocate(ctx, vfioPool, dev); status.Code(err) == codes.Unavailable {
			failures++
		} else if failures > 0 {
			t.Fatalf("Allocate on a full disk went through after %d failures: %v", failures, err)
		}
	}
	if failures < 3 {
		t.Fatalf("Allocate on a full disk failed %d times, want 3", failures)
	}
	// Each failed Allocate is one line, naming the pool and the device.
	const failed = "the ledger could not record the allocation of "
	if got, named := logs.Count("", failed), logs.Count("", `"pool":"`+vfioPool+`","error":"unavailable: `+vfioPool+`: `+failed+dev[0]); got != failures || named != failures {
		t.Errorf("%d lines (%d naming the pool and the device) for %d failed Allocates, want one each:\n%s", got, named, failures, logs)
	}
	disk.Free(t)
	if _, err := n.kubelet.Allocate(ctx, vfioPool, dev); err != nil {
		t.Fatalf("Allocate once the disk has room: %v", err)
	}
	path := strconv.Quote(filepath.Join(n.opts.StateDir, LedgerFileName))
	waitFor(ctx, t, "a line saying the ledger records again", func() bool {
		return logs.Count("info", `"message":"the ledger records again"`) > 0
	})
	for _, l := range []struct{ level, msg string }{
		{"error", "the ledger cannot record"},
		{"info", "the ledger records again"},
	} {
		if got := logs.Count(l.level, `"path":`+path+`,"message":"`+l.msg+`"`); got != 1 {
			t.Errorf("%d lines %q at %s naming the ledger over the outage, want 1:\n%s", got, l.msg, l.level, logs)
		}
	}
}

// The allocate histogram's code is the gRPC code the kubelet gets
// (docs/operations.md): a request for a device the pool lacks is refused
// with InvalidArgument and counted under it, not as Unknown.
func TestAllocateDurationCountsTheKubeletsCode(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	_, err := n.kubelet.Allocate(ctx, vfioPool, []string{"0000:99:00.0"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Allocate of a device the pool lacks: %v, want InvalidArgument", err)
	}
	_, body := httpGet(t, "http://"+d.metricsAddr+"/metrics")
	want := `devledger_allocate_duration_seconds_count{code="InvalidArgument",pool="intel.com/sriov_vfio"} 1`
	if !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q; it has:\n%s", want, grepLines(body, "devledger_allocate_duration_seconds_count"))
	}
}

// grepLines are the lines of body that begin with prefix.
func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// devledger_events_total counts every event this daemon recorded, the
// store's own too: a snapshot's SnapshotTaken and retention's
// EventsDropped are in the ledger like any other.
func TestEventsTotalCountsTheStoresOwnEvents(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	n.opts.SnapshotEvery, n.opts.SnapshotCheck, n.opts.RetainBytes = 5, 10*time.Millisecond, 1
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"0000:3b:01.2", "0000:3b:01.3"} {
		if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
			t.Fatal(err)
		}
	}
	count := func() map[events.Type]int {
		c := map[events.Type]int{}
		d.rec.Log().Read(d.rec.Log().FirstSeq(), func(e events.Envelope) error {
			c[e.Type]++
			return nil
		})
		return c
	}
	waitFor(ctx, t, "a snapshot and a drop in the ledger", func() bool {
		c := count()
		return c[events.TypeSnapshotTaken] > 0 && c[events.TypeEventsDropped] > 0
	})
	// The daemon counts the store's own events once the call that
	// appended them returns, a moment after the ledger shows them.
	var body string
	counted := func(typ events.Type) bool {
		return strings.Contains(body, `devledger_events_total{type="`+string(typ)+`"} `)
	}
	for waiting := true; waiting; {
		_, body = httpGet(t, "http://"+d.metricsAddr+"/metrics")
		if counted(events.TypeSnapshotTaken) && counted(events.TypeEventsDropped) {
			break
		}
		select {
		case <-ctx.Done():
			waiting = false
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, typ := range []events.Type{events.TypeSnapshotTaken, events.TypeEventsDropped} {
		if !counted(typ) {
			t.Errorf("the ledger holds %s events; /metrics has no devledger_events_total for them:\n%s", typ, grepLines(body, "devledger_events_total"))
		}
	}
}

// A pool the config dropped keeps its live allocations, which may yet be
// released or suspected of a leak. After a restart its counters exist at
// 0 before those events count, or the series first appears at 1 and
// increase() (the leak alert) never sees it.
func TestARemovedPoolsCountersStartAtZeroAfterARestart(t *testing.T) {
	n, d, ctx := allocatedBeforeMove(t, func(o *Options) { o.WatchConfig = false })
	n.reload(ctx, t, d, dpdkConfig) // sriov_vfio goes; the allocation stays live
	s := ledgerState(t, d)
	if _, kept := s.Pools[vfioPool]; len(s.Allocations) != 1 || kept {
		t.Fatalf("after the reload: %d live allocations, pool %s kept: %v; want 1, false", len(s.Allocations), vfioPool, kept)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	n.opts.MetricsAddr = "127.0.0.1:0"
	d = n.start(t)
	_, body := httpGet(t, "http://"+d.metricsAddr+"/metrics")
	for _, c := range []string{"leak_suspects_total", "releases_total"} {
		if want := `devledger_` + c + `{pool="intel.com/sriov_vfio"} 0`; !strings.Contains(body, want) {
			t.Errorf("after the restart, /metrics lacks %q:\n%s", want, grepLines(body, "devledger_"+c))
		}
	}
}

// A pool of the config that has no devices runs no allocator, yet its
// series stay, at zero: an alert on a pool that offers nothing needs one.
func TestMetricsOfAPoolWithNoDevices(t *testing.T) {
	cfg := strings.Replace(sriovConfig, `"drivers": ["iavf"]`, `"drivers": ["no-such-driver"]`, 1)
	_, _, base := readyWithMetrics(t, cfg)
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`devledger_pool_devices{health="healthy",pool="intel.com/sriov_net"} 0`,
		`devledger_pool_devices{health="unhealthy",pool="intel.com/sriov_net"} 0`,
		`devledger_pool_free_devices{pool="intel.com/sriov_net"} 0`,
		`devledger_pool_devices{health="healthy",pool="intel.com/sriov_vfio"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Not served, so neither registered nor meant to be: a 0 would page
	// whoever alerts on a pool the kubelet does not know.
	if got := grepLines(body, `devledger_pool_registered{pool="intel.com/sriov_net"}`); got != "" {
		t.Errorf("/metrics has %q for a pool not served", got)
	}
}

// A pool that does not answer a scrape in time (its mailbox held here, as
// a placement or a restart holds it) leaves out its own series only: the
// other pools' and every pool's registration are still there.
func TestAScrapeOutlivesAPoolThatDoesNotAnswer(t *testing.T) {
	d, ctx, base := readyWithMetrics(t, sriovConfig)
	kids, err := d.Children(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := kids.Pools[netPool]
	proc, ok := d.system.ProcessRegistry.Get(held)
	if held == nil || !ok {
		t.Fatalf("no pool %s among %v", netPool, kids.Pools)
	}
	proc.SendSystemMessage(held, &actor.SuspendMailbox{})
	defer proc.SendSystemMessage(held, &actor.ResumeMailbox{})

	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`devledger_pool_devices{health="healthy",pool="intel.com/sriov_vfio"} 5`,
		`devledger_pool_registered{pool="intel.com/sriov_vfio"} 1`,
		`devledger_pool_registered{pool="intel.com/sriov_net"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics with %s not answering lacks %q", netPool, want)
		}
	}
	if strings.Contains(body, `devledger_pool_free_devices{pool="intel.com/sriov_net"}`) {
		t.Errorf("/metrics has a series of %s, which did not answer", netPool)
	}
}

// A config whose record cannot be written (the disk full for a while) is
// tried again until it can: the file will not change again to ask. So is
// the rejection of an invalid one, which would otherwise leave no trace in
// the ledger or the metrics until the next start failed on it.
func TestAReloadThatCouldNotBeRecordedIsTriedAgain(t *testing.T) {
	port := `{"resourceName": "e810_port", "selectors": {"pciAddresses": ["0000:3b:00.1"]}}`
	for _, tc := range []struct {
		name, config string
		recorded     func(ctx context.Context, t *testing.T, n *testNode, d *Daemon)
	}{
		{"valid", strings.Replace(sriovConfig, `"resourceList": [`, `"resourceList": [`+port+`,`, 1),
			func(ctx context.Context, t *testing.T, n *testNode, _ *Daemon) {
				if _, err := n.kubelet.WaitRegistered(ctx, "intel.com/e810_port"); err != nil {
					t.Fatalf("the config that could not be recorded was not tried again: %v", err)
				}
			}},
		{"invalid", `{"resourceList": [{"resourceName": "bad name!", "selectors": {"vendors": ["8086"]}}]}`,
			func(ctx context.Context, t *testing.T, _ *testNode, d *Daemon) {
				waitLedger(ctx, t, d, "the rejection once the disk has room", func(s events.State) bool { return s.Config.Rejections > 0 })
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := storetest.NewFullDisk(t, 2<<20)
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
			n.opts.StateDir = filepath.Join(disk.Dir, "state")
			n.opts.WatchConfig = false // the test reloads once, by hand
			d := n.start(t)
			ctx := waitCtx(t)
			if _, err := n.kubelet.WaitRegistered(ctx, netPool); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(n.opts.ConfigPath, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			fillTheLedger(ctx, t, n, disk)
			if res, err := d.Reload(ctx, "test"); err != nil || res.Err == nil || res.Applied {
				t.Fatalf("reload on a full disk: %+v, %v; want it not recorded", res, err)
			}
			disk.Free(t)
			tc.recorded(ctx, t, n, d)
		})
	}
}

// fillTheLedger fills the disk under n's ledger, then allocates from the
// vfio pool until an append fails: bbolt writes into the pages its file
// has until it needs more.
func fillTheLedger(ctx context.Context, t *testing.T, n *testNode, disk *storetest.FullDisk) {
	t.Helper()
	disk.Fill(t)
	listed, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) > 1 })
	if err != nil {
		t.Fatal(err)
	}
	var failed error
	for i := 0; i < 2000 && failed == nil; i++ {
		_, failed = n.kubelet.Allocate(ctx, vfioPool, []string{listed[i%len(listed)].ID})
	}
	if failed == nil {
		t.Fatal("the ledger still appends on a full disk")
	}
}

// A stop that cannot record DaemonStopped (the disk full) leaves the pid
// file: the ledger has the run running, and the next start records it
// crashed with the file's mark of when it was last alive. A stop recorded
// removes it.
func TestAStopThatCouldNotBeRecordedLeavesThePIDFile(t *testing.T) {
	disk := storetest.NewFullDisk(t, 2<<20)
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.StateDir = filepath.Join(disk.Dir, "state")
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	fillTheLedger(ctx, t, n, disk)
	// A DaemonStopped is smaller than an Allocate's record: fill what room
	// is left for one.
	for i := 0; ; i++ {
		if _, err := d.rec.Record(ctx, events.DaemonStopped{Reason: "filler"}); err != nil {
			break
		}
		if i > 5000 {
			t.Fatal("the ledger never filled")
		}
	}
	// Pages the stopping actors' reads held may come free for it still.
	err := d.Stop(ctx, "test")
	unrecorded := err != nil && strings.Contains(err.Error(), "record stop")
	if _, serr := os.Stat(filepath.Join(n.opts.StateDir, PIDFileName)); unrecorded != (serr == nil) {
		t.Errorf("stop on a full disk: %v; the pid file: %v. It must stay exactly when the stop was not recorded", err, serr)
	}
}

// A reload of a file already rejected says so again, records nothing new,
// and is not "unchanged": the config in force is another one. Once the
// file holds the config in force again, that is recorded, so the last
// reload reads successful again.
func TestAReloadOfARejectedFileSaysRejected(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	n.opts.MetricsAddr = "127.0.0.1:0"
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, netPool); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(n.opts.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.opts.ConfigPath, []byte(`{"resourceList": [{"resourceName": "bad name!", "selectors": {"vendors": ["8086"]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, reason := range []string{"edit", "SIGHUP"} {
		res, err := d.Reload(ctx, reason)
		if err != nil || res.Rejected == nil || res.Unchanged || res.Applied {
			t.Fatalf("reload %d of the rejected file: %+v, %v; want it rejected", i+1, res, err)
		}
	}
	if s := ledgerState(t, d); s.Config.Rejections != 1 {
		t.Errorf("%d rejections recorded, want 1", s.Config.Rejections)
	}
	if err := os.WriteFile(n.opts.ConfigPath, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Reload(ctx, "revert"); err != nil || !res.Applied {
		t.Errorf("reload of the config in force after a rejection: %+v, %v; want it applied", res, err)
	}
	// The metrics say so too, stamped with the time the ledger has.
	var applied time.Time
	if err := d.rec.Log().ReadRaw(d.rec.Log().FirstSeq(), func(_ uint64, rec []byte) error {
		if e, err := events.Unmarshal(rec); err == nil && e.Type == events.TypeConfigApplied {
			applied = e.Time
		}
		return nil
	}); err != nil || applied.IsZero() {
		t.Fatalf("no ConfigApplied in the ledger: %v", err)
	}
	_, body := httpGet(t, "http://"+d.metricsAddr+"/metrics")
	if got := grepLines(body, "devledger_config_last_reload_successful "); got != "devledger_config_last_reload_successful 1" {
		t.Errorf("after the config in force came back: %q, want 1", got)
	}
	at, err := strconv.ParseFloat(strings.TrimPrefix(grepLines(body, "devledger_config_last_reload_timestamp_seconds "), "devledger_config_last_reload_timestamp_seconds "), 64)
	if want := float64(applied.UnixNano()) / 1e9; err != nil || at != want {
		t.Errorf("devledger_config_last_reload_timestamp_seconds = %v, %v; want %v, the recorded ConfigApplied's", at, err, want)
	}
}

// After a rollback, retention stops at the first event a newer devledger
// wrote, which then is the oldest the ledger keeps: the gauge shows its
// time, which this build reads though it cannot read the event.
func TestOldestEventTimeOfANewerDevledgersEvent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, LedgerFileName)
	l, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	appendNewerEvent(t, dir)
	after := time.Now()
	l, err = store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := oldestEventTime(l); got < float64(before.Unix()) || got > float64(after.Unix()+1) {
		t.Errorf("oldest event time = %v, want the newer event's, between %v and %v", got, before.Unix(), after.Unix()+1)
	}
}

// A salvage that lost the start of a ledger puts an EventLost without a
// time at each lost sequence: the gauge shows the time of the oldest
// event that has one, not 0, which says the ledger is empty.
func TestOldestEventTimeAfterASalvageLostTheStart(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), LedgerFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lost := events.New(events.EventLost{Reason: "no record of it in the damaged ledger"}, time.Time{}, "salvage")
	if _, err := l.Append(context.Background(), lost, lost,
		events.New(events.DaemonStarted{Version: "test", Node: "n"}, at, "boot")); err != nil {
		t.Fatal(err)
	}
	if got, want := oldestEventTime(l), float64(at.Unix()); got != want {
		t.Errorf("oldest event time = %v, want %v (the first event with a time)", got, want)
	}
}

// The kubelet's outage shows in the metrics as the ledger records it:
// devledger_kubelet_down is 1 from the recorded KubeletStopped, and the
// next kubelet both ends it and counts as one restart.
func TestKubeletMetricsFollowAnOutage(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	d := n.start(t)
	ctx := waitCtx(t)
	base := "http://" + d.metricsAddr
	waitReadyz(t, ctx, base)
	scrape := func() string {
		_, body := httpGet(t, base+"/metrics")
		return body
	}
	restarts := func(body string) string { return grepLines(body, "devledger_kubelet_restarts_total ") }
	before := restarts(scrape())
	if !strings.Contains(scrape(), "devledger_kubelet_down 0\n") {
		t.Fatalf("/metrics with the kubelet up lacks devledger_kubelet_down 0:\n%s", grepLines(scrape(), "devledger_kubelet"))
	}

	if err := n.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "devledger_kubelet_down 1", func() bool { return strings.Contains(scrape(), "devledger_kubelet_down 1\n") })
	if got := restarts(scrape()); got != before {
		t.Errorf("a kubelet gone moved the restarts: %q, was %q", got, before)
	}

	if err := n.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "devledger_kubelet_down 0", func() bool { return strings.Contains(scrape(), "devledger_kubelet_down 0\n") })
	var was float64
	if _, err := fmt.Sscan(strings.TrimPrefix(before, "devledger_kubelet_restarts_total "), &was); err != nil {
		t.Fatalf("devledger_kubelet_restarts_total before the outage: %q: %v", before, err)
	}
	if got, want := restarts(scrape()), fmt.Sprintf("devledger_kubelet_restarts_total %g", was+1); got != want {
		t.Errorf("after the kubelet came back: %q, want %q", got, want)
	}
}

// Each per-pool counter moves on its own event once the event is in the
// ledger, under the pool the event names, and no other counter moves.
func TestPoolCountersCountTheirEvents(t *testing.T) {
	d, ctx, base := readyWithMetrics(t, sriovConfig)
	counters := []string{"allocations_total", "releases_total", "leak_suspects_total", "allocation_conflicts_total",
		"unhealthy_allocations_total", "registrations_total", "registration_failures_total"}
	for _, tc := range []struct {
		name    string
		payload func(pool string) events.Payload
		want    map[string]int // the rest stay 0
	}{
		{"an allocation and what it says", func(pool string) events.Payload {
			return events.DevicesAllocated{Pool: pool, Supersedes: []uint64{1, 2}, HeldElsewhere: []uint64{3}, Unhealthy: []string{"a", "b", "c"}}
		}, map[string]int{"allocations_total": 1, "releases_total": 2, "allocation_conflicts_total": 1, "unhealthy_allocations_total": 3}},
		{"a release", func(pool string) events.Payload { return events.DevicesReleased{Pool: pool} },
			map[string]int{"releases_total": 1}},
		{"a leak", func(pool string) events.Payload { return events.AllocationLeakSuspected{Pool: pool} },
			map[string]int{"leak_suspects_total": 1}},
		{"a conflict", func(pool string) events.Payload { return events.AllocationConflict{Pool: pool} },
			map[string]int{"allocation_conflicts_total": 1}},
		{"a registration", func(pool string) events.Payload { return events.PluginRegistered{Pool: pool} },
			map[string]int{"registrations_total": 1}},
		{"a refused registration", func(pool string) events.Payload { return events.RegistrationFailed{Pool: pool} },
			map[string]int{"registration_failures_total": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A pool of its own, so that the daemon's own events do not count.
			pool := "example.com/" + strings.ReplaceAll(tc.name, " ", "_")
			if _, err := d.rec.Record(ctx, tc.payload(pool)); err != nil {
				t.Fatal(err)
			}
			_, body := httpGet(t, base+"/metrics")
			for _, c := range counters {
				prefix := `devledger_` + c + `{pool="` + pool + `"} `
				got := strings.TrimPrefix(grepLines(body, prefix), prefix)
				if got == "" {
					got = "0"
				}
				if want := strconv.Itoa(tc.want[c]); got != want {
					t.Errorf("devledger_%s of %s = %s, want %s", c, pool, got, want)
				}
			}
		})
	}
}
