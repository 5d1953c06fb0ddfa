package registrar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
)

// The actor under test runs under a recording parent (actortest).
type family = actortest.Family

func spawnFamily(t *testing.T, props *actor.Props) *family { return actortest.Spawn(t, props) }

func next[T any](t *testing.T, f *family) T { return actortest.Next[T](t, f) }

// emptyBackend serves a pool with no devices.
type emptyBackend struct{}

func (emptyBackend) WatchDevices(ctx context.Context) (<-chan []*pluginapi.Device, error) {
	ch := make(chan []*pluginapi.Device, 1)
	ch <- nil
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (emptyBackend) Allocate(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return nil, grpcapi.ErrUnavailable
}

func (emptyBackend) PreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return nil, grpcapi.ErrUnavailable
}

type registrarUnderTest struct {
	*family
	cfg     Config
	kubelet *kubelettest.Kubelet
	log     *store.Log
	// sockets counts the sockets reserve made.
	sockets int
}

// newRegistrar starts a registrar, with fast retries, against a kubelet
// stand-in started with kopts.
func newRegistrar(t *testing.T, mode grpcapi.RegistrationMode, kopts kubelettest.Options, tweaks ...func(*Config)) *registrarUnderTest {
	t.Helper()
	k := kubelettest.Start(t, "", kopts)
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cfg := Config{Recorder: ledger.NewRecorder(l, "boot-1", nil), Mode: mode,
		KubeletSocket: k.RegistrationSocket(), RegisterTimeout: 2 * time.Second,
		RetryInitial: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond, Log: zerolog.Nop(),
		// No stream reports come but those a test sends: a test that
		// means the grace to pass sets it.
		ListGrace: time.Hour}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	f := spawnFamily(t, Props(cfg))
	return &registrarUnderTest{family: f, cfg: cfg, kubelet: k, log: l}
}

