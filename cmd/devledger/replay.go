package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/devledger/devledger/actors/daemon"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

func runReplay(args []string, stdout, stderr io.Writer) (rerr error) {
	fs := newFlagSet("replay", "[--state-dir DIR | --db FILE] [--until-seq N | --until-time T | --diff T1..T2] [--format table|json] [--verify]", stdout)
	var lf ledgerFlags
	lf.register(fs)
	untilSeq := fs.Uint64("until-seq", 0, "fold events up to and including sequence `N` (0: all)")
	untilTime := fs.String("until-time", "", "fold events up to time `T` (RFC 3339 in any zone: 2026-11-24T09:00:00Z, 2026-11-24 10:00:00+01:00; a UTC date, to its end: 2026-11-24; or a duration before now: 2h, 7d)")
	format := fs.String("format", "table", "output `FORMAT`: table or json")
	wide := fs.Bool("wide", false, "on a terminal, do not cut table rows to its width (into a file or a pipe nothing is ever cut)")
	verify := fs.Bool("verify", false, "check every record (checksums, sequence, snapshots) first; exit 1 at the first bad one")
	diff := fs.String("diff", "", "print what changed between two points, `T1..T2` (or --diff T1 T2): each a time (as --until-time) or a sequence ('#N', quoted for the shell); T2 left out: the end")
	if err := parseFlags(fs, joinDiffEnds(args)); err != nil {
		return err
	}
	if err := lf.oneLedger(fs); err != nil {
		return err
	}
	if err := refuseEmpty(fs, map[string]string{"until-time": "replay folds the whole ledger", "diff": "replay prints the state, not what changed"}); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usageErrf("--format %q: want table or json", *format)
	}
	// What --verify found goes before a table, and beside JSON, which
	// must parse whole.
	said := stdout
	if *format == "json" {
		said = stderr
	}
	if *diff != "" {
		if *untilSeq != 0 || *untilTime != "" {
			return usageErrf("--diff and --until-seq/--until-time: --diff names both of its points")
		}
		out := io.WriteCloser(nopCloser{stdout})
		if *format != "json" {
			out = tableOut(stdout, *wide)
			said = out
		}
		err := replayDiff(out, said, &lf, *diff, *format, *verify, time.Now())
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	}
	var at time.Time
	readAt := time.Now()
	if *untilTime != "" {
		if *untilSeq != 0 {
			return usageErrf("--until-seq and --until-time: give one of them")
		}
		var err error
		if at, err = parseUntilFlag("until-time", *untilTime, readAt); err != nil {
			return err
		}
	}

	var s events.State
	var notes stateNotes
	src, err := openSource(&lf)
	if err != nil {
		return err
	}
	defer src.close()
	switch src := src.(type) {
	case fileSource:
		if s, err = replayLedgerFile(said, src.l, lf.path(), *verify, *untilSeq, at); err != nil {
			return err
		}
		notes = fileNotes(src.l, &lf, s, *untilSeq == 0 && at.IsZero())
		notes.verdictAt = func(_ string, seq uint64) (t time.Time, ok bool) {
			_ = src.l.Read(seq, func(e events.Envelope) error {
				t, ok = e.Time, e.Seq == seq
				return errStop
			})
			return t, ok
		}
		if point := pointTime(s, *untilSeq, at); !point.IsZero() && s.Daemon.Running {
			notes.crash, notes.crashSeq = crashBefore(readAhead(src.l, s.Seq), s, point)
			if notes.crash == nil {
				notes.endCrash = endedRun(src.l, &lf, s, point)
			}
		}
		if notes.endCrash != nil {
			s = withCrash(s, *notes.endCrash, s.Seq)
		}
		// Shown, then named.
		defer func() {
			if rerr == nil {
				rerr = readDamaged(src.l)
			}
		}()
	default:
		// A running daemon holds the file: fold what its admin socket
		// serves, from the first event kept (and the snapshot before it).
		if *verify {
			return usageErrf("--verify reads the file itself, which the running daemon holds: verify a copy (--db) or stop the daemon")
		}
		var next []events.Envelope
		ahead := 0
		if *untilSeq > 0 || !at.IsZero() {
			ahead = crashLookahead // for crashBefore
		}
		heard := verdictsHeard{}
		hearing := hearingSource{src, func(e events.Envelope) {
			if !pastPoint(e, *untilSeq, at) {
				heard.hear(e)
			}
		}}
		if s, next, err = foldSourceAhead(hearing, *untilSeq, at, ahead); err != nil {
			return err
		}
		notes.verdictAt = heard.at
		if point := pointTime(s, *untilSeq, at); !point.IsZero() && s.Daemon.Running {
			notes.crash, notes.crashSeq = crashBefore(next, s, point)
		}
	}
	if notes.crash != nil {
		s = withCrash(s, *notes.crash, notes.crashSeq)
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	notes.readAt = readAt
	out := tableOut(stdout, *wide)
	if err := printState(out, s, at, notes); err != nil {
		return err
	}
	return out.Close()
}

