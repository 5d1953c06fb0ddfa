package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// replay --diff: the state folded at two points of the ledger, and what
// differs between them. It compares states, not histories: something that
// changed and changed back between the two points (an allocation made and
// released) is not in it; dump --since/--until tells that story.

// diffEnd is one end of --diff as given: a sequence (#N), a time, or, for
// T2 only, nothing: the end of the ledger.
type diffEnd struct {
	seq  uint64
	at   time.Time
	text string
}

// given says whether the end is a point, not the end of the ledger.
func (p diffEnd) given() bool { return p.seq > 0 || !p.at.IsZero() }

// beyond says whether e comes after the point: not folded into its state.
func (p diffEnd) beyond(e events.Envelope) bool {
	return p.seq > 0 && e.Seq > p.seq || !p.at.IsZero() && e.Time.After(p.at)
}

// parseDiffRange reads --diff's value, "T1..T2". T1 and T2 are each a
// sequence number (#N) or a time as parseTimeFlag reads it (durations count
// back from now); an empty T2 is the end of the ledger. T1 must come before
// T2 where that can be told without the ledger (two times, two sequences);
// a sequence against a time is checked once both are folded.
func parseDiffRange(value string, now time.Time) (from, to diffEnd, err error) {
	t1, t2, ok := strings.Cut(value, "..")
	if !ok || t1 == "" {
		hint := ""
		if !ok && value != "" {
			hint = fmt.Sprintf(" (what changed since %s: --diff %s..)", value, value)
		}
		return from, to, usageErrf("--diff %q: want T1..T2, each a time (RFC 3339, a UTC date for its end, or a duration before now: 2h, 7d) or a sequence ('#N'); T2 left out is the end%s", value, hint)
	}
	if from, err = parseDiffEnd(t1, now); err != nil {
		return from, to, err
	}
	if t2 == "" {
		return from, diffEnd{text: "the end"}, nil
	}
	if to, err = parseDiffEnd(t2, now); err != nil {
		return from, to, err
	}
	if from.seq > 0 && to.seq > 0 && from.seq >= to.seq || !from.at.IsZero() && !to.at.IsZero() && !from.at.Before(to.at) {
		return from, to, usageErrf("--diff: T1 (%s) must come before T2 (%s)", describeEnd(from), describeEnd(to))
	}
	return from, to, nil
}

func parseDiffEnd(s string, now time.Time) (diffEnd, error) {
	if n, ok := strings.CutPrefix(s, "#"); ok {
		seq, err := strconv.ParseUint(n, 10, 64)
		if err != nil || seq == 0 {
			return diffEnd{}, usageErrf("--diff: %q is not a sequence number (#1, #2, ...)", s)
		}
		return diffEnd{seq: seq, text: s}, nil
	}
	at, err := parseUntilFlag("diff", s, now)
	if err != nil {
		if zerr := zoneless("diff", s); zerr != nil {
			return diffEnd{}, zerr
		}
		return diffEnd{}, usageErrf("--diff: %q is neither a time (RFC 3339: 2026-11-24T09:00:00Z, a UTC date: 2026-11-24, or a duration before now: 2h, 90m, 7d) nor a sequence number ('#N')", s)
	}
	return diffEnd{at: at, text: s}, nil
}

// describeEnd is the end as an error message names it: a duration given
// is shown as the time it stands for.
func describeEnd(p diffEnd) string {
	if !p.at.IsZero() {
		return untilText(p.at)
	}
	return p.text
}

// foldedEnd is the end as an error message names it once folded: with the
// last event folded there, when it was given as a time.
func foldedEnd(p diffEnd, seq uint64) string {
	if p.seq > 0 {
		return p.text
	}
	return fmt.Sprintf("%s, last event #%d", describeEnd(p), seq)
}