// serve serves a pool with no devices in the kubelet's device-plugins dir
// and returns its server and socket.
func (r *registrarUnderTest) serve(t *testing.T, pool string) (*grpcapi.PoolServer, string) {
	t.Helper()
	srv := grpcapi.NewPoolServer(pool, emptyBackend{}, grpcapi.PoolServerOptions{})
	sock := filepath.Join(r.kubelet.DevicePluginDir(), strings.ReplaceAll(pool, "/", "_")+".sock")
	if err := srv.Serve(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv, sock
}

func (r *registrarUnderTest) status(t *testing.T) *Status {
	t.Helper()
	res, err := r.Sys.Root.RequestFuture(r.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res.(*Status)
}

// await polls the registrar's status until ok holds.
func (r *registrarUnderTest) await(t *testing.T, what string, ok func(*Status) bool) *Status {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := r.status(t)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("registrar never %s: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitRecorded waits until the ledger holds at least n payloads (the
// registrar appends off its thread, in order) and returns them.
func (r *registrarUnderTest) awaitRecorded(t *testing.T, n int) []events.Payload {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := r.recorded(t)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recorded returns the payloads in the ledger.
func (r *registrarUnderTest) recorded(t *testing.T) []events.Payload {
	t.Helper()
	var out []events.Payload
	if err := r.log.Read(1, func(e events.Envelope) error {
		out = append(out, e.Payload)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const gpu = "example.com/gpu"

func registered(pool string) func(*Status) bool {
	return func(st *Status) bool { return st.Pools[pool].Registered }
}

func TestDesiredPoolIsRegistered(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	reg, err := r.kubelet.WaitRegistered(ctxFor(t), gpu)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Endpoint != sock || reg.Mode != kubelettest.ModeLegacy {
		t.Errorf("kubelet registered %s in %s mode, want %s in legacy mode", reg.Endpoint, reg.Mode, sock)
	}
	st := r.await(t, "registered the pool", registered(gpu))
	if p := st.Pools[gpu]; p.Socket != sock || p.Failures != 0 || p.LastError != "" {
		t.Errorf("status %+v", p)
	}
	want := []events.Payload{events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"}}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	r.Silent(t)
}

// A pool is registered the moment it serves, before its PluginServing is
// durable: registration never waits for the ledger. The store commits in
// the order events were queued, so the registrar's PluginRegistered lands
// after the pool's PluginServing all the same.
func TestRegisteredIsRecordedAfterThePoolsServing(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		first := true
		c.Recorder.Observe(func([]events.Envelope) { // on the store's writer: holds it
			if first {
				first = false
				close(held)
				<-release
			}
		})
	})
	// After newRegistrar's, so it runs before them: closing the ledger
	// waits for the writer this test holds.
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	_, sock := r.serve(t, gpu)
	serving := events.PluginServing{Pool: gpu, Socket: sock, Mode: "legacy"}
	if err := r.cfg.Recorder.RecordAsync(context.Background(), nil, []events.Payload{serving}, func([]events.Envelope, error) {}); err != nil {
		t.Fatal(err)
	}
	<-held // the pool's PluginServing is committed, its answer held
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	if _, err := r.kubelet.WaitRegistered(ctxFor(t), gpu); err != nil {
		t.Fatalf("registration waited for the ledger: %v", err)
	}
	r.await(t, "registered the pool", registered(gpu))
	once.Do(func() { close(release) })
	want := []events.Payload{serving, events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"}}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
}

// reserve plays the pool's part after a NeedSocket: srv serves on a new
// socket of its own and the pool desires it. It returns the new socket.
func (r *registrarUnderTest) reserve(t *testing.T, srv *grpcapi.PoolServer, need *NeedSocket) string {
	t.Helper()
	r.sockets++
	sock := filepath.Join(filepath.Dir(need.Socket), fmt.Sprintf("%s.%d.sock", strings.ReplaceAll(need.Pool, "/", "_"), r.sockets))
	if err := srv.Reserve(sock); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Desire{Pool: need.Pool, Socket: sock})
	return sock
}

// registers counts the Registers of pool the kubelet saw since boot (taken
// and refused).
func (r *registrarUnderTest) registers(pool string, boot int) int {
	n := 0
	for _, reg := range r.kubelet.Registrations() {
		if reg.Resource == pool && reg.Boot == boot && reg.Mode == kubelettest.ModeLegacy {
			n++
		}
	}
	for _, rej := range r.kubelet.Rejections() {
		if rej.Resource == pool && rej.Boot == boot {
			n++
		}
	}
	return n
}

// A Register the kubelet refuses is tried again with a doubling backoff,
// each time on a new socket: the refused one may be held by the kubelet.
func TestRejectedRegistrationIsRetriedWithBackoffOnNewSockets(t *testing.T) {
	logs := &actortest.Log{}
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) { c.Log = zerolog.New(logs).Level(zerolog.DebugLevel) })
	const bad = "not-extended" // the kubelet wants a domain-prefixed name
	srv, sock := r.serve(t, bad)
	r.Sys.Root.Send(r.Child, &Desire{Pool: bad, Socket: sock})
	sockets := []string{sock}
	for len(sockets) < 5 {
		need := next[*NeedSocket](t, r.family)
		if need.Pool != bad || need.Socket != sockets[len(sockets)-1] || need.Lost {
			t.Fatalf("NeedSocket %+v, want one about %s, not lost", *need, sockets[len(sockets)-1])
		}
		sockets = append(sockets, r.reserve(t, srv, need))
	}
	st := r.await(t, "failed four times", func(st *Status) bool { return st.Pools[bad].Failures >= 4 })
	rej := r.kubelet.Rejections()
	if len(rej) < 4 {
		t.Fatalf("the kubelet saw %d attempts, want 4", len(rej))
	}
	for i := range 4 {
		if want := sockets[i]; rej[i].Endpoint != want {
			t.Errorf("attempt %d on %s, want %s (a new socket each time)", i+1, rej[i].Endpoint, want)
		}
	}
	reason := rej[0].Reason
	if !strings.Contains(st.Pools[bad].LastError, reason) || st.Pools[bad].Registered {
		t.Errorf("status %+v, want unregistered with the kubelet's reason %q", st.Pools[bad], reason)
	}
	var attempts []int
	// The backoff doubles from RetryInitial up to RetryMax, and the ledger
	// says how long each retry waits.
	delays := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	for i, p := range r.awaitRecorded(t, 4)[:4] {
		f, ok := p.(events.RegistrationFailed)
		if !ok {
			t.Fatalf("recorded %T, want only RegistrationFailed", p)
		}
		if f.Pool != bad || f.Socket != sockets[i] || f.Mode != "legacy" || !strings.Contains(f.Error, reason) ||
			f.KubeletHolds != "" || f.Action != "registering on a new socket in "+delays[i].String() {
			t.Errorf("recorded %+v, want the kubelet's reason %q on %s, and a new socket in %v", f, reason, sockets[i], delays[i])
		}
		attempts = append(attempts, f.Attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 3, 4}) {
		t.Errorf("attempts %v, want 1, 2, 3, 4", attempts)
	}
	// One warning for failures that repeat the same way; the ledger
	// counts the attempts.
	if warn, debug := logs.Count("warn", "registration failed"), logs.Count("debug", "registration failed"); warn != 1 || debug < 3 {
		t.Errorf("logged %d warnings and %d debug lines for four failures alike, want 1 and at least 3:\n%s", warn, debug, logs)
	}
	// The backoff spaces the attempts: 10ms, 20ms, then 40ms.
	if gap := rej[3].At.Sub(rej[2].At); gap < 40*time.Millisecond {
		t.Errorf("fourth attempt %v after the third, want at least the doubled backoff 40ms", gap)
	}

	// Undesire stops the retries; a new Desire starts counting again.
	r.Sys.Root.Send(r.Child, &Undesire{Pool: bad})
	r.Drain(t)
	for {
		m, ok := r.Heard()
		if !ok {
			break
		}
		if _, ok := m.(*NeedSocket); !ok {
			t.Fatalf("parent heard %#v", m)
		}
	}
	last := sockets[len(sockets)-1]
	sock = filepath.Join(filepath.Dir(last), "fresh.sock")
	if err := srv.Reserve(sock); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Desire{Pool: bad, Socket: sock})
	r.await(t, "failed again after a new Desire, from attempt 1", func(*Status) bool {
		for _, p := range r.recorded(t) {
			if f, ok := p.(events.RegistrationFailed); ok && f.Socket == sock {
				return f.Attempt == 1
			}
		}
		return false
	})
}

// A kubelet that is down (a dead kubelet.sock) never saw the Register: the
// same socket is tried again, no new one asked for.
func TestUnreachableKubeletIsRetriedOnTheSameSocket(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) { c.RegisterTimeout = 100 * time.Millisecond })
	if err := r.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "failed twice", func(st *Status) bool { return st.Pools[gpu].Failures >= 2 })
	r.Silent(t)
	// The probe that records the kubelet gone sleeps and dials between
	// retries: wait for its KubeletStopped and the two failures, not for
	// a count that more failures can reach first. The second failure's
	// record may land after the stop's.
	var got []events.Payload
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got = r.recorded(t)
		failed, stopped := 0, 0
		for _, p := range got {
			switch p.(type) {
			case events.RegistrationFailed:
				failed++
			case events.KubeletStopped:
				stopped++
			}
		}
		if failed >= 2 && stopped > 0 {
			break
		}
	}
	var failed, stopped int
	for _, p := range got {
		switch p := p.(type) {
		case events.RegistrationFailed:
			if failed++; failed <= 2 && (p.Socket != sock || !strings.Contains(p.Error, grpcapi.ErrKubeletUnreachable.Error()) ||
				!strings.HasPrefix(p.Action, "trying the same socket again in ")) {
				t.Errorf("recorded %+v, want an unreachable kubelet on %s, tried again", p, sock)
			}
		case events.KubeletStopped:
			// The first failure is news of the kubelet: it is down.
			stopped++
			if !strings.Contains(p.Reason, "did not reach it; kubelet.sock refuses connections") {
				t.Errorf("KubeletStopped reason %q", p.Reason)
			}
		default:
			t.Errorf("recorded %#v", p)
		}
	}
	if failed < 2 || stopped != 1 {
		t.Errorf("%d RegistrationFailed, %d KubeletStopped; want 2 or more, and 1", failed, stopped)
	}

	// The next kubelet ends the outage the ledger has.
	if err := r.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	r.await(t, "the new kubelet seen", func(st *Status) bool { return st.KubeletRestarts == 1 })
	var restarted []events.KubeletRestarted
	for deadline := time.Now().Add(5 * time.Second); len(restarted) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, p := range r.recorded(t) {
			if p, ok := p.(events.KubeletRestarted); ok {
				restarted = append(restarted, p)
			}
		}
	}
	if len(restarted) != 1 || restarted[0].StoppedAt.IsZero() {
		t.Errorf("KubeletRestarted %+v, want one naming the stop", restarted)
	}
}