// stateNotes is what the tool knows beside the state it folded from a
// ledger file.
type stateNotes struct {
	// readAt is when the ledger was read: nothing later is known, so no
	// allocation is said to be held past it.
	readAt time.Time
	// first is the ledger's first event (zero for an empty one): a point
	// before it is not "the empty ledger".
	first events.Envelope
	// ended: no daemon holds the file (the state dir's) or it is a copy
	// (--db), and the state is the ledger's last: a run it has running
	// recorded no stop. endCrash, of the state dir's ledger, is the crash
	// the next start will record of that run (see endedRun); folded in.
	ended    bool
	copy     bool
	endCrash *events.DaemonCrashed
	// crash, at sequence crashSeq, is what a later start recorded of the
	// run the state has running, when that run was last alive before the
	// point asked for: it was no longer running then, which the fold up
	// to that point cannot know (only the next start records a crash).
	crash    *events.DaemonCrashed
	crashSeq uint64
	// verdictAt is when the event at seq, the one that gave device addr
	// its health, happened; false when no event read says (retention
	// dropped it, or the fold began at a snapshot after it).
	verdictAt func(addr string, seq uint64) (time.Time, bool)
}

// verdictsHeard keeps, by device, the last event read that judged it
// unhealthy or removed it: the times a table of a state read through a
// daemon's admin socket gives its unhealthy devices, which that source
// cannot look up by sequence.
type verdictsHeard map[string]heardVerdict

type heardVerdict struct {
	seq uint64
	at  time.Time
}

func (v verdictsHeard) hear(e events.Envelope) {
	switch p := e.Payload.(type) {
	case events.DeviceRemoved:
		v[p.Address] = heardVerdict{e.Seq, e.Time}
	case events.DeviceHealthChanged:
		if !p.Healthy {
			v[p.Address] = heardVerdict{e.Seq, e.Time}
		}
	}
}

func (v verdictsHeard) at(addr string, seq uint64) (time.Time, bool) {
	h, ok := v[addr]
	return h.at, ok && h.seq == seq
}

// verdictOf is when dev, at addr, was judged unhealthy or removed, as
// far as the events read say.
func (n stateNotes) verdictOf(addr string, dev events.Device) (time.Time, bool) {
	if n.verdictAt == nil || dev.HealthSeq == 0 || dev.Present && dev.Healthy {
		return time.Time{}, false
	}
	return n.verdictAt(addr, dev.HealthSeq)
}

// hearingSource is an eventSource that lets hear see each event it reads.
type hearingSource struct {
	eventSource
	hear func(events.Envelope)
}

// unreadableSnapshot is the source's own: hearing hides no error.
func (s hearingSource) unreadableSnapshot(seq uint64) error {
	if why, can := s.eventSource.(snapshotExplainer); can {
		return why.unreadableSnapshot(seq)
	}
	return nil
}

func (s hearingSource) read(fn func(events.Envelope) error) error {
	return s.eventSource.read(func(e events.Envelope) error {
		s.hear(e)
		return fn(e)
	})
}

// crashLookahead is how many events past the point asked for replay
// (and each end of replay --diff) reads for the next start's record of a
// crash: the crashed run's events end at the point, and what comes
// between is a tool's (an acknowledgement) at most.
const crashLookahead = 64

// withCrash is s, the fold up to a point, with crash folded in, which the
// next start recorded at seq of the run s has running: that run had
// stopped by the point, so no daemon ran and no pool was served or
// registered there, in JSON as in the table. s keeps its own last event.
func withCrash(s events.State, crash events.DaemonCrashed, seq uint64) events.State {
	last, at := s.Seq, s.Time
	s = events.Apply(s, events.Envelope{Seq: seq, Payload: crash})
	s.Seq, s.Time = last, at
	return s
}

