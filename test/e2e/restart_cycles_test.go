package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// restartCycles is how many times the cycle tests restart the kubelet and
// then the daemon. The daemon's stop alternates SIGTERM and SIGKILL, and
// the kubelet's, every other cycle, a clean stop and a kill, so that each
// pairing comes five times.
const restartCycles = 20

// registeredWithin is how soon after a restart every pool must be
// registered with its full capacity.
const registeredWithin = 2 * time.Second

// TestLegacyRestartCycles: a kubelet restart, then a daemon restart, twenty
// times. Each pool must be registered again within 2 s of each restart,
// and the kubelet must still see each daemon stop (every device unhealthy):
// a second Register of a socket path the kubelet is connected to makes it
// forget its client for that path, after which it never sees that plugin
// go and refuses the path until it restarts (issue 14). Half the kubelet
// restarts follow a kill (see kubelet.kill), which leaves kubelet.sock
// for the new kubelet to replace, as a real kubelet's end always does.
func TestLegacyRestartCycles(t *testing.T) { runRestartCycles(t, "legacy") }

// TestWatcherRestartCycles is TestLegacyRestartCycles with the plugin
// manager finding the sockets in plugins_registry/.
func TestWatcherRestartCycles(t *testing.T) { runRestartCycles(t, "watcher") }

func runRestartCycles(t testing.TB, mode string) {
	r := startRig(t, mode)
	// The kubelet has every pool; the ledger must too before the first
	// restart: an answer the registrar takes after it has seen the next
	// kubelet is not recorded, and the count below would be short.
	waitLedgerRegistered(t, r, 0)
	var afterKubelet, afterDaemon []time.Duration
	for i := range restartCycles {
		how := "clean"
		if i%4 >= 2 {
			how = "killed"
			r.k.kill(t)
		}
		r.k = r.k.restart(t, r.kopt)
		afterKubelet = append(afterKubelet, r.k.waitFull(t, fmt.Sprintf("cycle %d: the %s kubelet restart", i+1, how), r.k.started))
		// The registrar writes what the kubelet took off its own thread: a
		// SIGKILL must not come before it is in the ledger, or the count
		// below would be short.
		waitLedgerRegistered(t, r, i+1)

		sig := syscall.SIGTERM
		if i%2 == 1 {
			sig = syscall.SIGKILL
		}
		r.d.signal(t, sig, 30*time.Second)
		r.k.waitCapacity(t, fmt.Sprintf("cycle %d: every device unhealthy after %v", i+1, sig), r.d.stopped, 10*time.Second, func(_, a counts) bool {
			return equalCounts(a, noneAllocatable)
		})
		r.d = startDaemon(t, r.node, mode)
		afterDaemon = append(afterDaemon, r.k.waitFull(t, fmt.Sprintf("cycle %d: the daemon restart (%v)", i+1, sig), r.d.started))
		waitLedgerRegistered(t, r, i+1)
	}
	p50, most := spread(afterKubelet)
	logFigure(t, mode, "all-registered-after-kubelet-restart-p50", p50)
	logFigure(t, mode, "all-registered-after-kubelet-restart-max", most)
	p50, most = spread(afterDaemon)
	logFigure(t, mode, "all-registered-after-daemon-restart-p50", p50)
	logFigure(t, mode, "all-registered-after-daemon-restart-max", most)

	admitDPDK(t, r)
	r.d.signal(t, syscall.SIGTERM, 30*time.Second)
	// One registration per pool for each kubelet and each daemon, and
	// not one refused.
	s := replay(t, r.node.stateDir)
	for res, p := range s.Pools {
		if reg := p.Registration; reg.Failures != 0 || reg.LastError != "" {
			t.Errorf("ledger: %s registration %+v, want no failure", res, reg)
		}
	}
	// With each kubelet, a socket path is registered once: the kubelet
	// 1.37 refuses a second Register of a path it holds, and loses track
	// of the first in doing so.
	history := registrationHistory(t, r.node.stateDir)
	registered := 0
	seen := map[string]bool{}
	for _, e := range history {
		switch e.Type {
		case "KubeletRestarted":
			clear(seen)
		case "PluginRegistered":
			registered++
			if seen[e.Payload.Socket] {
				t.Errorf("ledger #%d: %s registered again with the same kubelet", e.Seq, e.Payload.Socket)
			}
			seen[e.Payload.Socket] = true
		case "RegistrationFailed":
			t.Errorf("ledger #%d: a registration failed: %+v", e.Seq, e.Payload)
		}
	}
	if want := len(sriovPools) * (1 + 2*restartCycles); registered != want {
		t.Errorf("ledger: %d PluginRegistered, want %d (each of %d pools once per kubelet and per daemon)", registered, want, len(sriovPools))
	}
}

// waitLedgerRegistered waits until the ledger (read through the running
// daemon's admin socket) has seen restarts kubelet restarts and has every
// pool registered on the socket it serves on now.
func waitLedgerRegistered(t testing.TB, r *rig, restarts int) {
	t.Helper()
	waitPoolsRegistered(t, r, 10*time.Second, fmt.Sprintf("%d kubelet restarts", restarts),
		func(s ledgerState) bool { return s.Kubelet.Restarts == restarts })
}

// waitPoolsRegistered waits up to within until the ledger's kubelet is as
// want says (what) and every pool is registered on the socket it serves
// on now.
func waitPoolsRegistered(t testing.TB, r *rig, within time.Duration, what string, want func(ledgerState) bool) {
	t.Helper()
	waitLedger(t, r, within, what+" and every pool registered", func(s ledgerState) bool {
		return want(s) && everyPoolRegistered(t, r, s)
	})
}