func TestNewKubeletGetsEveryPoolAgainOnANewSocket(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))

	if err := r.kubelet.Restart(); err != nil { // deletes the socket
		t.Fatal(err)
	}
	since := r.kubelet.BootedAt()
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	need := next[*NeedSocket](t, r.family)
	if *need != (NeedSocket{Pool: gpu, Socket: sock, Lost: true, Reason: need.Reason}) {
		t.Errorf("NeedSocket %+v, want the lost %s", *need, sock)
	}
	sock2 := r.reserve(t, srv, need)
	regs, err := r.kubelet.RegisteredAfter(ctxFor(t), []string{gpu}, since)
	if err != nil {
		t.Fatal(err)
	}
	if regs[0].Boot != 2 || regs[0].Endpoint != sock2 {
		t.Errorf("registered %s with kubelet boot %d, want %s with boot 2", regs[0].Endpoint, regs[0].Boot, sock2)
	}
	st := r.await(t, "registered with the new kubelet", registered(gpu))
	if st.KubeletRestarts != 1 {
		t.Errorf("KubeletRestarts = %d, want 1", st.KubeletRestarts)
	}
	want := []events.Payload{
		events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"},
		events.KubeletRestarted{Socket: r.kubelet.RegistrationSocket()},
		events.PluginRegistered{Pool: gpu, Socket: sock2, Mode: "legacy"},
	}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	r.Silent(t)
}

// The issue 14 storm: a kubelet restart empties device-plugins/ (a
// SocketRemoved per pool, each a Reconcile) and creates kubelet.sock (a
// KubeletAppeared, perhaps twice); pools re-announce, a pool restarts. Each
// pool is registered exactly once with each kubelet, whatever the order.
func TestTriggerStormsRegisterEachPoolOnce(t *testing.T) {
	pools := []string{"example.com/a", "example.com/b", "example.com/c", "example.com/d", "example.com/e", "example.com/f"}
	orders := []struct {
		name  string
		storm func(r *registrarUnderTest)
	}{
		{"sockets removed first", func(r *registrarUnderTest) {
			for range pools {
				r.Sys.Root.Send(r.Child, &Reconcile{})
			}
			r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
			r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
		}},
		{"kubelet first", func(r *registrarUnderTest) {
			r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
			for range pools {
				r.Sys.Root.Send(r.Child, &Reconcile{})
			}
			r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
		}},
		{"interleaved", func(r *registrarUnderTest) {
			for i := range pools {
				r.Sys.Root.Send(r.Child, &Reconcile{})
				if i%2 == 0 {
					r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
				}
			}
		}},
	}
	for _, tc := range orders {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
			servers := map[string]*grpcapi.PoolServer{}
			for _, p := range pools {
				srv, sock := r.serve(t, p)
				servers[p] = srv
				// Announced twice (a duplicate Serving), with reconciles.
				r.Sys.Root.Send(r.Child, &Desire{Pool: p, Socket: sock})
				r.Sys.Root.Send(r.Child, &Reconcile{})
				r.Sys.Root.Send(r.Child, &Desire{Pool: p, Socket: sock})
			}
			r.await(t, "registered every pool", func(st *Status) bool {
				for _, p := range pools {
					if !st.Pools[p].Registered {
						return false
					}
				}
				return true
			})

			if err := r.kubelet.Restart(); err != nil {
				t.Fatal(err)
			}
			tc.storm(r)
			// Each pool asks for a new socket once; the last pool also
			// restarts (a new server, a new socket) right after.
			asked := map[string]int{}
			for range pools {
				need := next[*NeedSocket](t, r.family)
				asked[need.Pool]++
				r.reserve(t, servers[need.Pool], need)
			}
			for p, n := range asked {
				if n != 1 {
					t.Errorf("%s asked for a new socket %d times, want once", p, n)
				}
			}
			r.await(t, "registered every pool with the new kubelet", func(st *Status) bool {
				for _, p := range pools {
					if !st.Pools[p].Registered {
						return false
					}
				}
				return true
			})
			last := pools[len(pools)-1]
			restarted, sock := r.serve(t, last+"-next")
			_ = restarted
			r.Sys.Root.Send(r.Child, &Desire{Pool: last, Socket: sock})
			r.Sys.Root.Send(r.Child, &Reconcile{})
			r.Sys.Root.Send(r.Child, &Desire{Pool: last, Socket: sock})
			r.await(t, "registered the restarted pool", func(st *Status) bool {
				return st.Pools[last].Registered && st.Pools[last].Socket == sock
			})
			r.Silent(t)
			for _, p := range pools {
				want := 1
				if p == last {
					want = 2 // its first server's socket, then the restarted one's
				}
				if n := r.registers(p, 2); n != want {
					t.Errorf("%s: %d Registers with the new kubelet, want %d", p, n, want)
				}
				if n := r.registers(p, 1); n != 1 {
					t.Errorf("%s: %d Registers with the first kubelet, want 1", p, n)
				}
			}
			if rej := r.kubelet.Rejections(); len(rej) != 0 {
				t.Errorf("the kubelet refused %+v", rej)
			}
		})
	}
}

func TestUndesiredPoolIsNotRegistered(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))
	r.Sys.Root.Send(r.Child, &Undesire{Pool: gpu})
	if st := r.status(t); len(st.Pools) != 0 {
		t.Errorf("status after Undesire: %+v, want no pools", st.Pools)
	}
	// A new kubelet is not given the pool.
	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	r.Silent(t)
	if n := len(r.kubelet.Registrations()); n != 1 {
		t.Errorf("%d registrations, want the one before Undesire", n)
	}
}

func TestMissingSocketIsReported(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	gone := filepath.Join(r.kubelet.DevicePluginDir(), "gone.sock")
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: gone})
	if m := next[*NeedSocket](t, r.family); m.Pool != gpu || m.Socket != gone || !m.Lost {
		t.Errorf("parent heard %+v, want the lost %s", *m, gone)
	}
	if st := r.status(t); len(st.Pools) != 0 {
		t.Errorf("a pool without its socket is still desired: %+v", st.Pools)
	}
	// Asked once: more reconciles ask nothing more until a new Desire.
	r.Sys.Root.Send(r.Child, &Reconcile{})
	r.Sys.Root.Send(r.Child, &Reconcile{})
	r.Silent(t)
	if n := len(r.kubelet.Registrations()) + len(r.kubelet.Rejections()); n != 0 {
		t.Errorf("%d Registers of a socket that is not there", n)
	}
}

