package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// readyWithin waits up to within for the daemon to be ready (every pool
// registered, as /readyz says).
func readyWithin(t *testing.T, d *Daemon, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := d.notReady(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not ready %v on: %v", what, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFullKubelet waits up to within for k to list every device of both pools.
func waitFullKubelet(t *testing.T, k *kubelettest.Kubelet, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for res, want := range map[string]int{vfioPool: 5, netPool: 3} {
		if _, err := k.WaitDevices(ctx, res, func(ds []*pluginapi.Device) bool { return len(ds) == want }); err != nil {
			t.Fatalf("the kubelet does not list %s's %d devices: %v", res, want, err)
		}
	}
}

// The daemon starts with the kubelet down and no kubelet.sock; the kubelet
// comes up later. Every pool registers with it at once, in every mode.
func TestAKubeletUpAfterTheDaemonGetsEveryPool(t *testing.T) {
	for _, mode := range []string{"legacy", "watcher", "auto"} {
		t.Run(mode, func(t *testing.T) {
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{Delayed: true, PluginWatcher: mode != "legacy"})
			n.opts.Registration = mode
			d := n.start(t)
			time.Sleep(500 * time.Millisecond)
			booted := time.Now()
			if err := n.kubelet.Boot(); err != nil {
				t.Fatal(err)
			}
			waitFullKubelet(t, n.kubelet, 3*time.Second)
			readyWithin(t, d, 3*time.Second, "after the kubelet came up")
			t.Logf("ready %v after boot", time.Since(booted))
			s := ledgerState(t, d)
			if s.Kubelet.Restarts != 1 || s.Kubelet.Down {
				t.Errorf("ledger kubelet %+v, want one (re)start, not down", s.Kubelet)
			}
		})
	}
}

// The ledger has the kubelet down (a KubeletStopped of the run before); the
// daemon starts with no kubelet.sock (the kubelet stopped cleanly), and
// the kubelet comes back later.
func TestAKubeletBackAfterARecordedOutageEndsIt(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
			d, err := Start(n.opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := waitCtx(t)
			waitFullKubelet(t, n.kubelet, 5*time.Second)
			if err := n.kubelet.Stop(); err != nil {
				t.Fatal(err)
			}
			waitLedger(ctx, t, d, "the kubelet recorded down", func(s events.State) bool { return s.Kubelet.Down })
			d.Stop(context.Background(), "test: daemon restart")
			// A kubelet stopped cleanly takes its socket with it.
			if err := os.Remove(n.kubelet.RegistrationSocket()); err != nil {
				t.Fatal(err)
			}
			d = n.start(t)
			time.Sleep(time.Duration(i) * 150 * time.Millisecond)
			booted := time.Now()
			if err := n.kubelet.Boot(); err != nil {
				t.Fatal(err)
			}
			waitFullKubelet(t, n.kubelet, 3*time.Second)
			readyWithin(t, d, 3*time.Second, "after the kubelet came back")
			t.Logf("ready %v after boot", time.Since(booted))
			s := ledgerState(t, d)
			if s.Kubelet.Down || s.Kubelet.Outages != 1 {
				t.Errorf("ledger kubelet %+v, want the outage ended", s.Kubelet)
			}
		})
	}
}

