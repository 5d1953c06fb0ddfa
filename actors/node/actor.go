// Package node is the root of devledger's actor tree: the node coordinator.
// It owns the config in force and the last scan, places each device in a
// pool (package config's selection), spawns one allocator per pool, and
// routes messages between its children, which it supervises with a
// doubling backoff that gives up loudly.
package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/configwatch"
	"github.com/devledger/devledger/actors/health"
	"github.com/devledger/devledger/actors/internal/handoff"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/actors/reconciler"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/actors/scanner"
	"github.com/devledger/devledger/actors/sockets"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/sysfs"
)

// Config is what the node coordinator needs.
type Config struct {
	// Config is the config in force at start, read from ConfigPath, whose
	// SHA-256 is ConfigSHA256; ReloadConfig reads ConfigPath again.
	Config       *config.Config
	ConfigPath   string
	ConfigSHA256 string
	// ConfigOptions are how ConfigPath is read (--resource-prefix).
	ConfigOptions config.Options
	// WatchConfig reloads ConfigPath when it changes (configwatch).
	WatchConfig bool
	Env         config.Env
	Reader      *sysfs.Reader
	Recorder    *ledger.Recorder
	// Replayed is the ledger's state at start; a restarted node replays.
	Replayed *events.State
	// FirstScan is the first scan, begun while the daemon replayed; a
	// restarted node's scanner scans afresh.
	FirstScan func() ([]sysfs.Device, error)
	// KubeletDir is the kubelet's root dir (/var/lib/kubelet).
	KubeletDir string
	Mode       grpcapi.RegistrationMode
	// AllocEnv is where device nodes are checked for Allocate answers.
	AllocEnv   allocation.Env
	DevinfoDir string
	// CDISpecDir is where CDI-enabled pools write their spec; "" writes none.
	CDISpecDir string
	// ScanInterval and ProbeInterval pace scans and probes; zero: defaults.
	ScanInterval  time.Duration
	ProbeInterval time.Duration
	CallTimeout   time.Duration
	// ObserveAllocate is each pool's (pool.Config.ObserveAllocate).
	ObserveAllocate func(pool string, took time.Duration, err error)
	// PodResources feeds the reconciler that Reconcile configures (the node
	// fills in its Recorder, Lister, Replayed and Log).
	PodResources reconciler.Lister
	Reconcile    reconciler.Config
	// Supervisor supervises the node's children.
	Supervisor actor.SupervisorStrategy
	Log        zerolog.Logger
}

// DevicePluginDir is the kubelet's legacy registration directory.
func DevicePluginDir(kubeletDir string) string {
	return filepath.Join(kubeletDir, "device-plugins")
}

// PluginsRegistryDir is the kubelet's plugin-watcher directory.
func PluginsRegistryDir(kubeletDir string) string {
	return filepath.Join(kubeletDir, "plugins_registry")
}

// KubeletSocket is the kubelet's registration socket.
func KubeletSocket(kubeletDir string) string {
	return filepath.Join(DevicePluginDir(kubeletDir), "kubelet.sock")
}

// SocketDir is where pools serve in the registration mode: each under a
// socket name of its own, new for every server (pool.SocketBase).
func SocketDir(kubeletDir string, mode grpcapi.RegistrationMode) string {
	if mode == grpcapi.ModeWatcher {
		return PluginsRegistryDir(kubeletDir)
	}
	return DevicePluginDir(kubeletDir)
}

// Props returns the props of the node coordinator.
func Props(cfg Config) *actor.Props {
	replayed, firstScan := handoff.First(cfg.Replayed), handoff.First(cfg.FirstScan)
	cfg.FirstScan = nil // held by firstScan until taken, not for good
	opts := []actor.PropsOption{actor.WithDispatcher(supervise.Warm)}
	if cfg.Supervisor != nil {
		opts = append(opts, actor.WithSupervisor(cfg.Supervisor))
	}
	life, shared := &lifetime{}, &cfg // a reload's config outlives a restart
	return actor.PropsFromProducer(func() actor.Actor {
		return &coordinator{cfg: shared, replayed: replayed(), firstScan: firstScan(), life: life}
	}, opts...)
}

// lifetime outlives a restart (which makes a new coordinator), as does its
// cfg. Only the actor's goroutine touches them.
type lifetime struct {
	incarnations int
	// unrecorded counts the reloads in a row whose ConfigApplied or
	// ConfigRejected could not be written: the next is tried after a
	// doubling wait.
	unrecorded int
	// rejected is the config file last rejected and recorded so, by its
	// digest, and why: the same bytes are not rejected twice. "" once a
	// config is applied.
	rejected      string
	rejectedLines []string
	// persist holds the node's messages back while a record (a config, or
	// what its start found emptied) goes to disk, so nothing next sees the
	// world before it; what it holds at a restart goes to the next
	// incarnation first, as its mailbox does.
	persist ledger.Persister
}

type coordinator struct {
	cfg       *Config
	life      *lifetime
	replayed  *events.State
	firstScan func() ([]sysfs.Device, error) // for the first scanner only
	// closing is set once the node is stopping or restarting (see Receive);
	// placed, once the first scan's devices were placed.
	closing bool
	placed  bool

	scanner, registrar, health, sockets, reconciler, configwatch *actor.PID

	devices []sysfs.Device
	pools   map[string]*actor.PID
	members map[string][]allocation.Member
	// unserved are the pools of the config that the last placement left
	// unserved for want of devices: the log has named them.
	unserved map[string]bool
	// owner maps a pooled device to its pool.
	owner map[string]string
	// join is what a device looked like when it joined its pool: health
	// checks that it still has that driver and VFIO node.
	join map[string]sysfs.Device
	// resources are the pools of the config in force, by name.
	resources map[string]*config.Resource
	// healthy is the newest verdict in the ledger per device: the health
	// checker's, or a scan's (discovered, back, removed).
	healthy events.Health
	// allocs are the live allocations, folded from the pools' and the
	// reconciler's records; a claimed one holds its devices in other pools.
	allocs events.State
	// leaving are, per device, the pools it was placed out of that may
	// still give it out (they list it until told of its move). Its new pool
	// lists it as held until each has let it go (pool.LetGo) or stopped.
	leaving map[string][]leave
	// gen counts placements (a pool spawned again gets a fresh name by
	// it); stopping are the pools told to stop, by PID Id, until they
	// have; deferred are the pools waiting for one of their name to stop.
	gen      uint64
	stopping map[string]poolStopped
	deferred map[string]deferral
}

