package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
)

// statsKeys are the values of --by.
var statsKeys = []string{"type", "pool", "device", "pod"}

// unboundGroup is the --by pod group of allocations no pod was ever bound
// to.
const unboundGroup = "(unbound)"

// statsOptions are the --stats flags, checked.
type statsOptions struct {
	by string
	// every is the bucket width; 0 for no buckets.
	every  time.Duration
	format string
}

// parseStatsFlags checks the flags of dump --stats. It returns nil when
// --stats is not given, and refuses --by and --every without it, and
// what --stats cannot do: the jsonl and html formats, --limit.
func parseStatsFlags(stats bool, by, every, format string, limit int) (*statsOptions, error) {
	if !stats {
		switch {
		case by != "":
			return nil, usageErrf("--by: only with --stats")
		case every != "":
			return nil, usageErrf("--every: only with --stats")
		}
		return nil, nil
	}
	o := &statsOptions{by: cmp.Or(by, "type"), format: format}
	if !slices.Contains(statsKeys, o.by) {
		return nil, usageErrf("--by %q: want type, pool, device or pod", by)
	}
	switch format {
	case "table", "json":
	case "jsonl", "html":
		return nil, usageErrf("--format %s: not with --stats (the counts are one table, or one JSON document: --format json)", format)
	default:
		return nil, usageErrf("--format %q: want table or json with --stats", format)
	}
	if limit != 0 {
		return nil, usageErrf("--limit: not with --stats (the counts cover every matching event; narrow them with --since, --until or --type)")
	}
	if every != "" {
		d, err := parseAge(every)
		if err != nil {
			return nil, usageErrf("--every %q: want a duration (15m, 1h, 1d): %v", every, err)
		}
		// Buckets are named by their start to the second.
		if d < time.Second || d%time.Second != 0 {
			return nil, usageErrf("--every %s: want whole seconds, at least 1s", every)
		}
		o.every = d
	}
	return o, nil
}

// statsCounts are the counts of one row, or of the total.
type statsCounts struct {
	events, allocations, devices, releases, conflicts, unhealthy int
}

func (c *statsCounts) add(d statsCounts) {
	c.events += d.events
	c.allocations += d.allocations
	c.devices += d.devices
	c.releases += d.releases
	c.conflicts += d.conflicts
	c.unhealthy += d.unhealthy
}

// statsKey names a row: a bucket (its start in Unix seconds; 0 without
// --every) and a group.
type statsKey struct {
	bucket int64
	group  string
}

// statsRow is a row of the result.
type statsRow struct {
	statsKey
	statsCounts
}

// statsTally counts the events of one read of the log.
type statsTally struct {
	o *statsOptions
	f *eventFilter
	// base is f without the pool and pod filters, which the tally applies
	// itself: they attribute health changes through the fold.
	base eventFilter
	// state is the fold before the event being counted: pool memberships
	// and the live allocations that hold each device.
	state events.State
	// podOf is the pod each bound allocation was first bound to, for
	// --by pod; pods interns their names.
	podOf map[uint64]string
	pods  map[string]string
	rows  map[statsKey]*statsCounts
	total statsCounts
	// matched counts the events the filters let through.
	matched int
}

