package registrar

import (
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
)

// The daemon starts with no kubelet.sock. The kubelet then starts: it
// empties device-plugins/ (a SocketRemoved per pool, each a Reconcile
// here) and creates kubelet.sock (KubeletAppeared), in that order. A
// Reconcile handled once kubelet.sock exists but before KubeletAppeared
// must not swallow the kubelet's appearance: it is a new kubelet all the
// same (KubeletRestarted), and ends the outage the ledger holds, so the
// pool's registration with it counts at once.
func TestAKubeletFirstSeenByAReconcileIsANewKubelet(t *testing.T) {
	for _, down := range []bool{false, true} {
		name := "no outage recorded"
		if down {
			name = "outage recorded before this run"
		}
		t.Run(name, func(t *testing.T) {
			stopped := time.Now().Add(-time.Minute).Round(0).UTC()
			r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{Delayed: true}, func(c *Config) {
				if down {
					c.KubeletDownSince = stopped
				}
			})
			srv, sock := r.serve(t, gpu)
			r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
			r.Drain(t)

			if err := r.kubelet.Boot(); err != nil { // deletes sock, then makes kubelet.sock
				t.Fatal(err)
			}
			r.Sys.Root.Send(r.Child, &Reconcile{}) // the SocketRemoved of sock
			r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
			need := next[*NeedSocket](t, r.family)
			if !need.Lost || need.Socket != sock {
				t.Fatalf("NeedSocket %+v, want the lost %s", *need, sock)
			}
			sock2 := r.reserve(t, srv, need)
			if _, err := r.kubelet.WaitRegistered(ctxFor(t), gpu); err != nil {
				t.Fatal(err)
			}
			// Well before the 5s recheck of a kubelet recorded gone.
			deadline := time.Now().Add(2 * time.Second)
			for !r.status(t).Pools[gpu].Registered {
				if time.Now().After(deadline) {
					t.Fatalf("the pool the kubelet took is not registered 2s on: %+v; ledger %+v", r.status(t), r.recorded(t))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if st := r.status(t); st.KubeletRestarts != 1 {
				t.Errorf("KubeletRestarts = %d, want 1: the kubelet that appeared", st.KubeletRestarts)
			}
			restarted := events.KubeletRestarted{Socket: r.kubelet.RegistrationSocket()}
			if down {
				restarted.StoppedAt = stopped
			}
			want := []events.Payload{restarted, events.PluginRegistered{Pool: gpu, Socket: sock2, Mode: "legacy"}}
			if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
				t.Errorf("recorded %+v, want %+v", got, want)
			}
			r.NothingFor(t, 100*time.Millisecond)
		})
	}
}

