package registrar

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/devledger/devledger/actors/internal/actortest"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
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
	kubelet *kubelettest.Kubelet
	log     *store.Log
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
		RetryInitial: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond, Log: zerolog.Nop()}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	f := spawnFamily(t, Props(cfg))
	return &registrarUnderTest{family: f, kubelet: k, log: l}
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
// durable; the registrar writes PluginRegistered only after it, so that
// the ledger tells the story in order.
func TestRegisteredIsRecordedAfterThePoolsServing(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	_, sock := r.serve(t, gpu)
	serving := make(chan struct{})
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock, Recorded: serving})
	if _, err := r.kubelet.WaitRegistered(ctxFor(t), gpu); err != nil {
		t.Fatalf("registration waited for the pool's append: %v", err)
	}
	r.await(t, "registered the pool", registered(gpu))
	time.Sleep(50 * time.Millisecond) // time enough for a wrongly early append
	if got := r.recorded(t); len(got) != 0 {
		t.Fatalf("recorded %+v before the pool's PluginServing", got)
	}
	close(serving)
	want := []events.Payload{events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"}}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
}

func TestRejectedRegistrationIsRetriedWithBackoff(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	const bad = "not-extended" // the kubelet wants a domain-prefixed name
	_, sock := r.serve(t, bad)
	r.Sys.Root.Send(r.Child, &Desire{Pool: bad, Socket: sock})
	st := r.await(t, "failed three times", func(st *Status) bool { return st.Pools[bad].Failures >= 3 })
	rej := r.kubelet.Rejections()
	if len(rej) == 0 {
		t.Fatal("the kubelet saw no attempt")
	}
	reason := rej[0].Reason
	if !strings.Contains(st.Pools[bad].LastError, reason) || st.Pools[bad].Registered {
		t.Errorf("status %+v, want unregistered with the kubelet's reason %q", st.Pools[bad], reason)
	}
	var attempts []int
	for _, p := range r.awaitRecorded(t, 3) {
		f, ok := p.(events.RegistrationFailed)
		if !ok {
			t.Fatalf("recorded %T, want only RegistrationFailed", p)
		}
		if f.Pool != bad || f.Socket != sock || f.Mode != "legacy" || !strings.Contains(f.Error, reason) {
			t.Errorf("recorded %+v, want the kubelet's reason %q", f, reason)
		}
		attempts = append(attempts, f.Attempt)
	}
	if len(attempts) < 3 || !slices.Equal(attempts[:3], []int{1, 2, 3}) {
		t.Errorf("attempts %v, want 1, 2, 3, ...", attempts)
	}
	// The backoff spaces the attempts: 10ms, 20ms, then 40ms.
	if len(rej) >= 3 {
		if gap := rej[2].At.Sub(rej[1].At); gap < 20*time.Millisecond {
			t.Errorf("third attempt %v after the second, want at least the doubled backoff 20ms", gap)
		}
	}

	// Undesire stops the retries; a new Desire starts counting again.
	r.Sys.Root.Send(r.Child, &Undesire{Pool: bad, Socket: sock})
	r.Silent(t)
	// The ledger may still be catching up with the earlier attempts (2, 3,
	// ...); the new Desire's first failure is the second attempt 1.
	firsts := func() int {
		n := 0
		for _, p := range r.recorded(t) {
			if f, ok := p.(events.RegistrationFailed); ok && f.Attempt == 1 {
				n++
			}
		}
		return n
	}
	r.Sys.Root.Send(r.Child, &Desire{Pool: bad, Socket: sock})
	r.await(t, "failed again after a new Desire, from attempt 1", func(*Status) bool { return firsts() == 2 })
}

