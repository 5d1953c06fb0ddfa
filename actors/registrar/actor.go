// Package registrar is the kubelet registrar actor. Like the kubelet's plugin
// manager it keeps a desired state (pools serving, with their sockets) and an
// actual state (what which kubelet acknowledged), and a level-triggered
// reconcile makes the actual follow the desired after every change. A pool
// has at most one Register out, and a socket path is registered at most
// once: a pool registers again on a new socket (see NeedSocket).
package registrar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/internal/handoff"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
)

// Config is what the registrar needs.
type Config struct {
	Recorder      *ledger.Recorder
	Mode          grpcapi.RegistrationMode
	KubeletSocket string                         // the kubelet's registration socket
	Options       *pluginapi.DevicePluginOptions // sent with every Register
	// RegisterTimeout bounds one Register call (default 10s).
	RegisterTimeout time.Duration
	// KubeletDownSince is when the ledger recorded the kubelet gone
	// (KubeletStopped), zero when it did not or the kubelet came back.
	KubeletDownSince time.Time
	// RetryInitial and RetryMax bound the backoff between failed attempts
	// (defaults 200ms and 30s).
	RetryInitial, RetryMax time.Duration
	// ListGrace is how long a registered pool may go with no ListAndWatch
	// stream on its socket before it registers anew (default 1s).
	ListGrace time.Duration
	Log       zerolog.Logger

	// recheckEvery is the wait between dials of a kubelet recorded gone
	// (default 5s), and redial the dial (default dialKubelet): tests set
	// them.
	recheckEvery time.Duration
	redial       func(socket string) error
}

// NeedSocket is sent to the parent when a desired pool must serve under a
// new socket name: its socket is gone (Lost), or the path was registered
// once already (a second Register of it would be refused, and the refusal
// breaks the kubelet's record of the first). The parent asks the pool
// (pool.Reserve); its Serving brings a new Desire.
type NeedSocket struct {
	Pool   string
	Socket string
	Lost   bool
	Reason string
}

// Props returns the props of a registrar.
func Props(cfg Config) *actor.Props {
	supervise.OrDefault(&cfg.RegisterTimeout, 10*time.Second)
	supervise.OrDefault(&cfg.RetryInitial, 200*time.Millisecond)
	supervise.OrDefault(&cfg.RetryMax, 30*time.Second)
	supervise.OrDefault(&cfg.ListGrace, time.Second)
	if cfg.Mode == "" {
		cfg.Mode = grpcapi.ModeLegacy
	}
	supervise.OrDefault(&cfg.recheckEvery, 5*time.Second)
	if cfg.redial == nil {
		cfg.redial = dialKubelet
	}
	first := handoff.First(true)
	life := &lifetime{downSince: cfg.KubeletDownSince, inflight: map[string]registerOut{}}
	return actor.PropsFromProducer(func() actor.Actor {
		return &registrar{cfg: cfg, crashed: !first(), lifetime: life}
	}, actor.WithDispatcher(supervise.Warm))
}

// lifetime is what outlives a crash of the registrar: what it knows of the
// kubelet and of its calls out to it, which a crash of ours does not
// change. Only the actor's goroutine touches it, one incarnation after
// another.
type lifetime struct {
	kubelet   kubeletID // the newest seen
	looked    bool      // its socket was looked for once: what appears later is a new kubelet
	downSince time.Time // when the kubelet was recorded gone; zero if not
	probing   bool      // a dial of its socket is out
	// checkAgain is why the kubelet was to be checked while a probe was
	// out ("" if not): the probe may have dialled before the news.
	checkAgain string
	inflight   map[string]registerOut // the Register out, by pool
	// rechecks numbers the recheck timers: only the newest one's recheck
	// dials, so a crash or a new outage never leaves two dialling.
	rechecks     int
	recheckTimer *time.Timer
}

// registerOut is a Register out: the socket it names, and what cuts it
// short when it was meant for a kubelet gone since (see observeKubelet).
type registerOut struct {
	socket string
	abort  context.CancelFunc
}

type desire struct {
	socket string
	// sent says a Register of socket went out (legacy mode) and may have
	// reached the kubelet: it is never registered again.
	sent bool
	// acked says the kubelet by acknowledged socket (by is zero in
	// watcher mode with no kubelet.sock).
	acked bool
	by    kubeletID
}

// kubeletID tells one kubelet from the next by its registration socket,
// which every kubelet start creates anew; zero is no kubelet. The mtime
// tells a reused inode apart and, unlike the ctime, survives a chmod.
type kubeletID struct {
	dev, ino uint64
	mtime    int64 // ns
}

func (k kubeletID) present() bool { return k != kubeletID{} }

// statKubelet identifies the kubelet socket at path (zero when none).
func statKubelet(path string) kubeletID {
	fi, err := os.Stat(path)
	if err != nil {
		return kubeletID{}
	}
	dev, ino, ok := fileID(fi)
	if !ok {
		return kubeletID{ino: 1, mtime: fi.ModTime().UnixNano()}
	}
	return kubeletID{dev: dev, ino: ino, mtime: fi.ModTime().UnixNano()}
}