// replayDiff is replay --diff: fold the ledger lf names at both ends of
// spec, print what differs. verify checks a ledger file first, as replay's
// --verify does.
func replayDiff(stdout, said io.Writer, lf *ledgerFlags, spec, format string, verify bool, now time.Time) (rerr error) {
	from, to, err := parseDiffRange(spec, now)
	if err != nil {
		return err
	}
	src, err := openSource(lf)
	if err != nil {
		return err
	}
	defer src.close()
	var a, b events.State
	// The events past each point, for the crash the next start recorded
	// of a run the point's state has running (see crashedBy).
	var aNext, bNext []events.Envelope
	switch src := src.(type) {
	case fileSource:
		if a, b, err = diffLedgerFile(said, src.l, lf.path(), verify, from, to); err != nil {
			return err
		}
		if a.Daemon.Running { // T1 is always a point
			aNext = readAhead(src.l, a.Seq)
		}
		if to.given() && b.Daemon.Running {
			bNext = readAhead(src.l, b.Seq)
		}
		// Shown, then named.
		defer func() {
			if rerr == nil {
				rerr = readDamaged(src.l)
			}
		}()
	default:
		if verify {
			return usageErrf("--verify reads the file itself, which the running daemon holds: verify a copy (--db) or stop the daemon")
		}
		if a, b, aNext, bNext, err = foldBetweenAhead(src, from, to, crashLookahead); err != nil {
			return err
		}
	}
	if a.Seq > b.Seq {
		return usageErrf("--diff: T1 (%s) comes after T2 (%s)", foldedEnd(from, a.Seq), foldedEnd(to, b.Seq))
	}
	a, b = crashedBy(a, from, aNext), crashedBy(b, to, bNext)
	if src, ok := src.(fileSource); ok {
		a, b = endedBy(src.l, lf, a, from), endedBy(src.l, lf, b, to)
	}
	d := diffStates(a, b)
	d.From.At, d.To.At = givenAt(from.at), givenAt(to.at)
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	return printDiff(stdout, d)
}

// diffLedgerFile folds a ledger file at both ends, each from the newest
// snapshot that fits.
func diffLedgerFile(said io.Writer, l *store.Log, path string, verify bool, from, to diffEnd) (a, b events.State, err error) {
	for _, p := range []diffEnd{from, to} {
		if p.seq > l.LastSeq() {
			return a, b, pastTheEnd(l, fmt.Sprintf("--diff: %s is past the end", p.text))
		}
	}
	if a, err = replayLedgerFile(said, l, path, verify, from.seq, from.at); err != nil {
		return a, b, err
	}
	b, err = replayLedgerFile(said, l, path, false, to.seq, to.at)
	return a, b, err
}

// crashedBy is s, the fold up to end, with the crash folded in that the
// next start recorded, in next, of the run s has running, when that run
// was last alive before end: it had stopped by then (see crashBefore and
// withCrash, which replay uses alike). The end of the ledger is no point.
func crashedBy(s events.State, end diffEnd, next []events.Envelope) events.State {
	at := pointTime(s, end.seq, end.at)
	if at.IsZero() || !s.Daemon.Running {
		return s
	}
	if crash, seq := crashBefore(next, s, at); crash != nil {
		return withCrash(s, *crash, seq)
	}
	return s
}

// endedBy is s, the fold of the state dir's ledger up to end, with the
// crash folded in that the next start will record of the run s has
// running, when that run is the ledger's last and ended before end, or
// end is the ledger's end (see endedRun).
func endedBy(l *store.Log, lf *ledgerFlags, s events.State, end diffEnd) events.State {
	if crash := endedRun(l, lf, s, pointTime(s, end.seq, end.at)); crash != nil {
		return withCrash(s, *crash, s.Seq)
	}
	return s
}

// foldBetween folds a stream of events once, from the first, keeping the
// state at from on the way to the state at to: one read, so a running
// daemon's appends between two reads cannot make the ends disagree.
func foldBetween(src eventSource, from, to diffEnd) (a, b events.State, err error) {
	a, b, _, _, err = foldBetweenAhead(src, from, to, 0)
	return a, b, err
}