// runStats is dump --stats: it counts the events that dump would print
// instead of printing them, "allocations per pool per hour" in one command.
// It reads the log once (twice for --by pod) and writes the rows to w. A
// ledger damaged past its end (read whole through a bad page) shows its
// counts before the damage is named; any other read error shows nothing.
//
// --by says what a row counts under:
//
//   - type: the event type. The only column is EVENTS.
//   - pool: the pool the event concerns (Envelope.Pool). A
//     DeviceHealthChanged names no pool: it counts under the pool its device
//     was a member of then, as the fold has it.
//   - device: each device the event names (Envelope.Devices); an event naming
//     two devices counts in both rows. With --device, only that device's row.
//   - pod: the namespace/pod the allocation the event belongs to is bound
//     to then; before its first AllocationBound (or for an
//     AllocationRecovered, its own) wherever that comes in the log, the pod
//     of that binding, so an allocation's events before its binding count
//     under its pod too. An allocation bound again (another container holds
//     it) counts under the new pod from there on. The events of an
//     allocation never bound count under "(unbound)". A conflict counts
//     under every pod its claims name, a DeviceHealthChanged under the pods
//     whose live allocations hold the device then. With --pod or
//     --namespace, only the selected pods' rows.
//
// Events with no group under the key (a ConfigApplied under --by pod, a
// DeviceDiscovered under --by pool) are left out. Under pool, device and pod
// the columns are EVENTS; ALLOCATIONS (DevicesAllocated and
// AllocationRecovered); DEVICES (the devices those allocations hand out; 1 per
// allocation under --by device); RELEASES (DevicesReleased: an allocation
// superseded by a new one ends without one and is not counted); CONFLICTS
// (AllocationConflict); UNHEALTHY (DeviceHealthChanged to unhealthy).
//
// --every D adds a bucket to every row: D wide, aligned to the Unix epoch,
// written as its start in RFC 3339 UTC. Empty buckets have no rows. Rows
// are sorted by bucket, then group. The TOTAL row counts each event once,
// so where an event counts in several rows (--by device, a conflict between
// pods) it is less than the sum of the rows; its DEVICES is that sum.
//
// The filters (--since, --until, --type, --pool, --device, --pod,
// --namespace) choose the events that are counted; what is known of the
// node to attribute them (pool memberships, who holds a device, bindings)
// comes from the whole log, and the state before its first event (see
// priorStates). --pool keeps the events the pool key would
// count under that pool, health changes of its devices included.
//
// Memory grows with the rows (groups × buckets) and with what the node
// holds at a time (its devices, pools and live allocations), not with the
// log; --by pod also keeps the pod of every bound allocation.
func runStats(w io.Writer, lf *ledgerFlags, prs *priorStates, read func(func(events.Envelope) error) error, f *eventFilter, o *statsOptions) error {
	t := &statsTally{o: o, f: f, base: *f, state: events.NewState(), rows: map[statsKey]*statsCounts{}}
	t.base.pool, t.base.pods = "", nil
	if o.by == "pod" {
		last, err := t.collectBindings(prs, read)
		if err != nil && !readAround(err) {
			return readFailed(lf, err)
		}
		// A live daemon's log grows between the passes: count what the
		// bindings were collected of.
		inner := read
		read = func(fn func(events.Envelope) error) error {
			err := inner(func(e events.Envelope) error {
				if e.Seq > last {
					return errPassDone
				}
				return fn(e)
			})
			if errors.Is(err, errPassDone) {
				return nil
			}
			return err
		}
	}
	// What the ledger knows, to name it when a --pool or --device matches
	// nothing.
	var known knownNames
	prior := func(s events.State) {
		t.state = s
		known.prior(s, f)
	}
	readErr := read(prs.around(prior, func(e events.Envelope) error {
		if t.matched == 0 {
			known.note(e, f)
		}
		t.add(e)
		return nil
	}))
	if readErr != nil && !readAround(readErr) {
		return readFailed(lf, readErr)
	}
	if readErr == nil && t.matched == 0 {
		if err := known.unknown(f); err != nil {
			return err
		}
	}
	bw := bufio.NewWriter(w)
	rows := t.sortedRows()
	var err error
	if o.format == "json" {
		err = writeStatsJSON(bw, o, rows, t.total)
	} else {
		err = writeStatsTable(bw, o, rows, t.total)
	}
	if err == nil {
		err = bw.Flush()
	}
	return cmp.Or(readFailed(lf, readErr), err)
}

// collectBindings is the first pass of --by pod: the pod every bound
// allocation was first bound to, whatever the filters, and the last
// sequence read.
func (t *statsTally) collectBindings(prs *priorStates, read func(func(events.Envelope) error) error) (uint64, error) {
	t.podOf, t.pods = map[uint64]string{}, map[string]string{}
	var last uint64
	prior := func(s events.State) {
		for seq, a := range s.Allocations {
			if b := a.Binding; b != nil {
				t.podOf[seq] = t.podName(b.Namespace, b.Pod)
			}
		}
	}
	err := read(prs.around(prior, func(e events.Envelope) error {
		last = e.Seq
		switch p := e.Payload.(type) {
		case events.AllocationBound:
			// A rebinding moves the allocation from there on (podNow).
			if _, ok := t.podOf[p.AllocationSeq]; !ok {
				t.podOf[p.AllocationSeq] = t.podName(p.Namespace, p.Pod)
			}
		case events.AllocationRecovered:
			t.podOf[e.Seq] = t.podName(p.Namespace, p.Pod)
		}
		return nil
	}))
	return last, err
}

// podName is namespace/pod, interned.
func (t *statsTally) podName(namespace, pod string) string {
	name := namespace + "/" + pod
	if s, ok := t.pods[name]; ok {
		return s
	}
	t.pods[name] = name
	return name
}