// deferral is why a pool waiting for one of its name to stop starts, and
// where the devices placed in it meanwhile came from (see moves).
type deferral struct {
	reason string
	moves  map[string]string
}

// held is a message held back while the node persists, with its sender.
type held struct {
	msg    any
	sender *actor.PID
}

// leave is a pool a device was placed out of, in placement gen.
type leave struct {
	pool string
	pid  *actor.PID
	gen  uint64
}

// poolStopped is what the node sends itself on a stopped pool's Terminated,
// which jumps the queue: it comes after the pool's last AllocationRecorded.
type poolStopped struct {
	pool string
	pid  *actor.PID
	// members are the devices it listed when it was told to stop.
	members map[string]bool
}

// Receive implements actor.Actor.
func (n *coordinator) Receive(ctx actor.Context) {
	// Once closing, do nothing: a pool spawned while the children stop
	// would never be told to stop, and the node would wait for it forever.
	switch m := ctx.Message().(type) {
	case *actor.Stopping, *actor.Restarting:
		n.closing = true
		// What is being recorded lands first: a config the ledger holds is
		// the next incarnation's (see reload), as is what is held; with none
		// to come, a reload asked is answered now.
		n.life.persist.Settle()
		if _, stopping := m.(*actor.Stopping); stopping {
			n.life.persist.Resume(func(h any) {
				if _, ok := h.(held).msg.(*ReloadConfig); ok && h.(held).sender != nil {
					ctx.Send(h.(held).sender, &ReloadResult{Err: errStopping})
				}
			})
		}
		return
	case *ledger.Landed:
		if !n.closing {
			n.life.persist.Land(m, n.handleHeld(ctx))
		}
		return
	case *ledger.Quiet:
		n.life.persist.Hold(m)
		return
	}
	if n.closing {
		// Stopping (a restart holds the mailbox): no incarnation will read
		// the file, so a reload is refused rather than left to time out.
		if _, ok := ctx.Message().(*ReloadConfig); ok && ctx.Sender() != nil {
			ctx.Respond(&ReloadResult{Err: errStopping})
		}
		return
	}
	switch ctx.Message().(type) {
	case *Query, *Children, *Crash, *actor.Terminated:
		// Terminated only ends a stop the node asked for before, and must
		// not wait for a restart that would find no stop to end.
	case *sockets.Ready, *sockets.KubeletAppeared, *sockets.KubeletGone, *sockets.SocketRemoved,
		*registrar.Listing, *registrar.KubeletReported, *registrar.Unrecorded, *pool.Serving,
		*registrar.NeedSocket, *registrar.NeedDesires:
		// Passed on between the kubelet's side and the registrar, which
		// does not wait for the ledger: a kubelet that restarts while the
		// disk stalls under the node's record gets every pool at once. A
		// pool the record drops is undesired once it lands, and its
		// PluginServing's guard refuses it.
	default:
		if n.life.persist.Hold(held{ctx.Message(), ctx.Sender()}) {
			return
		}
	}
	n.handle(ctx, ctx.Message(), ctx.Sender())
}

// errStopping answers a reload the node will not read: it is stopping.
var errStopping = errors.New("the node stopped before it read the config again")

// handleHeld hands what the Persister held back to handle.
func (n *coordinator) handleHeld(ctx actor.Context) func(any) {
	return func(h any) { n.handle(ctx, h.(held).msg, h.(held).sender) }
}

