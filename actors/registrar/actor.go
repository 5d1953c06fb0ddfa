// Package registrar is the kubelet registrar actor. Like the kubelet's own
// plugin manager it keeps a desired state (pools that serve and should be
// registered, with their sockets) and an actual state (what the kubelet
// acknowledged, for which kubelet), and a level-triggered reconcile makes the
// actual follow the desired after every change: a new socket, a lost socket,
// a new kubelet, a failed attempt's retry.
package registrar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
)

// Config is what the registrar needs.
type Config struct {
	Recorder *ledger.Recorder
	Mode     grpcapi.RegistrationMode
	// KubeletSocket is the kubelet's registration socket (legacy mode).
	KubeletSocket string
	// Options are sent with every Register.
	Options *pluginapi.DevicePluginOptions
	// RegisterTimeout bounds one Register call (default 10s).
	RegisterTimeout time.Duration
	// RetryInitial and RetryMax bound the backoff between failed attempts
	// (defaults 200ms and 30s).
	RetryInitial, RetryMax time.Duration
	Log                    zerolog.Logger
}

// SocketMissing is sent to the parent when a desired pool's socket file is
// gone: the pool must re-create it before it can be registered.
type SocketMissing struct {
	Pool   string
	Socket string
}

// CheckWatched is sent to the parent when the kubelet refused a Register
// because it holds a connection to the pool's socket path ("device plugin
// already connected"). The parent answers with Watched: if the kubelet
// watches the pool's current server, its registration stands; if not, its
// connection is to a server that is gone (a crashed pool's, the kubelet has
// not noticed yet), and the Register is tried again after a backoff.
type CheckWatched struct {
	Pool   string
	Socket string
	Gen    uint64
	Epoch  int
}

// Props returns the props of a registrar.
func Props(cfg Config) *actor.Props {
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = 10 * time.Second
	}
	if cfg.RetryInitial <= 0 {
		cfg.RetryInitial = 200 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.Mode == "" {
		cfg.Mode = grpcapi.ModeLegacy
	}
	return actor.PropsFromProducer(func() actor.Actor { return &registrar{cfg: cfg} })
}

type desire struct {
	socket   string
	gen      uint64
	recorded <-chan struct{} // Desire.Recorded
}

type acknowledged struct {
	gen    uint64
	epoch  int
	socket string
}

type registrar struct {
	cfg Config

	desired map[string]desire
	actual  map[string]acknowledged
	// inflight holds pools with a Register call out.
	inflight map[string]bool
	// retrying holds pools waiting for a retry timer.
	retrying map[string]*time.Timer
	// refused holds the error of a Register the kubelet refused as
	// already connected, until the parent says whether the kubelet
	// watches the pool (Watched).
	refused   map[string]error
	failures  map[string]int
	lastError map[string]string

	gen      uint64
	epoch    int
	restarts int
	waiting  bool // the missing kubelet socket was logged

	// notes is the queue of events the writer appends in order.
	notes   chan note
	written chan struct{}
}

// Receive implements actor.Actor.
func (r *registrar) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.startWriter()
		r.desired = map[string]desire{}
		r.actual = map[string]acknowledged{}
		r.inflight = map[string]bool{}
		r.retrying = map[string]*time.Timer{}
		r.failures = map[string]int{}
		r.lastError = map[string]string{}
		r.refused = map[string]error{}
	case *actor.Stopping, *actor.Restarting:
		for _, t := range r.retrying {
			t.Stop()
		}
		r.stopWriter()
	case *Desire:
		r.gen++
		r.desired[m.Pool] = desire{socket: m.Socket, gen: r.gen, recorded: m.Recorded}
		r.cancelRetry(m.Pool)
		r.failures[m.Pool] = 0
		delete(r.lastError, m.Pool)
		if a, ok := r.actual[m.Pool]; ok && r.cfg.Mode == grpcapi.ModeLegacy && m.KubeletWatching && a.epoch == r.epoch && a.socket == m.Socket {
			// The socket file was re-created under a live connection:
			// the kubelet's registration of the path stands, and a
			// second Register of a connected path is refused.
			r.actual[m.Pool] = acknowledged{gen: r.gen, epoch: r.epoch, socket: m.Socket}
			pool, socket := m.Pool, m.Socket
			r.record(events.PluginRegistered{Pool: pool, Socket: socket, Mode: string(r.cfg.Mode)}, func(e events.Envelope) {
				r.cfg.Log.Info().Str("pool", pool).Str("socket", socket).Uint64("seq", e.Seq).Msg("socket re-created; the kubelet still watches the pool, its registration stands")
			})
		}
		r.reconcile(ctx)
	case *Undesire:
		delete(r.desired, m.Pool)
		if !m.Lost {
			delete(r.actual, m.Pool)
		}
		r.cancelRetry(m.Pool)
	case *KubeletAppeared:
		r.epoch++
		r.restarts++
		r.waiting = false
		socket := m.Socket
		r.record(events.KubeletRestarted{Socket: socket}, func(e events.Envelope) {
			r.cfg.Log.Info().Str("socket", socket).Uint64("seq", e.Seq).Msg("kubelet restarted; registering every pool again")
		})
		for pool := range r.retrying {
			r.cancelRetry(pool)
			r.failures[pool] = 0
		}
		r.reconcile(ctx)
	case *KubeletReported:
		r.kubeletReported(m)
	case *registerResult:
		r.registered(ctx, m)
	case *Watched:
		r.watched(ctx, m)
	case *retry:
		delete(r.retrying, m.pool)
		r.reconcile(ctx)
	case *Reconcile:
		r.reconcile(ctx)
	case *Query:
		ctx.Respond(r.status())
	}
}