// pointTime is the time of the point s was folded to, for crashBefore:
// at, or, for a point given as a sequence, its event's time (an event a
// tool recorded while no daemon ran, as an offline ledger acknowledge,
// comes after the run's last); zero for the ledger's end.
func pointTime(s events.State, untilSeq uint64, at time.Time) time.Time {
	if untilSeq > 0 {
		return s.Time
	}
	return at
}

// readAhead is up to crashLookahead events of l after seq; what cannot
// be read ends it (a crash past the damage is not folded in: the state
// reads as the fold up to the point alone says).
func readAhead(l *store.Log, seq uint64) []events.Envelope {
	var next []events.Envelope
	_ = l.Read(seq+1, func(e events.Envelope) error {
		next = append(next, e)
		if len(next) == crashLookahead {
			return errStop
		}
		return nil
	})
	return next
}

// crashBefore finds, in the events next after s, the crash a start
// recorded of the run s has running, when that run recorded nothing past
// s and was last alive before at.
func crashBefore(next []events.Envelope, s events.State, at time.Time) (*events.DaemonCrashed, uint64) {
	for _, e := range next {
		switch p := e.Payload.(type) {
		case events.DaemonCrashed:
			if p.LastSeq <= s.Seq && p.LastAlive.Before(at) {
				return &p, e.Seq
			}
			return nil, 0
		case events.DaemonStarted, events.DaemonStopped:
			return nil, 0
		}
	}
	return nil, 0
}

// fileNotes are the notes on s, folded from the file of l that lf names;
// last says s is the ledger's last state.
func fileNotes(l *store.Log, lf *ledgerFlags, s events.State, last bool) stateNotes {
	var n stateNotes
	if first := l.FirstSeq(); first > 0 {
		_ = l.Read(first, func(e events.Envelope) error {
			n.first = e
			return errStop
		})
	}
	if !last || !s.Daemon.Running {
		return n
	}
	n.ended, n.copy = true, lf.db != ""
	n.endCrash = endedRun(l, lf, s, time.Time{})
	return n
}

// endedRun is the crash the next start will record of the run s has
// running, s being a state of the state dir's ledger, which no daemon
// holds (else it is read through the daemon's socket), past which that
// run is the ledger's last (see lastRun): that run ended with no stop
// recorded, last alive as daemon.Crashed says. A point (not zero) must
// come after that. It is nil for a copy (--db), whose daemon may run on,
// and for any other s. Folded in (withCrash), the state says what the
// table does: no daemon runs, and no pool is served or registered.
func endedRun(l *store.Log, lf *ledgerFlags, s events.State, point time.Time) *events.DaemonCrashed {
	if lf.db != "" || !s.Daemon.Running || !lastRun(l, s) {
		return nil
	}
	boot, at := daemon.LastAlive(lf.stateDir)
	c := daemon.Crashed(&s, boot, at)
	if !point.IsZero() && !c.LastAlive.Before(point) {
		return nil
	}
	return &c
}

// lastRun says whether the run s has running recorded nothing past s,
// and no other run began after it: the events of l past s, if any, are
// records of a tool (an offline ledger acknowledge), which the next
// start reads past to record that run's crash. What cannot be read
// there says no.
func lastRun(l *store.Log, s events.State) bool {
	if s.Seq == l.LastSeq() {
		return true
	}
	last := true
	err := l.Read(s.Seq+1, func(e events.Envelope) error {
		switch e.Payload.(type) {
		case events.DaemonStarted, events.DaemonStopped, events.DaemonCrashed:
			last = false
		}
		if e.BootID == s.Daemon.BootID {
			last = false
		}
		if !last {
			return errStop
		}
		return nil
	})
	return last && err == nil
}

