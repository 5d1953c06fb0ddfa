// Package health is the health checker actor. It probes every pooled device
// (still in sysfs, still bound to the driver it joined its pool with, its VFIO
// node still there) and records DeviceHealthChanged only when a verdict
// changes, then tells its parent so the pool can tell the kubelet.
package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// Config is what the health checker needs.
type Config struct {
	Reader   *sysfs.Reader
	Recorder *ledger.Recorder
	// Interval is the periodic probe (default 5s).
	Interval time.Duration
	// Known is the replayed device state: the verdicts the ledger holds.
	Known map[string]events.Device
	Log   zerolog.Logger
}

// Target is a device to probe and what it must look like to be healthy.
type Target struct {
	Address string
	// Driver is the driver the device had when it joined its pool.
	Driver string
	// VFIO says the device's /dev/vfio/<group> node must exist.
	VFIO bool
}

// Watch replaces the set of devices to probe; they are probed at once.
type Watch struct{ Targets []Target }

// Probe asks for a probe round now.
type Probe struct{}

// Verdict is sent to the parent when a device's health changed; it is
// already in the ledger.
type Verdict struct {
	Address string
	Healthy bool
	Reason  string
}

type tick struct{}

type verdict struct {
	healthy bool
	reason  string
}

// Props returns the props of a health checker.
func Props(cfg Config) *actor.Props {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	first := true
	return actor.PropsFromProducer(func() actor.Actor {
		c := &checker{cfg: cfg}
		if first {
			c.known = cfg.Known
			first = false
		}
		return c
	})
}

type checker struct {
	cfg      Config
	known    map[string]events.Device
	targets  []Target
	verdicts map[string]verdict
	timer    *time.Timer
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
		c.verdicts = map[string]verdict{}
		for addr, d := range c.known {
			c.verdicts[addr] = verdict{healthy: d.Healthy, reason: d.HealthReason}
		}
		c.known = nil
		c.schedule(ctx)
	case *actor.Stopping, *actor.Restarting:
		if c.timer != nil {
			c.timer.Stop()
		}
	case *Watch:
		c.targets = slices.Clone(m.Targets)
		c.probe(ctx)
	case *Probe:
		c.probe(ctx)
	case *tick:
		c.probe(ctx)
		c.schedule(ctx)
	}
}

func (c *checker) schedule(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	c.timer = time.AfterFunc(c.cfg.Interval, func() { root.Send(self, &tick{}) })
}

// probe checks every target and records the verdicts that changed, in one
// append.
func (c *checker) probe(ctx actor.Context) {
	var changes []events.Payload
	var next []Verdict
	for _, t := range c.targets {
		v := c.check(t)
		old, ok := c.verdicts[t.Address]
		if !ok {
			old = verdict{healthy: true}
		}
		if old.healthy == v.healthy {
			continue
		}
		changes = append(changes, events.DeviceHealthChanged{Address: t.Address, Healthy: v.healthy, Reason: v.reason})
		next = append(next, Verdict{Address: t.Address, Healthy: v.healthy, Reason: v.reason})
	}
	if len(changes) == 0 {
		return
	}
	envs, err := c.cfg.Recorder.Record(context.Background(), changes...)
	if err != nil {
		// Not recorded means not decided: the next probe tries again.
		c.cfg.Log.Error().Err(err).Int("changes", len(changes)).Msg("cannot record health changes; will retry")
		return
	}
	for i, v := range next {
		c.verdicts[v.Address] = verdict{healthy: v.Healthy, reason: v.Reason}
		ev := c.cfg.Log.Info()
		if !v.Healthy {
			ev = c.cfg.Log.Warn()
		}
		ev.Str("bdf", v.Address).Bool("healthy", v.Healthy).Str("reason", v.Reason).Uint64("seq", envs[i].Seq).Msg("device health changed")
		ctx.Send(ctx.Parent(), &next[i])
	}
}

// check probes one device. An attribute that cannot be read counts as a
// failed probe, with the reason naming what failed.
func (c *checker) check(t Target) verdict {
	d, err := c.cfg.Reader.Device(t.Address)
	switch {
	case errors.Is(err, sysfs.ErrNoDevice):
		return verdict{reason: "gone from sysfs"}
	case err != nil:
		return verdict{reason: "probe failed: " + err.Error()}
	case d.Driver == "" && t.Driver != "":
		return verdict{reason: "driver unbound (was " + t.Driver + ")"}
	case d.Driver != t.Driver:
		return verdict{reason: "driver is " + d.Driver + " (was " + t.Driver + ")"}
	case t.VFIO && !d.VFIODevice:
		return verdict{reason: "/dev/vfio/" + d.IOMMUGroup + " missing"}
	}
	return verdict{healthy: true, reason: "probes pass"}
}
