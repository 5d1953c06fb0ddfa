// Package pool is the pool allocator actor: one per resource pool. It owns
// the pool's members, their health and the live allocations of its devices;
// serves the pool to the kubelet through a grpcapi.PoolServer; and answers
// Allocate only once the allocation is durable in the ledger.
package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/devledger/devledger/actors/internal/handoff"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/sysfs"
)

// Config is what a pool allocator needs.
type Config struct {
	Resource *config.Resource
	// Members, Moves and Seq make the pool's first SetMembers.
	Members []allocation.Member
	Moves   map[string]string
	Seq     uint64
	// Reason is why the pool was spawned (default "daemon start").
	Reason   string
	Recorder *ledger.Recorder
	// Replayed is the first incarnation's state (later ones replay).
	Replayed *events.State
	// SocketDir is where the pool serves (see SocketBase), Mode how it registers.
	SocketDir string
	Mode      grpcapi.RegistrationMode
	Env       allocation.Env
	// DevinfoDir holds a netDevice pool's device-info files, CDISpecDir a
	// CDI pool's spec; "" writes none.
	DevinfoDir string
	CDISpecDir string
	// CallTimeout bounds every kubelet call (0: grpcapi.DefaultCallTimeout).
	CallTimeout time.Duration
	// RetryInitial and RetryMax bound the pause before the pool places its
	// members again after the ledger refused a change of them, doubling
	// from one to the other (0: 100 ms and a minute).
	RetryInitial, RetryMax time.Duration
	// ObserveAllocate, if set, hears each Allocate's duration and outcome.
	ObserveAllocate func(pool string, took time.Duration, err error)
	Log             zerolog.Logger
}

// Props returns the props of a pool allocator.
func Props(cfg Config) *actor.Props {
	supervise.OrDefault(&cfg.CallTimeout, grpcapi.DefaultCallTimeout)
	supervise.OrDefault(&cfg.RetryInitial, 100*time.Millisecond)
	supervise.OrDefault(&cfg.RetryMax, time.Minute)
	replayed := handoff.First(cfg.Replayed)
	life := newLifetime()
	shared := &cfg // a reload's SetResource outlives a restart
	return actor.PropsFromProducer(func() actor.Actor {
		return &allocator{cfg: shared, name: cfg.Resource.FullName(), life: life, replayed: replayed()}
	}, actor.WithDispatcher(supervise.Warm))
}

// placement is a SetMembers taken (see place). id names its membership
// change; one that changes no member has none and is durable at once.
// refused is the ledger's answer to a change it refused.
type placement struct {
	m       *SetMembers
	order   []string // its members' addresses, sorted
	id      uint64
	durable bool
	refused error
	start   bool
}

type allocator struct {
	cfg      *Config
	name     string
	replayed *events.State

	members map[string]*allocation.Member
	order   []string // member addresses, sorted
	// rank is members as GetPreferredAllocation ranks them (see ranking):
	// nil once members or their health change, unmarked once holds do.
	rank   *allocation.Index
	marked bool
	// verdicts is the newest verdict heard per device, member or not: one
	// may come before its device joins, and members may bring an older one.
	// Set at start.
	verdicts events.Health
	holds    events.Holds // the pool's live allocations (the fold's)
	// going are the members the newest placement taken drops, until it
	// applies: listed unhealthy, so that while the ledger refuses the
	// change the kubelet gives out no device gone from sysfs or moved.
	going map[string]bool

	// placing are the placements not applied yet, oldest first (see
	// place); retry places again after a refusal (see refused).
	placing []*placement
	retry   *time.Timer
	// serveWait is the timer of serveAgain's wait.
	serveWait *time.Timer

	watchers map[chan []*pluginapi.Device]*watcher
	// list is the last list built, nil once members or resource change;
	// stale names its entries whose health changed since (see deviceList).
	list  []*pluginapi.Device
	stale []string
	// cdiWritten are the entries of the CDI spec this incarnation last
	// wrote, by device; nil when it wrote none (see ensureCDISpec).
	cdiWritten map[string]specs.Device
	server     *grpcapi.PoolServer
	socket     string    // where server serves now (see SocketBase)
	life       *lifetime // outlives this incarnation, numbered life.incarnations
}

// Receive implements actor.Actor.
func (p *allocator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.start(ctx)
	case *actor.Stopping:
		// Stopped for good: every Allocate pending is answered first.
		p.drainPending(ctx)
		p.refuseWaiting(ctx)
		p.stop()
	case *actor.Restarting:
		// The next incarnation (same mailbox) takes the answers of the
		// Allocates pending, and the calls waiting (life.waiting).
		p.stop()
	case *actor.Stopped:
		close(p.life.gone) // Stopped comes once
		// Every incarnation's server finishes its calls (each bounded by
		// the call timeout) before the parent hears the pool is gone.
		p.life.draining.Wait()
		// Those calls have returned: an answer granted that is still
		// unread went to a backend that gave up (see unread).
		for _, reply := range p.life.unread {
			p.releaseUnread(ctx, reply)
		}
	case *SetMembers:
		p.place(ctx, m, false)
	case *placed:
		p.placedOne(ctx, m)
	case *replace:
		p.replace(ctx)
	case *serveAgain:
		p.serveAgain(ctx, m.socket, m.refused)
	case *servedLate:
		p.life.unserved = 0
	case *SetResource:
		p.cfg.Resource = m.Resource
		p.list = nil
		p.broadcast()
		p.syncDeviceInfo(nil) // the device type may have become netDevice
		_ = p.writeCDISpec()  // it logs a failure; an Allocate tries again
	case *SetHealths:
		changed := false
		for i := range m.Changes {
			changed = p.setHealth(&m.Changes[i]) || changed
		}
		if changed {
			p.broadcast()
		}
	case *Reserve:
		p.reserve(ctx, m)
	case *Reconciled:
		p.holds.Apply(p.name, m.Event)
		p.marked = false
	case *Withdraw:
		p.withdraw(m.Reason)
	case *Query:
		p.call(ctx, &queryReq{from: ctx.Sender()})
	case *Crash:
		panic(fmt.Sprintf("pool %s: injected crash: %s", p.name, m.Reason))
	case *watchReq:
		if m.incarnation == p.life.incarnations {
			// Told as it opens, not once taken: a stream held while
			// members are placed is the kubelet's all the same.
			ctx.Send(ctx.Parent(), &registrar.Listing{Pool: p.name, Socket: m.socket, Open: true})
		}
		p.call(ctx, m)
	case *unwatchReq, *preferredReq, *allocateReq:
		p.call(ctx, m)
	case *landed:
		if f, ok := p.life.pending[m.id]; ok { // drainPending may have landed it
			p.land(ctx, m.id, f, <-f.landed)
		}
	case *registrar.KubeletReported: // from the backend, after Serving
		ctx.Send(ctx.Parent(), m)
	case *abandoned: // never held: what it releases is durable already
		p.abandon(ctx, m)
	}
}

