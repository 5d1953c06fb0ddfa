// Package scanner is the PCI scanner actor: it reads the node's PCI
// functions through package sysfs, records what appeared, changed or
// vanished since the ledger last knew, and tells its parent the full list.
package scanner

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/handoff"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// Config is what a scanner needs.
type Config struct {
	Reader   *sysfs.Reader
	Recorder *ledger.Recorder
	// Known is the replayed device state the first incarnation starts from;
	// a restarted scanner replays the ledger instead.
	Known map[string]events.Device
	// First, when set, gives the first incarnation's first scan: one begun
	// before the actor (sysfs.Reader.ScanAhead).
	First func() ([]sysfs.Device, error)
	// Interval is the periodic rescan; zero disables it (rescans then come
	// only from Rescan messages).
	Interval time.Duration
	Log      zerolog.Logger
}

// Props returns the props of a scanner.
func Props(cfg Config) *actor.Props {
	known, first := handoff.First(cfg.Known), handoff.First(cfg.First)
	cfg.First = nil                // held by first until taken, not for good
	persist := &ledger.Persister{} // outlives a restart
	reads := &completeReads{}      // and so does this
	removed := new([]string)       // and this
	return actor.PropsFromProducer(func() actor.Actor {
		return &scanner{cfg: cfg, known: known(), first: first(), persist: persist, complete: reads, removed: removed}
	}, actor.WithDispatcher(supervise.Warm))
}

type scanner struct {
	cfg      Config
	known    map[string]events.Device
	complete *completeReads
	first    func() ([]sysfs.Device, error) // nil once taken
	timer    *time.Timer
	// unrecorded counts the scans in a row whose changes the ledger
	// refused, unread those that could not read sysfs
	// (supervise.FailureLevel).
	unrecorded, unread int
	// removed are the functions the kernel said it removed (Rescan), until
	// a scan's events about them are durable: a scan that fails, or whose
	// events the ledger refuses, leaves them to the next. They outlive a
	// restart, which first settles the append in flight (clearing them
	// if it recorded them), so the replayed ledger holds none of those
	// kept.
	removed *[]string
	// persist holds the scans back while a scan's changes are being
	// recorded: each diffs against the devices in the ledger.
	persist *ledger.Persister
}

// Receive implements actor.Actor.
func (s *scanner) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if s.known == nil {
			st, err := s.cfg.Recorder.Replay()
			if err != nil {
				panic(err) // restart with backoff: the ledger is unreadable now
			}
			s.known = st.Devices
		}
		s.scan(ctx, "start", nil)
		s.persist.Resume(func(m any) { s.handle(ctx, m) })
	case *ledger.Landed:
		s.persist.Land(m, func(m any) { s.handle(ctx, m) })
	case *Rescan, *ledger.Quiet:
		if !s.persist.Hold(m) {
			s.handle(ctx, m)
		}
	case *actor.Stopping, *actor.Restarting:
		if s.timer != nil {
			s.timer.Stop()
		}
		s.persist.Settle()
	}
}

func (s *scanner) handle(ctx actor.Context, m any) {
	if r, ok := m.(*Rescan); ok {
		s.scan(ctx, r.Reason, r.Removed)
	}
}

// scan reads sysfs, records the differences, and reports to the parent
// once they are durable. A failed scan or a failed append is retried at the
// next tick; it never reports devices the ledger does not know. Removed
// are the functions the kernel said it removed (Rescan).
func (s *scanner) scan(ctx actor.Context, reason string, removed []string) {
	defer s.schedule(ctx)
	for _, addr := range removed {
		if !slices.Contains(*s.removed, addr) {
			*s.removed = append(*s.removed, addr)
			delete(s.complete.last, addr) // another function may be in its slot
		}
	}
	read := s.cfg.Reader.Scan
	if s.first != nil {
		read, s.first = s.first, nil
	}
	devs, err := read()
	if err == nil && len(devs) == 0 {
		err = s.noFunctions()
	}
	if err != nil {
		s.unread++
		s.cfg.Log.WithLevel(supervise.FailureLevel(s.unread)).Err(err).Str("reason", reason).Msg("scan failed; will retry")
		return
	}
	if s.unread > 0 {
		s.cfg.Log.Info().Int("failed_scans", s.unread).Msg("sysfs read again")
		s.unread = 0
	}
	devs = s.steady(devs)
	diff := Diff(s.known, devs, *s.removed)
	if len(diff) == 0 {
		*s.removed = nil
		ctx.Send(ctx.Parent(), &Scanned{Devices: devs, Reason: reason})
		return
	}
	s.persist.Persist(ctx, s.cfg.Recorder, nil, diff, func(envs []events.Envelope, err error) {
		if err != nil {
			s.unrecorded++
			s.cfg.Log.WithLevel(supervise.FailureLevel(s.unrecorded)).Err(err).Int("changes", len(diff)).Msg("cannot record scan results; will retry")
			return
		}
		s.unrecorded, *s.removed = 0, nil
		st := events.NewState()
		st.Devices = s.known
		healthSet := map[string]events.Device{}
		counts := map[events.Type]int{}
		for _, e := range envs {
			st = events.Apply(st, e)
			logChange(s.cfg.Log, e)
			if d := st.Devices[e.Subject]; d.HealthSeq == e.Seq {
				healthSet[e.Subject] = d
			}
			counts[e.Type]++
		}
		s.cfg.Log.Info().Str("reason", reason).Int("discovered", counts[events.TypeDeviceDiscovered]).
			Int("changed", counts[events.TypeDeviceChanged]).Int("removed", counts[events.TypeDeviceRemoved]).
			Uint64("seq", envs[len(envs)-1].Seq).Msg("devices recorded")
		s.known = st.Devices
		ctx.Send(ctx.Parent(), &Scanned{Devices: devs, Changed: true, Reason: reason, HealthSet: healthSet})
	})
}