func TestRegistrationsWaitForTheKubelet(t *testing.T) {
	// Short, for an attempt made without a kubelet to show, yet long
	// enough for the Register once it is up, even on a loaded machine: a
	// Register that times out is never sent again on its socket, and the
	// test serves one new socket only.
	const timeout = 250 * time.Millisecond
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{Delayed: true}, func(c *Config) { c.RegisterTimeout = timeout })
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.Sys.Root.Send(r.Child, &Reconcile{})
	r.Silent(t)
	// An attempt would time out and be recorded as failed: give it the
	// time to, as nothing else tells that no attempt is out.
	deadline := time.Now().Add(4 * timeout)
	for time.Now().Before(deadline) {
		if got := r.recorded(t); len(got) != 0 {
			t.Fatalf("recorded %+v without a kubelet", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p := r.status(t).Pools[gpu]; p.Registered || p.Failures != 0 {
		t.Errorf("status without a kubelet: %+v, want waiting (no attempt, no failure)", p)
	}

	if err := r.kubelet.Boot(); err != nil { // deletes the socket
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	sock2 := r.reserve(t, srv, next[*NeedSocket](t, r.family))
	reg, err := r.kubelet.WaitRegistered(ctxFor(t), gpu)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Endpoint != sock2 {
		t.Errorf("registered %s, want %s", reg.Endpoint, sock2)
	}
	r.await(t, "registered once the kubelet appeared", registered(gpu))
}

func TestWatcherModeRecordsWhatTheKubeletReports(t *testing.T) {
	logs := &actortest.Log{}
	r := newRegistrar(t, grpcapi.ModeWatcher, kubelettest.Options{}, func(c *Config) { c.Log = zerolog.New(logs) })
	sock := filepath.Join(r.kubelet.Dir(), "example.com_gpu.sock")
	touch(t, sock) // never dialled in watcher mode, but looked for
	send := func(m any) { r.Sys.Root.Send(r.Child, m) }
	send(&Desire{Pool: gpu, Socket: sock})
	send(&KubeletReported{Pool: gpu, Socket: sock, InfoRequested: true})
	send(&KubeletReported{Pool: gpu, Socket: sock, Reason: "plugin rejected: bad version"})
	send(&KubeletReported{Pool: gpu, Socket: sock, Reason: "plugin rejected: bad version"})
	// About a socket the pool has left: not the pool's story.
	send(&KubeletReported{Pool: gpu, Socket: sock + ".old", Registered: true})
	r.Silent(t)
	if p := r.status(t).Pools[gpu]; p.Registered || p.Failures != 2 || p.LastError != "plugin rejected: bad version" {
		t.Errorf("status after two refusals: %+v", p)
	}
	if n := logs.Count("warn", "kubelet refused the pool"); n != 1 {
		t.Errorf("logged %d warnings for two refusals alike, want 1:\n%s", n, logs)
	}
	send(&KubeletReported{Pool: gpu, Socket: sock, Registered: true})
	r.Silent(t)
	if p := r.status(t).Pools[gpu]; !p.Registered || p.Failures != 0 || p.LastError != "" {
		t.Errorf("status after the kubelet's acceptance: %+v", p)
	}
	const again = "the kubelet's plugin watcher tries again"
	want := []events.Payload{
		events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "watcher", Error: "plugin rejected: bad version", Attempt: 1, Action: again},
		events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "watcher", Error: "plugin rejected: bad version", Attempt: 2, Action: again},
		events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "watcher"},
	}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	if n := len(r.kubelet.Registrations()) + len(r.kubelet.Rejections()); n != 0 {
		t.Errorf("watcher mode called Register %d times", n)
	}
	// A new kubelet voids the registration until it reports again.
	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	send(&KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	r.Silent(t)
	if p := r.status(t).Pools[gpu]; p.Registered {
		t.Errorf("still registered after a new kubelet: %+v", p)
	}

	// The plugin watcher refused the socket as held already: the pool
	// serves on a new one, and the ledger says which path the kubelet holds.
	held := "device plugin already connected: " + sock
	send(&KubeletReported{Pool: gpu, Socket: sock, Reason: held})
	if m := next[*NeedSocket](t, r.family); m.Pool != gpu || m.Socket != sock || m.Lost {
		t.Errorf("parent heard %+v, want a new socket in place of %s", *m, sock)
	}
	wantFailed := events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "watcher", Error: held, Attempt: 1,
		KubeletHolds: sock, Action: "serving the pool on a new socket"}
	got := r.awaitRecorded(t, len(want)+2)
	if len(got) != len(want)+2 || !reflect.DeepEqual(got[len(got)-1], wantFailed) {
		t.Errorf("recorded %+v, want last %+v", got, wantFailed)
	}
}