type registrar struct {
	cfg Config
	// crashed says a crash came before: the desires (which socket each
	// pool serves, and whether it went to the kubelet) are gone.
	crashed bool
	*lifetime

	desired   map[string]desire
	retrying  map[string]*time.Timer // waiting for a retry
	failures  map[string]int
	lastError map[string]string
	// warned holds, per pool not registered since, the failures logged
	// at warn (see failure).
	warned map[string]map[string]bool
	// listing counts the kubelet's ListAndWatch streams by socket;
	// unlisted holds, per registered pool with none on its socket, the
	// timer of its ListGrace, and drops counts the pool's renewals for
	// want of a stream since one last opened or a new kubelet came (see
	// listed).
	listing  map[string]int
	unlisted map[string]*time.Timer
	drops    map[string]int
	// refused holds, per pool whose socket the plugin watcher refused,
	// the timer of the grace after which it serves on a new one (see
	// refusedFor).
	refused  map[string]*time.Timer
	restarts int  // new kubelets seen
	waiting  bool // the missing kubelet socket was logged
	// lacks counts the waits in a row for the ledger to record again
	// after it refused a registration's record, until what the ledger
	// lacked lands (not when it records someone else's: a nearly full
	// disk takes small records and refuses others); again is the wait's
	// timer (see lacking).
	lacks int
	again *time.Timer
	// self and root send this actor what the store's writer answers.
	self *actor.PID
	root *actor.RootContext
}

// Receive implements actor.Actor.
func (r *registrar) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.self, r.root = ctx.Self(), ctx.ActorSystem().Root
		r.desired = map[string]desire{}
		r.retrying = map[string]*time.Timer{}
		r.failures = map[string]int{}
		r.lastError = map[string]string{}
		r.warned = map[string]map[string]bool{}
		r.listing = map[string]int{}
		r.unlisted = map[string]*time.Timer{}
		r.drops = map[string]int{}
		r.refused = map[string]*time.Timer{}
		if r.crashed {
			// Nothing, not even the ledger, says which socket a Register
			// went out on: every pool serves on a new one (NeedDesires),
			// once any Register still out is answered (inflight).
			ctx.Send(ctx.Parent(), &NeedDesires{})
		}
		// A kubelet recorded gone before this run may be back: dial it.
		if !r.downSince.IsZero() {
			r.recheckLater(ctx, 0)
		}
	case *actor.Stopping:
		r.stopTimers()
		if r.recheckTimer != nil {
			r.recheckTimer.Stop()
		}
		// Stopped for good: no registrar takes the answers. A restart
		// keeps them out instead (inflight), for the next incarnation.
		for _, out := range r.inflight {
			out.abort()
		}
	case *actor.Restarting:
		r.stopTimers()
	case *Desire:
		if d, ok := r.desired[m.Pool]; ok && d.socket == m.Socket {
			break
		}
		// A new socket registers at once; the failure count goes on, so
		// a pool that keeps being refused keeps backing off.
		r.forgetSocket(m.Pool)
		r.desired[m.Pool] = desire{socket: m.Socket}
		stopTimer(r.retrying, m.Pool)
		r.reconcile(ctx)
	case *Undesire:
		r.forgetSocket(m.Pool)
		delete(r.desired, m.Pool)
		delete(r.drops, m.Pool)
		delete(r.failures, m.Pool)
		delete(r.lastError, m.Pool)
		delete(r.warned, m.Pool)
		stopTimer(r.retrying, m.Pool)
	case *Listing:
		r.listed(ctx, m)
	case *unlisted:
		r.unlistedFor(ctx, m)
	case *refusedGrace:
		r.refusedFor(ctx, m)
	case *KubeletAppeared:
		r.observeKubelet(true)
		r.reconcile(ctx)
	case *CheckKubelet:
		r.checkKubelet(ctx, m.Why)
	case *probed:
		r.probed(ctx, m)
	case *recheck:
		if m.n != r.rechecks || r.downSince.IsZero() || r.probing {
			break
		}
		r.probing = true
		self, root, kubelet, socket, dial := ctx.Self(), ctx.ActorSystem().Root, r.observeKubelet(false), r.cfg.KubeletSocket, r.cfg.redial
		// Off the mailbox, as checkKubelet's: dials block for seconds.
		go func() { root.Send(self, &probed{kubelet: kubelet, recheck: true, err: dial(socket)}) }()
	case *stopRecorded:
		if !r.downSince.IsZero() {
			r.downSince = m.at
		}
	case *lackRecorded:
		r.lacks = 0
	case *KubeletReported:
		r.kubeletReported(ctx, m)
	case *registerResult:
		r.answered(ctx, m)
	case *retry:
		delete(r.retrying, m.pool)
		r.reconcile(ctx)
	case *Reconcile:
		r.reconcile(ctx)
	case *Unrecorded:
		r.lacking(ctx, m)
	case *recordAgain:
		r.recordAgain(ctx)
	case *Query:
		ctx.Respond(r.status())
	case *Crash:
		panic("registrar: injected crash: " + m.Reason)
	}
}

// stopTimers stops the retries and graces waiting to fire.
func (r *registrar) stopTimers() {
	for _, timers := range []map[string]*time.Timer{r.retrying, r.unlisted, r.refused} {
		for _, t := range timers {
			t.Stop()
		}
	}
	if r.again != nil {
		r.again.Stop()
	}
}

