package daemon

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/grpcapi/kubelettest"
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
		`devledger_replay_duration_seconds `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