// A failure warned of once is news again after the pool registered, from
// a new kubelet, and once the pool left the config and came back: only
// repeats in between log at debug.
func TestARefusalWarnsAgainAfterARegistrationOrANewKubelet(t *testing.T) {
	logs := &actortest.Log{}
	r := newRegistrar(t, grpcapi.ModeWatcher, kubelettest.Options{}, func(c *Config) { c.Log = zerolog.New(logs).Level(zerolog.DebugLevel) })
	sock := filepath.Join(r.kubelet.Dir(), "example.com_gpu.sock")
	touch(t, sock)
	send := func(m any) { r.Sys.Root.Send(r.Child, m) }
	const refused = "kubelet refused the pool"
	refuse := func(step string, warnings int) {
		t.Helper()
		send(&KubeletReported{Pool: gpu, Socket: sock, Reason: "plugin rejected: bad version"})
		r.Silent(t)
		if n := logs.Count("warn", refused); n != warnings {
			t.Fatalf("%s: %d warnings of the refusal, want %d:\n%s", step, n, warnings, logs)
		}
	}
	send(&Desire{Pool: gpu, Socket: sock})
	refuse("the first refusal", 1)
	refuse("the same again", 1)
	send(&KubeletReported{Pool: gpu, Socket: sock, Registered: true})
	r.await(t, "registered", registered(gpu))
	refuse("after the pool registered", 2)
	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	send(&KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	refuse("from a new kubelet", 3)
	send(&Undesire{Pool: gpu})
	send(&Desire{Pool: gpu, Socket: sock})
	refuse("after the pool left the config and came back", 4)
	if n := logs.Count("debug", refused); n != 1 {
		t.Errorf("%d debug lines of the refusal, want 1 (the repeat):\n%s", n, logs)
	}
}

// The kubelet lists a pool it registered on a ListAndWatch of the pool's
// socket. Once none is left there, past the grace and with the kubelet
// answering, it has dropped the pool's endpoint: the pool serves on a new
// socket, and the ledger says why. Streams on a socket the pool has left
// count for nothing, and a stream that opens in time keeps the pool.
func TestARegisteredPoolListedOnNoStreamRegistersAnew(t *testing.T) {
	const grace = 50 * time.Millisecond
	r, sock := registeredInWatcherMode(t, grace, true)
	send := func(m any) { r.Sys.Root.Send(r.Child, m) }
	r.NothingFor(t, 4*grace)

	// The stream ends and another opens on the same socket within the
	// grace: still listed.
	send(&Listing{Pool: gpu, Socket: sock + ".old", Open: true})
	send(&Listing{Pool: gpu, Socket: sock})
	send(&Listing{Pool: gpu, Socket: sock, Open: true})
	r.NothingFor(t, 4*grace)
	if p := r.status(t).Pools[gpu]; !p.Registered {
		t.Fatalf("status with a stream open: %+v", p)
	}

	// Its last stream ends; one on the socket it left does not count. The
	// kubelet is checked first (it answers: a probe takes a second or two),
	// after the probe the first end began and the one it asked for since:
	// three probes of 1.5s, too close to next's 5s on a loaded machine.
	send(&Listing{Pool: gpu, Socket: sock})
	if m := actortest.NextWithin[*NeedSocket](t, r.family, 15*time.Second); m.Pool != gpu || m.Socket != sock || m.Lost {
		t.Errorf("parent heard %+v, want a new socket in place of %s", *m, sock)
	}
	why := "the kubelet holds no ListAndWatch stream of the socket"
	want := events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "watcher", Error: why, Attempt: 1,
		Action: "serving the pool on a new socket"}
	if got := r.awaitRecorded(t, 2); !reflect.DeepEqual(got[1], want) {
		t.Errorf("recorded %+v, want then %+v", got, want)
	}

	// Registered anew on a socket whose stream never opens: the same,
	// as the renewal's attempt in a row (its grace doubles); n events in
	// the ledger by then.
	unlistedOn := func(s string, attempt, n int) {
		t.Helper()
		touch(t, s)
		send(&Desire{Pool: gpu, Socket: s})
		send(&KubeletReported{Pool: gpu, Socket: s, Registered: true})
		if m := next[*NeedSocket](t, r.family); m.Socket != s {
			t.Errorf("parent heard %+v, want a new socket in place of %s", *m, s)
		}
		want.Socket, want.Attempt = s, attempt
		if got := r.awaitRecorded(t, n); !reflect.DeepEqual(got[len(got)-1], want) {
			t.Errorf("recorded %+v, want last %+v", got, want)
		}
	}
	unlistedOn(sock+".2", 2, 4)

	// A new kubelet: the drops were the last one's, and its grace starts
	// over (the first renewal for it is attempt 1, a grace after).
	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	send(&KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	unlistedOn(sock+".3", 1, 7)
}

// A kubelet that dies before it opened a ListAndWatch of a pool it
// registered ends no stream: the grace with none asks whether it answers,
// and it is recorded gone rather than the pool registered anew.
func TestAKubeletThatDiesBeforeItListsIsRecordedGone(t *testing.T) {
	const grace = 50 * time.Millisecond
	r, _ := registeredInWatcherMode(t, grace, false)
	if err := r.kubelet.Stop(); err != nil { // kubelet.sock stays, refusing
		t.Fatal(err)
	}
	got := r.awaitRecorded(t, 2)
	if s, ok := got[1].(events.KubeletStopped); !ok || !strings.Contains(s.Reason, "no ListAndWatch stream of "+gpu) {
		t.Errorf("recorded %+v, want then the kubelet stopped, for want of a stream", got)
	}
	r.NothingFor(t, 4*grace)
}

// registeredInWatcherMode returns a registrar with the ListGrace given
// whose pool gpu the plugin watcher registered on the socket it returns,
// with a ListAndWatch stream open there if listing.
func registeredInWatcherMode(t *testing.T, grace time.Duration, listing bool) (*registrarUnderTest, string) {
	t.Helper()
	r := newRegistrar(t, grpcapi.ModeWatcher, kubelettest.Options{}, func(c *Config) { c.ListGrace = grace })
	sock := filepath.Join(r.kubelet.Dir(), "example.com_gpu.sock")
	touch(t, sock)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	if listing {
		r.Sys.Root.Send(r.Child, &Listing{Pool: gpu, Socket: sock, Open: true})
	}
	r.Sys.Root.Send(r.Child, &KubeletReported{Pool: gpu, Socket: sock, Registered: true})
	return r, sock
}

// A kubelet that holds an endpoint for the socket path already (left by
// an older daemon, or by someone's second Register) refuses it as
// "already connected", and would refuse it until it restarts: the ledger
// names the path it holds, and the pool is registered on a new socket.
func TestAlreadyConnectedRegistersOnANewSocket(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	srv, sock := r.serve(t, gpu)
	// Someone else registered the path: the kubelet is connected to it.
	if err := grpcapi.RegisterWithKubelet(ctxFor(t), r.kubelet.RegistrationSocket(), gpu, filepath.Base(sock), nil); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	need := next[*NeedSocket](t, r.family)
	if need.Pool != gpu || need.Socket != sock || need.Lost {
		t.Fatalf("NeedSocket %+v, want a new socket in place of %s", *need, sock)
	}
	sock2 := r.reserve(t, srv, need)
	r.await(t, "registered on the new socket", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock2
	})
	got := r.awaitRecorded(t, 2)
	f, ok := got[0].(events.RegistrationFailed)
	if !ok || f.Socket != sock || f.KubeletHolds != sock || !strings.Contains(f.Error, "already connected") ||
		f.Action != "serving the pool on a new socket" {
		t.Errorf("recorded first %+v, want the refusal naming the held %s and the new socket", got[0], sock)
	}
	if want := (events.PluginRegistered{Pool: gpu, Socket: sock2, Mode: "legacy"}); len(got) != 2 || got[1] != want {
		t.Errorf("recorded %+v, want then %+v", got, want)
	}
	r.Silent(t)
	if n := len(r.kubelet.Rejections()); n != 1 {
		t.Errorf("the kubelet refused %d Registers, want 1", n)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A kubelet that does not serve kubelet.sock (watcher mode only) still
// registers what its plugin watcher finds.
func TestWatcherModeWithoutKubeletSocket(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeWatcher, kubelettest.Options{}, func(c *Config) {
		c.KubeletSocket = filepath.Join(filepath.Dir(c.KubeletSocket), "none.sock")
	})
	sock := filepath.Join(r.kubelet.Dir(), "example.com_gpu.sock")
	touch(t, sock)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.Sys.Root.Send(r.Child, &KubeletReported{Pool: gpu, Socket: sock, Registered: true})
	r.await(t, "registered by the plugin watcher", registered(gpu))
}

// blockingKubelet is a kubelet's Registration server that holds every
// Register until release is closed, then takes it.
type blockingKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	got     chan *pluginapi.RegisterRequest
	release chan struct{}
	// cut hears each Register its caller gave up on (its context ended).
	cut chan *pluginapi.RegisterRequest
	lis *net.UnixListener
}

func (k *blockingKubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.got <- req
	select {
	case <-k.release:
		return &pluginapi.Empty{}, nil
	case <-ctx.Done():
		k.cut <- req
		return nil, ctx.Err()
	}
}

