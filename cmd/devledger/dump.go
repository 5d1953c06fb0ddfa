package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/sysfs"
)

// errStop ends a Read early once --limit events were printed.
var errStop = errors.New("limit reached")

// eventFilter selects events for dump. Zero fields select everything.
type eventFilter struct {
	since, until time.Time
	pool         string
	device       string
	types        []events.Type
	// pods selects the events of the allocations bound to a pod or a
	// namespace; its first pass must have run.
	pods *podSelection
	// behind selects the events of these devices (--iface, --pf), iface
	// and pf the flags it was found from.
	behind    map[string]bool
	iface, pf string
	// poolOf, with pool, is the pool a device is a member of as the event
	// being matched happens: a health change names no pool of its own.
	poolOf func(addr string) string
	// superseded, if set, are the devices of the allocations the event
	// being matched ends by superseding them (holdings.superseded): an
	// allocation of only some of their devices names none of the others.
	superseded func(e events.Envelope) []string
}

func (f *eventFilter) match(e events.Envelope) bool {
	if !f.since.IsZero() && e.Time.Before(f.since) {
		return false
	}
	if !f.until.IsZero() && e.Time.After(f.until) {
		return false
	}
	if len(f.types) > 0 && !slices.Contains(f.types, e.Type) {
		return false
	}
	if f.pool != "" && e.Pool() != f.pool && !f.healthOf(e, f.pool) {
		return false
	}
	if f.device != "" && !slices.Contains(e.Devices(), f.device) && !slices.Contains(f.endsHolds(e), f.device) {
		return false
	}
	if f.pods != nil && !f.pods.match(e) {
		return false
	}
	if f.behind != nil {
		behind := func(addr string) bool { return f.behind[addr] }
		if !slices.ContainsFunc(e.Devices(), behind) && !slices.ContainsFunc(f.endsHolds(e), behind) {
			return false
		}
	}
	return true
}

// endsHolds are the devices whose allocations e ends by superseding them.
func (f *eventFilter) endsHolds(e events.Envelope) []string {
	if f.superseded == nil {
		return nil
	}
	return f.superseded(e)
}

// healthOf says whether e is a health change of a member of pool.
func (f *eventFilter) healthOf(e events.Envelope, pool string) bool {
	h, ok := e.Payload.(events.DeviceHealthChanged)
	return ok && f.poolOf != nil && f.poolOf(h.Address) == pool
}