// handle handles msg from sender, now or once what was persisted before
// it is applied.
func (n *coordinator) handle(ctx actor.Context, msg any, sender *actor.PID) {
	switch m := msg.(type) {
	case *actor.Started:
		n.start(ctx)
		n.life.persist.Resume(n.handleHeld(ctx))
	case *scanner.Scanned:
		n.scanned(ctx, m)
	case *pool.Serving:
		if pid := n.pools[m.Pool]; pid != nil && pid.Equal(m.From) {
			ctx.Send(n.registrar, &registrar.Desire{Pool: m.Pool, Socket: m.Socket})
		}
	case *registrar.Listing, *registrar.KubeletReported, *registrar.Unrecorded: // from a pool
		ctx.Send(n.registrar, m)
	case *pool.NeedMembers:
		if pid := n.pools[m.Pool]; pid != nil { // its resource outlives the restart
			n.retellMembers(ctx, m.Pool, pid, "pool restarted")
		}
	case *pool.LetGo:
		n.retellHolds(ctx, m.Pool, n.letGo(m.From, m.Gen, m.Devices), "let go by "+m.Pool)
	case *actor.Terminated:
		if ps, ok := n.stopping[m.Who.Id]; ok {
			delete(n.stopping, m.Who.Id)
			ctx.Send(ctx.Self(), &ps)
		}
	case *poolStopped:
		// A pool of the same name may have taken its place: tell it too.
		n.retellHolds(ctx, "", n.letGo(m.pid, math.MaxUint64, nil), m.pool+" stopped")
		if n.pools[m.pool] == nil && !n.isStopping(m.pool) {
			// One of its name may have waited (isStopping): place to spawn it.
			if n.placed && n.resources[m.pool] != nil {
				n.place(ctx, m.pool+" stopped", true, health.Seen{})
			}
			// If none serves now, the CDI spec goes with the pool.
			if n.pools[m.pool] == nil {
				n.removeCDISpec(m.pool)
			}
		}
	case *sockets.Ready:
		// Watch first, then look: a reconcile finds what came before the watch.
		ctx.Send(n.registrar, &registrar.Reconcile{})
		// Said at each watch (the start's, and one made again after lost
		// events), in both modes: pools serve meanwhile and register when
		// it comes (or the plugin watcher finds them).
		if !m.KubeletPresent {
			sock := KubeletSocket(n.cfg.KubeletDir)
			n.cfg.Log.Warn().Str("socket", sock).Msg("waiting for kubelet at " + sock)
		}
	case *sockets.KubeletAppeared:
		ctx.Send(n.registrar, &registrar.KubeletAppeared{Socket: m.Socket})
		// Attribute pods now, not after a backoff grown while it was away.
		ctx.Send(n.reconciler, &reconciler.Reconcile{KubeletBack: true})
	case *sockets.KubeletGone:
		ctx.Send(n.registrar, &registrar.CheckKubelet{Why: "kubelet.sock was removed"})
	case *sockets.SocketRemoved:
		// The registrar asks once (NeedSocket) for each socket that is gone.
		ctx.Send(n.registrar, &registrar.Reconcile{})
	case *pool.AllocationRecorded:
		if n.replayedAlready(m.Event) {
			break
		}
		ctx.Send(n.reconciler, &reconciler.Allocated{Seq: m.Event.Seq})
		a := m.Event.Payload.(events.DevicesAllocated)
		ids := slices.Clone(a.DeviceIDs)
		for _, seq := range a.Supersedes {
			ids = append(ids, n.claimed(seq)...)
		}
		n.allocs = events.Apply(n.allocs, m.Event)
		n.retellHolds(ctx, m.Pool, ids, fmt.Sprintf("allocation #%d of %s holds it", m.Event.Seq, m.Pool))
	case *pool.AllocationAbandoned:
		if !n.replayedAlready(m.Event) {
			n.reconciled(ctx, m.Event)
		}
	case *reconciler.NeedTold:
		for seq := range n.allocs.Allocations {
			ctx.Send(n.reconciler, &reconciler.Allocated{Seq: seq})
		}
	case *reconciler.Recorded:
		if !n.replayedAlready(m.Event) {
			n.reconciled(ctx, m.Event)
		}
	case *registrar.NeedDesires:
		for _, name := range slices.Sorted(maps.Keys(n.pools)) {
			ctx.Send(n.pools[name], &pool.Reserve{Seq: n.cfg.Recorder.Log().LastSeq()})
		}
	case *registrar.NeedSocket:
		if pid := n.pools[m.Pool]; pid != nil {
			ctx.Send(pid, &pool.Reserve{Socket: m.Socket, Lost: m.Lost, Seq: n.cfg.Recorder.Log().LastSeq()})
		}
	case *health.Changed:
		for _, v := range m.Verdicts {
			n.healthy.Learn(v.Address, events.Verdict{Healthy: v.Healthy, Reason: v.Reason, Seq: v.Seq})
		}
		for pid, changes := range byPool(m.Verdicts, n.owner, n.pools) {
			ctx.Send(pid, &pool.SetHealths{Changes: changes})
		}
	case *Rescan:
		ctx.Send(n.scanner, &scanner.Rescan{Reason: m.Reason, Removed: m.Removed})
	case *configwatch.Changed:
		n.reload(ctx, m.Reason, nil)
	case *ReloadConfig:
		n.reload(ctx, m.Reason, sender)
	case *ProbeHealth:
		ctx.Send(n.health, &health.Probe{Reason: "asked", Addresses: m.Addresses, Interfaces: m.Interfaces, Down: m.Down})
	case *Crash:
		panic(fmt.Sprintf("node: injected crash: %s", m.Reason))
	case *Query:
		st := &Status{Holds: map[string][]uint64{}, Health: map[string]bool{}}
		for addr, seqs := range n.allocs.Holders {
			for _, seq := range seqs {
				if n.allocs.Allocations[seq].Claimed() {
					st.Holds[addr] = append(st.Holds[addr], seq)
				}
			}
		}
		for addr, k := range n.healthy {
			st.Health[addr] = k.Healthy
		}
		ctx.Respond(st)
	case *Children:
		ctx.Respond(&ChildPIDs{Scanner: n.scanner, Registrar: n.registrar, Health: n.health,
			Sockets: n.sockets, Reconciler: n.reconciler, ConfigWatch: n.configwatch, Pools: maps.Clone(n.pools),
			Configured: slices.Sorted(maps.Keys(n.resources)), Placed: n.placed})
	}
}

// replayedAlready says e, a record a child told of, is in the ledger this
// incarnation replayed as it started: one its last incarnation's children
// sent before it crashed. Folded again, it would undo what followed it.
func (n *coordinator) replayedAlready(e events.Envelope) bool {
	return e.Seq <= n.replayed.Seq
}

// reconciled folds e, a change to a live allocation that the reconciler
// recorded (see reconciler.Recorded), or a pool's release of one whose
// Allocate the kubelet gave up on (pool.AllocationAbandoned). A release
// or a recovery goes to the allocation's pool, for its holds. When
// whether a container claims the allocation changes, so does whether it
// holds its devices in the pools they moved to: those pools hear their
// members again.
func (n *coordinator) reconciled(ctx actor.Context, e events.Envelope) {
	var seq uint64
	var name, what string
	switch p := e.Payload.(type) {
	case events.AllocationBound:
		seq, name, what = p.AllocationSeq, p.Pool, "claimed again"
	case events.AllocationLeakSuspected:
		seq, name, what = p.AllocationSeq, p.Pool, "claimed by no container"
	case events.DevicesReleased:
		seq, name, what = p.AllocationSeq, p.Pool, "released"
		n.tellPool(ctx, name, e)
	case events.AllocationRecovered:
		seq, name, what = e.Seq, p.Pool, "recovered from the kubelet"
		n.tellPool(ctx, name, e)
	}
	before := n.claimed(seq)
	n.allocs = events.Apply(n.allocs, e)
	if after := n.claimed(seq); (before == nil) != (after == nil) {
		n.retellHolds(ctx, name, slices.Concat(before, after), fmt.Sprintf("allocation #%d of %s %s", seq, name, what))
	}
}

// tellPool sends e to the pool name or, before the first pools spawn,
// folds it into the replayed state they start from, lest they undo it;
// that state stays at its sequence, where the pools' guards start.
func (n *coordinator) tellPool(ctx actor.Context, name string, e events.Envelope) {
	if pid := n.pools[name]; pid != nil {
		ctx.Send(pid, &pool.Reconciled{Event: e})
	} else if !n.placed {
		n.foldReplayed(e)
	}
}

// foldReplayed folds e, recorded before the first placement, into the
// state the first pools start from; that state stays at its sequence,
// where the pools' guards start.
func (n *coordinator) foldReplayed(e events.Envelope) {
	st := events.Apply(n.replayed.Clone(), e)
	st.Seq, st.Time = n.replayed.Seq, n.replayed.Time
	n.replayed = &st
}