// serveBlockingKubelet serves a blockingKubelet on path.
func serveBlockingKubelet(t *testing.T, path string) *blockingKubelet {
	t.Helper()
	k := &blockingKubelet{got: make(chan *pluginapi.RegisterRequest, 4), release: make(chan struct{}), cut: make(chan *pluginapi.RegisterRequest, 4)}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	k.lis = lis
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return k
}

// A kubelet that restarts while a Register is out may have taken it, or
// its predecessor did: the registrar cannot tell, so it registers with the
// new one on a new socket, never the same path again.
func TestKubeletRestartDuringRegisterMovesToANewSocket(t *testing.T) {
	r, old, srv, sock := registeringWithABlockingKubelet(t)
	kubeletSock := filepath.Join(filepath.Dir(sock), "kubelet.sock")
	if req := <-old.got; req.Endpoint != filepath.Base(sock) {
		t.Fatalf("first Register of %s", req.Endpoint)
	}
	// The kubelet restarts under the Register: a new kubelet.sock.
	if err := os.Remove(kubeletSock); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // a clock tick: the next file's mtime differs
	newer := serveBlockingKubelet(t, kubeletSock)
	close(newer.release)
	close(old.release)
	need := next[*NeedSocket](t, r.family)
	if need.Pool != gpu || need.Socket != sock || need.Lost {
		t.Fatalf("NeedSocket %+v, want a new socket in place of %s", *need, sock)
	}
	sock2 := r.reserve(t, srv, need)
	if req := <-newer.got; req.Endpoint != filepath.Base(sock2) {
		t.Errorf("the new kubelet was asked to register %s, want %s", req.Endpoint, filepath.Base(sock2))
	}
	r.await(t, "registered with the new kubelet", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock2 && st.KubeletRestarts == 1
	})
	select {
	case req := <-newer.got:
		t.Errorf("a second Register with the new kubelet: %+v", req)
	default:
	}
}

// A kubelet that stops taking dials with a Register held, its socket file
// left in place (the same file: no new kubelet), is recorded gone; its
// answer to that Register, arriving after, is no registration: the ledger
// would say the pool registered with a kubelet it has recorded down. The
// pool registers anew with the next kubelet.
func TestARegisterAnsweredAfterTheKubeletWasRecordedGoneIsNotRecorded(t *testing.T) {
	r, k, srv, sock := registeringWithABlockingKubelet(t)
	kubeletSock := filepath.Join(filepath.Dir(sock), "kubelet.sock")
	select {
	case <-k.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no Register went out")
	}
	// No more dials taken, the socket file left where it was; the
	// connection with the Register on it stays.
	k.lis.SetUnlinkOnClose(false)
	if err := k.lis.Close(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &CheckKubelet{Why: "a ListAndWatch stream ended"})
	gone := func() bool {
		return slices.ContainsFunc(r.recorded(t), func(p events.Payload) bool { _, ok := p.(events.KubeletStopped); return ok })
	}
	for deadline := time.Now().Add(5 * time.Second); !gone(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet was never recorded gone: %+v", r.recorded(t))
		}
	}
	close(k.release)
	time.Sleep(200 * time.Millisecond) // the answer reaches the registrar
	for _, p := range r.recorded(t) {
		if p, ok := p.(events.PluginRegistered); ok {
			t.Fatalf("recorded %+v, answered by the kubelet recorded gone", p)
		}
	}
	if st := r.status(t); st.Pools[gpu].Registered {
		t.Errorf("status %+v: registered while the kubelet is gone", st.Pools[gpu])
	}

	if err := os.Remove(kubeletSock); err != nil {
		t.Fatal(err)
	}
	back := serveBlockingKubelet(t, kubeletSock)
	close(back.release)
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: kubeletSock})
	need := next[*NeedSocket](t, r.family)
	sock2 := r.reserve(t, srv, need)
	r.await(t, "registered with the next kubelet", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock2
	})
}

// A kubelet the ledger has gone (a stop recorded before this run) is
// dialled at start: it came back while the daemon was away, and
// KubeletRestarted ends the recorded outage.
func TestKubeletRecordedGoneBeforeIsBackWhenItAnswers(t *testing.T) {
	stopped := time.Now().Add(-time.Minute).Round(0).UTC()
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) { c.KubeletDownSince = stopped })
	var restarted []events.KubeletRestarted
	for deadline := time.Now().Add(5 * time.Second); len(restarted) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, p := range r.recorded(t) {
			if p, ok := p.(events.KubeletRestarted); ok {
				restarted = append(restarted, p)
			}
		}
	}
	if len(restarted) != 1 || !restarted[0].StoppedAt.Equal(stopped) {
		t.Errorf("KubeletRestarted %+v, want one ending the stop at %s", restarted, stopped)
	}
	// The pool then registers as with any kubelet.
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered with the kubelet found at start", registered(gpu))
}

// TestKubeletGoneWhileAProbeIsOutIsRecorded: a stream ends and the
// registrar probes the kubelet; meanwhile that kubelet restarts, and the
// new one dies. The probe's outcome is void (it began with the kubelet
// before), so the check asked for meanwhile must still run: the outage is
// recorded (seed 438426 of the daemon's model test lost it).
func TestKubeletGoneWhileAProbeIsOutIsRecorded(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered", registered(gpu))
	// The probe dials now, and again after probeWaits.
	r.Sys.Root.Send(r.Child, &CheckKubelet{Why: "a ListAndWatch stream ended"})
	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	if err := r.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &CheckKubelet{Why: "a ListAndWatch stream ended"})
	deadline := time.Now().Add(2*probeWaits[len(probeWaits)-1] + 5*time.Second)
	for time.Now().Before(deadline) {
		for _, p := range r.recorded(t) {
			if _, ok := p.(events.KubeletStopped); ok {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no KubeletStopped recorded; the ledger holds %+v", r.recorded(t))
}

// A kubelet recorded gone is dialled every recheckEvery by one timer,
// however often the registrar crashed: each restart used to start a loop
// of its own beside the last one's.
func TestOneRecheckLoopOutlivesCrashes(t *testing.T) {
	const every, window = 20 * time.Millisecond, 600 * time.Millisecond
	var dials atomic.Int64
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		c.KubeletDownSince = time.Now().Add(-time.Minute)
		c.recheckEvery = every
		c.redial = func(string) error { dials.Add(1); return syscall.ECONNREFUSED }
	})
	for range 3 {
		r.Sys.Root.Send(r.Child, &Crash{Reason: "test"})
		next[*NeedDesires](t, r.family)
	}
	awaitDials(t, &dials, 1)
	// A loop is never faster than its timer: a busy machine makes it
	// slower, never more dials. The bound is of the time that passed, as
	// the test may wake late.
	from, began := dials.Load(), time.Now()
	time.Sleep(window)
	n, took := dials.Load()-from, time.Since(began)
	if most := int64(took/every) + 2; n > most {
		t.Errorf("%d dials in %s, want at most %d: more than one recheck loop", n, took, most)
	}
	noKubeletRestarted(t, r)
}