// reconcile starts a Register for every desired pool the current kubelet has
// not acknowledged, unless one is already out or waiting for its retry.
// In watcher mode the kubelet comes to us; nothing is started.
func (r *registrar) reconcile(ctx actor.Context) {
	if r.cfg.Mode != grpcapi.ModeLegacy {
		return
	}
	pools := make([]string, 0, len(r.desired))
	for pool := range r.desired {
		pools = append(pools, pool)
	}
	slices.Sort(pools)
	kubeletThere := fileExists(r.cfg.KubeletSocket)
	for _, pool := range pools {
		d := r.desired[pool]
		if a, ok := r.actual[pool]; ok && a.gen == d.gen && a.epoch == r.epoch {
			continue
		}
		if r.inflight[pool] || r.retrying[pool] != nil {
			continue
		}
		if !fileExists(d.socket) {
			// Level-triggered: whatever event we missed, a desired pool
			// without its socket needs a new one.
			delete(r.desired, pool)
			ctx.Send(ctx.Parent(), &SocketMissing{Pool: pool, Socket: d.socket})
			continue
		}
		if !kubeletThere {
			// The node says "waiting for kubelet" once for the operator;
			// KubeletAppeared brings us back here.
			if !r.waiting {
				r.cfg.Log.Debug().Str("socket", r.cfg.KubeletSocket).Msg("no kubelet socket; registrations wait for it")
				r.waiting = true
			}
			continue
		}
		r.inflight[pool] = true
		r.register(ctx, pool, d, r.epoch)
	}
}

func (r *registrar) register(ctx actor.Context, pool string, d desire, epoch int) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	cfg := r.cfg
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), cfg.RegisterTimeout)
		defer cancel()
		err := grpcapi.RegisterWithKubelet(cctx, cfg.KubeletSocket, pool, filepath.Base(d.socket), cfg.Options)
		root.Send(self, &registerResult{pool: pool, gen: d.gen, epoch: epoch, err: err})
	}()
}

func (r *registrar) registered(ctx actor.Context, m *registerResult) {
	delete(r.inflight, m.pool)
	d, ok := r.desired[m.pool]
	if !ok || d.gen != m.gen {
		// The pool was lost or re-created while we registered it: the
		// result is about a socket that is no more.
		r.reconcile(ctx)
		return
	}
	if m.epoch != r.epoch {
		// A new kubelet appeared while we registered with the old one:
		// whatever the old one said, register with the new one now.
		r.reconcile(ctx)
		return
	}
	if errors.Is(m.err, grpcapi.ErrAlreadyConnected) {
		// The kubelet holds a connection to this socket path: to the
		// pool's current server (an earlier Register of it stands), or
		// to one that is gone. The pool knows which; until it answers,
		// the attempt counts as under way.
		r.inflight[m.pool] = true
		r.refused[m.pool] = m.err
		ctx.Send(ctx.Parent(), &CheckWatched{Pool: m.pool, Socket: d.socket, Gen: d.gen, Epoch: m.epoch})
		return
	}
	if m.err != nil {
		r.failed(ctx, m.pool, d, m.err)
		return
	}
	r.acknowledge(m.pool, d, m.epoch, "pool registered with the kubelet")
}

// watched ends a refused Register (CheckWatched): acknowledged when the
// kubelet watches the pool's current server, failed otherwise.
func (r *registrar) watched(ctx actor.Context, m *Watched) {
	err := r.refused[m.Pool]
	delete(r.refused, m.Pool)
	delete(r.inflight, m.Pool)
	d, ok := r.desired[m.Pool]
	if !ok || d.gen != m.Gen || m.Epoch != r.epoch || err == nil {
		r.reconcile(ctx)
		return
	}
	if m.Watching {
		r.acknowledge(m.Pool, d, m.Epoch, "the kubelet is connected to the pool's server already; its registration stands")
		return
	}
	r.failed(ctx, m.Pool, d, fmt.Errorf("%w; the kubelet is not watching the pool's current server: its connection is to one that is gone", err))
}