// Once the kubelet is recorded gone (KubeletStopped), a pool that still
// has to register waits for it to be back (KubeletAppeared, or the
// recheck that finds it answering): Registers against the dead
// kubelet.sock, each a RegistrationFailed in the ledger and a warning in
// the log, are a poll that tells nothing new.
func TestNoRegisterPollWhileTheKubeletIsRecordedGone(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		c.RegisterTimeout = 100 * time.Millisecond
	})
	if err := r.kubelet.Stop(); err != nil { // kubelet.sock stays, refusing
		t.Fatal(err)
	}
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	// The kubelet is recorded gone (probe after the first failure).
	deadline := time.Now().Add(5 * time.Second)
	stoppedAt := -1
	for stoppedAt < 0 {
		for i, p := range r.recorded(t) {
			if _, ok := p.(events.KubeletStopped); ok {
				stoppedAt = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no KubeletStopped: %+v", r.recorded(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A Register already out may still fail (RegisterTimeout 100 ms);
	// let it land, with room for a loaded machine.
	time.Sleep(time.Second)
	before := len(r.recorded(t))
	time.Sleep(2 * time.Second)
	got := r.recorded(t)
	if extra := got[before:]; len(extra) != 0 {
		t.Errorf("%d records in 2s while the kubelet is recorded gone, e.g. %+v", len(extra), extra[0])
	}
	// It is back: the pool registers.
	if err := r.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Reconcile{})
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	// The kubelet's start removed sock: the pool serves on a new one.
	r.reserve(t, srv, next[*NeedSocket](t, r.family))
	r.await(t, "registered once the kubelet is back", registered(gpu))
}

// A Register goes out while the kubelet is dying (its kubelet.sock still
// there, refusing), and the kubelet restarts under it: the Register waits
// for the socket to answer, and the new kubelet answers it. But that
// kubelet's start removed the pool's socket, so it dials a path that is
// not there, for as long as its dial timeout (10s in the kubelet). The
// registrar must not wait for that answer: the Register was meant for a
// kubelet that is gone, and the pool registers with the new one on a new
// socket at once.
func TestARegisterMeantForAKubeletGoneSinceDoesNotHoldThePool(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		c.RegisterTimeout = 8 * time.Second
	})
	if err := r.kubelet.Stop(); err != nil { // kubelet.sock stays, refusing
		t.Fatal(err)
	}
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.Drain(t)
	time.Sleep(100 * time.Millisecond)       // the Register is out, waiting for the socket
	if err := r.kubelet.Boot(); err != nil { // removes sock, then makes kubelet.sock
		t.Fatal(err)
	}
	booted := time.Now()
	r.Sys.Root.Send(r.Child, &Reconcile{}) // the SocketRemoved of sock
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	var need *NeedSocket
	for need == nil {
		if m, ok := r.Heard(); ok {
			need = m.(*NeedSocket)
			break
		}
		if time.Since(booted) > 2*time.Second {
			t.Fatalf("no new socket asked for 2s after the kubelet restarted; status %+v", r.status(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if need.Socket != sock {
		t.Fatalf("NeedSocket %+v, want one in place of %s", *need, sock)
	}
	sock2 := r.reserve(t, srv, need)
	for !r.status(t).Pools[gpu].Registered {
		if time.Since(booted) > 3*time.Second {
			t.Fatalf("not registered 3s after the kubelet restarted; status %+v", r.status(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("registered %v after the kubelet restarted", time.Since(booted))
	for _, p := range r.recorded(t) {
		if f, ok := p.(events.RegistrationFailed); ok {
			t.Errorf("recorded %+v: the Register was the gone kubelet's, not a refusal", f)
		}
	}
	if st := r.status(t); st.Pools[gpu].Socket != sock2 {
		t.Errorf("status %+v, want registered on %s", st, sock2)
	}
}

// A kubelet that stops and takes kubelet.sock with it (its device
// manager's Stop closes the listener, which unlinks the socket) ends its
// streams, and the socket watcher sees kubelet.sock removed. The kubelet is
// gone: KubeletStopped ("kubelet.sock is gone"), not a drop of each pool's
// registration by a kubelet that is not there.
func TestAKubeletThatTakesItsSocketWithItIsRecordedGone(t *testing.T) {
	const grace = 50 * time.Millisecond
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) { c.ListGrace = grace })
	_, sock := r.serve(t, gpu)
	send := func(m any) { r.Sys.Root.Send(r.Child, m) }
	send(&Desire{Pool: gpu, Socket: sock})
	send(&Listing{Pool: gpu, Socket: sock, Open: true})
	r.await(t, "registered", registered(gpu))
	r.kubeletGone(t, sock)
	var stopped *events.KubeletStopped
	deadline := time.Now().Add(5 * time.Second)
	for stopped == nil && time.Now().Before(deadline) {
		for _, p := range r.recorded(t) {
			if s, ok := p.(events.KubeletStopped); ok {
				stopped = &s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if stopped == nil {
		t.Fatalf("no KubeletStopped; the ledger holds %+v", r.recorded(t))
	}
	if !strings.Contains(stopped.Reason, "kubelet.sock is gone") {
		t.Errorf("KubeletStopped reason %q, want the socket gone", stopped.Reason)
	}
	r.NothingFor(t, 10*grace) // no pool moved to a new socket
	for _, p := range r.recorded(t) {
		if f, ok := p.(events.RegistrationFailed); ok {
			t.Errorf("recorded %+v while the kubelet is gone", f)
		}
	}
}

// A pool backing off after a kubelet that did not answer registers with
// the next kubelet as soon as it appears: the backoff and the failures
// were the last kubelet's. Waiting out the backoff (up to RetryMax, 30s
// by default) would leave the new kubelet without the pool meanwhile.
func TestANewKubeletEndsThePoolsBackoff(t *testing.T) {
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{}, func(c *Config) {
		c.RegisterTimeout = 100 * time.Millisecond
		c.RetryInitial, c.RetryMax = time.Hour, time.Hour
	})
	if err := r.kubelet.Stop(); err != nil { // kubelet.sock stays, refusing
		t.Fatal(err)
	}
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	r.await(t, "failed once", func(st *Status) bool { return st.Pools[gpu].Failures == 1 })

	if err := r.kubelet.Boot(); err != nil { // deletes sock, then makes kubelet.sock
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &KubeletAppeared{Socket: r.kubelet.RegistrationSocket()})
	need := next[*NeedSocket](t, r.family)
	if !need.Lost || need.Socket != sock {
		t.Fatalf("NeedSocket %+v, want the lost %s", *need, sock)
	}
	sock2 := r.reserve(t, srv, need)
	st := r.await(t, "registered with the new kubelet", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock2
	})
	if p := st.Pools[gpu]; p.Failures != 0 || p.LastError != "" {
		t.Errorf("status %+v, want no failures once registered", p)
	}
}

// A kubelet that acknowledges a pool's Register on kubelet.sock and then
// never opens a ListAndWatch of it (it answers Register first, as before
// 1.25, and its connection to the pool hangs) has no endpoint for the
// pool: nothing would bring the pool back. Its ListGrace passes with no
// stream, a check finds the kubelet answering, and a grace later the
// pool serves on a new socket, the ledger saying why, and registers again.
func TestARegisterNeverListedRegistersAgainInLegacyMode(t *testing.T) {
	const grace = 50 * time.Millisecond
	hang, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := newRegistrar(t, grpcapi.ModeLegacy, kubelettest.Options{AsyncRegister: true,
		BeforeConnect: func(string, string) {
			first := false
			once.Do(func() { first = true })
			if first {
				close(hang)
				<-release
			}
		}}, func(c *Config) { c.ListGrace = grace })
	t.Cleanup(func() { close(release) }) // before the kubelet's Close waits for it
	srv, sock := r.serve(t, gpu)
	r.Sys.Root.Send(r.Child, &Desire{Pool: gpu, Socket: sock})
	<-hang
	r.await(t, "registered", registered(gpu))

	// The kubelet is checked before the second grace (a probe can take a
	// second or two).
	need := actortest.NextWithin[*NeedSocket](t, r.family, 15*time.Second)
	if need.Pool != gpu || need.Socket != sock || need.Lost {
		t.Fatalf("NeedSocket %+v, want a new socket in place of %s", *need, sock)
	}
	why := "the kubelet holds no ListAndWatch stream of the socket"
	want := []events.Payload{
		events.PluginRegistered{Pool: gpu, Socket: sock, Mode: "legacy"},
		events.RegistrationFailed{Pool: gpu, Socket: sock, Mode: "legacy", Error: why, Attempt: 1,
			Action: "serving the pool on a new socket"},
	}
	if got := r.awaitRecorded(t, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	sock2 := r.reserve(t, srv, need)
	// The first connection still hangs: the kubelet's endpoint is the
	// second Register's.
	reg, err := r.kubelet.WaitRegistered(ctxFor(t), gpu)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Endpoint != sock2 || reg.Mode != kubelettest.ModeLegacy {
		t.Errorf("kubelet registered %s in %s mode, want %s in legacy mode", reg.Endpoint, reg.Mode, sock2)
	}
	r.await(t, "registered again on the new socket", func(st *Status) bool {
		return st.Pools[gpu].Registered && st.Pools[gpu].Socket == sock2
	})
}

// kubeletGone stops the kubelet and removes its socket, and tells the
// registrar what the pool and the socket watcher would: gpu's stream on
// sock ended, kubelet.sock went.
func (r *registrarUnderTest) kubeletGone(t *testing.T, sock string) {
	t.Helper()
	if err := r.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.kubelet.RegistrationSocket()); err != nil {
		t.Fatal(err)
	}
	r.Sys.Root.Send(r.Child, &Listing{Pool: gpu, Socket: sock})
	r.Sys.Root.Send(r.Child, &CheckKubelet{Why: "kubelet.sock was removed"})
}