// printState renders a folded state as aligned tables.
func printState(w io.Writer, s events.State, at time.Time, notes stateNotes) error {
	b := &strings.Builder{}
	when := "the empty ledger"
	switch {
	case s.Seq > 0:
		when = fmt.Sprintf("#%d (%s)", s.Seq, s.Time.UTC().Format(time.RFC3339))
	case notes.first.Seq > 0:
		when = fmt.Sprintf("none: before the first event (#%d at %s)", notes.first.Seq, notes.first.Time.UTC().Format(time.RFC3339Nano))
	}
	if !at.IsZero() {
		fmt.Fprintf(b, "State at %s: last event %s\n", untilText(at), when)
	} else {
		fmt.Fprintf(b, "State after %s\n", when)
	}
	d := s.Daemon
	if d.BootID != "" {
		run := "running since " + d.StartedAt.UTC().Format(time.RFC3339)
		switch {
		case notes.crash != nil:
			run = "NOT running: it started " + d.StartedAt.UTC().Format(time.RFC3339) + " and crashed or was killed, last alive " +
				notes.crash.LastAlive.UTC().Format(time.RFC3339) + fmt.Sprintf(" (as the next start recorded, #%d)", notes.crashSeq)
		case notes.endCrash != nil:
			run = "NOT running: it started " + d.StartedAt.UTC().Format(time.RFC3339) + " and ended with no stop recorded (crashed or killed), last alive " +
				notes.endCrash.LastAlive.UTC().Format(time.RFC3339)
		case !d.Running && !d.StoppedAt.IsZero():
			run = "stopped since " + d.StoppedAt.UTC().Format(time.RFC3339)
		case !d.Running: // a ledger from before stops were folded
			run = "stopped, started " + d.StartedAt.UTC().Format(time.RFC3339)
		case notes.copy:
			run += " in this copy (a run killed before it recorded its stop reads the same)"
		case notes.ended:
			run = "NOT running: it started " + d.StartedAt.UTC().Format(time.RFC3339) + " and ended with no stop recorded (crashed or killed)"
		}
		crashes := ""
		if d.Crashes > 0 {
			crashes = fmt.Sprintf(", %d crashed", d.Crashes)
		}
		if d.Reboots > 0 {
			crashes += ", " + counted(d.Reboots, "node reboot", "node reboots")
		}
		fmt.Fprintf(b, "Daemon:  %s, boot %s, %s, %s%s\n", d.Version, d.BootID, run, counted(d.Starts, "start", "starts"), crashes)
	}
	if s.Config.Path != "" {
		fmt.Fprintf(b, "Config:  %s (sha256 %.12s), applied %s, %d rejected since\n", s.Config.Path, s.Config.SHA256, s.Config.AppliedAt.UTC().Format(time.RFC3339), s.Config.Rejections)
	}
	fmt.Fprintf(b, "Kubelet: %s\n", kubeletLine(s.Kubelet))
	if a := s.Attribution; !a.Since.IsZero() {
		// Whether allocations could be attributed to pods then: while
		// not, HELD BY below may lag behind the kubelet.
		verdict := "attributed"
		if !a.Available {
			verdict = "NOT attributed (PodResources unavailable)"
		}
		fmt.Fprintf(b, "Pods:    %s since %s%s\n", verdict, a.Since.UTC().Format(time.RFC3339), withReason("", ": ", a.Reason))
	}
	io.WriteString(w, b.String())

	tw := columns(w)
	fmt.Fprintf(tw, "\nPOOLS (%d)\nRESOURCE\tTYPE\tDEVICES\tHEALTHY\tREGISTRATION\n", len(s.Pools))
	for _, name := range sortedKeys(s.Pools) {
		p := s.Pools[name]
		healthy := 0
		for _, a := range p.Members {
			if s.Devices[a].Healthy {
				healthy++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", name, dash(p.Spec.DeviceType), len(p.Members), healthy, registration(p.Registration))
	}

	fmt.Fprintf(tw, "\nDEVICES (%d)\nADDRESS\tID\tDRIVER\tNUMA\tPOOL\tHELD BY\tHEALTH\n", len(s.Devices))
	for _, addr := range sortedKeys(s.Devices) {
		dev := s.Devices[addr]
		health := "healthy"
		var when string
		if t, ok := notes.verdictOf(addr, dev); ok {
			when = " " + t.UTC().Format(time.RFC3339)
		}
		switch {
		case !dev.Present:
			// The fold's reason for a removal starts with "removed"; a
			// verdict after it (a probe in flight as the device went)
			// says neither why nor when the device went.
			health = "removed"
			if rest, ok := strings.CutPrefix(dev.HealthReason, "removed"); ok {
				health += when + rest
			}
		case !dev.Healthy:
			health = "unhealthy"
			if when != "" {
				health += " since" + when
			}
			if dev.HealthReason != "" {
				health += ": " + dev.HealthReason
			}
		}
		numa := "-"
		if dev.Facts.NUMANode >= 0 && dev.Facts.Vendor != "" {
			numa = fmt.Sprint(dev.Facts.NUMANode)
		}
		holders := make([]string, 0, 1)
		for _, seq := range s.Holders[addr] {
			holders = append(holders, holder(s.Allocations[seq]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", addr, dash(idOf(dev.Facts)), dash(dev.Facts.Driver), numa,
			dash(dev.Pool), dash(strings.Join(holders, ", ")), health)
	}

	// HELD FOR is how long each allocation had been held at the point replayed
	// to: the time asked for, else the last event's; a point still to come
	// (today's date, the day's end) counts to now.
	now := s.Time
	if !at.IsZero() {
		now = givenAt(at)
		if r := notes.readAt; !r.IsZero() && now.After(r) {
			now = r
		}
	}
	seqs := sortedKeys(s.Allocations)
	fmt.Fprintf(tw, "\nLIVE ALLOCATIONS (%d)\nSEQ\tPOOL\tDEVICES\tSINCE\tHELD FOR\tHELD BY\n", len(seqs))
	for _, seq := range seqs {
		a := s.Allocations[seq]
		fmt.Fprintf(tw, "#%d\t%s\t%s\t%s\t%s\t%s\n", seq, a.Pool, strings.Join(a.DeviceIDs, ","), a.At.UTC().Format(time.RFC3339),
			humanDuration(now.Sub(a.At)), holder(a))
	}
	return tw.Flush()
}

// joinDiffEnds turns "--diff T1 T2" into "--diff T1..T2": the flag
// package takes one value per flag, and would stop at T2, leaving the
// flags after it unread.
func joinDiffEnds(args []string) []string {
	for i := 0; i+2 < len(args); i++ {
		if a := args[i]; (a == "--diff" || a == "-diff") && !strings.Contains(args[i+1], "..") && !strings.HasPrefix(args[i+2], "-") {
			joined := append(slices.Clone(args[:i+1]), args[i+1]+".."+args[i+2])
			return append(joined, args[i+3:]...)
		}
	}
	return args
}

// kubeletLine says whether the kubelet is up, and its outages: "DOWN since
// T", or "12 restarts seen; 2 outages, 41s in all, the last 3s from T".
func kubeletLine(k events.KubeletState) string {
	s := fmt.Sprintf("%d %s seen", k.Restarts, plural(k.Restarts, "restart", "restarts"))
	if k.Outages > 0 {
		s += fmt.Sprintf("; %d %s recorded, %s in all, the last %s from %s", k.Outages, plural(k.Outages, "outage", "outages"),
			humanDuration(k.Downtime), humanDuration(k.LastOutage.To.Sub(k.LastOutage.From)), k.LastOutage.From.UTC().Format(time.RFC3339))
	}
	if k.Down {
		return fmt.Sprintf("DOWN since %s; %s", k.DownSince.UTC().Format(time.RFC3339), s)
	}
	return s
}

func holder(a events.Allocation) string {
	if a.Binding == nil {
		switch {
		case a.Lost:
			return fmt.Sprintf("#%d (lost)", a.Seq)
		case a.LeakSuspected:
			return fmt.Sprintf("#%d (unbound, leak suspected)", a.Seq)
		}
		return fmt.Sprintf("#%d (unbound)", a.Seq)
	}
	b := a.Binding
	return podRef(b.Namespace, b.Pod, b.Container, b.UID)
}

func registration(r events.Registration) string {
	switch {
	case r.Registered:
		return "registered (" + r.Mode + ")"
	case r.Serving:
		return "serving, not registered"
	case r.LastError != "":
		return "failed: " + r.LastError
	}
	return "-"
}

func idOf(d events.DeviceFacts) string {
	if d.Vendor == "" {
		return ""
	}
	return d.Vendor + ":" + d.Device
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys[K interface{ ~string | ~uint64 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// replayLedgerFile is replay on a ledger file: optional verification (said
// hears that it passed), then the store's replay from the newest snapshot
// that fits.
func replayLedgerFile(said io.Writer, l *store.Log, path string, verify bool, untilSeq uint64, at time.Time) (events.State, error) {
	if verify {
		rep, err := l.Check(context.Background())
		if err != nil {
			if errors.Is(err, store.ErrCorrupt) {
				return events.State{}, fmt.Errorf("verify: %w", err)
			}
			return events.State{}, fmt.Errorf("verify %s: %w", path, err)
		}
		fmt.Fprintf(said, "verified %s: %d events (#%d-#%d), %s, no problems\n\n",
			path, rep.Events, rep.FirstSeq, rep.LastSeq, snapshotsChecked(rep))
	}
	if untilSeq > l.LastSeq() {
		return events.State{}, pastTheEnd(l, fmt.Sprintf("--until-seq %d", untilSeq))
	}
	var s events.State
	var err error
	if !at.IsZero() {
		s, err = l.ReplayUntilTime(at)
	} else {
		s, err = l.Replay(untilSeq)
	}
	switch {
	case err == nil:
	case errors.Is(err, store.ErrCorrupt):
		return s, err
	case errors.Is(err, store.ErrHistoryDropped) && !at.IsZero():
		// The store names the instant it was asked for; a time given to
		// the second is named as given.
		return s, fmt.Errorf("replay %s to %s: %w: the oldest event kept is #%d, and no snapshot kept reaches back before it",
			path, untilText(at), store.ErrHistoryDropped, l.FirstSeq())
	default:
		return s, fmt.Errorf("replay %s: %w", path, err)
	}
	return s, nil
}

// pastTheEnd is the error for a point, given as what, past the last event
// of l: bad input, unless reads went past damage (a meta page fallen back
// to an older transaction hides the newest events), where the point may
// be among what the damage hides: the damage is named then (exit 1).
func pastTheEnd(l *store.Log, what string) error {
	if err := l.Damage(); err != nil {
		return fmt.Errorf("%s: what could be read ends at #%d: %w", what, l.LastSeq(), err)
	}
	return usageErrf("%s: the ledger ends at #%d", what, l.LastSeq())
}

// foldSource folds a stream of events from the first one (from the
// snapshot before it, when retention dropped older ones), up to untilSeq
// or the time at (whichever is set).
func foldSource(src eventSource, untilSeq uint64, at time.Time) (events.State, error) {
	s, _, err := foldSourceAhead(src, untilSeq, at, 0)
	return s, err
}

// pastPoint says whether e comes after the point --until-seq untilSeq or
// --until-time at names (0 and the zero time: none).
func pastPoint(e events.Envelope, untilSeq uint64, at time.Time) bool {
	return untilSeq > 0 && e.Seq > untilSeq || !at.IsZero() && e.Time.After(at)
}

// foldSourceAhead is foldSource that also returns up to ahead events past
// the point.
func foldSourceAhead(src eventSource, untilSeq uint64, at time.Time, ahead int) (events.State, []events.Envelope, error) {
	s := events.NewState()
	var last uint64
	var next []events.Envelope
	err := src.read(func(e events.Envelope) error {
		if len(next) == 0 { // not past the point yet
			if last == 0 {
				var err error
				if s, err = foldFrom(src, e.Seq); err != nil {
					return err
				}
				if untilSeq > 0 && untilSeq < s.Seq || !at.IsZero() && s.Time.After(at) {
					return fmt.Errorf("replay to before #%d: %w", e.Seq, store.ErrHistoryDropped)
				}
			}
			if !pastPoint(e, untilSeq, at) {
				if err := foldable(e); err != nil {
					return err
				}
				s = events.Apply(s, e)
				last = e.Seq
				return nil
			}
			if ahead == 0 {
				return errStop
			}
		}
		if next = append(next, e); len(next) >= ahead {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		if len(next) > 0 {
			// Past the point: what cannot be read there ends the look
			// ahead, not the fold (as readAhead does of a file).
			return s, next, nil
		}
		return s, nil, err
	}
	if untilSeq > last && err == nil && len(next) == 0 {
		return s, nil, usageErrf("--until-seq %d: the ledger ends at #%d", untilSeq, last)
	}
	return s, next, nil
}

// snapshotsChecked says how many snapshots a check verified, and how many
// it passed over as a newer devledger's (a rollback): no damage, but no
// snapshot this build starts from either.
func snapshotsChecked(rep store.CheckReport) string {
	s := counted(rep.Snapshots, "snapshot", "snapshots")
	if rep.Newer > 0 {
		s += fmt.Sprintf(" (and %s of a newer devledger, passed over)", counted(rep.Newer, "snapshot", "snapshots"))
	}
	return s
}