// foldBetweenAhead is foldBetween that also returns up to ahead events
// past each point (those past from are among those folded into b), read
// on past to in the same read; what cannot be read past to ends that look
// ahead, not the fold.
func foldBetweenAhead(src eventSource, from, to diffEnd, ahead int) (a, b events.State, aNext, bNext []events.Envelope, err error) {
	s := events.NewState()
	taken, stopped := false, false
	var last uint64
	err = src.read(func(e events.Envelope) error {
		if stopped {
			if len(aNext) < ahead {
				aNext = append(aNext, e)
			}
			if bNext = append(bNext, e); len(bNext) >= ahead {
				return errStop
			}
			return nil
		}
		if last == 0 {
			var err error
			if s, err = foldFrom(src, e.Seq); err != nil {
				return err
			}
			if base := (events.Envelope{Seq: s.Seq, Time: s.Time}); s.Seq > 0 && (from.beyond(base) || to.beyond(base)) {
				return fmt.Errorf("--diff: a point before #%d: %w", e.Seq, store.ErrHistoryDropped)
			}
		}
		if !taken && from.beyond(e) {
			// Apply reuses the state's maps: the copy is what stays.
			a, taken = s.Clone(), true
		}
		if taken && len(aNext) < ahead {
			aNext = append(aNext, e)
		}
		if to.beyond(e) {
			stopped = true
			if bNext = append(bNext, e); len(bNext) >= ahead {
				return errStop
			}
			return nil
		}
		if err := foldable(e); err != nil {
			return err
		}
		s = events.Apply(s, e)
		last = e.Seq
		return nil
	})
	if err != nil && !errors.Is(err, errStop) && !stopped {
		return a, s, nil, nil, err
	}
	switch {
	case !stopped && max(from.seq, to.seq) > last:
		return a, s, nil, nil, usageErrf("--diff: #%d is past the end: the ledger ends at #%d", max(from.seq, to.seq), last)
	case !taken && stopped:
		return a, s, nil, nil, usageErrf("--diff: T1 (%s) comes after T2 (%s)", describeEnd(from), foldedEnd(to, last))
	case !taken:
		a = s.Clone()
	}
	return a, s, aNext, bNext, nil
}

// stateDiff is what differs between two folded states. Its JSON is the
// output of replay --diff --format json: field names are stable, and a
// section without a change is left out. Holders are not compared: they
// follow from the allocations.
type stateDiff struct {
	From diffPoint `json:"from"`
	To   diffPoint `json:"to"`
	// Events is how many sequence numbers lie between the two points.
	Events uint64 `json:"events"`

	Daemon      *daemonDiff      `json:"daemon,omitempty"`
	Config      *configDiff      `json:"config,omitempty"`
	Kubelet     *kubeletDiff     `json:"kubelet,omitempty"`
	Attribution *attributionDiff `json:"attribution,omitempty"`
	Ledger      *ledgerDiff      `json:"ledger,omitempty"`
	Pools       []poolDiff       `json:"pools,omitempty"`
	Devices     []deviceDiff     `json:"devices,omitempty"`
	Allocations *allocationsDiff `json:"allocations,omitempty"`
}

// diffPoint is one end of a diff: the last event folded there, and the time
// asked for when the end was given as a time.
type diffPoint struct {
	// Seq is the last event folded; 0 when there was none yet.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time,omitzero"`
	At   time.Time `json:"at,omitzero"`
}

// change is a value then and now.
type change struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func changed(from, to string) *change {
	if from == to {
		return nil
	}
	return &change{From: from, To: to}
}

// daemonDiff counts the daemon runs that began and ended between the
// points. Each run ends in a DaemonStopped or, recorded by the next start,
// a DaemonCrashed: a run last alive before a point, whose crash the next
// start recorded after it, had stopped by then (crashedBy);
// one that no start has followed yet still counts as running.
type daemonDiff struct {
	Starts      int     `json:"starts,omitempty"`
	Stops       int     `json:"stops,omitempty"`
	Crashes     int     `json:"crashes,omitempty"`
	Reboots     int     `json:"node_reboots,omitempty"`
	Version     *change `json:"version,omitempty"`
	RunningThen bool    `json:"running_then"`
	RunningNow  bool    `json:"running_now"`
}

type configDiff struct {
	Path   *change `json:"path,omitempty"`
	SHA256 *change `json:"sha256,omitempty"`
	// Rejections is how many configurations were refused between;
	// LastError is what the last refusal said (as of T2).
	Rejections int      `json:"rejections,omitempty"`
	LastError  []string `json:"last_error,omitempty"`
}

type kubeletDiff struct {
	Restarts    int       `json:"restarts,omitempty"`
	LastRestart time.Time `json:"last_restart,omitzero"`
	// Outages are the recorded kubelet outages that ended between, and
	// Downtime their length.
	Outages  int           `json:"outages,omitempty"`
	Downtime time.Duration `json:"downtime,omitempty"`
	WasDown  bool          `json:"was_down"`
	Down     bool          `json:"down"`
	// DownSince is when the outage in progress at T2 began.
	DownSince time.Time `json:"down_since,omitzero"`
}

// attributionDiff is the PodResources verdict at T2, when one was recorded
// between the points (whether or not it is a different one).
type attributionDiff struct {
	WasAvailable bool      `json:"was_available"`
	Available    bool      `json:"available"`
	Reason       string    `json:"reason,omitempty"`
	Since        time.Time `json:"since"`
}