// stopTimer stops and forgets the pool's timer in timers, if any.
func stopTimer(timers map[string]*time.Timer, pool string) {
	if t := timers[pool]; t != nil {
		t.Stop()
	}
	delete(timers, pool)
}

// observeKubelet stats the kubelet's socket. A kubelet other than the one
// known voids every registration, and waiting retries start over. One
// appearing where none was known is a restart if the socket watcher saw
// it created, or if an earlier look found none; not when found at the
// first look (at start). Whichever message looks first after the kubelet
// made its socket (a Reconcile for a socket its start removed comes
// before KubeletAppeared) sees it appear.
func (r *registrar) observeKubelet(created bool) kubeletID {
	cur := statKubelet(r.cfg.KubeletSocket)
	first := !r.looked
	r.looked = true
	if !cur.present() || cur == r.kubelet {
		return cur
	}
	known := r.kubelet.present()
	r.kubelet = cur
	r.waiting = false
	if !known && !created && first {
		return cur
	}
	r.restarted("kubelet restarted; registering every pool again")
	for pool := range r.retrying {
		stopTimer(r.retrying, pool)
		r.failures[pool] = 0
	}
	// The drops were the last kubelet's: this one starts at one grace.
	clear(r.drops)
	clear(r.warned) // what this kubelet says is news
	// A Register out was meant for a kubelet before this one. Left to
	// run, it waits for the socket path to answer and reaches this one,
	// whose start removed the pool's socket: it would dial that path for
	// as long as its dial timeout (10s) before it answers. Its answer is
	// void anyway (answered): cut it short.
	for _, out := range r.inflight {
		out.abort()
	}
	return cur
}

// restarted records KubeletRestarted, naming the recorded stop it ends.
func (r *registrar) restarted(msg string) {
	r.restarts++
	socket, stopped := r.cfg.KubeletSocket, r.downSince
	r.downSince, r.waiting = time.Time{}, false
	r.record(events.KubeletRestarted{Socket: socket, StoppedAt: stopped}, func(e events.Envelope) {
		ev := r.cfg.Log.Info().Str("socket", socket).Uint64("seq", e.Seq)
		if !stopped.IsZero() {
			ev = ev.Dur("down_ms", e.Time.Sub(stopped))
		}
		ev.Msg(msg)
	})
}

// probeWaits are the waits before each dial after a sign the kubelet may
// have gone (dials at 0, 300ms, 1.5s): going down, it may end its streams
// before it closes its socket.
var probeWaits = []time.Duration{0, 300 * time.Millisecond, 1200 * time.Millisecond}

// dialKubelet dials the kubelet's socket. A starting kubelet binds before
// it listens, so a refusal counts only if dials 50 and 200 ms later meet
// it too.
func dialKubelet(socket string) error {
	var err error
	for _, wait := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond} {
		time.Sleep(wait)
		var conn net.Conn
		if conn, err = net.DialTimeout("unix", socket, time.Second); err == nil {
			conn.Close()
			return nil
		}
	}
	return err
}

// checkKubelet probes, one at a time, a kubelet seen running that may have
// gone: a dead kubelet leaves its socket, so only a refused dial tells. The
// probe ends at the first refusal or after the last dial answered.
func (r *registrar) checkKubelet(ctx actor.Context, why string) {
	if !r.downSince.IsZero() || !r.kubelet.present() {
		return
	}
	if r.probing {
		r.checkAgain = why
		return
	}
	r.probing = true
	self, root, socket, kubelet := ctx.Self(), ctx.ActorSystem().Root, r.cfg.KubeletSocket, r.kubelet
	// It sleeps for seconds: off the mailbox, holding no actor state.
	go func() {
		var err error
		for _, wait := range probeWaits {
			time.Sleep(wait)
			if err = dialKubelet(socket); err != nil {
				break
			}
		}
		root.Send(self, &probed{why: why, kubelet: kubelet, err: err})
	}()
}

// probed takes the outcome of checkKubelet's probe or of a recheck, then
// checks again if asked to meanwhile: a kubelet that restarted while the
// probe was out voids its outcome, and may be gone since.
func (r *registrar) probed(ctx actor.Context, m *probed) {
	r.probing = false
	defer func() {
		if why := r.checkAgain; why != "" {
			r.checkAgain = ""
			r.checkKubelet(ctx, why)
		}
	}()
	// A kubelet new since the probe began is up, whatever the probe met;
	// its KubeletRestarted is recorded. No socket at all is no new
	// kubelet: the one probed took it with it ("is gone"). One still
	// recorded gone is the kubelet known, its socket away when the probe
	// began: the outcome stands, and a refusal dials again.
	if cur := r.observeKubelet(false); cur.present() && cur != m.kubelet && r.downSince.IsZero() {
		return
	}
	switch {
	case m.recheck && r.downSince.IsZero():
	case m.recheck && m.err == nil:
		// Recorded gone, yet it answers on the same socket: what it held
		// may be gone, so every pool registers anew on a new socket.
		r.restarted("the kubelet answers again; registering every pool anew")
		for _, pool := range slices.Sorted(maps.Keys(r.desired)) {
			r.needSocket(ctx, pool, r.desired[pool], false, "the kubelet is back")
		}
	case m.recheck:
		r.recheckLater(ctx, r.cfg.recheckEvery)
	case m.err != nil && r.downSince.IsZero():
		r.stopped(ctx, m.why+"; "+filepath.Base(r.cfg.KubeletSocket)+" "+refusal(m.err))
	}
}