// letGo forgets the leaves of ids (all when nil) out of the pool at pid in
// placement gen or before, and returns the devices it forgot a leave of.
func (n *coordinator) letGo(pid *actor.PID, gen uint64, ids []string) []string {
	if ids == nil {
		ids = slices.Sorted(maps.Keys(n.leaving))
	}
	var out []string
	for _, addr := range ids {
		ls := n.leaving[addr]
		kept := slices.DeleteFunc(slices.Clone(ls), func(l leave) bool { return l.pid.Equal(pid) && l.gen <= gen })
		if len(kept) == len(ls) {
			continue
		}
		if len(kept) == 0 {
			delete(n.leaving, addr)
		} else {
			n.leaving[addr] = kept
		}
		out = append(out, addr)
	}
	return out
}

// member is d as a member of pool: with the newest verdict known (healthy
// when none is) and the other pools' allocations that hold it.
func (n *coordinator) member(d sysfs.Device, pool string) allocation.Member {
	m := allocation.Member{Device: d, Healthy: true, HeldElsewhere: n.heldElsewhere(d.Address, pool)}
	if k, ok := n.healthy[d.Address]; ok {
		m.Healthy, m.HealthSeq = k.Healthy, k.Seq
	}
	return m
}

// claimed are the devices of live allocation seq if a container claims it.
func (n *coordinator) claimed(seq uint64) []string {
	if a, ok := n.allocs.Allocations[seq]; ok && a.Claimed() {
		return a.DeviceIDs
	}
	return nil
}

// heldElsewhere are the claimed allocations of other pools that hold addr,
// and the other pools addr is leaving (as holds without a sequence).
func (n *coordinator) heldElsewhere(addr, pool string) []allocation.Hold {
	var out []allocation.Hold
	for _, seq := range n.allocs.Holders[addr] {
		if a := n.allocs.Allocations[seq]; a.Pool != pool && a.Claimed() {
			out = append(out, allocation.Hold{Pool: a.Pool, Seq: seq})
		}
	}
	cur := n.pools[pool]
	for _, l := range n.leaving[addr] {
		if !l.pid.Equal(cur) {
			out = append(out, allocation.Hold{Pool: l.pool})
		}
	}
	return out
}

// retellHolds retells their members to the pools holding ids, but from
// ("" skips none): what holds those devices elsewhere changed.
func (n *coordinator) retellHolds(ctx actor.Context, from string, ids []string, reason string) {
	changed := map[string]bool{}
	for _, id := range ids {
		if owner, ok := n.owner[id]; ok && owner != from {
			changed[owner] = true
		}
	}
	for name := range changed {
		if pid := n.pools[name]; pid != nil {
			n.retellMembers(ctx, name, pid, reason)
		}
	}
}

// retellMembers sends the pool name at pid its members as known now.
func (n *coordinator) retellMembers(ctx actor.Context, name string, pid *actor.PID, reason string) {
	ms := n.members[name]
	for i := range ms {
		ms[i] = n.member(ms[i].Device, name)
	}
	n.setMembers(ctx, pid, ms, reason, nil)
}

// setMembers sends the pool at pid its members, the other end of each move,
// and what it has not let go yet (a crashed pool may have lost that).
func (n *coordinator) setMembers(ctx actor.Context, pid *actor.PID, ms []allocation.Member, reason string, moves map[string]string) {
	var leaving []string
	for addr, ls := range n.leaving {
		if slices.ContainsFunc(ls, func(l leave) bool { return l.pid.Equal(pid) }) {
			leaving = append(leaving, addr)
		}
	}
	slices.Sort(leaving)
	ctx.Send(pid, &pool.SetMembers{Members: slices.Clone(ms), Reason: reason, Gen: n.gen, Seq: n.cfg.Recorder.Log().LastSeq(), Leaving: leaving, Moves: moves})
}

// moves maps the devices that owner moves into or out of pool from the
// placement before to the other pool, so both ends of a move name each other.
func moves(pool string, before, owner map[string]string) map[string]string {
	out := map[string]string{}
	for addr, from := range before {
		if to, placed := owner[addr]; placed && from != to && (from == pool || to == pool) {
			out[addr] = from
			if from == pool {
				out[addr] = to
			}
		}
	}
	return out
}

// byPool groups verdicts by the pool that holds each device now; a
// device in no pool has none to tell.
func byPool(verdicts []health.Verdict, owner map[string]string, pools map[string]*actor.PID) map[*actor.PID][]pool.SetHealth {
	out := map[*actor.PID][]pool.SetHealth{}
	for _, v := range verdicts {
		if pid := pools[owner[v.Address]]; pid != nil {
			out[pid] = append(out[pid], pool.SetHealth{Address: v.Address, Healthy: v.Healthy, Reason: v.Reason, Seq: v.Seq})
		}
	}
	return out
}

// start rebuilds the node's state from the ledger and spawns its children.
func (n *coordinator) start(ctx actor.Context) {
	st := n.replayed
	if st == nil {
		s, err := n.cfg.Recorder.Replay()
		if err != nil {
			panic(fmt.Errorf("node: replay: %w", err))
		}
		st = &s
	}
	// Children spawned now only read it (those that fold get a copy); a pool
	// spawned after the first placement replays the moved-on ledger itself.
	n.replayed = st
	n.life.incarnations++
	n.pools = map[string]*actor.PID{}
	n.members = map[string][]allocation.Member{}
	n.owner = map[string]string{}
	n.join = map[string]sysfs.Device{}
	rc := n.cfg.Reconcile
	n.resources, _ = poolsOf(n.cfg.Config)
	n.leaving, n.stopping, n.deferred = map[string][]leave{}, map[string]poolStopped{}, map[string]deferral{}
	n.allocs = st.LiveAllocations()
	n.healthy = st.Health()
	log := n.cfg.Log
	kubeletSock := KubeletSocket(n.cfg.KubeletDir)
	n.registrar = n.spawn(ctx, "registrar", registrar.Props(registrar.Config{
		Recorder: n.cfg.Recorder, Mode: n.cfg.Mode, KubeletSocket: kubeletSock,
		Options:          &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		KubeletDownSince: st.Kubelet.DownSince,
		Log:              log.With().Str("actor", "registrar").Logger(),
	}))
	dirs := []string{DevicePluginDir(n.cfg.KubeletDir)}
	if n.cfg.Mode == grpcapi.ModeWatcher {
		dirs = append(dirs, PluginsRegistryDir(n.cfg.KubeletDir))
	}
	n.sockets = n.spawn(ctx, "sockets", sockets.Props(sockets.Config{Dirs: dirs, KubeletSocket: kubeletSock,
		Log: log.With().Str("actor", "sockets").Logger()}))
	n.health = n.spawn(ctx, "health", health.Props(health.Config{Prober: n.cfg.Reader, Recorder: n.cfg.Recorder,
		Interval: n.cfg.ProbeInterval, Known: st.Clone().Devices, Log: log.With().Str("actor", "health").Logger()}))
	rc.Recorder, rc.Lister, rc.Replayed = n.cfg.Recorder, n.cfg.PodResources, st
	rc.Log = log.With().Str("actor", "reconciler").Logger()
	n.reconciler = n.spawn(ctx, "reconciler", reconciler.Props(rc))
	if n.cfg.ConfigPath != "" && n.cfg.WatchConfig {
		n.configwatch = n.spawn(ctx, "configwatch", configwatch.Props(configwatch.Config{Path: n.cfg.ConfigPath, Log: log.With().Str("actor", "configwatch").Logger()}))
	}
	n.scanner = n.spawn(ctx, "scanner", scanner.Props(scanner.Config{Reader: n.cfg.Reader, Recorder: n.cfg.Recorder,
		Known: st.Clone().Devices, First: n.firstScan, Interval: n.cfg.ScanInterval, Log: log.With().Str("actor", "scanner").Logger()}))
	n.firstScan = nil
}