// call handles a kubelet call or a Query, or holds it while placements
// are not applied (see place).
func (p *allocator) call(ctx actor.Context, c any) {
	if len(p.placing) > 0 {
		p.life.waiting = append(p.life.waiting, c)
		return
	}
	switch m := c.(type) {
	case *watchReq:
		if m.incarnation != p.life.incarnations {
			// Opened on a stopping incarnation's server: end it, so the
			// kubelet takes this incarnation's registration.
			close(m.ch)
			m.reply <- struct{}{}
			return
		}
		list := p.deviceList()
		p.watchers[m.ch] = &watcher{socket: m.socket, sent: list}
		push(m.ch, list)
		m.reply <- struct{}{}
	case *unwatchReq:
		if w, ok := p.watchers[m.ch]; ok {
			close(m.ch)
			delete(p.watchers, m.ch)
			ctx.Send(ctx.Parent(), &registrar.Listing{Pool: p.name, Socket: w.socket})
		}
	case *preferredReq:
		resp, err := p.preferred(m.req)
		m.reply <- preferredReply{resp: resp, err: err}
	case *allocateReq:
		if err := p.allocate(ctx, m); err != nil {
			p.answer(m.reply, allocateReply{err: err})
		}
	case *queryReq:
		ctx.Send(m.from, p.status())
	}
}

// refuseWaiting answers the calls waiting as the pool stops for good.
func (p *allocator) refuseWaiting(ctx actor.Context) {
	err := fmt.Errorf("%w: pool %s stopped", grpcapi.ErrUnavailable, p.name)
	for _, c := range p.life.waiting {
		switch m := c.(type) {
		case *allocateReq:
			p.answer(m.reply, allocateReply{err: err})
		case *preferredReq:
			m.reply <- preferredReply{err: err}
		case *queryReq:
			ctx.Send(m.from, p.status())
		}
	}
	p.life.waiting = nil
}

// start rebuilds the pool from the ledger, places its members and serves.
func (p *allocator) start(ctx actor.Context) {
	p.watchers = map[chan []*pluginapi.Device]*watcher{}
	st := p.replayed
	if st == nil {
		s := p.replay()
		st = &s
		// Members may have changed since we were spawned.
		ctx.Send(ctx.Parent(), &NeedMembers{Pool: p.name})
	}
	p.holds = st.Holds(p.name)
	p.verdicts = st.Health()
	// Start from the members the ledger lists; place those given, or the
	// last incarnation's on a restart (NeedMembers brings current ones).
	place := &SetMembers{Members: p.cfg.Members, Moves: p.cfg.Moves, Seq: p.cfg.Seq}
	if last := p.life.placed; last != nil {
		place = &SetMembers{Members: last.Members, Gen: last.Gen, Seq: last.Seq}
	}
	place.Reason = cmp.Or(p.cfg.Reason, "daemon start")
	if p.life.incarnations > 0 {
		place.Reason = "pool restarted"
	}
	// Numbered before placing: the calls the last incarnation held may
	// run as soon as the placement applies.
	p.life.incarnations++
	inForce := p.placeAfterReplay(ctx, st, place, true)

	CleanStaleSockets(p.cfg.SocketDir, p.name, p.cfg.Log)
	b := &backend{root: ctx.ActorSystem().Root, pid: ctx.Self(), timeout: p.cfg.CallTimeout, pool: p.name,
		life: p.life, incarnation: p.life.incarnations, observe: p.cfg.ObserveAllocate}
	p.server = grpcapi.NewPoolServer(p.name, b, grpcapi.PoolServerOptions{Mode: p.cfg.Mode, Observer: b,
		CallTimeout: p.cfg.CallTimeout, Logger: p.cfg.Log, PrivateDirKey: SocketBase(p.name) + ".sock"})
	p.socket = newSocketPath(p.cfg.SocketDir, p.name)
	if err := p.server.Serve(p.socket); err != nil {
		panic(fmt.Errorf("pool %s: serve %s: %w", p.name, p.socket, err))
	}
	if inForce {
		p.announce(ctx, "", place.Seq)
	}
	p.applyPlaced(ctx) // the calls held before, now that it serves
}