// ledgerDiff is the damage the ledger recorded about itself between the
// points: Damaged is newly recorded (acknowledged since or not),
// Acknowledged is what an operator acknowledged.
type ledgerDiff struct {
	Damaged      []string `json:"damaged,omitempty"`
	Acknowledged []string `json:"acknowledged,omitempty"`
}

type poolDiff struct {
	Resource string `json:"resource"`
	Added    bool   `json:"added,omitempty"`
	Removed  bool   `json:"removed,omitempty"`
	// Joined and Left are the member addresses; an added pool's members all
	// joined, a removed pool's all left.
	Joined []string  `json:"joined,omitempty"`
	Left   []string  `json:"left,omitempty"`
	Spec   *specDiff `json:"spec,omitempty"`
	// Registration is the standing with the kubelet, as replay shows it
	// ("registered (legacy)", "serving, not registered", "failed: ..."),
	// "" for none.
	Registration *change `json:"registration,omitempty"`
	// RegistrationFailures counts the failed registrations between.
	RegistrationFailures int `json:"registration_failures,omitempty"`
}

type specDiff struct {
	From events.PoolSpec `json:"from"`
	To   events.PoolSpec `json:"to"`
}

type deviceDiff struct {
	Address string `json:"address"`
	// Discovered is set for a device absent (or unknown) at T1 and present
	// at T2; Facts are then what it was discovered as.
	Discovered bool                `json:"discovered,omitempty"`
	Facts      *events.DeviceFacts `json:"facts,omitempty"`
	// Removed is set for a device present at T1 and gone at T2.
	Removed       bool   `json:"removed,omitempty"`
	RemovedReason string `json:"removed_reason,omitempty"`
	// Health is the verdict at T2 where it differs from T1's (for a
	// discovered device, from healthy).
	Health *healthDiff `json:"health,omitempty"`
	// Pool is the pool it is a member of, "" for none.
	Pool   *change `json:"pool,omitempty"`
	Driver *change `json:"driver,omitempty"`
}

type healthDiff struct {
	WasHealthy bool   `json:"was_healthy"`
	WasReason  string `json:"was_reason,omitempty"`
	Healthy    bool   `json:"healthy"`
	Reason     string `json:"reason,omitempty"`
	// Seq is the event that gave the verdict at T2, when known.
	Seq uint64 `json:"seq,omitempty"`
}

// allocationsDiff is the live allocations that started (live at T2, not
// at T1), ended (live at T1, not at T2), and changed holder.
type allocationsDiff struct {
	Started []allocationDiff `json:"started,omitempty"`
	Ended   []allocationDiff `json:"ended,omitempty"`
	Changed []allocationDiff `json:"changed,omitempty"`
}

type allocationDiff struct {
	Seq       uint64    `json:"seq"`
	Pool      string    `json:"pool"`
	DeviceIDs []string  `json:"device_ids"`
	At        time.Time `json:"at"`
	// HeldBy is the holder as replay shows it (namespace/pod/container,
	// or "#N (unbound)", "(lost)", "(unbound, leak suspected)"): at T1 for
	// an ended allocation, at T2 otherwise. WasHeldBy is T1's, for a
	// changed one.
	HeldBy    string `json:"held_by"`
	WasHeldBy string `json:"was_held_by,omitempty"`
	// Binding is the container that held it, when HeldBy was a pod;
	// WasBinding is WasHeldBy's.
	Binding    *events.Binding `json:"binding,omitempty"`
	WasBinding *events.Binding `json:"was_binding,omitempty"`
}

// empty says whether nothing differs.
func (d stateDiff) empty() bool {
	return d.Daemon == nil && d.Config == nil && d.Kubelet == nil && d.Attribution == nil && d.Ledger == nil &&
		len(d.Pools) == 0 && len(d.Devices) == 0 && d.Allocations == nil
}

// diffStates says what differs between a, the earlier state, and b. It is
// pure: it neither modifies nor keeps a reference to either.
func diffStates(a, b events.State) stateDiff {
	d := stateDiff{
		From:        diffPoint{Seq: a.Seq, Time: a.Time},
		To:          diffPoint{Seq: b.Seq, Time: b.Time},
		Daemon:      diffDaemon(a.Daemon, b.Daemon),
		Config:      diffConfig(a.Config, b.Config),
		Kubelet:     diffKubelet(a.Kubelet, b.Kubelet),
		Attribution: diffAttribution(a.Attribution, b.Attribution),
		Ledger:      diffLedger(a.Ledger, b.Ledger),
		Pools:       diffPools(a.Pools, b.Pools),
		Devices:     diffDevices(a.Devices, b.Devices),
		Allocations: diffAllocations(a.Allocations, b.Allocations),
	}
	if b.Seq > a.Seq {
		d.Events = b.Seq - a.Seq
	}
	return d
}