// stopped records the kubelet gone, and dials it again from time to time.
func (r *registrar) stopped(ctx actor.Context, reason string) {
	// Down now, not when the event lands, so that no late Register answer
	// is recorded as if before it (appends commit in order; a failed one
	// still ends at the redial). stopRecorded then sets the event's time,
	// for KubeletRestarted to name.
	r.downSince, r.waiting = time.Now(), false
	self, root, socket := ctx.Self(), ctx.ActorSystem().Root, r.cfg.KubeletSocket
	r.record(events.KubeletStopped{Socket: socket, Reason: reason}, func(e events.Envelope) {
		r.cfg.Log.Warn().Str("socket", socket).Str("reason", reason).Uint64("seq", e.Seq).Msg("kubelet stopped; pools keep serving and register when it is back")
		root.Send(self, &stopRecorded{at: e.Time})
	})
	r.recheckLater(ctx, r.cfg.recheckEvery)
}

// recheckLater dials the kubelet again after d, in place of any recheck
// timed before.
func (r *registrar) recheckLater(ctx actor.Context, d time.Duration) {
	if r.recheckTimer != nil {
		r.recheckTimer.Stop()
	}
	r.rechecks++
	self, root, n := ctx.Self(), ctx.ActorSystem().Root, r.rechecks
	r.recheckTimer = time.AfterFunc(d, func() { root.Send(self, &recheck{n: n}) })
}

// refusal says why a dial of the kubelet's socket failed, in a few words.
func refusal(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refuses connections"
	case errors.Is(err, os.ErrNotExist):
		return "is gone"
	}
	return "does not answer: " + err.Error()
}

// reconcile moves every desired pool with no Register out or waiting
// toward registered with the current kubelet: a socket gone or registered
// once asks for a new one (NeedSocket), a fresh one is registered. In
// watcher mode the plugin watcher registers; only lost sockets are renewed.
func (r *registrar) reconcile(ctx actor.Context) {
	cur := r.observeKubelet(false)
	for _, pool := range slices.Sorted(maps.Keys(r.desired)) {
		d := r.desired[pool]
		if r.inflight[pool].socket != "" || r.retrying[pool] != nil {
			continue
		}
		if _, err := os.Stat(d.socket); errors.Is(err, os.ErrNotExist) {
			// Level-triggered: whatever event was missed, it needs one.
			r.needSocket(ctx, pool, d, true, "its socket is gone")
			continue
		}
		if r.cfg.Mode != grpcapi.ModeLegacy || r.isRegistered(pool) {
			continue
		}
		if !cur.present() || !r.downSince.IsZero() {
			// No socket (the node tells the operator), or a kubelet the
			// ledger has gone: a Register could only fail again.
			// KubeletAppeared, or the recheck that finds it answering,
			// brings us back.
			if !r.waiting {
				r.cfg.Log.Debug().Str("socket", r.cfg.KubeletSocket).Msg("no kubelet; registrations wait for it")
				r.waiting = true
			}
			continue
		}
		if d.sent {
			r.needSocket(ctx, pool, d, false, "its socket was registered once already")
			continue
		}
		d.sent = true
		r.desired[pool] = d
		r.register(ctx, pool, d.socket, cur)
	}
}

// isRegistered says whether the current kubelet acknowledged the pool's
// current socket. (In watcher mode, with no kubelet.sock, both are none.)
func (r *registrar) isRegistered(pool string) bool {
	d := r.desired[pool]
	return d.acked && d.by == r.kubelet
}

// needSocket forgets the pool's desire and sends NeedSocket.
func (r *registrar) needSocket(ctx actor.Context, pool string, d desire, lost bool, why string) {
	r.forgetSocket(pool)
	delete(r.desired, pool)
	r.cfg.Log.Debug().Str("pool", pool).Str("socket", d.socket).Str("reason", why).Msg("the pool is to serve on a new socket")
	ctx.Send(ctx.Parent(), &NeedSocket{Pool: pool, Socket: d.socket, Lost: lost, Reason: why})
}

func (r *registrar) register(ctx actor.Context, pool, socket string, kubelet kubeletID) {
	self, root, cfg := ctx.Self(), ctx.ActorSystem().Root, r.cfg
	cctx, cancel := context.WithTimeout(context.Background(), cfg.RegisterTimeout)
	r.inflight[pool] = registerOut{socket: socket, abort: cancel}
	go func() {
		defer cancel()
		err := grpcapi.RegisterWithKubelet(cctx, cfg.KubeletSocket, pool, filepath.Base(socket), cfg.Options)
		root.Send(self, &registerResult{pool: pool, socket: socket, kubelet: kubelet, err: err})
	}()
}