// syncDeviceInfo writes the device-info file (read by CNI plugins) of each
// netDevice member that old (nil: none) lacks or has with other facts. It
// removes none: a device that left may still be held by a container whose
// sandbox CNI sets up again. For that reason, too, a held device keeps the
// file it has: its facts may have changed because a container holds it
// (in RDMA exclusive mode its RDMA device leaves the host for the pod's
// namespace), and the CNI must read again what it read at the Allocate.
func (p *allocator) syncDeviceInfo(old map[string]*allocation.Member) {
	if p.cfg.DevinfoDir == "" || p.cfg.Resource.DeviceType != config.NetDevice {
		return
	}
	// One log line, not one per device: a bad directory fails them all.
	var failed []string
	var first error
	res := p.cfg.Resource
	for _, addr := range p.order {
		d := allocation.ForDeviceInfo(res, p.members[addr].Device)
		if o, ok := old[addr]; ok {
			if was := allocation.ForDeviceInfo(res, o.Device); allocation.SameDeviceInfo(&was, &d) {
				continue
			}
		}
		if len(p.holds.Holders[addr]) > 0 && allocation.HasDeviceInfo(p.cfg.DevinfoDir, p.name, addr) {
			continue
		}
		if err := allocation.WriteDeviceInfo(p.cfg.DevinfoDir, p.name, d); err != nil {
			failed, first = append(failed, addr), cmp.Or(first, err)
		}
	}
	if len(failed) > 0 {
		p.cfg.Log.Warn().Err(first).Str("pool", p.name).Strs("devices", failed).Msg("cannot write device-info files")
	}
}

// writeCDISpec writes the CDI spec that resolves the names Allocate
// answers with, before the members are offered to the kubelet; with CDI
// off (a reload may turn it off) or no members, the spec goes. A spec
// that cannot be written goes too: the one before names devices that may
// have left for another pool, whose spec then names them too, and a
// runtime resolves a name two specs define in neither. It logs what
// fails, and returns it for Allocate (see ensureCDISpec).
func (p *allocator) writeCDISpec() error {
	p.cdiWritten = nil
	dir, res := p.cfg.CDISpecDir, p.cfg.Resource
	log := p.cfg.Log.With().Str("pool", p.name).Logger()
	if dir == "" {
		if res.CDI.Enabled {
			log.Error().Err(errNoCDISpecDir).Msg("no CDI spec for the pool: its Allocates are refused")
			return errNoCDISpecDir
		}
		return nil
	}
	removeStale := func() {
		if err := allocation.RemoveCDISpec(dir, res); err != nil {
			log.Error().Err(err).Msg("cannot remove the pool's CDI spec, which may name devices it no longer has")
		}
	}
	if !res.CDI.Enabled {
		if err := allocation.RemoveCDISpec(dir, res); err != nil {
			log.Error().Err(err).Msg("cannot remove the pool's CDI spec")
		}
		return nil
	}
	devs := make([]sysfs.Device, 0, len(p.order))
	for _, addr := range p.order {
		devs = append(devs, p.members[addr].Device)
	}
	spec, refused, err := allocation.CDISpec(res, devs, p.cfg.Env)
	if err != nil {
		log.Error().Err(err).Msg("no CDI spec for the pool: its CDI names cannot be resolved")
		removeStale()
		return err
	}
	for _, r := range refused {
		log.Warn().Err(r).Msg("a member left out of the pool's CDI spec")
	}
	path, err := allocation.WriteCDISpec(dir, res, spec)
	if err != nil {
		log.Error().Err(err).Msg("cannot write the pool's CDI spec: its CDI names cannot be resolved")
		removeStale()
		return err
	}
	p.cdiWritten = make(map[string]specs.Device, len(spec.Devices))
	for _, d := range spec.Devices {
		p.cdiWritten[d.Name] = d
	}
	if conflicts := allocation.CDIConflicts(dir, res); len(conflicts) > 0 {
		log.Error().Errs("conflicts", conflicts).Str("path", path).
			Msg("another CDI spec defines devices of the pool's spec too: runtimes resolve those names through neither, and their containers do not start")
	}
	log.Debug().Str("path", path).Int("devices", len(devs)-len(refused)).Msg("CDI spec written")
	return nil
}

// ensureCDISpec makes sure, for an Allocate of devs that answers with CDI
// names, that the pool's spec is there and gives each of devs what the
// Allocate would hand out now (a node such as rdma_cm may have appeared
// since it was written), or writes it again, as an Allocate writes a
// device-info file again: a name that resolves nowhere fails the
// container.
func (p *allocator) ensureCDISpec(devs []sysfs.Device) error {
	dir, res := p.cfg.CDISpecDir, p.cfg.Resource
	if !res.CDI.Enabled {
		return nil
	}
	if dir == "" {
		return errNoCDISpecDir
	}
	if _, err := os.Stat(allocation.CDISpecPath(dir, res)); err == nil && p.cdiWritten != nil {
		now, _, err := allocation.CDISpec(res, devs, p.cfg.Env)
		if err == nil && !slices.ContainsFunc(now.Devices, func(d specs.Device) bool {
			was, ok := p.cdiWritten[d.Name]
			return !ok || !reflect.DeepEqual(was, d)
		}) {
			return nil
		}
	}
	return p.writeCDISpec()
}

// announce records PluginServing (after SocketLost if lost is set) and at
// once tells the parent the pool can be registered; it was in force at seq.
func (p *allocator) announce(ctx actor.Context, lost string, seq uint64) {
	mode := string(cmp.Or(p.cfg.Mode, grpcapi.ModeLegacy))
	var payloads []events.Payload
	if lost != "" {
		payloads = append(payloads, events.SocketLost{Pool: p.name, Socket: lost})
		// Info in legacy mode, where every kubelet start removes every
		// plugin's socket (a warning would come from each pool at each
		// start); a warning in watcher mode, as the kubelet removes
		// nothing from plugins_registry/, so something else did. The
		// pool heals it here either way.
		level := zerolog.InfoLevel
		if mode == string(grpcapi.ModeWatcher) {
			level = zerolog.WarnLevel
		}
		p.cfg.Log.WithLevel(level).Str("pool", p.name).Str("socket", lost).Msg("socket lost; re-creating it")
	}
	payloads = append(payloads, events.PluginServing{Pool: p.name, Socket: p.socket, Mode: mode})
	// No wait for the fsync: the socket serves already, and the store
	// commits in order, so the registrar's records land after this. A pool
	// dropped since seq (a reload racing a new socket) records nothing.
	guard := p.inForce(seq)
	log, name, socket := p.cfg.Log, p.name, p.socket
	self, root := ctx.Self(), ctx.ActorSystem().Root
	p.recordAsync("PluginServing", &guard, payloads, func(seq uint64) {
		log.Info().Str("pool", name).Str("socket", socket).Str("mode", mode).Uint64("seq", seq).Msg("pool serving")
	}, func(err error) { root.Send(self, &serveAgain{socket: socket, refused: err}) })
	ctx.Send(ctx.Parent(), &Serving{Pool: p.name, From: ctx.Self(), Socket: p.socket})
}

