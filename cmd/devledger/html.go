package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
)

// dump --format html folds the history into a picture: one lane per device,
// its allocations as bars, its health as a band under them, its pool
// changes as ticks, and the daemon's and the kubelet's restarts as lines
// across every lane; above them a summary per pool. The fold reads the log
// once (twice for --pod) and keeps a bounded amount per device, whatever
// the length of the log: the lists below merge their closest neighbours
// when full, and the page draws at most pageMaxLanes lanes.
const (
	pageMaxLanes   = 500
	laneMaxBars    = 40
	laneMaxBands   = 32
	laneMaxTicks   = 16
	laneMaxOpen    = 8
	pageMaxMarkers = 200
)

// Health of a device in the fold, as its band shows it.
const (
	healthUnknown   = "" // no event about the device yet
	healthHealthy   = "healthy"
	healthUnhealthy = "unhealthy"
	healthGone      = "gone"
)

// span is one thing drawn on a lane or across the timeline: an allocation's
// bar, a spell of bad health, a tick, a marker. A span that stands for
// several (merged to bound the page) has n > 1.
type span struct {
	from, to time.Time
	// class says what it is: the CSS class it is drawn with.
	class string
	// label is the text on a bar (ns/pod, "#46 unbound"); merged spans keep
	// it only when all agree.
	label string
	// title is the hover text of a single span.
	title string
	n     int
	// total is the summed length of the spans merged into this one.
	total time.Duration
	// open is true for a span still going on at the end of the window.
	open bool
}

// spanList keeps at most max spans in time order. Adding one more merges
// the two neighbours whose union is shortest, so the list covers the same
// time with less detail: nothing vanishes from the picture.
type spanList struct {
	spans  []span
	max    int
	merged int
}