// awaitDials waits until dials reaches n.
func awaitDials(t *testing.T, dials *atomic.Int64, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); dials.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d dials of the kubelet recorded gone, want %d", dials.Load(), n)
		}
	}
}

// noKubeletRestarted checks that r recorded no KubeletRestarted: the
// kubelet recorded gone never answered.
func noKubeletRestarted(t *testing.T, r *registrarUnderTest) {
	t.Helper()
	for _, p := range r.recorded(t) {
		if _, ok := p.(events.KubeletRestarted); ok {
			t.Errorf("recorded %+v of a kubelet that never answered", p)
		}
	}
}

// The kubelet recorded gone is dialled for as long as it is: also when its
// socket was away as a recheck began, and back, the same one, when the
// dial was refused.
func TestARecheckOfASocketAwayAndBackDialsAgain(t *testing.T) {
	const every = 20 * time.Millisecond
	var dials atomic.Int64
	var away atomic.Bool
	var sock, moved string
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		sock = c.KubeletSocket
		moved = sock + ".away"
		c.KubeletDownSince = time.Now().Add(-time.Minute)
		c.recheckEvery = every
		c.redial = func(string) error {
			if away.CompareAndSwap(true, false) {
				if err := os.Rename(moved, sock); err != nil {
					t.Error(err)
				}
			}
			dials.Add(1)
			return syscall.ECONNREFUSED
		}
	})
	awaitDials(t, &dials, 1)
	if err := os.Rename(sock, moved); err != nil {
		t.Fatal(err)
	}
	away.Store(true)
	for deadline := time.Now().Add(5 * time.Second); away.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no recheck with the socket away")
		}
	}
	awaitDials(t, &dials, dials.Load()+3)
	noKubeletRestarted(t, r)
}

// registeringWithABlockingKubelet starts a registrar against a kubelet
// that holds every Register (serveBlockingKubelet), serves gpu and desires
// it: a Register of its socket goes out and is held.
func registeringWithABlockingKubelet(t *testing.T, tweaks ...func(*Config)) (*registrarUnderTest, *blockingKubelet, *grpcapi.PoolServer, string) {
	t.Helper()
	dir := kubelettest.ShortTempDir(t)
	kubeletSock := filepath.Join(dir, "kubelet.sock")
	k := serveBlockingKubelet(t, kubeletSock)
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cfg := Config{Recorder: ledger.NewRecorder(l, "boot-1", nil), Mode: grpcapi.ModeLegacy,
		KubeletSocket: kubeletSock, RegisterTimeout: 5 * time.Second, RetryInitial: 10 * time.Millisecond, Log: zerolog.Nop()}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	f := spawnFamily(t, Props(cfg))
	r := &registrarUnderTest{family: f, log: l}
	srv := grpcapi.NewPoolServer(gpu, emptyBackend{}, grpcapi.PoolServerOptions{})
	sock := filepath.Join(dir, "example.com_gpu.0.sock")
	if err := srv.Serve(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })

	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	return r, k, srv, sock
}

// A crash does not end a Register that is out: the restarted registrar
// asks for every pool again (NeedDesires), and a pool's new socket is
// registered only once the Register still out is answered, so the
// kubelet never has two of one pool in flight.
func TestACrashedRegistrarWaitsForTheRegisterOut(t *testing.T) {
	r, k, srv, sock := registeringWithABlockingKubelet(t)
	select {
	case req := <-k.got:
		if req.Endpoint != filepath.Base(sock) {
			t.Fatalf("first Register of %s", req.Endpoint)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Register went out")
	}
	r.Sys.Root.Send(r.Child, &Crash{Reason: "test"})
	next[*NeedDesires](t, r.family)
	sock2 := r.reserve(t, srv, &NeedSocket{Pool: gpu, Socket: sock})
	select {
	case req := <-k.got:
		t.Fatalf("a second Register (%s) went out while the first was", req.Endpoint)
	case <-time.After(200 * time.Millisecond):
	}
	close(k.release)
	select {
	case req := <-k.got:
		if req.Endpoint != filepath.Base(sock2) {
			t.Errorf("after the first was answered the kubelet was asked to register %s, want %s", req.Endpoint, filepath.Base(sock2))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the new socket was never registered")
	}
	r.await(t, "registered on the new socket", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock2
	})
}

// A registrar stopped for good (the daemon stops) ends the Register it
// has out: nothing is left to take its answer, and its goroutine and
// connection to kubelet.sock would outlive the daemon's Stop until the
// Register timed out.
func TestAStoppedRegistrarEndsTheRegisterOut(t *testing.T) {
	r, k, _, sock := registeringWithABlockingKubelet(t, func(c *Config) { c.RegisterTimeout = time.Hour })
	select {
	case <-k.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no Register went out")
	}
	if err := r.Sys.Root.StopFuture(r.Child).Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-k.cut:
		if req.Endpoint != filepath.Base(sock) {
			t.Errorf("the kubelet saw a Register of %s end, want %s", req.Endpoint, filepath.Base(sock))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Register of a stopped registrar is still out")
	}
}

// The answer to a Register this registrar did not send (its predecessor's,
// under the same name: the node restarted) is not taken for the one it
// has out: no second Register goes out meanwhile, and the pool keeps its
// socket.
func TestAnAnswerToAnotherRegistrarsRegisterIsNotOurs(t *testing.T) {
	r, k, _, sock := registeringWithABlockingKubelet(t)
	dir := filepath.Dir(sock)
	select {
	case <-k.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no Register went out")
	}
	r.Sys.Root.Send(r.Child, &registerResult{pool: gpu, socket: filepath.Join(dir, "example.com_gpu.earlier.sock"), kubelet: statKubelet(filepath.Join(dir, "kubelet.sock"))})
	r.NothingFor(t, 200*time.Millisecond)
	select {
	case req := <-k.got:
		t.Fatalf("a second Register (%s) went out while the first was", req.Endpoint)
	default:
	}
	close(k.release)
	r.await(t, "registered on its socket", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock
	})
}

// A stream the kubelet opens on a socket the pool has left is not
// counted: the pool never tells its end once it stops serving there, and
// each socket left that way would stay in the count for good.
func TestAStreamOnASocketLeftIsNotCounted(t *testing.T) {
	r := &registrar{desired: map[string]desire{gpu: {socket: "new.sock"}}, listing: map[string]int{},
		unlisted: map[string]*time.Timer{}, drops: map[string]int{}}
	r.listed(nil, &Listing{Pool: gpu, Socket: "old.sock", Open: true})
	r.listed(nil, &Listing{Pool: gpu, Socket: "new.sock", Open: true})
	if want := map[string]int{"new.sock": 1}; !reflect.DeepEqual(r.listing, want) {
		t.Errorf("streams counted %v, want %v", r.listing, want)
	}
}

