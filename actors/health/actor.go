// Package health is the health checker actor. It probes every pooled device
// (still in sysfs, still bound to the driver it joined its pool with, its VFIO
// node still there, and, when its pool asks, its link or its PF's link up
// with carrier), records DeviceHealthChanged when a verdict changes, then
// tells its parent, which tells the device's pool (for the kubelet).
//
// A device turns unhealthy once its probes have failed for its pool's
// debounce (zero: at once), and healthy again once they have passed for the
// hold-down. Each device is probed every probe interval of its pool, when
// asked (a kernel event, a rescan), and when its hold-down or debounce ends.
// A periodic round takes the devices due, and those due within a quarter of
// their interval, so that devices of one interval stay in one round even
// after a kernel event probed some of them early. A probe this process
// cannot make for want of file descriptors or memory leaves every verdict
// as it stands (sysfs.ProbeResult.Inconclusive).
package health

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/handoff"
	"github.com/devledger/devledger/actors/internal/wake"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// Prober probes devices (sysfs.Reader): every check, or the link check alone.
type Prober interface {
	ProbeAll(ts []sysfs.ProbeTarget) []sysfs.ProbeResult
	ProbeLinks(ts []sysfs.ProbeTarget) []sysfs.ProbeResult
}

// Config is what the health checker needs.
type Config struct {
	Prober   Prober
	Recorder *ledger.Recorder
	// Interval is the probe interval for targets that set none (default 5s).
	Interval time.Duration
	// Known is the replayed device state: the verdicts the ledger holds.
	Known map[string]events.Device
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log zerolog.Logger
}

// Target is a device to probe and the rules of its pool.
type Target struct {
	Probe sysfs.ProbeTarget
	// HoldDown is how long a recovered device must pass its probes before
	// it is healthy again; Debounce how long a failure must last before it
	// counts; Interval how often the device is probed (0: the default).
	HoldDown, Debounce, Interval time.Duration
	// Known is the verdict the ledger holds for the device, as the parent
	// knows it. One newer than the checker's own (the device was removed
	// or discovered again since) replaces what the checker knew of it.
	Known events.Verdict
}

// Watch replaces the set of devices to probe. Those new, whose target
// changed, whose Known is newer than the checker's verdict, or that Seen
// names are probed at once; the others keep their time: a scan that saw
// nothing change in a device does not probe it sooner than its interval,
// nor does the checker's own verdict coming back as the parent's Known.
type Watch struct {
	Targets []Target
	Seen    Seen
}

// Seen names the devices a scan saw change (Addresses) and their
// interfaces: the targets they name as a Probe does are probed at once.
type Seen struct{ Addresses, Interfaces []string }

// Probe asks for a probe round now: of the devices named in Addresses or
// whose interface (or PF's interface) is named in Interfaces (a kernel event
// names them), or of every target when both are empty. A device named by
// an interface only (a link notification) has its link checked again, and
// keeps what its last full probe said of the rest.
type Probe struct {
	Reason     string
	Addresses  []string
	Interfaces []string
	// Down are the interfaces the kernel reported down since it last
	// asked: a link that went down and up again before the probe (a
	// flapping port) fails the link check of the targets that read it,
	// before their probe's own result is judged.
	Down []string
}

// Changed is sent to the parent once per probe round in which verdicts
// changed, with all of them, already in the ledger. The parent tells each
// device's pool, where the device is then (one message per pool: a PF
// going down takes its VFs with it, and each pool tells the kubelet once).
type Changed struct{ Verdicts []Verdict }

// Verdict is one device's new health.
type Verdict struct {
	Address string
	Healthy bool
	Reason  string
	// Seq is the sequence number of its DeviceHealthChanged: of two
	// verdicts on a device, the higher is the newer.
	Seq uint64
}

// Query asks for the current verdicts; the reply is a *Verdicts.
type Query struct{}

// Crash makes the checker panic: fault injection for tests of supervision.
type Crash struct{ Reason string }

// Verdicts is the reply to Query, by address.
type Verdicts struct{ Devices map[string]Verdict }