func runDump(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dump", "[--state-dir DIR | --db FILE] [filters] [--format table|json|jsonl|html]\n       devledger dump [--state-dir DIR | --db FILE] [filters] --stats [--by type|pool|device|pod] [--every D] [--format table|json]", stdout)
	var lf ledgerFlags
	lf.register(fs)
	since := fs.String("since", "", "only events at or after `T` (RFC 3339 in any zone: 2026-11-24T09:00:00Z, 2026-11-24 10:00:00+01:00; a UTC date, from its start: 2026-11-24; or a duration before now: 2h, 7d)")
	until := fs.String("until", "", "only events at or before `T` (as --since; a date, to its end)")
	pool := fs.String("pool", "", "only events of the pool `RESOURCE` (prefix/name), and the health changes of its members then")
	device := fs.String("device", "", "only events that concern the PCI device `ADDR` (0000:3b:02.1)")
	pod := fs.String("pod", "", "the story of pod `NAME` (or NAMESPACE/NAME, or the pod's UID where the ledger has it): its allocations (allocated, bound, released, conflicts) and what befell their devices while it held them (health, driver, moves, unplug, configs that moved them)")
	namespace := fs.String("namespace", "", "only the allocations bound to pods of namespace `NS`")
	iface := fs.String("iface", "", "only events of the devices behind network interface `NAME`: the function that has (or had) it and, for a PF, its VFs")
	pf := fs.String("pf", "", "only events of the PF at `ADDR` and its VFs")
	typeList := fs.String("type", "", "only events of these `TYPES` (comma-separated)")
	limit := fs.Int("limit", 0, "print at most `N` events (0: all)")
	format := fs.String("format", "table", "output `FORMAT`: table, json, jsonl, or html (one self-contained page: a timeline per device)")
	wide := fs.Bool("wide", false, "on a terminal, do not cut table rows to its width (into a file or a pipe nothing is ever cut)")
	stats := fs.Bool("stats", false, "print counts of the matching events instead of the events, per group (--by) and bucket (--every), with a TOTAL row; --format table or json")
	by := fs.String("by", "", "with --stats, count per `KEY`: type (the default: EVENTS only); pool (a health change counts under its device's pool); device (each device an event names);\n"+
		"pod (namespace/pod of the allocation, an allocation's events before its binding included, \"(unbound)\" if never bound). Events with no group are left out.\n"+
		"Columns: EVENTS, ALLOCATIONS (DevicesAllocated, AllocationRecovered), DEVICES (that they hand out), RELEASES, CONFLICTS, UNHEALTHY (health changes to unhealthy)")
	every := fs.String("every", "", "with --stats, one row per group per bucket `D` wide (15m, 1h, 1d; whole seconds), aligned to the Unix epoch, named by its start in UTC; empty buckets are left out")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := lf.oneLedger(fs); err != nil {
		return err
	}
	if err := refuseEmpty(fs, map[string]string{
		"since": "dump prints from the first event", "until": "dump prints to the last event",
		"pool": "dump prints every pool's events", "device": "dump prints every device's events",
		"pod": "dump prints every pod's events", "namespace": "dump prints every namespace's events",
		"iface": "dump prints every interface's events", "pf": "dump prints every PF's events",
		"type": "dump prints events of every type", "by": "dump --stats counts per event type",
		"every": "dump --stats counts the whole span in one row per group",
	}); err != nil {
		return err
	}

	now := time.Now()
	var f eventFilter
	var err error
	if *since != "" {
		if f.since, err = parseTimeFlag("since", *since, now); err != nil {
			return err
		}
	}
	if *until != "" {
		if f.until, err = parseUntilFlag("until", *until, now); err != nil {
			return err
		}
	}
	if !f.since.IsZero() && !f.until.IsZero() && f.since.After(f.until) {
		return usageErrf("--since %s is after --until %s: no event can be in between", f.since.UTC().Format(time.RFC3339Nano), untilText(f.until))
	}
	if *typeList != "" {
		for _, name := range strings.Split(*typeList, ",") {
			t, err := events.ParseType(strings.TrimSpace(name))
			if err != nil {
				return usageErrf("--type: %v", err)
			}
			f.types = append(f.types, t)
		}
	}
	if *device != "" {
		addr, err := sysfs.NormalizeAddress(*device)
		if err != nil {
			return usageErrf("--device: %v", err)
		}
		f.device = addr
	}
	f.pool = *pool
	var pfAddr string
	if *pf != "" {
		if pfAddr, err = sysfs.NormalizeAddress(*pf); err != nil {
			return usageErrf("--pf: %v", err)
		}
	}
	if f.pods, err = newPodSelection(*pod, *namespace); err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrf("--limit %d: want 0 (all) or a positive count", *limit)
	}
	so, err := parseStatsFlags(*stats, *by, *every, *format, *limit)
	if err != nil {
		return err
	}
	var p printer
	switch {
	case so != nil:
		// The counts are written whole at the end, not streamed.
	case *format == "html":
		// The page folds whole allocations and health spells; a page of
		// some event types or of the first N events would draw a wrong
		// picture. It bounds its own size.
		if *limit != 0 {
			return usageErrf("--limit: not with --format html (the page samples devices itself)")
		}
		if len(f.types) > 0 {
			return usageErrf("--type: not with --format html (the page draws whole allocations and health spells)")
		}
	default:
		// A device's, a PF's or a pod's history reads as a story.
		story := f.device != "" || f.pods != nil || *iface != "" || pfAddr != ""
		if p, err = newPrinter(*format, stdout, *wide, story, f.device); err != nil {
			return err
		}
	}

	src, err := openSource(&lf)
	if err != nil {
		return err
	}
	defer src.close()
	prs := &priorStates{src: src}
	defer prs.warnMissing(stderr, "dump")

	if *iface != "" || pfAddr != "" {
		f.iface, f.pf = *iface, pfAddr
		if f.behind, err = devicesBehind(prs, *iface, pfAddr); err != nil {
			return readFailed(&lf, err)
		}
	}
	read := src.read
	if f.pods != nil {
		if err := f.pods.collect(prs); err != nil {
			return readFailed(&lf, err)
		}
		if err := f.pods.unknown(); err != nil {
			return err
		}
		read = func(fn func(events.Envelope) error) error { return f.pods.readSelected(src, fn) }
	}
	if so != nil {
		out := io.WriteCloser(nopCloser{stdout})
		if *format == "table" {
			out = tableOut(stdout, *wide)
		}
		err := runStats(out, &lf, prs, read, &f, so)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if *format == "html" {
		return readFailed(&lf, writeHistoryPage(stdout, prs, read, &f))
	}

	printed := 0
	// What the ledger knows, to name it when a --pool or --device matches
	// nothing.
	var known knownNames
	held := newHoldings()
	f.superseded = held.superseded
	spells := unhealthySpells{}
	tp, _ := p.(*tablePrinter)
	if tp != nil && tp.story {
		tp.holders = held.of
		tp.unhealthyFor = spells.ends
	}
	// A device's story names what held the device where the events shown
	// begin, and a pod's what the pod held there: the allocation may
	// predate --since, or the events retention kept, and the story would
	// read as if nothing held it. A device's story also says so of an
	// unhealthy spell the device is in there.
	var health deviceHealth
	begun := tp == nil || !tp.story || (f.device == "" && f.pods == nil)
	var lastSeq uint64
	var lastTime time.Time
	// dropped is the first event kept, when retention dropped those
	// before it and --until falls before it: what held a device then, or
	// its health, is not the state before that event, which may have come
	// about after the window; the events that would tell are gone.
	var dropped events.Envelope
	begin := func(next uint64) {
		if begun {
			return
		}
		begun = true
		if dropped.Seq != 0 {
			return
		}
		where := fmt.Sprintf("before #%d", next)
		if next == 0 {
			where = fmt.Sprintf("after #%d, the last event", lastSeq)
		}
		var lines []string
		switch {
		case f.device != "":
			if h := held.of(f.device); h != "" {
				lines = append(lines, fmt.Sprintf("(held by %s %s)", h, where))
			}
			if v := health.spell(f.device, spells); v != "" {
				lines = append(lines, fmt.Sprintf("(%s; %s)", v, where))
			}
		default:
			for _, l := range held.boundTo(f.pods.names) {
				lines = append(lines, fmt.Sprintf("(%s %s)", l, where))
			}
		}
		tp.start = strings.Join(lines, "\n")
	}
	// With --pool, the fold says which pool a device is in.
	var st events.State
	if f.pool != "" {
		f.poolOf = func(addr string) string { return st.Devices[addr].Pool }
	}
	prior := func(s events.State) {
		known.prior(s, &f)
		held.prior(s)
		spells.prior(s)
		if !begun && f.device != "" {
			health.prior(s, f.device)
		}
		st = s
	}
	readErr := read(prs.around(prior, func(e events.Envelope) error {
		if printed == 0 {
			known.note(e, &f)
		}
		if lastSeq == 0 && e.Seq > 1 && !f.until.IsZero() && e.Time.After(f.until) {
			dropped = e
		}
		if f.since.IsZero() || !e.Time.Before(f.since) {
			begin(e.Seq)
		}
		lastSeq, lastTime = e.Seq, e.Time
		matched := f.match(e) // before note: what e supersedes held then
		held.note(e)
		if !begun && f.device != "" {
			health.note(e, f.device)
		}
		if f.poolOf != nil {
			st = events.Apply(st, e)
		}
		if matched {
			if err := p.event(e); err != nil {
				return err
			}
		}
		spells.note(e) // after p.event: a healthy verdict ends a spell
		if !matched {
			return nil
		}
		printed++
		if *limit > 0 && printed >= *limit {
			return errStop
		}
		return nil
	}))
	if errors.Is(readErr, errStop) {
		readErr = nil
	}
	if readErr == nil {
		begin(0)
	}
	if readErr == nil && printed == 0 {
		if err := known.unknown(&f); err != nil {
			return err
		}
		// A copy read days after it was made has nothing in the last
		// hours: say so, rather than leave "(no events)" to read as a
		// quiet node. A running daemon's ledger (its admin socket) has
		// not ended: there "(no events)" is a quiet node, and says so.
		if dropped.Seq != 0 {
			fmt.Fprintf(stderr, "devledger dump: warning: retention dropped the events before #%d, the first event kept (at %s): what happened by --until %s is not in the ledger\n",
				dropped.Seq, dropped.Time.UTC().Format(time.RFC3339), untilText(f.until))
		} else if _, live := src.(adminSource); !live && lastSeq != 0 && lastTime.Before(f.since) {
			fromNow := ""
			if _, err := parseAge(*since); err == nil {
				fromNow = " (" + *since + " counts back from now)"
			}
			fmt.Fprintf(stderr, "devledger dump: warning: the ledger ends before --since %s%s: its last event, #%d, is at %s\n",
				f.since.Format(time.RFC3339), fromNow, lastSeq, lastTime.UTC().Format(time.RFC3339))
		}
	}
	if err := p.end(); err != nil && readErr == nil {
		readErr = err
	}
	return readFailed(&lf, readErr)
}