// add counts e if the filters select it, then folds it.
func (t *statsTally) add(e events.Envelope) {
	if t.match(e) {
		t.matched++
		t.count(e)
	}
	t.state = events.Apply(t.state, e)
}

func (t *statsTally) match(e events.Envelope) bool {
	if !t.base.match(e) {
		return false
	}
	if t.f.pool != "" && t.poolOf(e) != t.f.pool {
		return false
	}
	if ps := t.f.pods; ps != nil && !ps.match(e) && !slices.ContainsFunc(t.holders(e), ps.selected) {
		return false
	}
	return true
}

func (t *statsTally) count(e events.Envelope) {
	groups := t.groups(e)
	if len(groups) == 0 {
		return
	}
	d := statsCounts{events: 1}
	switch p := e.Payload.(type) {
	case events.DevicesAllocated:
		d.allocations, d.devices = 1, len(p.DeviceIDs)
	case events.AllocationRecovered:
		d.allocations, d.devices = 1, len(p.DeviceIDs)
	case events.DevicesReleased:
		d.releases = 1
	case events.AllocationConflict:
		d.conflicts = 1
	case events.DeviceHealthChanged:
		if !p.Healthy {
			d.unhealthy = 1
		}
	}
	total := d
	if t.o.by == "device" && d.allocations > 0 {
		// Each row hands out its own device.
		d.devices = 1
		total.devices = len(groups)
	}
	t.total.add(total)
	bucket := int64(0)
	if t.o.every > 0 {
		bucket = bucketStart(e.Time, t.o.every)
	}
	for _, g := range groups {
		k := statsKey{bucket, g}
		c := t.rows[k]
		if c == nil {
			c = &statsCounts{}
			t.rows[k] = c
		}
		c.add(d)
	}
}

// bucketStart is the start, in Unix seconds, of the bucket of width every
// (whole seconds) that holds at: buckets are aligned to the Unix epoch, so
// 1d buckets start at midnight UTC and 7d ones on Thursdays.
func bucketStart(at time.Time, every time.Duration) int64 {
	s, w := at.Unix(), int64(every/time.Second)
	b := s - s%w
	if s%w < 0 {
		b -= w
	}
	return b
}

// groups are the distinct groups e counts under.
func (t *statsTally) groups(e events.Envelope) []string {
	var gs []string
	switch t.o.by {
	case "type":
		return []string{string(e.Type)}
	case "pool":
		if p := t.poolOf(e); p != "" {
			return []string{p}
		}
		return nil
	case "device":
		gs = e.Devices()
		if t.f.device != "" {
			gs = slices.DeleteFunc(gs, func(d string) bool { return d != t.f.device })
		}
	case "pod":
		gs = t.podsOf(e)
		if ps := t.f.pods; ps != nil {
			gs = slices.DeleteFunc(gs, func(g string) bool {
				ns, pod, ok := strings.Cut(g, "/")
				return !ok || !ps.names(ns, pod, "") && !ps.uidPods[g]
			})
		}
	}
	slices.Sort(gs)
	return slices.Compact(gs)
}

// poolOf is the pool e concerns: its own, or for a health change the pool
// its device is a member of.
func (t *statsTally) poolOf(e events.Envelope) string {
	if p := e.Pool(); p != "" {
		return p
	}
	if h, ok := e.Payload.(events.DeviceHealthChanged); ok {
		return t.state.Devices[h.Address].Pool
	}
	return ""
}

// holders are the live allocations that hold the device of a health
// change.
func (t *statsTally) holders(e events.Envelope) []uint64 {
	if h, ok := e.Payload.(events.DeviceHealthChanged); ok {
		return t.state.Holders[h.Address]
	}
	return nil
}

// podsOf are the pods of the allocations e belongs to.
func (t *statsTally) podsOf(e events.Envelope) []string {
	switch p := e.Payload.(type) {
	case events.DevicesAllocated:
		return []string{t.podOfAllocation(e.Seq)}
	case events.AllocationRecovered:
		return []string{t.podName(p.Namespace, p.Pod)}
	case events.AllocationBound:
		return []string{t.podName(p.Namespace, p.Pod)}
	case events.DevicesReleased:
		return []string{t.podNow(p.AllocationSeq)}
	case events.AllocationLeakSuspected:
		return []string{t.podNow(p.AllocationSeq)}
	case events.AllocationConflict:
		var pods []string
		for _, c := range p.Claims {
			switch {
			case c.Pod != "":
				pods = append(pods, t.podName(c.Namespace, c.Pod))
			case c.AllocationSeq != 0:
				pods = append(pods, t.podNow(c.AllocationSeq))
			}
		}
		return pods
	case events.DeviceHealthChanged:
		var pods []string
		for _, seq := range t.state.Holders[p.Address] {
			pods = append(pods, t.podNow(seq))
		}
		return pods
	}
	return nil
}