// device is what the checker knows of one device: the verdict in the ledger,
// and what the probes say now, since when.
type device struct {
	events.Verdict           // the device's health in the ledger
	raw            bool      // what the last probe said
	rawSince       time.Time // since when the probes say raw
	// devFail is why the checks other than the link's failed at the last
	// full probe, "" when they passed.
	devFail string
}

// Props returns the props of a health checker.
func Props(cfg Config) *actor.Props {
	supervise.OrDefault(&cfg.Interval, 5*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	known := handoff.First(cfg.Known)
	life := &lifetime{}
	return actor.PropsFromProducer(func() actor.Actor {
		return &checker{cfg: cfg, known: known(), life: life}
	}, actor.WithDispatcher(supervise.Warm))
}

// lifetime is what the checker keeps across its incarnations. Only the
// actor's goroutine touches it, one incarnation after another.
type lifetime struct {
	targets []Target // the last Watch's: a restarted checker probes them at once
	// persist holds the rounds back while a round's verdicts are being
	// recorded: each judges against the verdicts in the ledger.
	persist ledger.Persister
	// unrecorded counts the rounds in a row whose verdicts the ledger
	// refused, unprobed those with a probe this process could not make
	// (sysfs.ProbeResult.Inconclusive) since every device was last
	// probed (supervise.FailureLevel).
	unrecorded, unprobed int
	// inconclusive are the devices whose last probe this process could
	// not make: the outage the log tells of lasts until each has had a
	// full probe it could make, or is no longer watched.
	inconclusive map[string]bool
}

type checker struct {
	cfg     Config
	life    *lifetime
	known   map[string]events.Device
	targets []Target
	devices map[string]*device
	// next is when each target is due for its next probe: its interval
	// after its last probe, or sooner when its hold-down or debounce ends.
	next  map[string]time.Time
	timer wake.Timer // the next round's
}

// Receive implements actor.Actor.
func (c *checker) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if c.known == nil {
			st, err := c.cfg.Recorder.Replay()
			if err != nil {
				panic(fmt.Errorf("health: replay: %w", err))
			}
			c.known = st.Devices
		}
		c.devices = map[string]*device{}
		c.next = map[string]time.Time{}
		c.schedule(ctx, c.cfg.Interval)
		if ts := c.life.targets; ts != nil {
			c.watch(ts, Seen{})
			c.round(ctx, c.targets, nil, nil)
		}
		c.life.persist.Resume(func(m any) { c.handle(ctx, m) })
	case *actor.Stopping, *actor.Restarting:
		c.timer.Stop()
		c.life.persist.Settle()
	case *ledger.Landed:
		c.life.persist.Land(m, func(m any) { c.handle(ctx, m) })
	case *Crash:
		panic("health: injected crash: " + m.Reason)
	case *Watch, *Probe, *wake.Tick, *ledger.Quiet:
		if !c.life.persist.Hold(m) {
			c.handle(ctx, m)
		}
	case *Query:
		out := &Verdicts{Devices: map[string]Verdict{}}
		for _, t := range c.targets {
			if d := c.devices[t.Probe.Address]; d != nil {
				out.Devices[t.Probe.Address] = Verdict{Address: t.Probe.Address, Healthy: d.Healthy, Reason: d.Reason}
			}
		}
		ctx.Respond(out)
	}
}

func (c *checker) handle(ctx actor.Context, m any) {
	switch m := m.(type) {
	case *Watch:
		c.round(ctx, c.watch(m.Targets, m.Seen), nil, nil)
	case *Probe:
		targets, linkOnly := c.targets, []bool(nil)
		if len(m.Addresses) > 0 || len(m.Interfaces) > 0 {
			targets, linkOnly = c.named(m.Addresses, m.Interfaces)
		}
		c.round(ctx, targets, linkOnly, m.Down)
	case *wake.Tick:
		if !c.timer.Take(m) {
			return // stale (see wake)
		}
		c.round(ctx, c.dueNow(), nil, nil)
		c.scheduleNext(ctx)
	}
}

// schedule arranges a round after d unless one is due sooner.
func (c *checker) schedule(ctx actor.Context, d time.Duration) {
	c.timer.At(ctx, c.cfg.Now(), d)
}