func TestNewKubeletGetsEveryPoolAgain(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))

	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	since := r.kubelet.BootedAt()
	if err := srv.Reserve(sock); err != nil { // the restart deleted the socket
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	regs, err := r.kubelet.RegisteredAfter(ctxFor(t), []string{gpu}, since)
	if err != nil {
		t.Fatal(err)
	}
	if regs[0].Boot != 2 {
		t.Errorf("registered with kubelet boot %d, want 2", regs[0].Boot)
	}
	st := r.await(t, "registered with the new kubelet", registered(gpu))
	if st.KubeletRestarts != 1 {
		t.Errorf("KubeletRestarts = %d, want 1", st.KubeletRestarts)
	}
	want := []events.Payload{
		events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"},
		events.KubeletRestarted{Socket: r.kubelet.RegistrationSocket()},
		events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"},
	}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
}

func TestUndesiredPoolIsNotRegistered(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))
	r.Sys.Root.Send(r.Child, &Undesire{Pool: gpu, Socket: sock})
	if st := r.status(t); len(st.Pools) != 0 {
		t.Errorf("status after Undesire: %+v, want no pools", st.Pools)
	}
	// A new kubelet is not given the pool.
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
	if m := next[*SocketMissing](t, r.family); *m != (SocketMissing{Pool: gpu, Socket: gone}) {
		t.Errorf("parent heard %+v", *m)
	}
	if st := r.status(t); len(st.Pools) != 0 {
		t.Errorf("a pool without its socket is still desired: %+v", st.Pools)
	}

	// A socket the kubelet deleted on its restart is found missing too.
	_, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "registered the pool", registered(gpu))
	if err := r.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	if m := next[*SocketMissing](t, r.family); *m != (SocketMissing{Pool: gpu, Socket: sock}) {
		t.Errorf("parent heard %+v", *m)
	}
	r.Silent(t)
	if n := len(r.kubelet.Registrations()); n != 1 {
		t.Errorf("%d registrations, want only the one before the restart", n)
	}
}

func TestRegistrationsWaitForTheKubelet(t *testing.T) {
	const timeout = 50 * time.Millisecond
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

	if err := r.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reserve(sock); err != nil { // the kubelet's boot deleted it
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	if _, err := r.kubelet.WaitRegistered(ctxFor(t), gpu); err != nil {
		t.Fatal(err)
	}
	r.await(t, "registered once the kubelet appeared", registered(gpu))
}

func TestWatcherModeRecordsWhatTheKubeletReports(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeWatcher, kubelettest.Options{})
	sock := filepath.Join(r.kubelet.PluginsRegistryDir(), "example.com_gpu.sock") // never dialled in watcher mode
	send := func(m any) { r.Sys.Root.Send(r.Child, m) }
	send(&Desire{Pool: gpu, Socket: sock})
	send(&KubeletReported{Pool: gpu, Socket: sock, InfoRequested: true})
	send(&KubeletReported{Pool: gpu, Socket: sock, Reason: "plugin rejected: bad version"})
	send(&KubeletReported{Pool: gpu, Socket: sock, Reason: "plugin rejected: bad version"})
	r.Silent(t)
	if p := r.status(t).Pools[gpu]; p.Registered || p.Failures != 2 || p.LastError != "plugin rejected: bad version" {
		t.Errorf("status after two refusals: %+v", p)
	}
	send(&KubeletReported{Pool: gpu, Socket: sock, Registered: true})
	r.Silent(t)
	if p := r.status(t).Pools[gpu]; !p.Registered || p.Failures != 0 || p.LastError != "" {
		t.Errorf("status after the kubelet's acceptance: %+v", p)
	}
	want := []events.Payload{
		events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "watcher", Error: "plugin rejected: bad version", Attempt: 1},
		events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "watcher", Error: "plugin rejected: bad version", Attempt: 2},
		events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "watcher"},
	}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	if n := len(r.kubelet.Registrations()) + len(r.kubelet.Rejections()); n != 0 {
		t.Errorf("watcher mode called Register %d times", n)
	}
	// A new kubelet voids the registration until it reports again.
	send(&KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	r.Silent(t)
	if p := r.status(t).Pools[gpu]; p.Registered {
		t.Errorf("still registered after a new kubelet: %+v", p)
	}
}