// podNow is the pod allocation seq is bound to before the event being
// counted, as the fold has it; before its first binding, the pod of that
// binding.
func (t *statsTally) podNow(seq uint64) string {
	if b := t.state.Allocations[seq].Binding; b != nil {
		return t.podName(b.Namespace, b.Pod)
	}
	return t.podOfAllocation(seq)
}

// podOfAllocation is the pod allocation seq was first bound to.
func (t *statsTally) podOfAllocation(seq uint64) string {
	if pod, ok := t.podOf[seq]; ok {
		return pod
	}
	return unboundGroup
}

// sortedRows are the rows by bucket, then group.
func (t *statsTally) sortedRows() []statsRow {
	keys := slices.SortedFunc(maps.Keys(t.rows), func(a, b statsKey) int {
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), strings.Compare(a.group, b.group))
	})
	rows := make([]statsRow, len(keys))
	for i, k := range keys {
		rows[i] = statsRow{k, *t.rows[k]}
	}
	return rows
}

// bucketName is a bucket's start in RFC 3339 UTC.
func bucketName(bucket int64) string {
	return time.Unix(bucket, 0).UTC().Format(time.RFC3339)
}

// writeStatsTable writes the rows as an aligned table with a TOTAL row.
func writeStatsTable(w io.Writer, o *statsOptions, rows []statsRow, total statsCounts) error {
	tw := columns(w)
	var head []string
	if o.every > 0 {
		head = append(head, "BUCKET")
	}
	head = append(head, strings.ToUpper(o.by), "EVENTS")
	if o.by != "type" {
		head = append(head, "ALLOCATIONS", "DEVICES", "RELEASES", "CONFLICTS", "UNHEALTHY")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	line := func(bucket, group string, c statsCounts) {
		var cells []string
		if o.every > 0 {
			cells = append(cells, bucket)
		}
		cells = append(cells, group, fmt.Sprint(c.events))
		if o.by != "type" {
			cells = append(cells, fmt.Sprint(c.allocations), fmt.Sprint(c.devices), fmt.Sprint(c.releases),
				fmt.Sprint(c.conflicts), fmt.Sprint(c.unhealthy))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, r := range rows {
		line(bucketName(r.bucket), r.group, r.statsCounts)
	}
	if o.every > 0 {
		line("TOTAL", "", total)
	} else {
		line("", "TOTAL", total)
	}
	return tw.Flush()
}

// statsJSON is the document of dump --stats --format json. Its field names
// are part of devledger's interface: every and bucket are there with
// --every only; the counts beyond events are left out under --by type.
// every is in nanoseconds, as every duration in devledger's JSON is
// (held_for, age, downtime).
type statsJSON struct {
	By    string          `json:"by"`
	Every time.Duration   `json:"every,omitempty"`
	Rows  []statsJSONRow  `json:"rows"`
	Total statsJSONCounts `json:"total"`
}

type statsJSONRow struct {
	Bucket string `json:"bucket,omitempty"`
	Group  string `json:"group"`
	statsJSONCounts
}

type statsJSONCounts struct {
	Events int `json:"events"`
	*statsJSONDetail
}

type statsJSONDetail struct {
	Allocations int `json:"allocations"`
	Devices     int `json:"devices"`
	Releases    int `json:"releases"`
	Conflicts   int `json:"conflicts"`
	Unhealthy   int `json:"unhealthy"`
}

func writeStatsJSON(w io.Writer, o *statsOptions, rows []statsRow, total statsCounts) error {
	counts := func(c statsCounts) statsJSONCounts {
		j := statsJSONCounts{Events: c.events}
		if o.by != "type" {
			j.statsJSONDetail = &statsJSONDetail{Allocations: c.allocations, Devices: c.devices,
				Releases: c.releases, Conflicts: c.conflicts, Unhealthy: c.unhealthy}
		}
		return j
	}
	doc := statsJSON{By: o.by, Rows: make([]statsJSONRow, len(rows)), Total: counts(total)}
	if o.every > 0 {
		doc.Every = o.every
	}
	for i, r := range rows {
		doc.Rows[i] = statsJSONRow{Group: r.group, statsJSONCounts: counts(r.statsCounts)}
		if o.every > 0 {
			doc.Rows[i].Bucket = bucketName(r.bucket)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