// failed records a failed attempt and schedules the next.
func (r *registrar) failed(ctx actor.Context, pool string, d desire, err error) {
	r.failures[pool]++
	n := r.failures[pool]
	r.lastError[pool] = err.Error()
	r.record(events.RegistrationFailed{Pool: pool, Socket: d.socket, Mode: string(r.cfg.Mode), Error: err.Error(), Attempt: n}, nil)
	delay := r.backoff(n)
	r.cfg.Log.Warn().Err(err).Str("pool", pool).Int("attempt", n).Dur("retry_in", delay).Msg("registration failed")
	self, root := ctx.Self(), ctx.ActorSystem().Root
	r.retrying[pool] = time.AfterFunc(delay, func() { root.Send(self, &retry{pool: pool}) })
}

// acknowledge records that the kubelet has the pool registered.
func (r *registrar) acknowledge(pool string, d desire, epoch int, msg string) {
	r.actual[pool] = acknowledged{gen: d.gen, epoch: epoch, socket: d.socket}
	r.failures[pool] = 0
	delete(r.lastError, pool)
	socket := d.socket
	r.record(events.PluginRegistered{Pool: pool, Socket: socket, Mode: string(r.cfg.Mode)}, func(e events.Envelope) {
		r.cfg.Log.Info().Str("pool", pool).Str("socket", socket).Uint64("seq", e.Seq).Msg(msg)
	})
}

func (r *registrar) kubeletReported(m *KubeletReported) {
	if m.InfoRequested {
		r.cfg.Log.Debug().Str("pool", m.Pool).Msg("kubelet asked for plugin info")
		return
	}
	d, ok := r.desired[m.Pool]
	if !ok {
		d = desire{socket: m.Socket}
	}
	if !m.Registered {
		r.failures[m.Pool]++
		r.lastError[m.Pool] = m.Reason
		r.record(events.RegistrationFailed{Pool: m.Pool, Socket: m.Socket, Mode: string(grpcapi.ModeWatcher), Error: m.Reason, Attempt: r.failures[m.Pool]}, nil)
		r.cfg.Log.Warn().Str("pool", m.Pool).Str("reason", m.Reason).Msg("kubelet refused the pool")
		return
	}
	r.actual[m.Pool] = acknowledged{gen: d.gen, epoch: r.epoch, socket: m.Socket}
	r.failures[m.Pool] = 0
	delete(r.lastError, m.Pool)
	pool, socket := m.Pool, m.Socket
	r.record(events.PluginRegistered{Pool: pool, Socket: socket, Mode: string(grpcapi.ModeWatcher)}, func(e events.Envelope) {
		r.cfg.Log.Info().Str("pool", pool).Str("socket", socket).Uint64("seq", e.Seq).Msg("pool registered with the kubelet")
	})
}

func (r *registrar) status() *Status {
	st := &Status{Pools: map[string]PoolStatus{}, KubeletRestarts: r.restarts}
	for pool, d := range r.desired {
		a, ok := r.actual[pool]
		st.Pools[pool] = PoolStatus{Socket: d.socket, Registered: ok && a.gen == d.gen && a.epoch == r.epoch,
			Failures: r.failures[pool], LastError: r.lastError[pool]}
	}
	return st
}

// record queues an event for the registrar's writer, which appends them in
// order off the actor's thread. A registration is a fact about the kubelet
// that stands whether or not we wrote it down yet, so the registrar does not
// wait for the fsync: with several pools re-registering after a kubelet
// restart, waiting would put one fsync per event on the path to the last
// registration. done, when set, runs once the event is durable. A failed
// append is logged and the registrar carries on.
// An event about a pool is written after the pool's own PluginServing
// (Desire.Recorded).
func (r *registrar) record(p events.Payload, done func(events.Envelope)) {
	n := note{p: p, done: done}
	switch e := p.(type) {
	case events.PluginRegistered:
		n.after = r.desired[e.Pool].recorded
	case events.RegistrationFailed:
		n.after = r.desired[e.Pool].recorded
	}
	r.notes <- n
}

type note struct {
	p     events.Payload
	done  func(events.Envelope)
	after <-chan struct{} // nil: nothing to wait for
}

// startWriter starts the goroutine that appends queued events in order;
// stopWriter drains the queue and waits for it.
func (r *registrar) startWriter() {
	r.notes = make(chan note, 1024)
	r.written = make(chan struct{})
	notes, written, rec, log := r.notes, r.written, r.cfg.Recorder, r.cfg.Log
	go func() {
		defer close(written)
		for n := range notes {
			if n.after != nil {
				<-n.after
			}
			envs, err := rec.Record(context.Background(), n.p)
			if err != nil {
				log.Error().Err(err).Str("event", string(n.p.EventType())).Msg("cannot record registration event")
				continue
			}
			if n.done != nil {
				n.done(envs[0])
			}
		}
	}()
}

func (r *registrar) stopWriter() {
	if r.notes != nil {
		close(r.notes)
		<-r.written
		r.notes = nil
	}
}

func (r *registrar) backoff(n int) time.Duration {
	d := r.cfg.RetryInitial
	for i := 1; i < n && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.RetryMax)
}

func (r *registrar) cancelRetry(pool string) {
	if t := r.retrying[pool]; t != nil {
		t.Stop()
	}
	delete(r.retrying, pool)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}