// After a kubelet restart a pool serves on a new socket: the lines of a
// ListAndWatch stream name the socket it is on, as the registrar's lines
// of the registration do.
func TestListAndWatchLinesNameTheirSocket(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	n.start(t)
	ctx := waitCtx(t)
	opened := func(socket string) bool {
		return logs.Count("info", `"socket":`+strconv.Quote(socket)+`,"message":"kubelet opened ListAndWatch"`) > 0
	}
	first, err := n.kubelet.WaitRegistered(ctx, vfioPool)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a line of the stream on "+first.Endpoint, func() bool { return opened(first.Endpoint) })
	if err := n.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	var again kubelettest.Registration
	waitFor(ctx, t, "the pool registered on a new socket", func() bool {
		again, err = n.kubelet.WaitRegistered(ctx, vfioPool)
		return err != nil || again.Endpoint != first.Endpoint
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a line of the stream on "+again.Endpoint, func() bool { return opened(again.Endpoint) })
	// A kubelet's start removes every plugin's socket: each pool says it
	// made its socket again, as news, not as a warning per pool.
	waitFor(ctx, t, "each pool's line of its socket lost", func() bool {
		return logs.Count("", "socket lost; re-creating it") == 2
	})
	if warned := logs.Count("warn", "socket lost"); warned != 0 {
		t.Errorf("a kubelet restart: %d warnings of a socket lost, want none:\n%s", warned, logs)
	}
}

// failingConnects is a kubelet with a plugin watcher whose device
// manager fails the first n registrations of pool (every one for n < 0)
// as when it cannot reach the socket: the plugin watcher, as in kubelets
// 1.35.4 and 1.34.4, then never tries that socket again.
func failingConnects(pool string, n int32) kubelettest.Options {
	var fails atomic.Int32
	return kubelettest.Options{PluginWatcher: true, ConnectError: func(resource, _ string) error {
		if resource == pool && (n < 0 || fails.Add(1) <= n) {
			return errors.New("failed to dial device plugin: context deadline exceeded")
		}
		return nil
	}}
}

// In watcher mode the plugin watcher's word on a socket is one line, the
// registrar's, which the ledger's record matches: the pool's server that
// heard it says it again only at debug.
func TestAWatcherRegistrationIsOneLine(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, failingConnects(netPool, 1))
	n.opts.Registration = "watcher"
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	d := n.start(t)
	waitFullKubelet(t, n.kubelet, 20*time.Second)
	readyWithin(t, d, 10*time.Second, "the pool renewed")
	waitLedger(waitCtx(t), t, d, "the pools' registrations", func(s events.State) bool {
		return !s.Pools[netPool].Registration.RegisteredAt.IsZero() && !s.Pools[vfioPool].Registration.RegisteredAt.IsZero()
	})
	if got := logs.Count("", "plugin registration failed with err: failed to dial"); got != 1 {
		t.Errorf("%d lines for one refusal, want 1:\n%s", got, logs)
	}
	registered := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"pool":"`+vfioPool+`"`) && strings.Contains(line, "registered") {
			registered++
		}
	}
	if registered != 1 {
		t.Errorf("%d lines for one registration of %s, want 1:\n%s", registered, vfioPool, logs)
	}
}

// A kubelet that refuses every socket of a pool the same way brings a
// refusal and a renewal each round, with a doubling grace: the log warns
// of each once, as the same failure again is news to no one (each is at
// debug, and in the ledger).
func TestRefusalsAlikeWarnOnce(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, failingConnects(netPool, -1))
	n.opts.Registration = "watcher"
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	n.start(t)
	const refused, renewed = "kubelet refused the pool", "the kubelet did not register the pool it refused"
	waitFor(waitCtx(t), t, "three refusals and two renewals", func() bool {
		return logs.Count("", refused) >= 3 && logs.Count("", renewed) >= 2
	})
	for _, msg := range []string{refused, renewed} {
		if warned := logs.Count("warn", msg); warned != 1 {
			t.Errorf("%d warnings %q over the rounds, want 1:\n%s", warned, msg, logs)
		}
	}
}

// A kubelet of 1.35.4 or 1.34.4 whose device manager fails a registration
// its plugin watcher began keeps the socket as registered and never tries
// it again. The pool serves on a new socket a grace later, which the
// plugin watcher registers; the ledger shows the refusal, then the
// renewal.
func TestARegistrationThePluginWatcherKeepsFailedIsRenewed(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, failingConnects(netPool, 1))
	n.opts.Registration = "watcher"
	d := n.start(t)
	waitFullKubelet(t, n.kubelet, 20*time.Second)
	readyWithin(t, d, 10*time.Second, "the pool renewed")
	// The registrar records a registration without waiting for it.
	waitLedger(waitCtx(t), t, d, "the pool's registration", func(s events.State) bool {
		return !s.Pools[netPool].Registration.RegisteredAt.IsZero()
	})

	var refused, renewed *events.RegistrationFailed
	var registeredAfter bool
	if err := d.rec.Log().Read(1, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.RegistrationFailed:
			if p.Pool != netPool {
				break
			}
			if refused == nil {
				refused = &p
			} else if renewed == nil {
				renewed = &p
			}
		case events.PluginRegistered:
			registeredAfter = registeredAfter || (p.Pool == netPool && renewed != nil && p.Socket != renewed.Socket)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if refused == nil || !strings.Contains(refused.Error, "plugin registration failed") {
		t.Fatalf("recorded refusal %+v, want the device manager's", refused)
	}
	if renewed == nil || renewed.Socket != refused.Socket || renewed.Action != "serving the pool on a new socket" {
		t.Errorf("recorded renewal %+v, want the pool served anew in place of %s", renewed, refused.Socket)
	}
	if !registeredAfter {
		t.Error("no PluginRegistered of the pool on a new socket after the renewal")
	}
}

// A kubelet that restarts while the disk stalls under a record of the
// node's (here a reload's ConfigApplied) gets every pool again at once:
// what the node only passes on between the kubelet's side and the
// registrar does not wait for the node's record to be durable.
func TestAKubeletRestartedWhileTheNodeRecordsGetsEveryPool(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.WatchConfig = false
	d := n.start(t)
	ctx := supervisionCtx(t)
	waitFullKubelet(t, n.kubelet, 10*time.Second)
	release := holdWriter(ctx, t, d.rec.Log())
	// The same pools, another file: a ConfigApplied the writer holds.
	if err := os.WriteFile(n.opts.ConfigPath, []byte(sriovConfig+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reloaded := d.system.Root.RequestFuture(d.node, &node.ReloadConfig{Reason: "test"}, time.Minute)
	// Children is answered after the reload was taken: its record waits.
	if _, err := d.Children(ctx); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	if err := n.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := n.kubelet.RegisteredAfter(wait, []string{vfioPool, netPool}, since); err != nil {
		t.Errorf("with the node's record held by the disk: %v", err)
	}
	release()
	if res, err := reloaded.Result(); err != nil || !res.(*node.ReloadResult).Applied {
		t.Fatalf("reload = %+v, %v; want it applied", res, err)
	}
	waitFullKubelet(t, n.kubelet, 10*time.Second)
}

// A NotifyRegistrationStatus forged on a pool's socket (anything root on
// the node can call it) with a megabyte's reason is recorded and logged
// with the reason cut, its length noted.
func TestAForgedRefusalIsRecordedCut(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{PluginWatcher: true})
	n.opts.Registration = "watcher"
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	d := n.start(t)
	ctx := waitCtx(t)
	s := waitLedger(ctx, t, d, "the pool's registration", func(s events.State) bool { return s.Pools[netPool].Registration.Registered })
	conn, err := grpc.NewClient("unix://"+s.Pools[netPool].Registration.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	huge := strings.Repeat("x", 1<<20)
	if _, err := registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: huge}); err != nil {
		t.Fatal(err)
	}
	note := fmt.Sprintf("… (%d bytes)", len(huge))
	var got *events.RegistrationFailed
	waitFor(ctx, t, "the refusal recorded", func() bool {
		if err := d.rec.Log().Read(1, func(e events.Envelope) error {
			if p, ok := e.Payload.(events.RegistrationFailed); ok && p.Pool == netPool {
				got = &p
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got != nil
	})
	if want := huge[:grpcapi.MaxReason] + note; got.Error != want {
		t.Errorf("recorded a %d-byte reason %.200q, want %.200q", len(got.Error), got.Error, want)
	}
	waitFor(ctx, t, "the refusal logged", func() bool { return logs.Count("warn", "kubelet refused the pool") == 1 })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "xxxxxxxx") && (len(line) > 2*grpcapi.MaxReason || !strings.Contains(line, note)) {
			t.Errorf("%d-byte log line %.300q, want the reason cut, saying %q", len(line), line, note)
		}
	}
}