// A socket removed while its Register is out (an operator's rm as the
// kubelet registers it) is found gone once the kubelet answers: the
// reconcile the removal asked for passed the pool over, and the kubelet,
// still connected to it, never drops it. The pool serves on a new socket.
func TestASocketRemovedDuringItsRegisterIsFoundGone(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{BeforeConnect: func(string, string) {
		once.Do(func() { close(reached) })
		<-release
	}})
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	select {
	case <-reached:
	case <-time.After(5 * time.Second):
		t.Fatal("the Register never reached the kubelet")
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Reconcile{}) // as the socket watcher's removal asks
	r.Drain(t)
	close(release)
	if m := next[*NeedSocket](t, r.family); m.Pool != gpu || m.Socket != sock || !m.Lost {
		t.Errorf("parent heard %+v, want a new socket in place of the lost %s", *m, sock)
	}
}

// A kubelet.sock removed by hand while the kubelet runs has the kubelet
// recorded gone (nothing tells that from a clean stop), and no recheck
// finds it again. Its plugin watcher still registers what serves in
// plugins_registry: only a running kubelet does that, so the outage ends
// and the pool is registered.
func TestAPluginWatcherRegistrationEndsAKubeletSocketRemovedByHand(t *testing.T) {
	r, _ := registeredInWatcherMode(t, time.Hour, true)
	r.await(t, "registered", registered(gpu))
	if err := os.Remove(r.kubelet.RegistrationSocket()); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &CheckKubelet{Why: "kubelet.sock was removed"})
	r.await(t, "unregistered with the kubelet recorded gone", func(st *Status) bool { return !st.Pools[gpu].Registered })

	const nic = "example.com/nic"
	nicSock := filepath.Join(r.kubelet.Dir(), "example.com_nic.sock")
	touch(t, nicSock)
	r.Sys.Root.Send(r.Child, &Desire{Pool: nic, Socket: nicSock})
	r.Sys.Root.Send(r.Child, &KubeletReported{Pool: nic, Socket: nicSock, Registered: true, At: time.Now()})
	r.await(t, "registered by the running kubelet's plugin watcher", func(st *Status) bool {
		return st.Pools[nic].Registered && st.Pools[gpu].Registered
	})
	got := r.awaitRecorded(t, 4)
	if len(got) != 4 {
		t.Fatalf("recorded %+v, want 4 events", got)
	}
	if _, ok := got[1].(events.KubeletStopped); !ok {
		t.Errorf("recorded second %+v, want KubeletStopped", got[1])
	}
	if k, ok := got[2].(events.KubeletRestarted); !ok || k.StoppedAt.IsZero() {
		t.Errorf("recorded third %+v, want KubeletRestarted ending the stop", got[2])
	}
	if want := (events.PluginRegistered{Pool: nic, Socket: nicSock, Mode: "watcher"}); got[3] != want {
		t.Errorf("recorded last %+v, want %+v", got[3], want)
	}
}

// A registration notice the pool heard before the kubelet stopped (clean:
// kubelet.sock went with it) may reach the registrar after the stop is
// recorded, held in a restarting pool's mailbox. It is no sign of a
// kubelet back: the stop stands, and the pool stays unregistered.
func TestANoticeFromBeforeAStopEndsNoOutage(t *testing.T) {
	r, sock := registeredInWatcherMode(t, time.Hour, true)
	r.await(t, "registered", registered(gpu))
	heard := time.Now()
	if err := os.Remove(r.kubelet.RegistrationSocket()); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &CheckKubelet{Why: "kubelet.sock was removed"})
	r.await(t, "unregistered with the kubelet recorded gone", func(st *Status) bool { return !st.Pools[gpu].Registered })
	r.Sys.Root.Send(r.Child, &KubeletReported{Pool: gpu, Socket: sock, Registered: true, At: heard})
	if st := r.status(t); st.Pools[gpu].Registered {
		t.Errorf("a notice heard before the stop registered the pool: %+v", st.Pools[gpu])
	}
	got := r.recorded(t)
	for _, p := range got {
		if _, ok := p.(events.KubeletRestarted); ok {
			t.Errorf("recorded %+v: a notice heard before the stop ended it", got)
		}
	}
}

// A failure that names the pool's socket (a dial's error names the path)
// names a new one at each retry, as the pool serves on a new socket each
// time: it is the same failure all the same, warned of once.
func TestFailuresThatNameTheSocketWarnOnce(t *testing.T) {
	refusal := func(socket string) string {
		return "failed to dial device plugin: dial unix " + socket + ": connect: permission denied"
	}
	t.Run("legacy", func(t *testing.T) {
		logs := &actortest.Log{}
		r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{ConnectError: func(_, socket string) error {
			return errors.New(refusal(socket))
		}}, func(c *Config) { c.Log = zerolog.New(logs).Level(zerolog.DebugLevel) })
		srv, sock := r.serve(t, gpu)
		r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
		for range 4 {
			r.reserve(t, srv, next[*NeedSocket](t, r.family))
		}
		r.await(t, "failed four times", func(st *Status) bool { return st.Pools[gpu].Failures >= 4 })
		if warn, debug := logs.Count("warn", "registration failed"), logs.Count("debug", "registration failed"); warn != 1 || debug < 3 {
			t.Errorf("logged %d warnings and %d debug lines for four failures alike but for their socket, want 1 and at least 3:\n%s", warn, debug, logs)
		}
	})
	t.Run("watcher", func(t *testing.T) {
		logs := &actortest.Log{}
		r := newRegistrar(t, grpcapi.ModeWatcher, kubelettest.Options{}, func(c *Config) { c.Log = zerolog.New(logs) })
		for i := range 3 {
			sock := filepath.Join(r.kubelet.Dir(), fmt.Sprintf("example.com_gpu.%d.sock", i))
			touch(t, sock)
			r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
			r.Sys.Root.Send(r.Child, &KubeletReported{Pool: gpu, Socket: sock, Reason: "RegisterPlugin error -- plugin registration failed with err: " + refusal(sock)})
		}
		r.Silent(t)
		if p := r.status(t).Pools[gpu]; p.Failures != 3 {
			t.Fatalf("status after three refusals: %+v", p)
		}
		if n := logs.Count("warn", "kubelet refused the pool"); n != 1 {
			t.Errorf("logged %d warnings for three refusals alike but for their socket, want 1:\n%s", n, logs)
		}
	})
}