// knownNames are the pools and devices the events name, while none
// matched, and those of the state before the first event (see priorStates):
// a --pool or --device that names none of them is a mistake to point out,
// not "(no events)".
type knownNames struct {
	pools, devices       map[string]bool
	poolSeen, deviceSeen bool
}

func (k *knownNames) prior(s events.State, f *eventFilter) {
	for p := range s.Pools {
		k.pool(p, f)
	}
	for d := range s.Devices {
		k.device(d, f)
	}
}

func (k *knownNames) note(e events.Envelope, f *eventFilter) {
	if p := e.Pool(); p != "" {
		k.pool(p, f)
	}
	for _, d := range e.Devices() {
		k.device(d, f)
	}
}

func (k *knownNames) pool(p string, f *eventFilter) {
	if k.pools == nil {
		k.pools = map[string]bool{}
	}
	k.pools[p] = true
	k.poolSeen = k.poolSeen || p == f.pool
}

func (k *knownNames) device(d string, f *eventFilter) {
	if k.devices == nil {
		k.devices = map[string]bool{}
	}
	k.devices[d] = true
	k.deviceSeen = k.deviceSeen || d == f.device
}

// named reports whether each --pool and --device given was named.
func (k *knownNames) named(f *eventFilter) bool {
	return (f.pool == "" || k.poolSeen) && (f.device == "" || k.deviceSeen)
}