// withdraw records that the pool stops serving for want of devices; its
// parent stops it next, which removes its socket.
func (p *allocator) withdraw(reason string) {
	log, name, socket := p.cfg.Log, p.name, p.socket
	withdrawn := events.PluginWithdrawn{Pool: name, Socket: socket, Reason: reason}
	p.recordAsync("PluginWithdrawn", nil, []events.Payload{withdrawn}, func(seq uint64) {
		log.Info().Str("pool", name).Str("socket", socket).Str("reason", reason).Uint64("seq", seq).
			Msg("pool withdrawn: it has no devices")
	}, nil)
}

// recordAsync records facts about now without waiting for the fsync (they
// hold whether or not the ledger takes them). durable gets the last one's
// sequence; what names them in the log if refused; g, if set, guards them.
// unrecorded, if set, hears of a refusal by the ledger (not by g, nor by
// a ledger closed as the daemon stops).
func (p *allocator) recordAsync(what string, g *store.Guard, payloads []events.Payload, durable func(seq uint64), unrecorded func(error)) {
	log, name := p.cfg.Log, p.name
	failed := func(err error) {
		if errors.Is(err, errDropped) {
			log.Info().Str("pool", name).Msg("the pool was dropped from the config; " + what + " is not recorded")
			return
		}
		log.Error().Err(err).Str("pool", name).Msg("cannot record " + what)
		if unrecorded != nil && !errors.Is(err, store.ErrClosed) {
			unrecorded(err)
		}
	}
	landed := func(envs []events.Envelope, err error) {
		if err != nil {
			failed(err)
			return
		}
		durable(envs[len(envs)-1].Seq)
	}
	if err := p.cfg.Recorder.RecordAsync(context.Background(), g, payloads, landed); err != nil {
		failed(err)
	}
}

// stop ends this incarnation's socket and streams at once. Its server's
// calls still in the mailbox are answered by the next incarnation or end
// once the pool is gone (await): waiting for them here would hang.
func (p *allocator) stop() {
	if p.retry != nil {
		p.retry.Stop()
	}
	if p.serveWait != nil {
		p.serveWait.Stop()
	}
	for ch := range p.watchers {
		close(ch)
		delete(p.watchers, ch)
	}
	if p.server == nil {
		return
	}
	srv := p.server
	p.server = nil
	if err := srv.Close(); err != nil {
		p.cfg.Log.Warn().Err(err).Str("pool", p.name).Msg("pool server close")
	}
	log, name, timeout := p.cfg.Log, p.name, p.cfg.CallTimeout
	p.life.draining.Add(1)
	go func() {
		defer p.life.draining.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			log.Warn().Err(err).Str("pool", name).Msg("pool server stop")
		}
	}()
}

// reserve serves on a new socket in place of m.Socket (see Reserve). In
// legacy mode the kubelet's streams on the old one go on until it drops
// them. In watcher mode they end first: a kubelet before
// kubernetes#135437 (one client per resource) whose plugin watcher
// unregisters the old socket while registering the new one, in one pass,
// may otherwise disconnect the new client, or lose track of it.
func (p *allocator) reserve(ctx actor.Context, m *Reserve) {
	if p.server == nil || (m.Socket != "" && m.Socket != p.socket) {
		return
	}
	left, ended := p.socket, 0
	if p.cfg.Mode == grpcapi.ModeWatcher {
		for ch, w := range p.watchers {
			if w.socket == left {
				close(ch)
				delete(p.watchers, ch)
				ended++
			}
		}
	}
	lost := ""
	if _, err := os.Stat(p.socket); m.Lost || (m.Socket == "" && errors.Is(err, fs.ErrNotExist)) {
		lost = p.socket
	}
	p.socket = newSocketPath(p.cfg.SocketDir, p.name)
	if err := p.server.Reserve(p.socket); err != nil {
		panic(fmt.Errorf("pool %s: serve on a new socket %s: %w", p.name, p.socket, err))
	}
	p.announce(ctx, lost, m.Seq)
	// Told after Serving, as the kubelet ending them would be.
	for range ended {
		ctx.Send(ctx.Parent(), &registrar.Listing{Pool: p.name, Socket: left})
	}
}

// index maps ms by address (a later duplicate wins), addresses sorted.
func index(ms []allocation.Member) (map[string]*allocation.Member, []string) {
	byAddr := make(map[string]*allocation.Member, len(ms))
	order := make([]string, 0, len(ms))
	for _, m := range ms {
		if _, dup := byAddr[m.Device.Address]; !dup {
			order = append(order, m.Device.Address)
		}
		byAddr[m.Device.Address] = &m
	}
	slices.Sort(order)
	return byAddr, order
}

// listed are the members the ledger lists, with the facts ms has of them,
// or else those the pool has (cur): what a pool has until the members it
// places are durable, and keeps if the ledger refuses them. Of a device
// neither has (one that left while the daemon was down) it knows only the
// address, and the ledger's verdict.
func listed(addrs []string, ms []allocation.Member, cur map[string]*allocation.Member) []allocation.Member {
	byAddr, _ := index(ms)
	out := make([]allocation.Member, 0, len(addrs))
	for _, addr := range addrs {
		if m, ok := byAddr[addr]; ok {
			out = append(out, *m)
		} else if m, ok := cur[addr]; ok {
			out = append(out, *m)
		} else {
			out = append(out, allocation.Member{Device: sysfs.Device{Address: addr, NUMANode: -1}})
		}
	}
	return out
}