// interval is how often t is probed.
func (c *checker) interval(t Target) time.Duration {
	if t.Interval > 0 {
		return t.Interval
	}
	return c.cfg.Interval
}

// dueNow returns the targets a periodic round takes now: those due, and
// those due within a quarter of their interval.
func (c *checker) dueNow() []Target {
	now := c.cfg.Now()
	var out []Target
	for _, t := range c.targets {
		at, ok := c.next[t.Probe.Address]
		if !ok || !at.After(now.Add(c.interval(t)/4)) {
			out = append(out, t)
		}
	}
	return out
}

// scheduleNext arranges a round for when the first target is due.
func (c *checker) scheduleNext(ctx actor.Context) {
	first := time.Time{}
	for _, t := range c.targets {
		if at := c.next[t.Probe.Address]; first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if first.IsZero() {
		c.schedule(ctx, c.cfg.Interval)
		return
	}
	c.schedule(ctx, max(first.Sub(c.cfg.Now()), 0))
}

// state returns what is known of t's device, starting from the ledger's
// verdict the first time it is probed, and again when the target knows a
// newer one than the checker's (the device went and came back: its
// discovery made it healthy in the ledger).
func (c *checker) state(t Target, now time.Time) *device {
	addr := t.Probe.Address
	d := c.devices[addr]
	if d != nil && !t.Known.Newer(d.Verdict) {
		return d
	}
	// The newer of the ledger's (as replayed) and the parent's.
	v := events.Verdict{Healthy: true}
	if k, ok := c.known[addr]; ok && k.Present {
		v = k.Verdict()
	}
	if t.Known.Newer(v) {
		v = t.Known
	}
	d = &device{Verdict: v}
	d.raw, d.rawSince = d.Healthy, now
	c.devices[addr] = d
	return d
}

// watch replaces the targets, and returns those new or changed, or that
// seen names.
func (c *checker) watch(ts []Target, seen Seen) []Target {
	was := make(map[string]Target, len(c.targets))
	for _, t := range c.targets {
		was[t.Probe.Address] = t
	}
	c.targets = slices.Clone(ts)
	c.life.targets = c.targets
	if len(c.life.inconclusive) > 0 {
		watched := make(map[string]bool, len(ts))
		for _, t := range ts {
			watched[t.Probe.Address] = true
		}
		for addr := range c.life.inconclusive {
			if !watched[addr] {
				delete(c.life.inconclusive, addr) // no probe will end its outage
			}
		}
	}
	named, _ := c.named(seen.Addresses, seen.Interfaces)
	kept := make(map[string]time.Time, len(ts))
	var changed []Target
	now := c.cfg.Now()
	for _, t := range c.targets {
		if _, ok := was[t.Probe.Address]; !ok {
			if d := c.devices[t.Probe.Address]; d != nil {
				// Back in a pool: probes from before it left count for
				// no debounce or hold-down.
				d.raw, d.rawSince = d.Healthy, now
			}
		}
		if at, ok := c.next[t.Probe.Address]; ok && c.sameTarget(was[t.Probe.Address], t) && !slices.Contains(named, t) {
			kept[t.Probe.Address] = at
		} else {
			changed = append(changed, t)
		}
	}
	c.next = kept
	return changed
}

// sameTarget says whether t probes as was does, and brings no verdict
// newer than the checker's. Known alone changing is no news of the
// device: after each verdict the parent's next Watch brings the
// checker's own verdict back.
func (c *checker) sameTarget(was, t Target) bool {
	if d := c.devices[t.Probe.Address]; d == nil || t.Known.Newer(d.Verdict) {
		return false
	}
	was.Known = t.Known
	return was == t
}

// named returns the targets a kernel event concerns: those whose address
// is in addrs, and those whose link check reads an interface in ifaces
// (sysfs.ProbeTarget.LinkInterface); each once, in the order of the
// targets. linkOnly says which were named by an interface only.
func (c *checker) named(addrs, ifaces []string) (targets []Target, linkOnly []bool) {
	for _, t := range c.targets {
		p := t.Probe
		switch link, _ := p.LinkInterface(); {
		case slices.Contains(addrs, p.Address):
			targets, linkOnly = append(targets, t), append(linkOnly, false)
		case p.Link && link != "" && slices.Contains(ifaces, link):
			targets, linkOnly = append(targets, t), append(linkOnly, true)
		}
	}
	return targets, linkOnly
}

// round probes targets, records the verdicts that changed in one append,
// and sets when each target is due again: its probe interval from now, or
// sooner when its hold-down or debounce ends first; a round comes no later
// than the first of those. The targets linkOnly marks have their link
// checked alone when their last full probe passed the other checks (or
// failed them: that failure stands). A target whose link check reads an
// interface in down, and whose probe passed, is judged failed first: the
// drop the kernel reported was over before the probe could see it.
func (c *checker) round(ctx actor.Context, targets []Target, linkOnly []bool, down []string) {
	if len(targets) == 0 {
		return
	}
	results, linked := c.probe(targets, linkOnly)
	c.inconclusive(targets, results, linked)
	now := c.cfg.Now()
	next := c.cfg.Interval
	var changes []events.Payload
	var verdicts []Verdict
	for i, t := range targets {
		var v *Verdict
		due := c.interval(t)
		if link, pf := t.Probe.LinkInterface(); t.Probe.Link && results[i].Healthy && slices.Contains(down, link) {
			reason := "link down on " + link + ", briefly: the kernel reported it, the probe after it found the link up"
			if pf {
				reason = "link down on " + link + " (PF), briefly: the kernel reported it, the probe after it found the link up"
			}
			v, due = c.judge(t, sysfs.ProbeResult{Reason: reason, Link: true}, now)
		}
		after, dueAfter := c.judge(t, results[i], now)
		v, due = cmp.Or(v, after), min(due, dueAfter)
		at := now.Add(due)
		if prev, ok := c.next[t.Probe.Address]; ok && linked[i] && prev.Before(at) {
			// A link check alone never puts off the full probe: what
			// only it sees (a /dev/vfio node gone) is seen in time.
			at = prev
		}
		c.next[t.Probe.Address] = at
		next = min(next, max(at.Sub(now), 0))
		if v != nil {
			verdicts = append(verdicts, *v)
			changes = append(changes, events.DeviceHealthChanged{Address: v.Address, Healthy: v.Healthy, Reason: v.Reason})
		}
	}
	c.schedule(ctx, next)
	if len(changes) == 0 {
		return
	}
	c.life.persist.Persist(ctx, c.cfg.Recorder, nil, changes, func(envs []events.Envelope, err error) {
		c.recorded(ctx, verdicts, envs, err)
	})
}

// recorded applies a round's verdicts once they are durable, and tells
// the parent.
func (c *checker) recorded(ctx actor.Context, verdicts []Verdict, envs []events.Envelope, err error) {
	if err != nil {
		// Not recorded means not decided: the next round tries again.
		c.life.unrecorded++
		c.cfg.Log.WithLevel(supervise.FailureLevel(c.life.unrecorded)).Err(err).Int("changes", len(verdicts)).Msg("cannot record health changes; will retry")
		return
	}
	c.life.unrecorded = 0
	for i := range verdicts {
		v := &verdicts[i]
		v.Seq = envs[i].Seq
		c.devices[v.Address].Verdict = events.Verdict{Healthy: v.Healthy, Reason: v.Reason, Seq: v.Seq}
	}
	// The parent first, which tells the devices' pools: the kubelet need
	// not wait for a line logged per VF of a PF going down. A copy: a
	// message is the receiver's once sent.
	ctx.Send(ctx.Parent(), &Changed{Verdicts: slices.Clone(verdicts)})
	for _, v := range verdicts {
		ev := c.cfg.Log.Info()
		if !v.Healthy {
			ev = c.cfg.Log.Warn()
		}
		ev.Str("bdf", v.Address).Bool("healthy", v.Healthy).Str("reason", v.Reason).Uint64("seq", v.Seq).Msg("device health changed")
	}
}

// inconclusive says when a round's probes could not be made for want of
// what this process needs (file descriptors, memory), and when every
// device they missed has been probed again. Those devices keep their
// verdicts meanwhile: running out of file descriptors says nothing of a
// device, and the ledger must not say that every device went unhealthy.
// A link check alone (linked) ends no device's outage: the rest of its
// probe is still the one it could not make.
func (c *checker) inconclusive(targets []Target, results []sysfs.ProbeResult, linked []bool) {
	n, reason := 0, ""
	for i, r := range results {
		addr := targets[i].Probe.Address
		switch {
		case r.Inconclusive:
			n, reason = n+1, cmp.Or(reason, r.Reason)
			if c.life.inconclusive == nil {
				c.life.inconclusive = map[string]bool{}
			}
			c.life.inconclusive[addr] = true
		case !linked[i]:
			delete(c.life.inconclusive, addr)
		}
	}
	switch {
	case n > 0:
		c.life.unprobed++
		c.cfg.Log.WithLevel(supervise.FailureLevel(c.life.unprobed)).Int("devices", n).Str("reason", reason).
			Msg("cannot probe devices: their health stays as recorded until a probe can be made")
	case c.life.unprobed > 0 && len(c.life.inconclusive) == 0:
		c.life.unprobed = 0
		c.cfg.Log.Info().Msg("devices can be probed again")
	}
}

// probe probes targets: fully, or, where linkOnly says so, the link alone,
// completed by what the last full probe said of the rest (linked says
// which). A device in its debounce or hold-down, or never probed, is
// probed fully: a verdict is not changed on the link's word alone.
func (c *checker) probe(targets []Target, linkOnly []bool) (results []sysfs.ProbeResult, linked []bool) {
	var full, links []sysfs.ProbeTarget
	var fullAt, linkAt []int
	linked = make([]bool, len(targets))
	for i, t := range targets {
		if d := c.devices[t.Probe.Address]; i < len(linkOnly) && linkOnly[i] && d != nil && d.Healthy == d.raw {
			links, linkAt, linked[i] = append(links, t.Probe), append(linkAt, i), true
			continue
		}
		full, fullAt = append(full, t.Probe), append(fullAt, i)
	}
	results = make([]sysfs.ProbeResult, len(targets))
	if len(full) > 0 {
		for k, r := range c.cfg.Prober.ProbeAll(full) {
			results[fullAt[k]] = r
			if r.Inconclusive {
				continue // it says nothing of the device
			}
			d := c.state(targets[fullAt[k]], c.cfg.Now())
			d.devFail = ""
			if !r.Healthy && !r.Link {
				d.devFail = r.Reason
			}
		}
	}
	if len(links) > 0 {
		for k, r := range c.cfg.Prober.ProbeLinks(links) {
			if d := c.devices[targets[linkAt[k]].Probe.Address]; d.devFail != "" && !r.Inconclusive {
				r = sysfs.ProbeResult{Reason: d.devFail}
			}
			results[linkAt[k]] = r
		}
	}
	return results, linked
}

// judge takes t's probe result r at now and returns its new verdict (nil
// when it stays), and how soon t is due again: its interval, or when its
// debounce or hold-down ends, if that is sooner.
func (c *checker) judge(t Target, r sysfs.ProbeResult, now time.Time) (*Verdict, time.Duration) {
	due := c.interval(t)
	// An inconclusive result is no word on the device: its verdict
	// stands, and a debounce or hold-down under way is still judged
	// when it ends.
	d := c.devices[t.Probe.Address]
	if !r.Inconclusive {
		d = c.state(t, now)
		if r.Healthy != d.raw {
			d.raw, d.rawSince = r.Healthy, now
		}
	}
	if d == nil || d.Healthy == d.raw {
		return nil, due
	}
	wait := t.HoldDown
	if d.Healthy {
		wait = t.Debounce
	}
	if wait -= now.Sub(d.rawSince); wait > 0 {
		return nil, min(due, wait)
	}
	if r.Inconclusive {
		return nil, due
	}
	if !d.raw {
		return &Verdict{Address: t.Probe.Address, Healthy: false, Reason: r.Reason}, due
	}
	reason := "probes pass"
	if t.HoldDown > 0 {
		reason = fmt.Sprintf("probes passed for %s", t.HoldDown)
	}
	return &Verdict{Address: t.Probe.Address, Healthy: true, Reason: reason}, due
}