// noFunctions is the error of a scan that lists no PCI function where the
// ledger knows some present: a PCI bus never empties (its host bridges
// stay), so bus/pci/devices is missing or unreadable (a hostPath not
// mounted, a wrong --sysfs-root), and the read is no news of any device.
// Taken as read, it would record every device removed and its holders'
// allocations lost. A node with no PCI function known scans as empty.
func (s *scanner) noFunctions() error {
	present := 0
	for _, d := range s.known {
		if d.Present {
			present++
		}
	}
	if present == 0 {
		return nil
	}
	return fmt.Errorf("%s lists no PCI function, where the ledger knows %d present: taken as a failed read, as a PCI bus never empties",
		filepath.Join(s.cfg.Reader.SysfsRoot(), "bus", "pci", "devices"), present)
}

// completeReads is each function present's last complete read, which
// stands in for a read of it that is not (sysfs.Device.Incomplete). It
// outlives a restart of the scanner, not one of the node coordinator
// (which spawns the scanner anew) or of the daemon, and forgets a
// function that is gone (another card may come back in its slot).
type completeReads struct{ last map[string]sysfs.Device }

// steady puts each function's last complete read in the place of one
// read incompletely: a read that failed (EIO, EMFILE) is no news of a
// function, and must not move it out of its pool. A VF whose own files
// read whole keeps them, and takes only what comes from its PF from the
// last read when the PF's failed. One with no complete read yet is taken
// as read, by the ledger and the node alike. The reader has logged what
// failed.
//
// A VF read as no VF, or another PF's, or as its PF's VF of no index
// (the PF read whole lists it no more), is being torn down: the kernel
// takes the PF's virtfn link, then the VF's physfn link, before it
// unbinds the VF's driver and removes its directory, which may take a
// while. That read is no news either: a function stays the VF it was
// until it is gone.
func (s *scanner) steady(devs []sysfs.Device) []sysfs.Device {
	was := s.complete.last
	s.complete.last = make(map[string]sysfs.Device, len(devs))
	for i, d := range devs {
		c, ok := was[d.Address]
		switch {
		case ok && c.PF != "" && d.PF != c.PF:
			d = c
		case ok && c.PF != "" && c.VFIndex >= 0 && d.VFIndex < 0 && !d.PFIncomplete:
			d = c
		case !d.Incomplete:
		case ok && d.PFIncomplete:
			if d.PF == c.PF {
				d.VFIndex, d.PFInterface = c.VFIndex, c.PFInterface
				d.Incomplete, d.PFIncomplete = false, false
			}
		case ok:
			d = c
		}
		devs[i] = d
		if !d.Incomplete {
			s.complete.last[d.Address] = d
		}
	}
	return devs
}

func (s *scanner) schedule(ctx actor.Context) {
	if s.cfg.Interval <= 0 {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	s.timer = time.AfterFunc(s.cfg.Interval, func() { root.Send(self, &Rescan{Reason: "periodic"}) })
}

// logChange writes one debug line per device change; the info line is the
// summary of the scan.
func logChange(log zerolog.Logger, e events.Envelope) {
	ev := log.Debug().Uint64("seq", e.Seq).Str("bdf", e.Subject)
	switch p := e.Payload.(type) {
	case events.DeviceDiscovered:
		ev.Str("driver", p.Device.Driver).Msg("device discovered")
	case events.DeviceChanged:
		ev.Strs("changed", p.Changed).Msg("device changed")
	case events.DeviceRemoved:
		ev.Str("reason", p.Reason).Msg("device removed")
	}
}