func (n *coordinator) scanned(ctx actor.Context, m *scanner.Scanned) {
	// The devices this scan found changed (a link, a driver), and those
	// that follow their links, are probed at once; the others at their
	// interval.
	was := make(map[string]sysfs.Device, len(n.devices))
	for _, d := range n.devices {
		was[d.Address] = d
	}
	var seen health.Seen
	for _, d := range m.Devices {
		if old, ok := was[d.Address]; ok && !reflect.DeepEqual(old, d) {
			seen.Addresses = append(seen.Addresses, d.Address)
			for _, ifc := range slices.Concat(old.Interfaces, d.Interfaces) {
				seen.Interfaces = append(seen.Interfaces, ifc.Name)
			}
		}
	}
	n.devices = m.Devices
	for addr, d := range m.HealthSet {
		n.healthy.Learn(addr, d.Verdict())
	}
	n.place(ctx, "scan: "+m.Reason, m.Changed, seen)
}

// place puts the last scan's devices into the config's pools, spawns,
// withdraws or updates the pools, and tells the health checker what to
// probe, at once the devices in seen.
func (n *coordinator) place(ctx actor.Context, reason string, changed bool, seen health.Seen) {
	// Where each device was: the last placement, or the ledger's at a start.
	before := n.owner
	if !n.placed {
		before = map[string]string{}
		for addr, d := range n.replayed.Devices {
			if d.Pool != "" {
				before[addr] = d.Pool
			}
		}
	}
	pools, owner, members := placement(n.cfg.Config, n.resources, n.devices, n.cfg.Env, before)
	n.gen++
	n.leave(owner)

	var targets []health.Target
	var emptied []events.Payload // what the pools this start leaves unspawned cannot record
	var emptiedPools []string
	// idle are the pools this placement leaves unserved for want of
	// devices that the last one did not, and that no other line names:
	// one line names them all.
	var idle []string
	unserved := map[string]bool{}
	for _, pm := range pools {
		res := pm.Resource
		devs := members[pm.Name]
		slices.SortFunc(devs, func(a, b sysfs.Device) int { return strings.Compare(a.Address, b.Address) })
		ms := make([]allocation.Member, 0, len(devs))
		for _, d := range devs {
			addr := d.Address
			ms = append(ms, n.member(d, pm.Name))
			joined, ok := n.join[addr]
			if prev := n.owner[addr]; !ok || prev != pm.Name || (d.Driver != "" && d.Driver != joined.Driver) {
				joined, n.join[addr] = d, d
			}
			t := health.Target{Probe: sysfs.ProbeTarget{Address: addr, Driver: joined.Driver,
				VFIO: sysfs.IsVFIODriver(joined.Driver), IOMMUGroup: d.IOMMUGroup,
				Link: res.Health.Link, VF: d.IsVF(), PFInterface: d.PFInterface},
				HoldDown: res.Health.HoldDown, Debounce: res.Health.Debounce, Interval: res.Health.ProbeInterval,
				Known: n.healthy[addr]}
			if len(d.Interfaces) > 0 {
				t.Probe.Interface = d.Interfaces[0].Name
			}
			targets = append(targets, t)
		}
		prev := n.members[pm.Name]
		n.members[pm.Name] = ms
		// Like the SR-IOV plugin, serve no empty pool unless it advertises empty.
		serve := len(ms) > 0 || res.AdvertiseEmpty
		pid, running := n.pools[pm.Name]
		if !serve {
			delete(n.deferred, pm.Name)
		}
		named := running // a pool that served says so as it withdraws
		switch {
		case running && !serve:
			// The last device left: the pool records it, withdraws, stops.
			n.setMembers(ctx, pid, nil, reason, moves(pm.Name, before, owner))
			ctx.Send(pid, &pool.Withdraw{Reason: "no devices: the last one left (" + reason + ")"})
			n.stopPool(ctx, pm.Name, pid, prev)
		case running && (changed || !sameDevices(prev, ms)):
			n.setMembers(ctx, pid, ms, reason, moves(pm.Name, before, owner))
		case !running && serve && n.isStopping(pm.Name):
			// Spawned once the one of its name has stopped, for this reason,
			// naming where what joined it meanwhile came from.
			d, ok := n.deferred[pm.Name]
			if !ok {
				d = deferral{reason: n.startReason(reason), moves: map[string]string{}}
			}
			maps.Copy(d.moves, moves(pm.Name, before, owner))
			n.deferred[pm.Name] = d
		case !running && serve:
			why, mv := n.startReason(reason), moves(pm.Name, before, owner)
			if d, ok := n.deferred[pm.Name]; ok {
				why = d.reason
				mv = maps.Clone(d.moves)
				maps.Copy(mv, moves(pm.Name, before, owner))
			}
			delete(n.deferred, pm.Name)
			n.spawnPool(ctx, res, ms, mv, why)
		case !running && !n.placed:
			// Not served (no devices yet, as after a reboot before the
			// VFs are made): what a killed run left under its name goes
			// here, or the kubelet's plugin watcher dials it again and again.
			pool.CleanStaleSockets(SocketDir(n.cfg.KubeletDir, n.cfg.Mode), pm.Name, n.cfg.Log)
			if ps := n.emptied(pm.Name, owner); len(ps) > 0 {
				emptied, emptiedPools = append(emptied, ps...), append(emptiedPools, pm.Name)
				named = true // once its records land
			}
		}
		// An auxNetDevice pool serves none of its devices yet: not for want
		// of them.
		if !serve && res.DeviceType != config.AuxNetDevice {
			unserved[pm.Name] = true
			if !named && !n.unserved[pm.Name] {
				idle = append(idle, pm.Name)
			}
		}
	}
	n.unserved = unserved
	if len(emptied) > 0 {
		n.life.persist.Persist(ctx, n.cfg.Recorder, nil, emptied, func(_ []events.Envelope, err error) {
			if err != nil {
				n.cfg.Log.Error().Err(err).Strs("pools", emptiedPools).Msg("cannot record that pools have no devices")
				emptiedPools = nil
			}
			n.logUnserved(slices.Concat(emptiedPools, idle))
		})
	} else {
		n.logUnserved(idle)
	}
	maps.DeleteFunc(n.join, func(addr string, _ sysfs.Device) bool {
		_, ok := owner[addr]
		return !ok
	})
	n.owner = owner
	if !n.placed {
		n.removeStaleCDISpecs()
	}
	n.placed = true
	ctx.Send(n.health, &health.Watch{Targets: targets, Seen: seen})
}