// place takes new members: persist, then apply. A change of who the
// members are applies once its PoolMembershipChanged is durable, after the
// placements taken before it. Calls that come meanwhile wait, in order,
// until none is left to apply (call), across restarts too: what a call
// records follows every change already sent to the ledger. So the
// kubelet, Allocate and the ledger see members in one order, and no
// device leaves a pool before the ledger says so. start marks a pool's
// start, which writes every device-info file again.
func (p *allocator) place(ctx actor.Context, m *SetMembers, start bool) {
	byAddr, order := index(m.Members)
	before := p.order
	if n := len(p.placing); n > 0 {
		before = p.placing[n-1].order
	}
	// Note what to let go first, so a crash from here on cannot lose it.
	var added, removed []string
	for _, addr := range order {
		if _, was := slices.BinarySearch(before, addr); !was {
			added = append(added, addr)
			delete(p.life.leaving, addr)
		}
	}
	for _, addr := range before {
		if _, member := byAddr[addr]; !member {
			removed = append(removed, addr)
		}
	}
	for _, addr := range slices.Concat(removed, m.Leaving) {
		if _, member := byAddr[addr]; !member {
			p.life.leaving[addr] = true
		}
	}
	p.life.placed = m
	p.setGoing()
	pl := &placement{m: m, order: order, start: start, durable: true}
	if len(added) > 0 || len(removed) > 0 {
		p.life.nextID++
		pl.id, pl.durable = p.life.nextID, false
		p.recordMembership(ctx, pl.id, added, removed, byAddr)
	}
	p.placing = append(p.placing, pl)
	p.applyPlaced(ctx)
}

// errNoCDISpecDir refuses an Allocate of a CDI pool when no CDI specs are
// written (--cdi-spec-dir -): its names would resolve nowhere.
var errNoCDISpecDir = errors.New("the pool answers with CDI names, and no CDI spec dir is set (--cdi-spec-dir -): a runtime could resolve none of them")

// errDropped refuses a record of a pool the config dropped (see inForce).
var errDropped = errors.New("the config in force has dropped the pool")

// inForce guards a record of the pool's: it is refused with errDropped
// should a config recorded after seq have dropped the pool (its parent
// stops it next), so that the ledger does not list the pool again.
func (p *allocator) inForce(seq uint64) store.Guard {
	name := p.name
	return store.Guard{After: seq, Check: func(e events.Envelope) error {
		if c, ok := e.Payload.(events.ConfigApplied); ok && !slices.ContainsFunc(c.Pools, func(s events.PoolSpec) bool { return s.Resource == name }) {
			return fmt.Errorf("%w (#%d)", errDropped, e.Seq)
		}
		return nil
	}}
}

// placedOne takes the store's answer to a membership change.
func (p *allocator) placedOne(ctx actor.Context, m *placed) {
	recorded := false
	for _, pl := range p.placing {
		if pl.id == m.id && !pl.durable && pl.refused == nil {
			if errors.Is(m.err, errDropped) {
				// The parent stops the pool next: nothing to place again.
				p.cfg.Log.Info().Str("pool", p.name).Msg("the pool was dropped from the config; its last members are not recorded")
				if p.retry != nil {
					p.retry.Stop()
				}
				p.forget(ctx)
				return
			}
			pl.refused = m.err
			pl.durable = m.err == nil
			recorded = pl.durable
		}
	}
	p.applyPlaced(ctx)
	if len(p.placing) > 0 && p.placing[0].refused != nil {
		p.afterRefusal(ctx)
	} else if recorded {
		p.life.refusals = 0
	}
}

// afterRefusal waits, once the ledger refused the change at the head of
// placing, for its answers to those after it: each is a diff on the one
// before, and the ledger may take some (a disk that had room again). None
// applies. If none was taken, the pool keeps its members (refused); if
// one was, the ledger lists members the pool never placed, and it places
// its last ones again at once (replace), against what the ledger lists.
func (p *allocator) afterRefusal(ctx actor.Context) {
	recorded := false
	for _, pl := range p.placing[1:] {
		if !pl.durable && pl.refused == nil {
			return // an answer to come
		}
		recorded = recorded || (pl.id != 0 && pl.durable)
	}
	err := p.placing[0].refused
	if !recorded {
		p.refused(ctx, err)
		return
	}
	p.cfg.Log.Warn().Err(err).Str("pool", p.name).Msg("cannot record a membership change, but a later one was recorded; placing the members again")
	if p.retry != nil {
		p.retry.Stop()
	}
	p.placing = nil
	p.replace(ctx)
	p.applyPlaced(ctx) // the calls that waited, if replace placed nothing
}

// applyPlaced applies the durable placements at the head, then, once
// none is left, the calls that waited, in order. A call leaves the list
// before it runs, so if it crashes the pool the next incarnation gets
// those after it.
func (p *allocator) applyPlaced(ctx actor.Context) {
	for len(p.placing) > 0 && p.placing[0].durable {
		pl := p.placing[0]
		p.placing = p.placing[1:]
		p.setMembers(ctx, pl)
	}
	// Held calls run on a pool that serves: not before start ends.
	for p.server != nil && len(p.life.waiting) > 0 && len(p.placing) == 0 {
		c := p.life.waiting[0]
		p.life.waiting = p.life.waiting[1:]
		p.call(ctx, c)
	}
}

// forget drops the placements not applied yet and takes the waiting calls.
func (p *allocator) forget(ctx actor.Context) {
	p.placing = nil
	p.applyPlaced(ctx)
}