// answered takes the outcome of a Register.
func (r *registrar) answered(ctx actor.Context, m *registerResult) {
	if r.inflight[m.pool].socket != m.socket {
		// Not the Register out: one of a registrar before this one (a
		// restarted node's registrar has its predecessor's name).
		r.cfg.Log.Debug().Str("pool", m.pool).Str("socket", m.socket).Msg("an earlier registrar's Register was answered")
		return
	}
	delete(r.inflight, m.pool)
	d, ok := r.desired[m.pool]
	if !ok || d.socket != m.socket { // a socket the pool has left
		r.reconcile(ctx)
		return
	}
	switch {
	case r.observeKubelet(false) != m.kubelet:
		// Meant for a kubelet gone since, whatever the answer (or cut
		// short when the next was seen): not the current kubelet's
		// refusal, nor its registration. One that never reached a
		// kubelet may go again on the same socket.
		if errors.Is(m.err, grpcapi.ErrKubeletUnreachable) {
			d.sent = false
			r.desired[m.pool] = d
		}
		r.cfg.Log.Info().Str("pool", m.pool).Str("socket", m.socket).Msg("the kubelet went or restarted during the registration; registering anew")
		r.reconcile(ctx)
	case m.err == nil && !r.downSince.IsZero():
		// The registration went with the kubelet recorded gone; the
		// pool registers anew when it is back.
		r.cfg.Log.Info().Str("pool", m.pool).Str("socket", m.socket).Msg("registered with a kubelet that has gone since")
	case m.err == nil:
		r.acknowledge(ctx, m.pool, d)
		// A reconcile while the Register was out passed the pool over: its
		// socket may have gone meanwhile (removed by hand), and the
		// kubelet, connected still, would not say so.
		if _, err := os.Stat(d.socket); errors.Is(err, os.ErrNotExist) {
			r.needSocket(ctx, m.pool, r.desired[m.pool], true, "its socket is gone")
		}
	case errors.Is(m.err, grpcapi.ErrAlreadyConnected):
		// The kubelet keeps a dead endpoint for this path until it
		// restarts; a new path is free, so the first refusal moves at once.
		r.failed(ctx, m.pool, d, m.err, m.socket, "serving the pool on a new socket")
	case errors.Is(m.err, grpcapi.ErrKubeletUnreachable):
		d.sent = false // the kubelet never saw it
		r.desired[m.pool] = d
		r.failed(ctx, m.pool, d, m.err, "", "trying the same socket again")
		r.checkKubelet(ctx, "a Register of "+m.pool+" did not reach it")
	default:
		r.failed(ctx, m.pool, d, m.err, "", "registering on a new socket")
	}
}