// everyPoolRegistered says whether the ledger has every pool registered on
// the socket it serves on now.
func everyPoolRegistered(t testing.TB, r *rig, s ledgerState) bool {
	t.Helper()
	for res := range sriovPools {
		reg := s.Pools[res].Registration
		if !reg.Registered || reg.Socket != poolSocket(t, r.socketDir(), res) {
			return false
		}
	}
	return true
}

// ledgerEvent is a registration event as dump --format jsonl prints it.
type ledgerEvent struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Payload struct {
		Pool   string `json:"pool"`
		Socket string `json:"socket"`
		Error  string `json:"error"`
	} `json:"payload"`
}

// registrationHistory is every KubeletStopped, KubeletRestarted,
// PluginRegistered and RegistrationFailed of the ledger, in order
// (offline, or through the admin socket while the daemon runs).
func registrationHistory(t testing.TB, stateDir string) []ledgerEvent {
	t.Helper()
	out := devledger(t, "dump", "--state-dir", stateDir, "--format", "jsonl")
	var h []ledgerEvent
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e ledgerEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("dump --format jsonl: %v: %s", err, line)
		}
		switch e.Type {
		case "KubeletStopped", "KubeletRestarted", "PluginRegistered", "RegistrationFailed":
			h = append(h, e)
		}
	}
	return h
}

// TestLegacyDoubleRegisterByHand does to the kubelet what made issue 14:
// a second Register of a pool's socket path while the kubelet is connected
// to it. The kubelet refuses it and forgets its live client, so when the
// daemon is killed it does not mark that pool's devices unhealthy, and it
// would refuse that path until it restarts. The next daemon registers each
// pool on a socket of its own and serves pods again within 2 s.
func TestLegacyDoubleRegisterByHand(t *testing.T) {
	r := startRig(t, "legacy")
	sock := poolSocket(t, devicePluginsDir, resDPDK)
	err := registerByHand(filepath.Base(sock), resDPDK)
	if err == nil || !strings.Contains(err.Error(), "already connected") {
		t.Fatalf("a second Register of %s: err = %v, want the kubelet's 'already connected'", sock, err)
	}

	r.d.signal(t, syscall.SIGKILL, 30*time.Second)
	// The kubelet's bookkeeping is broken now: the other pools go
	// unhealthy, the DPDK pool stays as it was.
	stale := counts{resDPDK: sriovPools[resDPDK], resNetdevice: 0, resDPDKExtra: 0, resPF: 0}
	r.k.waitCapacity(t, "the other pools unhealthy, the DPDK pool stale", r.d.stopped, 10*time.Second, func(_, a counts) bool {
		return equalCounts(a, stale)
	})

	r.d = startDaemon(t, r.node, "legacy")
	took := r.k.waitFull(t, "the daemon restart after a double Register", r.d.started)
	logFigure(t, "legacy", "all-registered-after-double-register", took)
	// The kubelet's stale endpoint keeps the DPDK pool at full capacity,
	// so capacity cannot say when the new socket's Register was taken;
	// until it is, the kubelet sends the pool's calls to the old socket,
	// which is gone. The ledger says it.
	waitPoolsRegistered(t, r, 10*time.Second, "the second daemon", func(s ledgerState) bool { return s.Daemon.Starts == 2 })
	if now := poolSocket(t, devicePluginsDir, resDPDK); now == sock {
		t.Errorf("the new daemon serves %s on %s, the path the kubelet holds", resDPDK, now)
	}
	// Pods are served by the new endpoint: the kubelet's Allocate goes to
	// the daemon, not to the stale one.
	_, a := admitDPDK(t, r)
	logFigure(t, "legacy", "admission-after-double-register", a.took)
	if s := replay(t, r.node.stateDir); !s.Pools[resDPDK].Registration.Registered {
		t.Errorf("ledger: %s not registered: %+v", resDPDK, s.Pools[resDPDK].Registration)
	}
}

// waitFull waits until the kubelet reports every pool of the sriov node
// with its full capacity, all of it allocatable, and fails the test unless
// that holds within registeredWithin of since. It returns how long it took.
func (k *kubelet) waitFull(t testing.TB, what string, since time.Time) time.Duration {
	t.Helper()
	deadline := since.Add(registeredWithin)
	for {
		c, a := k.capacity()
		if equalCounts(c, sriovPools) && equalCounts(a, sriovPools) {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not every pool registered within %v; capacity: %v; allocatable: %v", what, registeredWithin, c, a)
		}
		time.Sleep(pollEvery)
	}
}

// spread returns the median and the largest of ds.
func spread(ds []time.Duration) (p50, most time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// poolSocket is the one socket the daemon serves resource on in dir: the
// pool's part of the name (resource with '/' replaced) and one of its own.
func poolSocket(t testing.TB, dir, resource string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.ReplaceAll(resource, "/", "_") + "."
	var found []string
	for _, e := range entries {
		name := e.Name()
		if e.Type() == os.ModeSocket && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, ".sock") &&
			!strings.Contains(strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".sock"), ".") {
			found = append(found, filepath.Join(dir, name))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: sockets %v in %s, want one", resource, found, dir)
	}
	return found[0]
}

// registerByHand calls the kubelet's Register as a plugin would.
func registerByHand(endpoint, resource string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialUnix(ctx, filepath.Join(devicePluginsDir, "kubelet.sock"))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource})
	return err
}

// dialUnix returns a gRPC client connection to the unix socket at path.
func dialUnix(_ context.Context, path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
}