// unknown is the usage error for a --pool or --device the ledger never
// names; nil when each given is named somewhere.
func (k *knownNames) unknown(f *eventFilter) error {
	list := func(m map[string]bool) string { return someNames(slices.Sorted(maps.Keys(m))) }
	switch {
	case f.pool != "" && !k.poolSeen:
		return usageErrf("--pool %s: no event names it; the ledger's pools: %s", f.pool, list(k.pools))
	case f.device != "" && !k.deviceSeen:
		return usageErrf("--device %s: no event names it; the ledger's devices: %s", f.device, list(k.devices))
	}
	return nil
}

// readFailed names the ledger in a read error; a corrupt record's error,
// or damage read around, names it already.
func readFailed(lf *ledgerFlags, err error) error {
	var coded *codeError
	if err != nil && !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, errReadDamaged) && !errors.As(err, &coded) {
		return fmt.Errorf("read %s: %w", lf.path(), err)
	}
	return err
}

// printer writes a stream of events in one format. It buffers its output,
// flushing as it goes, so memory stays flat however long the log.
type printer interface {
	event(events.Envelope) error
	end() error
}

// newPrinter returns the printer of format. A story table tells what
// happened in words, about one device (about) or about a pod's
// allocations (about "").
func newPrinter(format string, w io.Writer, wide, story bool, about string) (printer, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	switch format {
	case "table":
		out := tableOut(w, wide)
		return &tablePrinter{w: bufio.NewWriterSize(out, 64<<10), out: out, story: story, about: about}, nil
	case "jsonl":
		return &jsonPrinter{w: bw, lines: true}, nil
	case "json":
		return &jsonPrinter{w: bw}, nil
	}
	return nil, usageErrf("--format %q: want table, json or jsonl, or html", format)
}