// failed records a failed attempt and schedules the next; holds is the
// socket path the kubelet refused as held already, action what comes next.
func (r *registrar) failed(ctx actor.Context, pool string, d desire, err error, holds, action string) {
	level := r.failure(pool, d.socket, err.Error())
	n := r.failures[pool]
	delay := supervise.Doubling(r.cfg.RetryInitial, r.cfg.RetryMax, n)
	if holds != "" && n == 1 {
		delay = 0 // nothing to wait for: the new socket is free
	} else {
		action += " in " + delay.String()
	}
	r.record(events.RegistrationFailed{Pool: pool, Socket: d.socket, Mode: string(r.cfg.Mode), Error: err.Error(), Attempt: n,
		KubeletHolds: holds, Action: action}, nil)
	ev := r.cfg.Log.WithLevel(level).Err(err).Str("pool", pool).Str("socket", d.socket).Int("attempt", n).Dur("retry_in_ms", delay).Str("action", action)
	if holds != "" {
		ev = ev.Str("kubelet_holds", holds)
	}
	ev.Msg("registration failed")
	if delay == 0 {
		r.reconcile(ctx)
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	r.retrying[pool] = time.AfterFunc(delay, func() { root.Send(self, &retry{pool: pool}) })
}

// failure counts a failure of the pool's registration that says why, and
// returns the level to log it at: a warning the first time it says so
// since the pool was last registered (or a new kubelet came), debug each
// time it comes again (the ledger counts them). A pool whose renewals
// alternate two failures, a refusal and the renewal it brings, so logs
// each once. Why may name the socket the failure was about (a dial's
// error names its path), which each renewal makes anew: its name is not
// part of what is compared, or every retry would warn, and be kept, as
// news.
func (r *registrar) failure(pool, socket, why string) zerolog.Level {
	r.failures[pool]++
	r.lastError[pool] = why
	if socket != "" {
		why = strings.ReplaceAll(why, filepath.Base(socket), "")
	}
	if r.warned[pool][why] {
		return zerolog.DebugLevel
	}
	if r.warned[pool] == nil {
		r.warned[pool] = map[string]bool{}
	}
	r.warned[pool][why] = true
	return zerolog.WarnLevel
}

// acknowledge records that the current kubelet has the pool registered.
func (r *registrar) acknowledge(ctx actor.Context, pool string, d desire) {
	d.acked, d.by = true, r.kubelet
	r.desired[pool] = d
	stopTimer(r.refused, pool)
	r.failures[pool] = 0
	delete(r.lastError, pool)
	delete(r.warned, pool)
	socket, mode := d.socket, string(r.cfg.Mode)
	r.record(events.PluginRegistered{Pool: pool, Socket: socket, Mode: mode}, func(e events.Envelope) {
		r.cfg.Log.Info().Str("pool", pool).Str("socket", socket).Uint64("seq", e.Seq).Msg("pool registered with the kubelet")
	})
	r.watchListing(ctx, pool)
}

// listed counts the kubelet's streams. The kubelet lists a pool it
// registered through a ListAndWatch on the pool's socket; one that has
// none there has dropped the pool's endpoint. Its plugin watcher, which
// registers sockets side by side, may have finished one the pool had left
// after the pool's own (and drops that one once it sees it gone), or a
// kubelet older than kubernetes#135437 may have dropped it by resource
// name when another of the pool's sockets went. Nothing else
// would bring the pool back, so it registers anew (unlistedFor).
func (r *registrar) listed(ctx actor.Context, m *Listing) {
	if m.Open {
		// Only the pool's socket is counted: a stream on one it left
		// ends with no word once the pool stops, and its count would stay.
		if d, ok := r.desired[m.Pool]; ok && d.socket == m.Socket {
			r.listing[m.Socket]++
			stopTimer(r.unlisted, m.Pool)
			delete(r.drops, m.Pool)
		}
		return
	}
	if n := r.listing[m.Socket]; n > 1 {
		r.listing[m.Socket] = n - 1
	} else {
		delete(r.listing, m.Socket)
	}
	r.watchListing(ctx, m.Pool)
	// Every stream ends when the kubelet dies: check it still answers.
	r.checkKubelet(ctx, "the ListAndWatch stream of "+m.Pool+" ended")
}

// watchListing starts the pool's ListGrace if the current kubelet has it
// registered with no stream on its socket.
func (r *registrar) watchListing(ctx actor.Context, pool string) {
	if r.unlisted[pool] == nil {
		r.graceAgain(ctx, pool, false)
	}
}

// graceAgain (re)starts the pool's ListGrace; checked says the kubelet was
// checked since it had no stream there. The grace doubles with each
// renewal that brought no stream (up to RetryMax): a kubelet that
// acknowledges and never lists is not asked again every few seconds.
// With no kubelet.sock to dial (watcher mode) a kubelet gone is not told
// from one that dropped the pool: the rule waits for a kubelet to watch.
func (r *registrar) graceAgain(ctx actor.Context, pool string, checked bool) {
	d, ok := r.desired[pool]
	if !ok || !r.isRegistered(pool) || r.listing[d.socket] > 0 || !r.kubelet.present() {
		return
	}
	self, root, socket := ctx.Self(), ctx.ActorSystem().Root, d.socket
	r.unlisted[pool] = time.AfterFunc(r.listGrace(pool), func() { root.Send(self, &unlisted{pool: pool, socket: socket, checked: checked}) })
}

// listGrace is the pool's ListGrace now: doubled for each renewal in a
// row that brought no stream.
func (r *registrar) listGrace(pool string) time.Duration {
	return supervise.Doubling(r.cfg.ListGrace, max(r.cfg.ListGrace, r.cfg.RetryMax), r.drops[pool]+1)
}

// unlistedFor takes a ListGrace that passed with no stream on the pool's
// socket. A kubelet that died before it opened one leaves no other sign,
// so the kubelet is checked first (KubeletStopped if it is gone); one that
// answers, a grace later, dropped the pool, which registers anew.
func (r *registrar) unlistedFor(ctx actor.Context, m *unlisted) {
	d, ok := r.desired[m.pool]
	if !ok || d.socket != m.socket {
		return // of a socket left since: a grace of the new one may run
	}
	delete(r.unlisted, m.pool)
	if !r.isRegistered(m.pool) || r.listing[d.socket] > 0 || !r.downSince.IsZero() {
		return
	}
	if r.probing { // its outcome first
		r.graceAgain(ctx, m.pool, m.checked)
		return
	}
	if !m.checked {
		r.checkKubelet(ctx, "the kubelet holds no ListAndWatch stream of "+m.pool)
		r.graceAgain(ctx, m.pool, true)
		return
	}
	r.renew(ctx, m.pool, d, "the kubelet holds no ListAndWatch stream of the socket", "the kubelet dropped the pool's registration")
}

// renew serves the pool on a new socket for want of what the kubelet
// should have done with this one (why, msg for the log), recorded as a
// RegistrationFailed; it counts among the pool's drops, which double the
// next grace.
func (r *registrar) renew(ctx actor.Context, pool string, d desire, why, msg string) {
	grace := r.listGrace(pool)
	level := r.failure(pool, d.socket, why)
	r.drops[pool]++
	action := "serving the pool on a new socket"
	r.record(events.RegistrationFailed{Pool: pool, Socket: d.socket, Mode: string(r.cfg.Mode), Error: why,
		Attempt: r.drops[pool], Action: action}, nil)
	r.cfg.Log.WithLevel(level).Str("pool", pool).Str("socket", d.socket).Dur("grace_ms", grace).Str("action", action).Msg(msg)
	r.needSocket(ctx, pool, d, false, why)
}

// forgetSocket forgets the streams and ListGrace of the pool's socket,
// which it leaves.
func (r *registrar) forgetSocket(pool string) {
	if d, ok := r.desired[pool]; ok {
		delete(r.listing, d.socket)
	}
	stopTimer(r.unlisted, pool)
	stopTimer(r.refused, pool)
}

// kubeletReported takes what the plugin watcher told a pool (watcher mode).
func (r *registrar) kubeletReported(ctx actor.Context, m *KubeletReported) {
	if m.InfoRequested {
		r.cfg.Log.Debug().Str("pool", m.Pool).Str("socket", m.Socket).Msg("kubelet asked for plugin info")
		return
	}
	// The plugin watcher may speak first of a new kubelet.
	cur := r.observeKubelet(false)
	d, ok := r.desired[m.Pool]
	if !ok || d.socket != m.Socket {
		r.cfg.Log.Debug().Str("pool", m.Pool).Str("socket", m.Socket).Bool("registered", m.Registered).Msg("kubelet reported on a socket the pool has left")
		return
	}
	if m.Registered {
		if !r.downSince.IsZero() {
			if cur.present() || m.At.Before(r.downSince) {
				// From before it went (heard before the stop was, or it
				// refused its socket since): the recheck decides.
				return
			}
			// Only a running kubelet's plugin watcher registers. With no
			// kubelet.sock (removed by hand) no recheck would find it.
			r.restarted("the kubelet's plugin watcher registered a pool; the kubelet is back")
		}
		r.acknowledge(ctx, m.Pool, d)
		return
	}
	level := r.failure(m.Pool, m.Socket, m.Reason)
	failed := events.RegistrationFailed{Pool: m.Pool, Socket: m.Socket, Mode: string(grpcapi.ModeWatcher), Error: m.Reason,
		Attempt: r.failures[m.Pool], Action: "the kubelet's plugin watcher tries again"}
	held := strings.Contains(m.Reason, "already connected")
	if held {
		failed.KubeletHolds, failed.Action = m.Socket, "serving the pool on a new socket"
	}
	r.record(failed, nil)
	r.cfg.Log.WithLevel(level).Str("pool", m.Pool).Str("socket", m.Socket).Str("reason", m.Reason).Str("action", failed.Action).Msg("kubelet refused the pool")
	if held {
		r.needSocket(ctx, m.Pool, d, false, "the kubelet holds its socket already")
		return
	}
	if r.refused[m.Pool] == nil {
		self, root, socket, kubelet := ctx.Self(), ctx.ActorSystem().Root, m.Socket, r.kubelet
		r.refused[m.Pool] = time.AfterFunc(r.listGrace(m.Pool), func() {
			root.Send(self, &refusedGrace{pool: m.Pool, socket: socket, kubelet: kubelet})
		})
	}
}

// refusedFor takes a grace that passed since the plugin watcher refused
// the pool's socket, with the socket still not registered. Kubelets
// 1.35.4 and 1.34.4 keep a socket whose registration the device manager
// failed as registered, and never try it again; later ones do, and
// usually register it within the grace. The pool serves on a new socket,
// which every plugin watcher registers: on a kubelet that would have
// tried again, the old socket was never registered, so nothing is lost.
// The grace doubles like the ListGrace (drops).
func (r *registrar) refusedFor(ctx actor.Context, m *refusedGrace) {
	d, ok := r.desired[m.pool]
	if !ok || d.socket != m.socket {
		return // of a socket left since
	}
	delete(r.refused, m.pool)
	if r.isRegistered(m.pool) || r.kubelet != m.kubelet || !r.downSince.IsZero() {
		// Registered, or a kubelet other than the one that refused: a new
		// kubelet's plugin watcher tries every socket afresh.
		return
	}
	r.renew(ctx, m.pool, d, "the kubelet's plugin watcher did not register the socket it refused", "the kubelet did not register the pool it refused")
}

func (r *registrar) status() *Status {
	st := &Status{Pools: map[string]PoolStatus{}, KubeletRestarts: r.restarts}
	for pool, d := range r.desired {
		st.Pools[pool] = PoolStatus{Socket: d.socket, Registered: r.isRegistered(pool) && r.downSince.IsZero(),
			Failures: r.failures[pool], LastError: r.lastError[pool]}
	}
	return st
}

// record appends an event without waiting: a registration stands whether
// written down or not, and waiting would cost an fsync per pool after a
// kubelet restart. Appends commit in order, so it lands after what the
// pool recorded before announcing its socket. done, if set, runs on the
// store's writer once the event is durable; a failed append is logged.
func (r *registrar) record(p events.Payload, done func(events.Envelope)) {
	log, typ, self, root := r.cfg.Log, string(p.EventType()), r.self, r.root
	landed := func(envs []events.Envelope, err error) {
		if err != nil {
			log.Error().Err(err).Str("event", typ).Msg("cannot record registration event")
			if !errors.Is(err, store.ErrClosed) { // the daemon stops
				root.Send(self, &Unrecorded{Event: typ})
			}
		} else if done != nil {
			done(envs[0])
		}
	}
	if err := r.cfg.Recorder.RecordAsync(context.Background(), nil, []events.Payload{p}, landed); err != nil {
		landed(nil, err)
	}
}

// lacking takes a registration's record the ledger refused (the disk
// full): the registration holds, but the ledger, and so a replay or a
// dump, would go on telling the one before. Once the wait (doubling from
// RetryInitial to RetryMax) is over and the ledger records again, the
// registrar records what it lacks (see recordAgain).
func (r *registrar) lacking(ctx actor.Context, m *Unrecorded) {
	if r.again != nil {
		return // a wait is under way
	}
	r.lacks++
	wait := supervise.Doubling(r.cfg.RetryInitial, r.cfg.RetryMax, r.lacks)
	// Debug: the refusal was logged where it came.
	r.cfg.Log.Debug().Str("pool", m.Pool).Str("event", m.Event).Dur("retry_in_ms", wait).
		Msg("the ledger may lack a registration; looking once the ledger records again")
	self, root := ctx.Self(), ctx.ActorSystem().Root
	r.again = time.AfterFunc(wait, func() { root.Send(self, &recordAgain{}) })
}

// errMovedOn refuses recordAgain's records when a registration's record
// landed after the state they were drawn from: they are drawn again.
var errMovedOn = errors.New("a registration was recorded meanwhile")

// recordAgain ends lacking's wait. Its own try tells whether the ledger
// records again (on a quiet node with room for small records and none
// for a snapshot, no other record lands to say so); a refusal brings a
// longer wait. Level-triggered: the registrar compares the ledger's
// registrations (the kubelet up or down, and for each pool the ledger
// has serving on the socket the registrar knows, whether it is
// registered) with its own and records, in one append, what makes the
// first the second. The kubelet is not asked again: a pool's
// registration holds, and a new socket would cut its calls in flight
// short. A registration recorded meanwhile refuses the append, and the
// registrar looks again.
func (r *registrar) recordAgain(ctx actor.Context) {
	r.again = nil
	st, err := r.cfg.Recorder.Replay()
	if err != nil {
		r.lacking(ctx, &Unrecorded{Event: "none: the ledger cannot be read: " + err.Error()})
		return
	}
	var ps []events.Payload
	socket, down := r.cfg.KubeletSocket, !r.downSince.IsZero()
	kubelet := st.Kubelet.Down != down
	switch {
	case kubelet && down:
		ps = append(ps, events.KubeletStopped{Socket: socket, Reason: "recorded late: the ledger could not record it when seen"})
	case kubelet:
		ps = append(ps, events.KubeletRestarted{Socket: socket, StoppedAt: st.Kubelet.DownSince})
	}
	// A pool's serving is the pool's to record (it knows its socket;
	// the registrar's may be one it has left): a socket the ledger does
	// not have the pool serving on waits for the pool's record, which
	// tells the registrar (Unrecorded) once it lands.
	mode := string(r.cfg.Mode)
	for _, pool := range slices.Sorted(maps.Keys(r.desired)) {
		d, reg := r.desired[pool], st.Pools[pool].Registration
		if !reg.Serving || reg.Socket != d.socket {
			continue
		}
		if r.isRegistered(pool) && !down && (!reg.Registered || kubelet) {
			ps = append(ps, events.PluginRegistered{Pool: pool, Socket: d.socket, Mode: mode})
		}
	}
	if len(ps) == 0 {
		r.lacks = 0 // the ledger lacks nothing
		return
	}
	g := store.Guard{After: st.Seq, Check: func(e events.Envelope) error {
		switch e.Payload.(type) {
		case events.PluginServing, events.PluginRegistered, events.RegistrationFailed, events.SocketLost, events.PluginWithdrawn,
			events.KubeletStopped, events.KubeletRestarted, events.ConfigApplied:
			return fmt.Errorf("%w (#%d %s)", errMovedOn, e.Seq, e.Type)
		}
		return nil
	}}
	log, self, root := r.cfg.Log, ctx.Self(), ctx.ActorSystem().Root
	landed := func(envs []events.Envelope, err error) {
		switch {
		case err == nil:
			// Named one by one: their times are this line's, not those
			// of what they tell, and dump shows them so.
			what := make([]string, len(envs))
			for i, e := range envs {
				what[i] = strings.TrimSpace(string(e.Type) + " " + e.Pool())
			}
			log.Info().Strs("recorded", what).Uint64("seq", envs[len(envs)-1].Seq).Msg("recorded the registrations the ledger lacked")
			// The stop's time is its record's, as in stopped: the next
			// KubeletRestarted names that one.
			if _, ok := envs[0].Payload.(events.KubeletStopped); ok {
				root.Send(self, &stopRecorded{at: envs[0].Time})
			}
			root.Send(self, &lackRecorded{})
		case errors.Is(err, store.ErrClosed):
		default:
			// Debug: the store logs the disk's refusal where it starts,
			// and a longer wait follows each, so that a disk that takes
			// only some records (nearly full) does not flood the log.
			log.Debug().Err(err).Msg("cannot record the registrations the ledger lacks; trying again")
			root.Send(self, &Unrecorded{Event: "the registrations the ledger lacked"})
		}
	}
	if err := r.cfg.Recorder.RecordAsync(context.Background(), &g, ps, landed); err != nil {
		landed(nil, err)
	}
}