// logUnserved is the one line that names the pools a placement leaves
// unserved for want of devices; nothing when there are none.
func (n *coordinator) logUnserved(pools []string) {
	if len(pools) > 0 {
		n.cfg.Log.Info().Strs("pools", pools).Msg("pools have no devices and are not served")
	}
}

// sameDevices says whether a and b list the same devices with the same
// facts, but for an interface's link state and the scan's warnings, which
// no pool uses: the ledger does not keep every fact a selector or an
// answer reads (a vdpa type, an SF, a partition key), so a scan that
// changes none of its facts may still move a device between pools.
func sameDevices(a, b []allocation.Member) bool {
	stable := func(d sysfs.Device) sysfs.Device {
		d.Warnings = nil
		d.Interfaces = slices.Clone(d.Interfaces)
		for i := range d.Interfaces {
			d.Interfaces[i].OperState, d.Interfaces[i].Carrier = "", 0
		}
		return d
	}
	return slices.EqualFunc(a, b, func(x, y allocation.Member) bool {
		return reflect.DeepEqual(stable(x.Device), stable(y.Device))
	})
}

// placement says where each device goes under cfg (resources are its pools
// by name): to the first pool in file order whose selectors take it. Two
// kinds stay in their pool in before while that exists: one with no driver
// (unbound, between drivers), so a rebind makes no membership change, and
// one whose facts are in a pod (factsInPod), which no selector can judge.
// members lists each pool's devices, unsorted.
func placement(cfg *config.Config, resources map[string]*config.Resource, devices []sysfs.Device, env config.Env,
	before map[string]string) (pools []config.PoolMembers, owner map[string]string, members map[string][]sysfs.Device) {
	pools = cfg.Members(devices, env)
	byAddr := make(map[string]sysfs.Device, len(devices))
	for _, d := range devices {
		byAddr[d.Address] = d
	}
	owner, members = map[string]string{}, map[string][]sysfs.Device{}
	for _, pm := range pools {
		for _, addr := range pm.Members {
			if d, ok := byAddr[addr]; ok { // auxiliary devices ride on their parent
				owner[addr] = pm.Name
				members[pm.Name] = append(members[pm.Name], d)
			}
		}
	}
	for addr, name := range before {
		d, present := byAddr[addr]
		cur, placed := owner[addr]
		keep := !placed && d.Driver == "" || factsInPod(&d)
		if !present || !keep || cur == name || resources[name] == nil {
			continue
		}
		if placed {
			members[cur] = slices.DeleteFunc(members[cur], func(o sysfs.Device) bool { return o.Address == addr })
		}
		owner[addr] = name
		members[name] = append(members[name], d)
	}
	return pools, owner, members
}

// factsInPod says whether a function's interfaces and RDMA devices are all
// in a pod's network namespace (RDMA exclusive mode): RDMA is enabled on
// it (sysfs.Device.RDMAEnabled) yet the host sees neither. A selector that
// reads them (pKeys) cannot judge it until the pod ends.
func factsInPod(d *sysfs.Device) bool {
	return len(d.Interfaces) == 0 && !d.RDMA() && d.RDMAEnabled()
}

// stopPool stops the pool name at pid, which the registrar forgets. Until
// it has stopped it may still give out what it listed (ms).
func (n *coordinator) stopPool(ctx actor.Context, name string, pid *actor.PID, ms []allocation.Member) {
	ctx.Send(n.registrar, &registrar.Undesire{Pool: name})
	ctx.Poison(pid)
	listed := make(map[string]bool, len(ms))
	for _, m := range ms {
		listed[m.Device.Address] = true
	}
	n.stopping[pid.Id] = poolStopped{pool: name, pid: pid, members: listed}
	delete(n.pools, name)
}

// removeCDISpec removes the CDI spec of pool, one that is gone.
func (n *coordinator) removeCDISpec(pool string) {
	if dir := n.cfg.CDISpecDir; dir != "" {
		prefix, name, _ := strings.Cut(pool, "/")
		if err := allocation.RemoveCDISpec(dir, &config.Resource{Prefix: prefix, Name: name}); err != nil {
			n.cfg.Log.Error().Err(err).Str("pool", pool).Msg("cannot remove the CDI spec of a pool that is gone")
		}
	}
}