// refused takes a membership change the ledger refused (full disk, I/O
// error), and those after it, none recorded (see afterRefusal). None
// applies: the pool keeps its members, takes the waiting calls, and after
// a pause (doubling, up to a minute) places its last members again
// (replace).
func (p *allocator) refused(ctx actor.Context, err error) {
	p.forget(ctx)
	p.broadcast() // the members it drops are listed unhealthy (going)
	p.life.refusals++
	delay := supervise.Doubling(p.cfg.RetryInitial, p.cfg.RetryMax, p.life.refusals)
	p.cfg.Log.WithLevel(supervise.FailureLevel(p.life.refusals)).Err(err).Str("pool", p.name).Dur("retry_in_ms", delay).Msg("cannot record a membership change; the members stay as the ledger has them")
	if p.retry != nil {
		p.retry.Stop()
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	p.retry = time.AfterFunc(delay, func() { root.Send(self, &replace{}) })
}

// replace places the last members again, against the ledger's members now
// (a change taken after the refused one may have been recorded).
func (p *allocator) replace(ctx actor.Context) {
	p.retry = nil
	if len(p.placing) > 0 || p.life.placed == nil {
		return // placing already (a later SetMembers, or a restart)
	}
	st := p.replay()
	again := *p.life.placed // a copy: placing it sets its Seq
	p.placeAfterReplay(ctx, &st, &again, false)
}

// replay folds the ledger as it is now; a pool that cannot read it restarts.
func (p *allocator) replay() events.State {
	st, err := p.cfg.Recorder.Replay()
	if err != nil {
		panic(fmt.Errorf("pool %s: replay: %w", p.name, err))
	}
	return st
}

// placeAfterReplay starts from the members st, the state just read, lists
// and places m, perhaps long stale, against st. It says whether the pool
// is in force: not if st has a config without it (its parent stops it
// next); else it was up to st.Seq, where the change's guard starts.
func (p *allocator) placeAfterReplay(ctx actor.Context, st *events.State, m *SetMembers, start bool) bool {
	old := p.members
	p.setMemberList(listed(st.Pools[p.name].Members, m.Members, p.members))
	if !start {
		// A retry: the members the ledger has now, with m's facts, are
		// the pool's whether or not m is recorded this time, so the
		// kubelet and the CNI hear of them now (setMembers, diffing
		// against these, would not).
		p.syncDeviceInfo(old)
		p.broadcast()
	}
	if _, inForce := st.Pools[p.name]; !inForce && st.Config.SHA256 != "" {
		p.cfg.Log.Info().Str("pool", p.name).Msg("the pool was dropped from the config; its members are not recorded")
		return false
	}
	m.Seq = max(m.Seq, st.Seq)
	p.place(ctx, m, start)
	return true
}

// recordMembership records a membership change, with where the devices
// that move come from or go to; the store's answer comes as placed id.
func (p *allocator) recordMembership(ctx actor.Context, id uint64, added, removed []string, byAddr map[string]*allocation.Member) {
	m := p.life.placed
	reason := m.Reason + MovedList("moved from", added, m.Moves) + MovedList("moved to", removed, m.Moves)
	// The reason names the live allocations (they stay in the ledger) that
	// hold a device leaving, or the Allocate of it whose events are queued
	// ahead of this change, and other pools' that hold one arriving.
	var held, arrived []string
	for _, addr := range removed {
		for _, seq := range p.holds.Holders[addr] {
			held = append(held, fmt.Sprintf("%s by #%d", addr, seq))
		}
		if p.life.flying(addr) {
			held = append(held, addr+" by an Allocate under way")
		}
	}
	for _, addr := range added {
		// A pool the device is leaving lets it go within moments.
		hs := slices.DeleteFunc(slices.Clone(byAddr[addr].HeldElsewhere), allocation.Hold.Leaving)
		if len(hs) > 0 {
			arrived = append(arrived, addr+" by "+holdList(hs))
		}
	}
	if len(held) > 0 {
		reason += "; still held: " + strings.Join(held, ", ")
	}
	if len(arrived) > 0 {
		reason += "; arrived held, listed unhealthy until released: " + strings.Join(arrived, ", ")
		held = append(held, arrived...)
	}
	log, name, members := p.cfg.Log, p.name, len(byAddr)
	self, root := ctx.Self(), ctx.ActorSystem().Root
	// The node records a dropped pool's last membership with the config.
	guard := p.inForce(m.Seq)
	err := p.cfg.Recorder.RecordAsync(context.Background(), &guard, []events.Payload{events.PoolMembershipChanged{Pool: p.name, Added: added, Removed: removed, Reason: reason}},
		func(envs []events.Envelope, err error) {
			if err == nil {
				ev := log.Info()
				if len(held) > 0 {
					ev = log.Warn().Strs("still_held", held)
				}
				ev.Str("pool", name).Int("added", len(added)).Int("removed", len(removed)).
					Int("members", members).Str("reason", reason).Uint64("seq", envs[0].Seq).Msg("pool membership changed")
			}
			root.Send(self, &placed{id: id, err: err})
		})
	if err != nil {
		ctx.Send(self, &placed{id: id, err: err})
	}
}

// setMembers applies a durable placement: the kubelet hears of the new
// members, and those that left are let go.
func (p *allocator) setMembers(ctx actor.Context, pl *placement) {
	old := p.members
	if pl.start {
		old = nil
	}
	p.setMemberList(pl.m.Members)
	p.life.gen = max(p.life.gen, pl.m.Gen)
	p.syncDeviceInfo(old)
	_ = p.writeCDISpec() // it logs a failure; an Allocate tries again
	p.broadcast()
	p.letGo(ctx, slices.Sorted(maps.Keys(p.life.leaving)))
}

// letGo tells the parent which of ids have left the pool with no Allocate
// of them pending; the others are let go when their Allocates land. They
// are members no more, so no Allocate can take them again.
func (p *allocator) letGo(ctx actor.Context, ids []string) {
	if len(ids) == 0 || len(p.life.leaving) == 0 {
		return
	}
	var gone []string
	for _, id := range ids {
		if _, member := p.members[id]; !member && p.life.leaving[id] && !p.life.flying(id) && !p.placesAgain(id) {
			delete(p.life.leaving, id)
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		ctx.Send(ctx.Parent(), &LetGo{Pool: p.name, From: ctx.Self(), Gen: p.life.gen, Devices: gone})
	}
}

// placesAgain says a placement not applied yet brings id back.
func (p *allocator) placesAgain(id string) bool {
	for _, pl := range p.placing {
		if _, ok := slices.BinarySearch(pl.order, id); ok {
			return true
		}
	}
	return false
}

// MovedList is "; <verb> <pool>: <ids>" for each other pool that moves
// names for some of ids, for a membership change's reason.
func MovedList(verb string, ids []string, moves map[string]string) string {
	by := map[string][]string{}
	for _, id := range ids {
		if other := moves[id]; other != "" {
			by[other] = append(by[other], id)
		}
	}
	var b strings.Builder
	for _, other := range slices.Sorted(maps.Keys(by)) {
		fmt.Fprintf(&b, "; %s %s: %s", verb, other, strings.Join(by[other], ", "))
	}
	return b.String()
}

// holdList names hs: "#12 of intel.com/a, #15 of intel.com/b".
func holdList(hs []allocation.Hold) string {
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.String()
	}
	return strings.Join(names, ", ")
}

// setMemberList makes ms the members (see index); the ranking index is
// built again at the next call.
func (p *allocator) setMemberList(ms []allocation.Member) {
	p.members, p.order = p.index(ms)
	p.rank, p.list = nil, nil
	p.setGoing()
}

// setGoing notes which members the newest placement taken drops (going);
// the list's entries whose mark changes are built again.
func (p *allocator) setGoing() {
	going := map[string]bool{}
	if pl := p.life.placed; pl != nil {
		placed := make(map[string]bool, len(pl.Members))
		for _, m := range pl.Members {
			placed[m.Device.Address] = true
		}
		for _, addr := range p.order {
			if !placed[addr] {
				going[addr] = true
			}
		}
	}
	if p.list != nil {
		for _, addr := range p.order {
			if going[addr] != p.going[addr] {
				p.stale = append(p.stale, addr)
			}
		}
	}
	p.going = going
}

// usable says whether the kubelet is told it may give out the member at
// addr: its own facts allow it, and no placement taken drops it.
func (p *allocator) usable(addr string) bool {
	return p.members[addr].Usable() && !p.going[addr]
}

// listDevice is the ListAndWatch entry of the member at addr.
func (p *allocator) listDevice(addr string) *pluginapi.Device {
	m := *p.members[addr]
	if p.going[addr] {
		m.Healthy = false
	}
	return allocation.ListDevice(p.cfg.Resource, m)
}

// index is index with each member's newest verdict: its own, or one the
// pool heard (events.Health's rule; a member may bring an older one).
func (p *allocator) index(ms []allocation.Member) (map[string]*allocation.Member, []string) {
	byAddr, order := index(ms)
	for addr, m := range byAddr {
		p.verdicts.Learn(addr, events.Verdict{Healthy: m.Healthy, Seq: m.HealthSeq})
		v := p.verdicts[addr]
		m.Healthy, m.HealthSeq = v.Healthy, v.Seq
	}
	return byAddr, order
}

// setHealth applies a verdict unless the pool knows one as new, and says
// whether it changed a member.
func (p *allocator) setHealth(m *SetHealth) bool {
	if !p.verdicts.Learn(m.Address, events.Verdict{Healthy: m.Healthy, Reason: m.Reason, Seq: m.Seq}) {
		return false
	}
	mem, ok := p.members[m.Address]
	if !ok {
		return false
	}
	mem.HealthSeq = m.Seq
	if mem.Healthy == m.Healthy {
		return false
	}
	mem.Healthy = m.Healthy
	p.rank = nil
	if p.list != nil {
		p.stale = append(p.stale, m.Address)
	}
	return true
}

func (p *allocator) status() *Status {
	st := &Status{Resource: p.name, Socket: p.socket, Members: len(p.order), Pending: len(p.life.pending), Held: map[string][]uint64{}, Health: map[string]bool{}}
	for addr, m := range p.members {
		st.Health[addr] = m.Healthy
		if p.usable(addr) { // as the kubelet sees it
			st.Healthy++
		}
		switch {
		case len(p.holds.Holders[addr]) > 0:
			st.Allocated++
		case p.usable(addr) && !p.life.flying(addr):
			st.Free++
		}
	}
	for id, h := range p.holds.Holders {
		st.Held[id] = slices.Clone(h)
	}
	return st
}

// deviceList is the ListAndWatch list. Entries are built once and shared
// until their device changes; a health change copies the list and rebuilds
// only the stale entries. Published lists and entries are never modified:
// the server reuses an entry's encoding while its pointer stays.
func (p *allocator) deviceList() []*pluginapi.Device {
	if p.list == nil {
		p.list = make([]*pluginapi.Device, len(p.order))
		for i, addr := range p.order {
			p.list[i] = p.listDevice(addr)
		}
		p.stale = p.stale[:0]
	}
	if len(p.stale) == 0 {
		return p.list
	}
	list := slices.Clone(p.list)
	for _, addr := range p.stale {
		if i, ok := slices.BinarySearch(p.order, addr); ok {
			list[i] = p.listDevice(addr)
		}
	}
	p.list, p.stale = list, p.stale[:0]
	return list
}

// watcher is a ListAndWatch stream: the socket it came in on and the
// last list it was handed.
type watcher struct {
	socket string
	sent   []*pluginapi.Device
}

// broadcast hands each stream the list, unless it lists what the stream
// was handed last: new facts the kubelet is not shown, a reload or a
// retold hold change nothing it sees, and each list makes it write its
// checkpoint again.
func (p *allocator) broadcast() {
	if len(p.watchers) == 0 {
		// Nobody to tell: the next watcher gets a list built afresh.
		p.list, p.stale = nil, nil
		return
	}
	list := p.deviceList()
	for ch, w := range p.watchers {
		if !sameList(w.sent, list) {
			push(ch, list)
			w.sent = list
		}
	}
}

// sameList says whether a and b list the same devices, in the same order.
func sameList(a, b []*pluginapi.Device) bool {
	return slices.EqualFunc(a, b, func(x, y *pluginapi.Device) bool { return x == y || proto.Equal(x, y) })
}

// push hands the newest list to a watcher without blocking: a list the
// watcher has not taken yet is replaced. The actor is the only sender.
func push(ch chan []*pluginapi.Device, list []*pluginapi.Device) {
	select {
	case <-ch:
	default:
	}
	ch <- list
}

// preferred answers GetPreferredAllocation (see allocation.Index.Preferred).
func (p *allocator) preferred(req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	rank := p.ranking()
	resp := &pluginapi.PreferredAllocationResponse{}
	for i, cr := range req.ContainerRequests {
		ids, err := rank.Preferred(p.cfg.Resource, p.inFlight, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))
		if err != nil {
			return nil, fmt.Errorf("%w: container request %d: %v", grpcapi.ErrInvalidRequest, i, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// ranking is rank, built if the members changed and marked with the
// pool's holds if they changed.
func (p *allocator) ranking() *allocation.Index {
	if p.rank == nil {
		p.rank, p.marked = allocation.NewIndex(p.members), false
	}
	if !p.marked {
		p.rank.Mark(maps.Keys(p.holds.Holders))
		p.marked = true
	}
	return p.rank
}

// inFlight yields the devices of the pool's pending Allocates.
func (p *allocator) inFlight(yield func(string) bool) {
	for _, f := range p.life.pending {
		for _, id := range f.ids {
			if !yield(id) {
				return
			}
		}
	}
}

func toPlugin(a events.ContainerAllocation) *pluginapi.ContainerAllocateResponse {
	r := &pluginapi.ContainerAllocateResponse{Envs: a.Envs, Annotations: a.Annotations}
	for _, m := range a.Mounts {
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range a.Devices {
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, name := range a.CDIDevices {
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
	return r
}

// errServedOn refuses serveAgain's record when a record of the pool's
// serving landed after the state it was drawn from: it looks again.
var errServedOn = errors.New("a record of the pool's serving landed meanwhile")

// serveAgain records that the pool serves on socket, which the ledger
// refused (the disk full): the socket serves whether written down or
// not, and the ledger, and so a replay or a dump, would go on naming the
// one before. It waits (doubling from RetryInitial to RetryMax), then
// records PluginServing if the ledger lacks it, and tells the registrar
// (Unrecorded), which then records the socket's registration. Its own
// try tells whether the ledger records again: on a quiet node with room
// for small records and none for a snapshot, no other record lands to
// say so. A pool on another socket since, or not serving, has nothing
// to record: a later announce recorded it; nor has one the ledger's
// config dropped. refused is the error of the record tried last, if the
// ledger refused it: then it waits, though the ledger may have taken
// another's record since, as a nearly full disk takes small records and
// refuses others; the wait starts over only once the record lands.
func (p *allocator) serveAgain(ctx actor.Context, socket string, refused error) {
	p.serveWait = nil
	if p.server == nil || p.socket != socket {
		return
	}
	self, root, parent, name := ctx.Self(), ctx.ActorSystem().Root, ctx.Parent(), p.name
	wait := func(err error) {
		p.life.unserved++
		delay := supervise.Doubling(p.cfg.RetryInitial, p.cfg.RetryMax, p.life.unserved)
		// Debug: the refusal was logged where it came.
		p.cfg.Log.Debug().Err(err).Str("pool", name).Str("socket", socket).Dur("retry_in_ms", delay).
			Msg("the ledger lacks the socket the pool serves on; recording it once the ledger records again")
		if p.serveWait != nil {
			p.serveWait.Stop()
		}
		p.serveWait = time.AfterFunc(delay, func() { root.Send(self, &serveAgain{socket: socket}) })
	}
	if refused != nil {
		wait(refused)
		return
	}
	st := p.replay()
	if _, inForce := st.Pools[name]; !inForce && st.Config.SHA256 != "" {
		// A reload dropped the pool (its parent stops it next): the
		// fold would ignore its serving, and dump show it after the
		// config that dropped it.
		p.cfg.Log.Info().Str("pool", name).Msg("the pool was dropped from the config; PluginServing is not recorded")
		return
	}
	told := func() { root.Send(parent, &registrar.Unrecorded{Pool: name, Event: string(events.TypePluginServing)}) }
	if reg := st.Pools[name].Registration; reg.Serving && reg.Socket == socket {
		p.life.unserved = 0
		told()
		return
	}
	mode := string(cmp.Or(p.cfg.Mode, grpcapi.ModeLegacy))
	inForce := p.inForce(st.Seq)
	guard := store.Guard{After: st.Seq, Check: func(e events.Envelope) error {
		switch e.Payload.(type) {
		case events.PluginServing, events.SocketLost, events.PluginWithdrawn:
			if e.Pool() == name {
				return fmt.Errorf("%w (#%d %s)", errServedOn, e.Seq, e.Type)
			}
		}
		return inForce.Check(e)
	}}
	log := p.cfg.Log
	err := p.cfg.Recorder.RecordAsync(context.Background(), &guard, []events.Payload{events.PluginServing{Pool: name, Socket: socket, Mode: mode}},
		func(envs []events.Envelope, err error) {
			switch {
			case err == nil:
				log.Info().Str("pool", name).Str("socket", socket).Str("mode", mode).Uint64("seq", envs[0].Seq).Msg("pool serving, recorded late")
				root.Send(self, &servedLate{})
				told()
			case errors.Is(err, errDropped), errors.Is(err, store.ErrClosed):
			case errors.Is(err, errServedOn): // a record meanwhile: look again
				root.Send(self, &serveAgain{socket: socket})
			default: // the disk again
				root.Send(self, &serveAgain{socket: socket, refused: err})
			}
		})
	if err != nil && !errors.Is(err, store.ErrClosed) {
		wait(err)
	}
}