// deviceHealth follows one device's health verdict, by the fold, up to
// where a story about it begins.
type deviceHealth struct{ s events.State }

// prior takes addr's verdict in s, the state before the first event.
func (h *deviceHealth) prior(s events.State, addr string) {
	h.s = events.NewState()
	if d, ok := s.Devices[addr]; ok {
		h.s.Devices[addr] = d
	}
}

// note folds e in if it is one of the events that give addr a verdict.
func (h *deviceHealth) note(e events.Envelope, addr string) {
	switch e.Payload.(type) {
	case events.DeviceDiscovered, events.DeviceChanged, events.DeviceRemoved, events.DeviceHealthChanged:
		if slices.Contains(e.Devices(), addr) {
			h.s = events.Apply(h.s, e)
		}
	}
}

// spell says what is wrong with addr, "" when it is healthy: "unhealthy
// since #9 at 2026-12-01T03:30:00Z: link down on ens1f0 (PF)", "removed
// since ...: gone from sysfs", with the reason of the last verdict and
// the start of the spell as spells has it.
func (h *deviceHealth) spell(addr string, spells unhealthySpells) string {
	d, ok := h.s.Devices[addr]
	if !ok || d.Healthy {
		return ""
	}
	what, reason := "unhealthy", d.HealthReason
	if !d.Present {
		what = "removed"
		reason = strings.TrimPrefix(strings.TrimPrefix(reason, "removed"), ": ")
	}
	// A snapshot older than the verdict's sequence in the fold has none.
	if began := spells[addr]; began.seq != 0 {
		what += fmt.Sprintf(" since #%d", began.seq)
		if !began.at.IsZero() {
			what += " at " + began.at.UTC().Format(time.RFC3339)
		}
	}
	return withReason(what, ": ", reason)
}

// unhealthySpells holds, per device, where its unhealthy spell began, from
// the events read: the first unhealthy verdict after a healthy one, or the
// device's removal; it ends as the fold makes the device healthy (a
// healthy verdict, its discovery, a change of it while removed). A spell
// open in the state before the first event read (a snapshot's) began at
// no known time.
type unhealthySpells map[string]spellStart

type spellStart struct {
	seq uint64
	at  time.Time
	// removed is set while the device is gone.
	removed bool
}

// prior takes the spells open in s, the state before the first event:
// their start is the last verdict's sequence, at no known time.
func (u unhealthySpells) prior(s events.State) {
	for addr, d := range s.Devices {
		if !d.Healthy {
			u[addr] = spellStart{seq: d.HealthSeq, removed: !d.Present}
		}
	}
}

func (u unhealthySpells) note(e events.Envelope) {
	open := func(addr string, removed bool) {
		sp, ok := u[addr]
		if !ok {
			sp = spellStart{seq: e.Seq, at: e.Time}
		}
		sp.removed = sp.removed || removed
		u[addr] = sp
	}
	switch p := e.Payload.(type) {
	case events.DeviceHealthChanged:
		if p.Healthy {
			delete(u, p.Address)
		} else {
			open(p.Address, false)
		}
	case events.DeviceRemoved:
		open(p.Address, true)
	case events.DeviceDiscovered:
		delete(u, p.Device.Address)
	case events.DeviceChanged:
		if u[p.Device.Address].removed {
			delete(u, p.Device.Address)
		}
	}
}

// ends says for how long the device e, a healthy verdict, finds healthy
// again was unhealthy; false when e is no such verdict or the spell's
// start is unknown.
func (u unhealthySpells) ends(e events.Envelope) (time.Duration, bool) {
	p, ok := e.Payload.(events.DeviceHealthChanged)
	if !ok || !p.Healthy {
		return 0, false
	}
	began, ok := u[p.Address]
	if !ok || began.at.IsZero() {
		return 0, false
	}
	return e.Time.Sub(began.at), true
}