// removeStaleCDISpecs removes, at the first placement, the CDI specs of
// pools that do not run with CDI now (they went while the daemon was down):
// a runtime must not resolve a name to a device that is another pool's now.
func (n *coordinator) removeStaleCDISpecs() {
	dir := n.cfg.CDISpecDir
	if dir == "" {
		return
	}
	keep := map[string]bool{}
	for name := range n.pools {
		if r := n.resources[name]; r != nil && r.CDI.Enabled {
			keep[allocation.CDISpecPath(dir, r)] = true
		}
	}
	// Listed, not globbed: the dir's own name may hold [, * or ?.
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.cfg.Log.Error().Err(err).Str("dir", dir).Msg("cannot list the CDI spec dir for stale specs")
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if ok, _ := filepath.Match(allocation.CDISpecGlob, e.Name()); !ok || keep[p] {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			n.cfg.Log.Error().Err(err).Str("path", p).Msg("cannot remove a stale CDI spec")
			continue
		}
		n.cfg.Log.Info().Str("path", p).Msg("removed the CDI spec of a pool that no longer serves with CDI")
	}
}

// startReason is why a pool spawned by a placement for reason starts: at an
// incarnation's first placement, the daemon's start or the node's restart.
func (n *coordinator) startReason(reason string) string {
	switch {
	case n.placed:
		return reason
	case n.life.incarnations > 1:
		return "node restarted"
	}
	return "daemon start"
}

// isStopping says whether a pool of the name is still stopping. A new one
// waits for it: until then it may record, answer the kubelet or touch the
// CDI spec, all of which are the new one's.
func (n *coordinator) isStopping(name string) bool {
	for _, ps := range n.stopping {
		if ps.pool == name {
			return true
		}
	}
	return false
}

// emptied is what a pool left with no devices at a start, so not spawned,
// cannot record itself: that its ledger members left, with the live
// allocations that still hold them, and that it serves no more (a crash
// came between its withdrawal and the record). Its members are the fold's:
// a crash between the two records of a move leaves a device listed by the
// pool it left as well as the one it joined.
func (n *coordinator) emptied(name string, owner map[string]string) []events.Payload {
	removed := n.replayed.Pools[name].Members
	to := map[string]string{}
	for _, addr := range removed {
		if p, ok := owner[addr]; ok {
			to[addr] = p
		}
	}
	var payloads []events.Payload
	if len(removed) > 0 {
		c := PoolRemoved(name, removed, &n.allocs, n.startReason(""), to)
		c.Reason += "; the pool has no devices and is not served"
		payloads = append(payloads, c)
	}
	if reg := n.replayed.Pools[name].Registration; reg.Serving {
		payloads = append(payloads, events.PluginWithdrawn{Pool: name, Socket: reg.Socket, Reason: "no devices at the node's start"})
	}
	return payloads
}

// leave notes the devices that owner places out of a pool that may still
// give them out (running, or stopping), and forgets the leave of a pool
// that holds the device again.
func (n *coordinator) leave(owner map[string]string) {
	for addr, to := range owner {
		// Back in the very pool it was leaving (not a new one of the name).
		pid := n.pools[to]
		ls := slices.DeleteFunc(n.leaving[addr], func(l leave) bool { return l.pid.Equal(pid) })
		if len(ls) == 0 {
			delete(n.leaving, addr)
		} else {
			n.leaving[addr] = ls
		}
		// Until stopped, a stopping pool may give out what it listed,
		// wherever it went since (even into a pool of its name).
		for _, ps := range n.stopping {
			if ps.members[addr] {
				n.addLeave(addr, ps.pool, ps.pid)
			}
		}
		if from, ok := n.owner[addr]; ok && from != to {
			n.addLeave(addr, from, n.pools[from])
		}
	}
	// Placed nowhere, it stays listed by its old pool until let go; placed
	// somewhere before then, it is held there.
	for addr, from := range n.owner {
		if _, placed := owner[addr]; !placed {
			n.addLeave(addr, from, n.pools[from])
		}
	}
}

// addLeave notes that addr is leaving the pool name at pid in this
// placement, once per pool; a nil pid (no such pool running) is no leave.
func (n *coordinator) addLeave(addr, name string, pid *actor.PID) {
	if pid != nil && !slices.ContainsFunc(n.leaving[addr], func(o leave) bool { return o.pid.Equal(pid) }) {
		n.leaving[addr] = append(n.leaving[addr], leave{pool: name, pid: pid, gen: n.gen})
	}
}

// spawn starts a child under a name operators read in the logs
// ("node/scanner", not "node/$3"), free at a restart: the old ones stopped.
func (n *coordinator) spawn(ctx actor.Context, name string, props *actor.Props) *actor.PID {
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		panic(fmt.Errorf("node: spawn %s: %w", name, err))
	}
	return pid
}

// spawnPool starts the allocator of res, from the replayed state only at
// the first placement (see start).
func (n *coordinator) spawnPool(ctx actor.Context, res *config.Resource, ms []allocation.Member, moves map[string]string, reason string) {
	replayed := n.replayed
	if n.placed {
		replayed = nil
	}
	name := res.FullName()
	n.pools[name] = n.spawn(ctx, fmt.Sprintf("pool-%s-%d", strings.ReplaceAll(name, "/", "_"), n.gen), pool.Props(pool.Config{
		Resource: res, Members: slices.Clone(ms), Moves: moves, Seq: n.cfg.Recorder.Log().LastSeq(), Reason: reason, Recorder: n.cfg.Recorder, Replayed: replayed,
		SocketDir: SocketDir(n.cfg.KubeletDir, n.cfg.Mode), Mode: n.cfg.Mode, Env: n.cfg.AllocEnv, DevinfoDir: n.cfg.DevinfoDir, CDISpecDir: n.cfg.CDISpecDir,
		CallTimeout: n.cfg.CallTimeout, ObserveAllocate: n.cfg.ObserveAllocate, Log: n.cfg.Log.With().Str("actor", "pool").Logger(),
	}))
}

// poolsOf are cfg's pools by name, and their names in file order.
func poolsOf(cfg *config.Config) (map[string]*config.Resource, []string) {
	byName := make(map[string]*config.Resource, len(cfg.Resources))
	var names []string
	for i := range cfg.Resources {
		r := &cfg.Resources[i]
		byName[r.FullName()] = r
		names = append(names, r.FullName())
	}
	return byName, names
}