// A Register the kubelet refuses because it is connected to the socket
// path already is settled by asking the parent whether the kubelet watches
// the pool's current server (CheckWatched). When it does, the registration
// stands: acknowledged, nothing failed, no Register again.
func TestAlreadyConnectedToTheCurrentServerStands(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	_, sock := r.registeredAndWatched(t, gpu)
	// Desired again (say the registrar lost what it knew): the kubelet,
	// connected, refuses.
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	check := next[*CheckWatched](t, r.family)
	if check.Pool != gpu || check.Socket != sock {
		t.Fatalf("CheckWatched %+v", *check)
	}
	r.Sys.Root.Send(r.Child, &Watched{Pool: check.Pool, Socket: check.Socket, Gen: check.Gen, Epoch: check.Epoch, Watching: true})
	st := r.await(t, "acknowledged the registration that stands", func(st *Status) bool {
		return st.Pools[gpu].Registered && len(r.recorded(t)) == 2
	})
	if p := st.Pools[gpu]; p.Failures != 0 || p.LastError != "" {
		t.Errorf("status %+v, want no failure", p)
	}
	for _, p := range r.recorded(t) {
		if _, ok := p.(events.PluginRegistered); !ok {
			t.Errorf("recorded %+v, want PluginRegistered only", p)
		}
	}
	r.Silent(t)
	if n := len(r.kubelet.Rejections()); n != 1 {
		t.Errorf("the kubelet refused %d Registers, want 1 (no retry)", n)
	}
}

// When the kubelet's connection is to a server that is gone (a crashed
// pool's, which it has not noticed yet), the refusal is a failure: the
// Register is tried again until the kubelet, having noticed, takes it.
func TestAlreadyConnectedToAServerThatIsGoneIsRetried(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{})
	old, sock := r.registeredAndWatched(t, gpu)
	// The pool restarts: a new server on the same path, registered while
	// the kubelet still holds its connection to the old one.
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	check := next[*CheckWatched](t, r.family)
	if err := old.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.serve(t, gpu)
	// Each refusal is answered: not watched. The kubelet takes a retry
	// once it noticed the old server go.
	answered := 0
	deadline := time.Now().Add(5 * time.Second)
	for taken := false; !taken; {
		r.Sys.Root.Send(r.Child, &Watched{Pool: check.Pool, Socket: check.Socket, Gen: check.Gen, Epoch: check.Epoch, Watching: false})
		answered++
		for {
			if m, ok := r.Heard(); ok {
				if check, ok = m.(*CheckWatched); !ok {
					t.Fatalf("parent heard %#v", m)
				}
				break
			}
			if n := registrations(r.kubelet, gpu); n == 2 {
				taken = true
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no retry taken or refused within 5s (%d answered)", answered)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	st := r.await(t, "registered the new server", registered(gpu))
	var failed []events.RegistrationFailed
	for _, p := range r.recorded(t) {
		if f, ok := p.(events.RegistrationFailed); ok {
			failed = append(failed, f)
		}
	}
	if len(failed) != answered || !strings.Contains(failed[0].Error, "not watching the pool's current server") {
		t.Errorf("recorded failures %+v, want %d naming the gone server", failed, answered)
	}
	if st.Pools[gpu].Failures != 0 {
		t.Errorf("status %+v after the registration", st.Pools[gpu])
	}
}

// registrations counts the Registers of pool the kubelet took.
func registrations(k *kubelettest.Kubelet, pool string) int {
	n := 0
	for _, reg := range k.Registrations() {
		if reg.Resource == pool {
			n = max(n, reg.Count)
		}
	}
	return n
}

// registeredAndWatched serves pool, has it registered, and waits until the
// kubelet watches it (its ListAndWatch sent a list).
func (r *registrarUnderTest) registeredAndWatched(t *testing.T, pool string) (*grpcapi.PoolServer, string) {
	t.Helper()
	srv, sock := r.serve(t, pool)
	r.Sys.Root.Send(r.Child, &Desire{Pool: pool, Socket: sock})
	r.await(t, "registered the pool", registered(pool))
	if _, err := r.kubelet.WaitDevices(ctxFor(t), pool, func([]*pluginapi.Device) bool { return true }); err != nil {
		t.Fatal(err)
	}
	return srv, sock
}
