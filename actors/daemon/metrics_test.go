package daemon

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
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

func TestMetricsHealthAndReadiness(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{Delayed: true})
	n.opts.MetricsAddr = "127.0.0.1:0"
	d := n.start(t)
	ctx := waitCtx(t)
	base := "http://" + d.MetricsAddr()

	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}
	// No kubelet yet: nothing is registered, so not ready.
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz without a kubelet = %d %q, want 503 naming a pool", code, body)
	}
	if err := n.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	for {
		code, _ := httpGet(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never ready after the kubelet came: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := n.kubelet.Allocate(context.Background(), "intel.com/sriov_vfio", []string{"0000:3b:01.2"}); err != nil {
		t.Fatal(err)
	}
	// Registration is acknowledged before its PluginRegistered is in the
	// ledger (the registrar writes after the pool's PluginServing), and
	// the counter follows the ledger: wait for it.
	var body string
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
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
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
		if err := d.Recorder().Log().Read(0, func(e events.Envelope) error {
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
	live, err := d.Recorder().Replay()
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