// Digest is the SHA-256 of a config file's bytes, as the ledger names it.
func Digest(data []byte) string {
	if data == nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// unrecordedRetry starts the reason of a reload that tries again a config
// whose record could not be written.
const unrecordedRetry = "again, as it could not be recorded: "

// ConfigApplied describes a valid config for the ledger: its path, digest
// and every pool's spec, with the pool's whole entry as canonical JSON so
// any change of it is a change of the spec.
func ConfigApplied(path string, data []byte, cfg *config.Config) events.ConfigApplied {
	ca := events.ConfigApplied{Path: path, SHA256: Digest(data)}
	for i := range cfg.Resources {
		r := &cfg.Resources[i]
		ca.Pools = append(ca.Pools, events.PoolSpec{Resource: r.FullName(), DeviceType: string(r.DeviceType),
			ExcludeTopology: r.ExcludeTopology, AllocatePolicy: string(r.AllocatePolicy), Definition: r.Definition()})
	}
	return ca
}

// reload reads the config file again and answers sender (if any) with a
// *ReloadResult. An unreadable file is logged, an invalid one recorded as
// ConfigRejected; the config in force stays. A valid one is recorded as
// ConfigApplied, after the membership of pools it removes. The node holds
// its messages while the record goes to disk, so what comes next sees the
// new config; should the node close meanwhile, the config is only
// remembered and the next incarnation starts its pools by it.
func (n *coordinator) reload(ctx actor.Context, reason string, sender *actor.PID) {
	reply := func(res *ReloadResult) {
		if sender != nil {
			ctx.Send(sender, res)
		}
	}
	path := n.cfg.ConfigPath
	log := n.cfg.Log.With().Str("config", path).Str("reason", reason).Logger()
	data, err := os.ReadFile(path)
	if err != nil {
		log.Warn().Err(err).Msg("cannot read the config file; keeping the config in force")
		reply(&ReloadResult{Err: err})
		return
	}
	sha := Digest(data)
	switch {
	case sha == n.life.rejected:
		reply(&ReloadResult{Rejected: n.life.rejectedLines})
		return
	case sha == n.cfg.ConfigSHA256 && n.life.rejected == "":
		reply(&ReloadResult{Unchanged: true})
		return
	}
	// The file will not change again to ask: a record that fails is tried
	// again after a doubling wait.
	unrecorded := func(err error, what string) {
		n.life.unrecorded++
		wait := supervise.Doubling(time.Second, time.Minute, n.life.unrecorded)
		log.WithLevel(supervise.FailureLevel(n.life.unrecorded)).Err(err).Dur("retry_in_ms", wait).Msg("cannot record the " + what + "; keeping the config in force until it can")
		self, root, why := ctx.Self(), ctx.ActorSystem().Root, strings.TrimPrefix(reason, unrecordedRetry)
		time.AfterFunc(wait, func() { root.Send(self, &ReloadConfig{Reason: unrecordedRetry + why}) })
	}
	cfg, err := config.ParseWith(path, data, n.cfg.ConfigOptions)
	if err != nil {
		lines := strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
		n.life.persist.Persist(ctx, n.cfg.Recorder, nil, []events.Payload{events.ConfigRejected{Path: path, SHA256: sha, Errors: lines}},
			func(_ []events.Envelope, err error) {
				if err != nil {
					unrecorded(err, "rejected config")
					reply(&ReloadResult{Rejected: lines, Err: err})
					return
				}
				n.life.unrecorded = 0
				n.life.rejected, n.life.rejectedLines = sha, lines
				log.Warn().Strs("errors", lines).Msg("config rejected; keeping the config in force")
				reply(&ReloadResult{Rejected: lines})
			})
		return
	}
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}
	next, pools := poolsOf(cfg)
	// Placed as place will below, so the records name the devices it moves.
	var now map[string]string
	if n.placed {
		_, now, _ = placement(cfg, next, n.devices, n.cfg.Env, n.owner)
	}
	var payloads []events.Payload
	var gone []string
	for _, name := range slices.Sorted(maps.Keys(n.resources)) { // the ledger's order is not the map's
		if next[name] != nil {
			continue
		}
		gone = append(gone, name)
		var removed []string
		for _, m := range n.members[name] {
			removed = append(removed, m.Device.Address)
		}
		if !n.placed {
			// Nothing is placed yet: its members are the ledger's, which
			// leave it as at a start (where they go, the first scan's
			// records say).
			removed = n.replayed.Pools[name].Members
		}
		if len(removed) > 0 {
			payloads = append(payloads, PoolRemoved(name, removed, &n.allocs, "pool removed from the config", now))
		}
	}
	applied := ConfigApplied(path, data, cfg)
	old := make(map[string]string, len(n.resources))
	for name, r := range n.resources {
		old[name] = r.Definition()
	}
	applied.Changes = ConfigChanges(old, applied.Pools, n.owner, now)
	payloads = append(payloads, applied)
	n.life.persist.Persist(ctx, n.cfg.Recorder, nil, payloads, func(envs []events.Envelope, err error) {
		if err != nil {
			unrecorded(err, "new config")
			reply(&ReloadResult{Err: err})
			return
		}
		n.life.unrecorded = 0
		n.life.rejected, n.life.rejectedLines = "", nil
		n.cfg.Config, n.cfg.ConfigSHA256 = cfg, sha
		log.Info().Str("sha256", sha).Strs("pools", pools).Strs("removed", gone).Uint64("seq", envs[len(envs)-1].Seq).Msg("config applied")
		defer reply(&ReloadResult{Applied: true})
		if n.closing {
			return
		}
		for _, name := range gone {
			if pid := n.pools[name]; pid != nil {
				n.stopPool(ctx, name, pid, n.members[name])
			}
			// Its CDI spec goes now, not once it has stopped: the pools
			// its devices move to write theirs at once, under the same
			// names, and a runtime resolves a name two specs define
			// through neither.
			n.removeCDISpec(name)
			delete(n.members, name)
			// One waiting to start waits no more: added again, it starts
			// for the reload that adds it.
			delete(n.deferred, name)
		}
		for _, spec := range applied.Pools {
			if pid := n.pools[spec.Resource]; pid != nil && !config.SameDefinition(old[spec.Resource], spec.Definition) {
				ctx.Send(pid, &pool.SetResource{Resource: next[spec.Resource]})
			}
		}
		n.resources = next
		if n.placed {
			n.place(ctx, "reload: "+reason, true, health.Seen{})
			return
		}
		// The first scan places the devices by this config; its pools
		// start from a state that has it.
		for _, e := range envs {
			n.foldReplayed(e)
		}
	})
}