func (l *spanList) add(s span) {
	if s.n == 0 {
		s.n = 1
		s.total = s.to.Sub(s.from)
	}
	i, _ := slices.BinarySearchFunc(l.spans, s.from, func(e span, t time.Time) int { return e.from.Compare(t) })
	for i < len(l.spans) && !l.spans[i].from.After(s.from) {
		i++ // after the spans that start at the same time: keep the order of arrival
	}
	l.spans = slices.Insert(l.spans, i, s)
	if len(l.spans) <= l.max {
		return
	}
	best, bestLen := 0, time.Duration(-1)
	for i := 0; i+1 < len(l.spans); i++ {
		a, b := l.spans[i], l.spans[i+1]
		if d := later(a.to, b.to).Sub(a.from); bestLen < 0 || d < bestLen {
			best, bestLen = i, d
		}
	}
	a, b := l.spans[best], l.spans[best+1]
	m := span{from: a.from, to: later(a.to, b.to), class: a.class, n: a.n + b.n, total: a.total + b.total}
	if a.label == b.label {
		m.label = a.label
	}
	l.spans[best] = m
	l.spans = slices.Delete(l.spans, best+1, best+2)
	l.merged++
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// recoveredNote ends the label of an allocation recovered from the
// kubelet.
const recoveredNote = " (recovered)"

// laneAlloc is a live allocation on a device.
type laneAlloc struct {
	seq   uint64
	pool  string
	from  time.Time
	label string // ns/pod/container once bound
	lost  bool
	// leak is the reason a leak was suspected, "" for none.
	leak string
}

// laneStat is a device's time in a pool within the window.
type laneStat struct {
	pool                    string
	member, busy, unhealthy time.Duration
}

// historyLane is what the page keeps of one device.
type historyLane struct {
	addr                 string
	id, driver, name     string
	numa                 int
	pool                 string   // the pool it is a member of now
	pools                []string // every pool it was in or allocated from
	health, healthReason string
	healthSince          time.Time
	seen                 time.Time // its first event
	mark                 time.Time // its time is accounted up to here
	open                 []laneAlloc
	droppedOpen          int
	bars, bands, ticks   spanList
	stats                []laneStat
	busy                 time.Duration
	allocations          int
	labels               []string // the distinct pods seen, for the page's search box
	// selected is set when an allocation or a conflict --pod selects
	// touched the device: under --pod only those lanes are drawn.
	selected bool
}

func (l *historyLane) stat(pool string) *laneStat {
	for i := range l.stats {
		if l.stats[i].pool == pool {
			return &l.stats[i]
		}
	}
	l.stats = append(l.stats, laneStat{pool: pool})
	return &l.stats[len(l.stats)-1]
}

func (l *historyLane) joined(pool string) {
	if pool != "" && !slices.Contains(l.pools, pool) {
		l.pools = append(l.pools, pool)
	}
}

// poolCounts counts a pool's allocation events within the window.
type poolCounts struct {
	allocations, releases, conflicts, leaks int
}

// historyFold folds events into lanes, markers and counts. Events before
// --since are folded for the state they leave (a device unhealthy since
// yesterday, an allocation still held) but draw nothing; the first event
// after --until ends the fold, as replay --until-time does.
type historyFold struct {
	f *eventFilter
	// first and last are the times of the first and last event folded,
	// never going back: a span never ends before it starts, even when the
	// node's clock stepped back.
	first, last       time.Time
	firstSeq, lastSeq uint64
	// inWindow counts the events within the window; windowFirstSeq is the
	// first of them.
	inWindow       int
	windowFirstSeq uint64
	// priorSeq is the sequence of the state the fold started from: the
	// snapshot retention kept when the ledger's first event is past #1,
	// 0 when it starts from nothing.
	priorSeq uint64
	// stopped is set by the first event after --until, next.
	stopped bool
	next    events.Envelope
	// damage is the damage the read met, when it read around some: the
	// fold holds what was read.
	damage error
	node   string
	// daemon is the fold's view of the daemon runs, from the state before
	// the first event on: whether a start follows a node reboot is the
	// fold's rule (DaemonState.RebootedBefore).
	daemon  events.DaemonState
	lanes   map[string]*historyLane
	markers spanList
	counts  map[string]*poolCounts
	// untimed holds the markers of the events with no time that open the
	// log (the EventLost a salvage puts in place of each event lost from
	// its start) until the first event with a time says where they go;
	// untimedFirstSeq and untimedCount are the first of them and how many.
	untimed         spanList
	untimedFirstSeq uint64
	untimedCount    int
}

func newHistoryFold(f *eventFilter) *historyFold {
	return &historyFold{
		f:       f,
		lanes:   map[string]*historyLane{},
		markers: spanList{max: pageMaxMarkers},
		counts:  map[string]*poolCounts{},
		untimed: spanList{max: pageMaxMarkers},
	}
}

// errUntilReached ends the fold's read at the first event after --until.
var errUntilReached = errors.New("until reached")

// within reports whether t is inside the window's start (the end is where
// the fold stops).
func (h *historyFold) within(t time.Time) bool {
	return h.f.since.IsZero() || !t.Before(h.f.since)
}

// overlap is how much of from..to lies after the window's start.
func (h *historyFold) overlap(from, to time.Time) time.Duration {
	if !h.f.since.IsZero() {
		from = later(from, h.f.since)
	}
	return max(to.Sub(from), 0)
}

// lane returns the device's lane, made on first sight; nil for a device
// --device, --iface or --pf leaves out.
func (h *historyFold) lane(addr string, t time.Time) *historyLane {
	if h.f.device != "" && addr != h.f.device || h.f.behind != nil && !h.f.behind[addr] {
		return nil
	}
	l := h.lanes[addr]
	if l == nil {
		l = &historyLane{addr: addr, numa: -1, seen: t, mark: t,
			bars: spanList{max: laneMaxBars}, bands: spanList{max: laneMaxBands}, ticks: spanList{max: laneMaxTicks}}
		h.lanes[addr] = l
	}
	return l
}

// advance accounts the lane's time up to t to the pool it is in and to the
// allocation it is held by, before anything about it changes.
func (h *historyFold) advance(l *historyLane, t time.Time) {
	d := h.overlap(l.mark, t)
	l.mark = t
	if d == 0 {
		return
	}
	if l.pool != "" {
		st := l.stat(l.pool)
		st.member += d
		if l.health == healthUnhealthy || l.health == healthGone {
			st.unhealthy += d
		}
		// Busy is a share of the time in the pool the device is in,
		// whichever pool's allocation holds it (it may have moved).
		if len(l.open) > 0 {
			st.busy += d
		}
	}
	if len(l.open) > 0 {
		l.busy += d
	}
}

// addSpan adds s to list unless it ended before the window.
func (h *historyFold) addSpan(list *spanList, s span) {
	if !h.f.since.IsZero() && s.to.Before(h.f.since) {
		return
	}
	list.add(s)
}

func (h *historyFold) count(pool string) *poolCounts {
	c := h.counts[pool]
	if c == nil {
		c = &poolCounts{}
		h.counts[pool] = c
	}
	return c
}

// allocationShown reports whether an allocation of pool on devices belongs
// on the page under --pool, --device, --iface, --pf and --pod.
func (h *historyFold) allocationShown(seq uint64, pool string, devices []string) bool {
	switch {
	case h.f.pool != "" && pool != h.f.pool:
		return false
	case h.f.device != "" && !slices.Contains(devices, h.f.device):
		return false
	case h.f.behind != nil && !slices.ContainsFunc(devices, func(addr string) bool { return h.f.behind[addr] }):
		return false
	}
	return h.f.pods == nil || h.f.pods.selected(seq)
}

// setHealth moves a lane to a new health, closing the spell it ends.
func (h *historyFold) setHealth(l *historyLane, t time.Time, health, reason string) {
	if health == l.health {
		l.healthReason = reason
		return
	}
	h.advance(l, t)
	if l.health == healthUnhealthy || l.health == healthGone {
		h.addSpan(&l.bands, span{from: l.healthSince, to: t, class: l.health, title: l.healthReason})
	}
	l.health, l.healthReason, l.healthSince = health, reason, t
}

// marker records a line across every lane.
func (h *historyFold) marker(t time.Time, class, title string) {
	h.addSpan(&h.markers, span{from: t, to: t, class: class, title: title})
}

// tick records a mark on one lane.
func (h *historyFold) tick(l *historyLane, t time.Time, class, title string) {
	h.addSpan(&l.ticks, span{from: t, to: t, class: class, title: title})
}

// bar records an allocation that ended at t.
func (h *historyFold) bar(l *historyLane, a laneAlloc, t time.Time) {
	h.addSpan(&l.bars, barSpan(a, t, false))
}

// barSpan is the bar of allocation a until t; open says it goes on.
func barSpan(a laneAlloc, t time.Time, open bool) span {
	s := span{from: a.from, to: t, class: "bar", label: a.label, title: allocationTitle(a), open: open}
	if a.label == "" {
		s.class = "bar unbound"
		s.label = fmt.Sprintf("#%d unbound", a.seq)
	}
	if a.leak != "" {
		s.class += " leak"
	}
	if a.lost {
		s.class += " lost"
	}
	return s
}

func allocationTitle(a laneAlloc) string {
	who := a.label
	if who == "" {
		who = "no pod claimed it"
	}
	s := fmt.Sprintf("#%d %s\n%s", a.seq, a.pool, who)
	if a.leak != "" {
		s += "\nleak suspected: " + a.leak
	}
	if a.lost {
		s += "\nthe device was removed while held"
	}
	return s
}

// opensUntimed reports whether e is one of the events with no time that
// open a salvaged log: an EventLost before any event with a time. Drawn
// at year 1, it would squeeze the whole history into the page's right
// edge; it is drawn where the history it stands before starts.
func (h *historyFold) opensUntimed(e events.Envelope) bool {
	_, lost := e.Payload.(events.EventLost)
	return lost && e.Time.IsZero() && h.firstSeq == 0
}

// placeUntimed draws the events with no time that opened the log at t,
// the time of the first event with one.
func (h *historyFold) placeUntimed(t time.Time) {
	if h.untimedCount == 0 {
		return
	}
	h.firstSeq = h.untimedFirstSeq
	if h.within(t) {
		h.windowFirstSeq, h.inWindow = h.untimedFirstSeq, h.untimedCount
	}
	for _, s := range h.untimed.spans {
		s.from, s.to = t, t
		h.addSpan(&h.markers, s)
	}
	h.markers.merged += h.untimed.merged
}

// event folds one event.
func (h *historyFold) event(e events.Envelope) error {
	if h.opensUntimed(e) {
		if h.untimedCount == 0 {
			h.untimedFirstSeq = e.Seq
		}
		h.untimedCount++
		h.untimed.add(span{class: "ledger", title: describe(e)})
		return nil
	}
	t := later(e.Time, h.last)
	if !h.f.until.IsZero() && t.After(h.f.until) {
		h.stopped, h.next = true, e
		return errUntilReached
	}
	if h.firstSeq == 0 {
		h.first, h.firstSeq = t, e.Seq
		h.placeUntimed(t)
	}
	h.last, h.lastSeq = t, e.Seq
	if h.within(t) {
		if h.inWindow == 0 {
			h.windowFirstSeq = e.Seq
		}
		h.inWindow++
	}
	switch p := e.Payload.(type) {
	case events.DaemonStarted:
		if p.Node != "" {
			h.node = p.Node
		}
		what := "daemon started"
		if h.daemon.RebootedBefore(p) {
			what = "node rebooted; daemon started"
		}
		h.daemon.KernelBootID = p.KernelBootID
		h.marker(t, "daemon", fmt.Sprintf("%s: %s, pid %d", what, p.Version, p.PID))
	case events.DaemonStopped:
		how := "unclean"
		if p.Clean {
			how = "clean"
		}
		h.marker(t, "daemon", fmt.Sprintf("daemon stopped (%s): %s", how, p.Reason))
	case events.KubeletRestarted:
		h.marker(t, "kubelet", "kubelet restarted: "+describe(e))
	case events.KubeletStopped:
		h.marker(t, "kubelet", "kubelet stopped: "+p.Reason)
	case events.DaemonCrashed:
		h.marker(t, "daemon", describe(e))
	case events.ConfigApplied:
		h.marker(t, "config", describe(e))
	case events.ConfigRejected:
		h.marker(t, "config", "config rejected: "+describe(e))
	case events.EventsDropped:
		h.marker(t, "ledger", "retention dropped "+describe(e))
	case events.EventLost, events.LedgerDamaged, events.DamageAcknowledged:
		h.marker(t, "ledger", describe(e))
	case events.AttributionChanged:
		what := "pods attributed again"
		if !p.Available {
			what = "pods not attributed (PodResources unavailable)"
		}
		h.marker(t, "podres", withReason(what, ": ", p.Reason))
	case events.DeviceDiscovered:
		if l := h.lane(p.Device.Address, t); l != nil {
			h.learn(l, p.Device)
			h.setHealth(l, t, healthHealthy, "")
		}
	case events.DeviceChanged:
		if l := h.lane(p.Device.Address, t); l != nil {
			h.learn(l, p.Device)
			if l.health == healthGone || l.health == healthUnknown {
				h.setHealth(l, t, healthHealthy, "")
			}
		}
	case events.DeviceRemoved:
		if l := h.lane(p.Address, t); l != nil {
			h.setHealth(l, t, healthGone, withReason("removed", ": ", p.Reason))
			for i := range l.open {
				l.open[i].lost = true
			}
		}
	case events.DeviceHealthChanged:
		if l := h.lane(p.Address, t); l != nil {
			health := healthHealthy
			if !p.Healthy {
				health = healthUnhealthy
			}
			h.setHealth(l, t, health, p.Reason)
		}
	case events.PoolMembershipChanged:
		h.membership(t, p)
	case events.DevicesAllocated:
		// The allocations it supersedes end here, on every lane of theirs,
		// whether or not the filters show the new one: it may be another
		// pod's, or hold only some of their devices (the whole allocation
		// is freed, as events.Apply frees it).
		// Each counts as a release where the page draws it.
		if ended := h.endSuperseded(t, p.Supersedes); h.within(t) && ended > 0 {
			h.count(p.Pool).releases += ended
		}
		if !h.allocationShown(e.Seq, p.Pool, p.DeviceIDs) {
			break
		}
		if h.within(t) {
			h.count(p.Pool).allocations++
			h.count(p.Pool).conflicts += len(p.HeldElsewhere)
		}
		for _, addr := range p.DeviceIDs {
			if l := h.lane(addr, t); l != nil {
				h.open(l, t, laneAlloc{seq: e.Seq, pool: p.Pool, from: t})
			}
		}
	case events.AllocationRecovered:
		if !h.allocationShown(e.Seq, p.Pool, p.DeviceIDs) {
			break
		}
		for _, addr := range p.DeviceIDs {
			if l := h.lane(addr, t); l != nil {
				h.open(l, t, laneAlloc{seq: e.Seq, pool: p.Pool, from: t, label: p.Namespace + "/" + p.Pod + "/" + p.Container + recoveredNote})
			}
		}
	case events.AllocationBound:
		if !h.allocationShown(p.AllocationSeq, p.Pool, p.DeviceIDs) {
			break
		}
		label := p.Namespace + "/" + p.Pod + "/" + p.Container
		for _, addr := range p.DeviceIDs {
			l := h.lane(addr, t)
			if l == nil {
				continue
			}
			if i := openIndex(l, p.AllocationSeq); i >= 0 {
				if a := l.open[i]; a.label != "" && a.label != label && !strings.HasSuffix(a.label, recoveredNote) {
					// Bound again, to another pod: the bar so far is the
					// pod's it was bound to, the rest is this one's. A
					// binding after a recovery says whose it was all along.
					h.advance(l, t)
					h.bar(l, a, t)
					l.open[i].from = t
				}
				l.open[i].label = label
			} else {
				// Its allocation is older than the log (retention).
				h.open(l, t, laneAlloc{seq: p.AllocationSeq, pool: p.Pool, from: t, label: label})
			}
			if pod := p.Namespace + "/" + p.Pod; !slices.Contains(l.labels, pod) && len(l.labels) < laneMaxBars {
				l.labels = append(l.labels, pod)
			}
		}
	case events.DevicesReleased:
		if !h.allocationShown(p.AllocationSeq, p.Pool, p.DeviceIDs) {
			break
		}
		if h.within(t) {
			h.count(p.Pool).releases++
		}
		for _, addr := range p.DeviceIDs {
			l := h.lane(addr, t)
			if l == nil {
				continue
			}
			h.advance(l, t)
			l.selected = true
			if i := openIndex(l, p.AllocationSeq); i >= 0 {
				a := l.open[i]
				l.open = slices.Delete(l.open, i, i+1)
				h.bar(l, a, t)
			} else {
				// Allocated before the log begins: HeldFor says when.
				h.bar(l, laneAlloc{seq: p.AllocationSeq, pool: p.Pool, from: earlier(t, t.Add(-p.HeldFor))}, t)
			}
		}
	case events.AllocationLeakSuspected:
		if !h.allocationShown(p.AllocationSeq, p.Pool, p.DeviceIDs) {
			break
		}
		if h.within(t) {
			h.count(p.Pool).leaks++
		}
		reason := cmp.Or(p.Reason, "unclaimed for "+humanDuration(p.Age))
		for _, addr := range p.DeviceIDs {
			if l := h.lane(addr, t); l != nil {
				if i := openIndex(l, p.AllocationSeq); i >= 0 {
					l.open[i].leak = reason
				}
			}
		}
	case events.AllocationConflict:
		l := h.lane(p.Device, t)
		if l == nil || h.f.pool != "" && p.Pool != h.f.pool || h.f.pods != nil && !h.f.pods.match(e) {
			break
		}
		if h.within(t) {
			h.count(p.Pool).conflicts++
		}
		l.selected = true
		h.tick(l, t, "conflict", tell(e, p.Device))
	}
	return nil
}

// prior takes s, the state before the first event (retention dropped
// what came before), at t, that event's time: each device's facts, pool
// and health, and the allocations live then, from when they were made.
// When a health spell open then began is no longer in the ledger, so it
// is drawn from the snapshot's time, by which it had begun.
func (h *historyFold) prior(s events.State, t time.Time) {
	h.daemon, h.priorSeq = s.Daemon, s.Seq
	for _, addr := range slices.Sorted(maps.Keys(s.Devices)) {
		d := s.Devices[addr]
		l := h.lane(addr, t)
		if l == nil {
			continue
		}
		h.learn(l, d.Facts)
		if d.Pool != "" {
			l.pool = d.Pool
			l.joined(d.Pool)
		}
		l.health, l.healthReason, l.healthSince = healthHealthy, "", earlier(s.Time, t)
		switch {
		case !d.Present:
			l.health, l.healthReason = healthGone, cmp.Or(d.HealthReason, "removed")
		case !d.Healthy:
			l.health, l.healthReason = healthUnhealthy, d.HealthReason
		}
	}
	for _, seq := range slices.Sorted(maps.Keys(s.Allocations)) {
		a := s.Allocations[seq]
		if !h.allocationShown(seq, a.Pool, a.DeviceIDs) {
			continue
		}
		la := laneAlloc{seq: seq, pool: a.Pool, from: earlier(a.At, t)}
		// As the events draw it: a recovery's binding (made with it) says
		// so, and only a binding after it names the pod to the search box.
		recovered := a.Recovered && a.Binding != nil && a.Binding.At.Equal(a.At)
		if b := a.Binding; b != nil {
			la.label = b.Namespace + "/" + b.Pod + "/" + b.Container
			if recovered {
				la.label += recoveredNote
			}
		}
		if a.LeakSuspected {
			la.leak = "before the first event the ledger keeps"
		}
		for _, addr := range a.DeviceIDs {
			l := h.lane(addr, t)
			if l == nil || len(l.open) >= laneMaxOpen {
				continue
			}
			l.joined(a.Pool)
			l.selected = true
			on := la
			// Lost on the lane of the device that was removed while held.
			on.lost = a.Lost && !s.Devices[addr].Present
			l.open = append(l.open, on)
			if pod := a.Binding; pod != nil && !recovered && !slices.Contains(l.labels, pod.Namespace+"/"+pod.Pod) && len(l.labels) < laneMaxBars {
				l.labels = append(l.labels, pod.Namespace+"/"+pod.Pod)
			}
		}
	}
}

// learn keeps a device's facts.
func (h *historyFold) learn(l *historyLane, d events.DeviceFacts) {
	l.id = idOf(d)
	l.driver = d.Driver
	l.numa = d.NUMANode
	l.name = d.VendorName
	if d.DeviceName != "" {
		l.name = d.VendorName + " " + d.DeviceName
	}
}

func (h *historyFold) membership(t time.Time, p events.PoolMembershipChanged) {
	for _, addr := range p.Removed {
		l := h.lane(addr, t)
		if l == nil {
			continue
		}
		h.advance(l, t)
		if l.pool == p.Pool {
			l.pool = ""
		}
		h.tick(l, t, "left", withReason("left "+p.Pool, " ", parenthesized(p.Reason)))
	}
	for _, addr := range p.Added {
		l := h.lane(addr, t)
		if l == nil {
			continue
		}
		h.advance(l, t)
		l.pool = p.Pool
		l.joined(p.Pool)
		if l.health == healthUnknown {
			h.setHealth(l, t, healthHealthy, "")
		}
		h.tick(l, t, "joined", withReason("joined "+p.Pool, " ", parenthesized(p.Reason)))
	}
}

// endSuperseded ends the allocations seqs on every lane that draws them,
// at t, and returns how many of them it found drawn.
func (h *historyFold) endSuperseded(t time.Time, seqs []uint64) int {
	ended := 0
	for _, seq := range seqs {
		found := false
		for _, l := range h.lanes {
			if i := openIndex(l, seq); i >= 0 {
				h.advance(l, t)
				a := l.open[i]
				l.open = slices.Delete(l.open, i, i+1)
				h.bar(l, a, t)
				found = true
			}
		}
		if found {
			ended++
		}
	}
	return ended
}

// open starts an allocation on a lane.
func (h *historyFold) open(l *historyLane, t time.Time, a laneAlloc) {
	h.advance(l, t)
	l.joined(a.pool)
	l.selected = true
	if h.within(t) {
		l.allocations++
	}
	if len(l.open) >= laneMaxOpen {
		l.droppedOpen++
		return
	}
	l.open = append(l.open, a)
}

func openIndex(l *historyLane, seq uint64) int {
	return slices.IndexFunc(l.open, func(a laneAlloc) bool { return a.seq == seq })
}

// empty reports whether the window holds nothing to draw: no event folded
// (the ledger has none, or none at or before --until), or no event in the
// window and no time (it starts after the last event).
func (h *historyFold) empty() bool {
	start, end := h.window()
	return h.firstSeq == 0 || h.inWindow == 0 && !end.After(start)
}

// window is the time the page draws: from --since (or the first event)
// to --until when the log goes on after it, else to the last event.
func (h *historyFold) window() (start, end time.Time) {
	start, end = h.first, h.last
	if !h.f.since.IsZero() && h.f.since.After(start) {
		start = h.f.since
	}
	if h.stopped {
		end = givenAt(h.f.until)
	}
	return start, later(start, end)
}

// finish closes what is still going on at the window's end.
func (h *historyFold) finish() {
	_, end := h.window()
	for _, l := range h.lanes {
		h.advance(l, end)
		if l.health == healthUnhealthy || l.health == healthGone {
			h.addSpan(&l.bands, span{from: l.healthSince, to: end, class: l.health, title: l.healthReason, open: true})
		}
		for _, a := range l.open {
			// Beyond the list's bound: a handful at most (laneMaxOpen).
			l.bars.spans = append(l.bars.spans, barSpan(a, end, true))
		}
	}
}

// shownLanes returns the lanes the filters select, and how many there
// are before the page's cap: the busiest pageMaxLanes, ordered by pool and
// address.
func (h *historyFold) shownLanes() (shown []*historyLane, total int) {
	if h.empty() {
		return nil, 0
	}
	start, _ := h.window()
	var all []*historyLane
	for _, l := range h.lanes {
		switch {
		case h.f.pool != "" && !slices.Contains(l.pools, h.f.pool):
			continue
		case h.f.pods != nil && !l.selected:
			continue
		case l.health == healthGone && l.healthSince.Before(start) && len(l.bars.spans) == 0:
			continue // gone before the window and nothing to draw
		}
		all = append(all, l)
	}
	total = len(all)
	if total > pageMaxLanes {
		slices.SortFunc(all, func(a, b *historyLane) int {
			return cmp.Or(cmp.Compare(b.busy, a.busy), cmp.Compare(b.allocations, a.allocations), cmp.Compare(a.addr, b.addr))
		})
		all = all[:pageMaxLanes]
	}
	slices.SortFunc(all, func(a, b *historyLane) int {
		return cmp.Or(cmp.Compare(laneGroup(a), laneGroup(b)), cmp.Compare(a.addr, b.addr))
	})
	return all, total
}

// laneGroup is the pool a lane is drawn under: the one it is in, else the
// last it was in, else none ("~" sorts after every resource name).
func laneGroup(l *historyLane) string {
	if l.pool != "" {
		return l.pool
	}
	if n := len(l.pools); n > 0 {
		return l.pools[n-1]
	}
	return "~"
}

// poolSummary is a row of the page's table.
type poolSummary struct {
	pool                    string
	devices                 int
	member, busy, unhealthy time.Duration
	poolCounts
}

// summaries sums the lanes' time per pool, over every lane the filters
// select (not only the ones drawn).
func (h *historyFold) summaries() []poolSummary {
	if h.empty() {
		return nil
	}
	byPool := map[string]*poolSummary{}
	get := func(pool string) *poolSummary {
		s := byPool[pool]
		if s == nil {
			s = &poolSummary{pool: pool}
			byPool[pool] = s
		}
		return s
	}
	for pool, c := range h.counts {
		get(pool).poolCounts = *c
	}
	for _, l := range h.lanes {
		if h.f.pods != nil && !l.selected {
			continue
		}
		for _, st := range l.stats {
			s := get(st.pool)
			s.member += st.member
			s.busy += st.busy
			s.unhealthy += st.unhealthy
			if st.member > 0 || l.pool == st.pool {
				s.devices++
			}
		}
	}
	out := make([]poolSummary, 0, len(byPool))
	for _, s := range byPool {
		if h.f.pool == "" || s.pool == h.f.pool {
			out = append(out, *s)
		}
	}
	slices.SortFunc(out, func(a, b poolSummary) int { return cmp.Compare(a.pool, b.pool) })
	return out
}

// writeHistoryPage folds the events read gives, from the state before the
// first of them (see priorStates), and writes the page. Damage the read
// meets (see readAround) ends the fold: the page draws what was read and
// says so, and the damage is returned after it is written. A --pool or
// --device the ledger never names is a usage error, and no page, as in
// the table.
func writeHistoryPage(w io.Writer, prs *priorStates, read func(func(events.Envelope) error) error, f *eventFilter) error {
	h := newHistoryFold(f)
	var prior *events.State
	var known knownNames
	err := read(prs.around(func(s events.State) {
		prior = &s
		known.prior(s, f)
	}, func(e events.Envelope) error {
		if !known.named(f) {
			known.note(e, f)
		}
		if h.stopped {
			// Past --until: read on, folding nothing, to learn whether
			// the ledger names the --pool or --device, and to meet any
			// damage the table would name.
			return nil
		}
		if prior != nil && !h.opensUntimed(e) {
			// The state before the log, at the first event with a time.
			if f.until.IsZero() || !e.Time.After(f.until) {
				h.prior(*prior, e.Time)
			}
			prior = nil
		}
		if err := h.event(e); !errors.Is(err, errUntilReached) {
			return err
		}
		return nil
	}))
	switch {
	case err == nil:
	case readAround(err):
		h.damage = err
	default:
		return err
	}
	if h.damage == nil {
		if err := known.unknown(f); err != nil {
			return err
		}
	}
	h.finish()
	if err := writePage(w, h); err != nil {
		return err
	}
	return h.damage
}