// grew is how much a count grew, never negative: the two states may come
// from snapshots of different formats, one without the count.
func grew(from, to int) int { return max(to-from, 0) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func diffDaemon(a, b events.DaemonState) *daemonDiff {
	d := daemonDiff{
		Starts:      grew(a.Starts, b.Starts),
		Crashes:     grew(a.Crashes, b.Crashes),
		Reboots:     grew(a.Reboots, b.Reboots),
		RunningThen: a.Running,
		RunningNow:  b.Running,
	}
	// Every run that ended was running at T1 or started since; a crash is
	// recorded before the next start, so what did not crash stopped.
	ended := btoi(a.Running) + d.Starts - btoi(b.Running)
	d.Stops = max(ended-d.Crashes, 0)
	if a.Version != "" || b.Version != "" {
		d.Version = changed(a.Version, b.Version)
	}
	if d.Starts == 0 && d.Stops == 0 && d.Crashes == 0 && d.Reboots == 0 && d.Version == nil && a.Running == b.Running {
		return nil
	}
	return &d
}

func diffConfig(a, b events.ConfigState) *configDiff {
	d := configDiff{
		Path:       changed(a.Path, b.Path),
		SHA256:     changed(a.SHA256, b.SHA256),
		Rejections: grew(a.Rejections, b.Rejections),
	}
	if d.Rejections > 0 {
		d.LastError = slices.Clone(b.LastError)
	}
	if d.Path == nil && d.SHA256 == nil && d.Rejections == 0 {
		return nil
	}
	return &d
}

func diffKubelet(a, b events.KubeletState) *kubeletDiff {
	d := kubeletDiff{
		Restarts: grew(a.Restarts, b.Restarts),
		Outages:  grew(a.Outages, b.Outages),
		WasDown:  a.Down,
		Down:     b.Down,
	}
	if d.Restarts > 0 {
		d.LastRestart = b.LastRestart
	}
	if d.Outages > 0 {
		d.Downtime = max(b.Downtime-a.Downtime, 0)
	}
	if b.Down {
		d.DownSince = b.DownSince
	}
	if d.Restarts == 0 && d.Outages == 0 && a.Down == b.Down && a.DownSince.Equal(b.DownSince) {
		return nil
	}
	return &d
}

func diffAttribution(a, b events.AttributionState) *attributionDiff {
	if a.Since.Equal(b.Since) {
		return nil
	}
	// Nothing recorded (Since zero) means assumed available.
	return &attributionDiff{
		WasAvailable: a.Available || a.Since.IsZero(),
		Available:    b.Available || b.Since.IsZero(),
		Reason:       b.Reason,
		Since:        b.Since,
	}
}

func diffLedger(a, b events.LedgerState) *ledgerDiff {
	var d ledgerDiff
	for _, p := range slices.Concat(b.Damage, b.Acknowledged) {
		if !a.Known(p) && !slices.Contains(d.Damaged, p) {
			d.Damaged = append(d.Damaged, p)
		}
	}
	for _, p := range b.Acknowledged {
		if !slices.Contains(a.Acknowledged, p) {
			d.Acknowledged = append(d.Acknowledged, p)
		}
	}
	if len(d.Damaged) == 0 && len(d.Acknowledged) == 0 {
		return nil
	}
	return &d
}

// unionKeys is the keys of both maps, sorted, each once.
func unionKeys[K interface{ ~string | ~uint64 }, V any](a, b map[K]V) []K {
	keys := append(sortedKeys(a), sortedKeys(b)...)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// without is the members of s that are not in t (both sorted or not).
func without(s, t []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(t, x) {
			out = append(out, x)
		}
	}
	return out
}

func diffPools(a, b map[string]events.Pool) []poolDiff {
	var out []poolDiff
	for _, name := range unionKeys(a, b) {
		pa, inA := a[name]
		pb, inB := b[name]
		d := poolDiff{Resource: name}
		switch {
		case !inA:
			d.Added = true
			d.Joined = slices.Clone(pb.Members)
			d.Registration = changed("", standing(pb.Registration))
			d.RegistrationFailures = pb.Registration.Failures
		case !inB:
			d.Removed = true
			d.Left = slices.Clone(pa.Members)
		default:
			d.Joined = without(pb.Members, pa.Members)
			d.Left = without(pa.Members, pb.Members)
			if pa.Spec != pb.Spec {
				d.Spec = &specDiff{From: pa.Spec, To: pb.Spec}
			}
			d.Registration = changed(standing(pa.Registration), standing(pb.Registration))
			d.RegistrationFailures = grew(pa.Registration.Failures, pb.Registration.Failures)
		}
		if d.Added || d.Removed || len(d.Joined) > 0 || len(d.Left) > 0 || d.Spec != nil || d.Registration != nil || d.RegistrationFailures > 0 {
			out = append(out, d)
		}
	}
	return out
}

// standing is the registration as replay shows it, "" for none.
func standing(r events.Registration) string {
	if s := registration(r); s != "-" {
		return s
	}
	return ""
}

func diffDevices(a, b map[string]events.Device) []deviceDiff {
	var out []deviceDiff
	for _, addr := range unionKeys(a, b) {
		da, inA := a[addr]
		db, inB := b[addr]
		was, is := inA && da.Present, inB && db.Present
		d := deviceDiff{Address: addr, Pool: changed(da.Pool, db.Pool)}
		switch {
		case !was && is:
			d.Discovered = true
			facts := db.Facts
			facts.Interfaces, facts.RDMADevices = slices.Clone(facts.Interfaces), slices.Clone(facts.RDMADevices)
			d.Facts = &facts
			if !db.Healthy {
				// Discovered healthy; a verdict since says otherwise.
				d.Health = &healthDiff{WasHealthy: true, Reason: db.HealthReason, Seq: db.HealthSeq}
			}
		case was && !is:
			d.Removed = true
			// The fold's reason for a removed device is "removed" or
			// "removed: why".
			d.RemovedReason = strings.TrimPrefix(strings.TrimPrefix(db.HealthReason, "removed"), ": ")
		case was && is:
			d.Driver = changed(da.Facts.Driver, db.Facts.Driver)
			if da.Healthy != db.Healthy || da.HealthReason != db.HealthReason {
				d.Health = &healthDiff{WasHealthy: da.Healthy, WasReason: da.HealthReason, Healthy: db.Healthy, Reason: db.HealthReason}
				if db.HealthSeq > da.HealthSeq {
					d.Health.Seq = db.HealthSeq
				}
			}
		}
		if d.Discovered || d.Removed || d.Health != nil || d.Pool != nil || d.Driver != nil {
			out = append(out, d)
		}
	}
	return out
}

func diffAllocations(a, b map[uint64]events.Allocation) *allocationsDiff {
	var d allocationsDiff
	entry := func(al events.Allocation) allocationDiff {
		return allocationDiff{Seq: al.Seq, Pool: al.Pool, DeviceIDs: slices.Clone(al.DeviceIDs), At: al.At,
			HeldBy: holder(al), Binding: cloneBinding(al.Binding)}
	}
	for _, seq := range unionKeys(a, b) {
		aa, inA := a[seq]
		ab, inB := b[seq]
		switch {
		case !inA:
			d.Started = append(d.Started, entry(ab))
		case !inB:
			d.Ended = append(d.Ended, entry(aa))
		case holder(aa) != holder(ab):
			e := entry(ab)
			e.WasHeldBy, e.WasBinding = holder(aa), cloneBinding(aa.Binding)
			d.Changed = append(d.Changed, e)
		}
	}
	if len(d.Started) == 0 && len(d.Ended) == 0 && len(d.Changed) == 0 {
		return nil
	}
	return &d
}

func cloneBinding(b *events.Binding) *events.Binding {
	if b == nil {
		return nil
	}
	c := *b
	return &c
}

// printDiff renders a diff: a heading that says which two points, a line
// for each changed fact of the node, then the pools, devices and
// allocations that changed, one self-contained line per change.
func printDiff(w io.Writer, d stateDiff) error {
	tw := columns(w)
	fmt.Fprintf(tw, "Changes from %s to %s: %s\n", diffPointLabel(d.From), diffPointLabel(d.To), counted(int(d.Events), "event", "events"))
	if d.empty() {
		fmt.Fprintln(tw, "no changes")
		return tw.Flush()
	}
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	// The node's lines follow a blank line; each section below brings
	// its own.
	if d.Daemon != nil || d.Config != nil || d.Kubelet != nil || d.Attribution != nil || d.Ledger != nil {
		fmt.Fprintln(tw)
	}

	if dd := d.Daemon; dd != nil {
		var parts []string
		var counts []string
		for _, c := range []struct {
			n         int
			one, many string
		}{{dd.Starts, "start", "starts"}, {dd.Stops, "stop", "stops"}, {dd.Crashes, "crash", "crashes"}, {dd.Reboots, "node reboot", "node reboots"}} {
			if c.n > 0 {
				counts = append(counts, counted(c.n, c.one, c.many))
			}
		}
		if len(counts) > 0 {
			parts = append(parts, strings.Join(counts, ", "))
		}
		if dd.Version != nil {
			parts = append(parts, "version "+dash(dd.Version.From)+" → "+dash(dd.Version.To))
		}
		runs := map[bool]string{true: "running", false: "stopped"}
		if dd.RunningThen == dd.RunningNow {
			parts = append(parts, runs[dd.RunningNow]+" then and now")
		} else {
			parts = append(parts, runs[dd.RunningThen]+" → "+runs[dd.RunningNow])
		}
		fmt.Fprintf(tw, "Daemon:\t%s\n", strings.Join(parts, "; "))
	}
	if c := d.Config; c != nil {
		var parts []string
		if c.SHA256 != nil {
			parts = append(parts, fmt.Sprintf("sha256 %s → %s", dash(shortSHA(c.SHA256.From)), dash(shortSHA(c.SHA256.To))))
		}
		if c.Path != nil {
			parts = append(parts, fmt.Sprintf("path %s → %s", dash(c.Path.From), dash(c.Path.To)))
		}
		if c.Rejections > 0 {
			parts = append(parts, withReason(counted(c.Rejections, "rejection", "rejections"), ", the last: ", strings.Join(c.LastError, "; ")))
		}
		fmt.Fprintf(tw, "Config:\t%s\n", strings.Join(parts, "; "))
	}
	if k := d.Kubelet; k != nil {
		var parts []string
		if k.Restarts > 0 {
			parts = append(parts, fmt.Sprintf("%s, the last at %s", counted(k.Restarts, "restart", "restarts"), stamp(k.LastRestart)))
		}
		if k.Outages > 0 {
			parts = append(parts, fmt.Sprintf("%s ended, %s down in all", counted(k.Outages, "outage", "outages"), humanDuration(k.Downtime)))
		}
		switch {
		case k.Down:
			parts = append(parts, "down since "+stamp(k.DownSince))
		case k.WasDown:
			parts = append(parts, "down then, up now")
		}
		fmt.Fprintf(tw, "Kubelet:\t%s\n", strings.Join(parts, "; "))
	}
	if at := d.Attribution; at != nil {
		verdict := map[bool]string{true: "attributed", false: "NOT attributed"}
		if at.WasAvailable == at.Available {
			// The same verdict, recorded again: dump tells what came
			// between.
			fmt.Fprintf(tw, "Pods:\t%s then and now; verdict recorded at %s%s\n", verdict[at.Available], stamp(at.Since), withReason("", ": ", at.Reason))
		} else {
			fmt.Fprintf(tw, "Pods:\t%s → %s since %s%s\n", verdict[at.WasAvailable], verdict[at.Available], stamp(at.Since), withReason("", ": ", at.Reason))
		}
	}
	if l := d.Ledger; l != nil {
		var parts []string
		if len(l.Damaged) > 0 {
			parts = append(parts, "damage recorded: "+strings.Join(l.Damaged, "; "))
		}
		if len(l.Acknowledged) > 0 {
			parts = append(parts, "acknowledged: "+strings.Join(l.Acknowledged, "; "))
		}
		fmt.Fprintf(tw, "Ledger:\t%s\n", strings.Join(parts, "; "))
	}

	if len(d.Pools) > 0 {
		fmt.Fprintf(tw, "\nPOOLS\n")
		for _, p := range d.Pools {
			line := func(format string, args ...any) {
				fmt.Fprintf(tw, "%s\t%s\n", p.Resource, fmt.Sprintf(format, args...))
			}
			switch {
			case p.Added:
				line("added")
			case p.Removed:
				line("removed")
			}
			if len(p.Joined) > 0 {
				line("joined: %s", strings.Join(p.Joined, ", "))
			}
			if len(p.Left) > 0 {
				line("left: %s", strings.Join(p.Left, ", "))
			}
			if s := p.Spec; s != nil {
				line("spec changed: %s", specChanges(s.From, s.To))
			}
			if r := p.Registration; r != nil {
				line("registration %s → %s", dash(r.From), dash(r.To))
			}
			if p.RegistrationFailures > 0 {
				line("%s", counted(p.RegistrationFailures, "failed registration", "failed registrations"))
			}
		}
	}

	if len(d.Devices) > 0 {
		fmt.Fprintf(tw, "\nDEVICES\n")
		for _, dev := range d.Devices {
			line := func(format string, args ...any) {
				fmt.Fprintf(tw, "%s\t%s\n", dev.Address, fmt.Sprintf(format, args...))
			}
			switch {
			case dev.Discovered:
				what := strings.Join(slices.DeleteFunc([]string{idOf(*dev.Facts), dev.Facts.Driver}, func(s string) bool { return s == "" }), " ")
				if dev.Pool != nil && dev.Pool.To != "" {
					what = withReason(what, ", ", "pool "+dev.Pool.To)
				}
				line("%s", withReason("discovered", ": ", what))
			case dev.Removed:
				s := withReason("removed", ": ", dev.RemovedReason)
				if dev.Pool != nil && dev.Pool.From != "" {
					s += "; left pool " + dev.Pool.From
				}
				line("%s", s)
			case dev.Pool != nil:
				line("pool %s → %s", dash(dev.Pool.From), dash(dev.Pool.To))
			}
			if dev.Driver != nil {
				line("driver %s → %s", dash(dev.Driver.From), dash(dev.Driver.To))
			}
			if h := dev.Health; h != nil {
				seq := ""
				if h.Seq > 0 {
					seq = fmt.Sprintf("#%d", h.Seq)
				}
				was := "healthy" // its reason is no news
				if !h.WasHealthy {
					was = withReason("unhealthy", ": ", h.WasReason)
				}
				now := withReason(map[bool]string{true: "healthy", false: "unhealthy"}[h.Healthy], ": ", h.Reason)
				if h.WasHealthy && h.Healthy {
					// The same verdict, given again: dump tells what came
					// between.
					line("healthy then and now; verdict%s: %s", withReason("", " at ", seq), dash(h.Reason))
				} else {
					line("%s → %s%s", was, now, withReason("", " ", parenthesized(seq)))
				}
			}
		}
	}

	if al := d.Allocations; al != nil {
		fmt.Fprintf(tw, "\nALLOCATIONS\n")
		row := func(kind string, a allocationDiff, holder string) {
			fmt.Fprintf(tw, "%s\t#%d\t%s\t%s\t%s\n", kind, a.Seq, a.Pool, strings.Join(a.DeviceIDs, ","), holder)
		}
		for _, a := range al.Started {
			row("started", a, a.HeldBy)
		}
		for _, a := range al.Ended {
			row("ended", a, a.HeldBy)
		}
		for _, a := range al.Changed {
			kind := "changed"
			if a.WasBinding == nil && a.Binding != nil {
				kind = "bound"
			}
			row(kind, a, a.WasHeldBy+" → "+a.HeldBy)
		}
	}
	return tw.Flush()
}

// diffPointLabel names an end of a diff in the heading: the time asked for
// and the last event folded then, or that event alone.
func diffPointLabel(p diffPoint) string {
	if !p.At.IsZero() {
		if p.Seq == 0 {
			return p.At.UTC().Format(time.RFC3339Nano) + " (before the first event)"
		}
		return fmt.Sprintf("%s (last event #%d)", p.At.UTC().Format(time.RFC3339Nano), p.Seq)
	}
	if p.Seq == 0 {
		return "the empty ledger"
	}
	return fmt.Sprintf("#%d (%s)", p.Seq, p.Time.UTC().Format(time.RFC3339Nano))
}

func specChanges(a, b events.PoolSpec) string {
	var parts []string
	if a.DeviceType != b.DeviceType {
		parts = append(parts, fmt.Sprintf("device type %s → %s", dash(a.DeviceType), dash(b.DeviceType)))
	}
	if a.AllocatePolicy != b.AllocatePolicy {
		parts = append(parts, fmt.Sprintf("allocate policy %s → %s", dash(a.AllocatePolicy), dash(b.AllocatePolicy)))
	}
	if a.ExcludeTopology != b.ExcludeTopology {
		parts = append(parts, fmt.Sprintf("exclude topology %t → %t", a.ExcludeTopology, b.ExcludeTopology))
	}
	if len(parts) == 0 {
		// Only the definition (selectors and the rest) differs.
		return "definition"
	}
	return strings.Join(parts, ", ")
}

func shortSHA(s string) string { return s[:min(len(s), 12)] }
