package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
)

// podSelection selects the allocations bound to a pod or a namespace, for
// dump --pod and --namespace. The log records an allocation before the pod
// it went to (AllocationBound follows DevicesAllocated), so selecting takes
// two passes over the log: collect reads it once and keeps the sequence of
// every allocation bound to a matching pod, and match then picks that
// allocation's events in a second pass. Memory grows with the matching
// bindings, not with the log.
type podSelection struct {
	// pod and namespace are the names asked for; "" matches any. uid is
	// a pod UID asked for (a --pod of a UID's form), which a binding the
	// kubelet's checkpoint gave it matches (or a pod of that name);
	// uidPods are the pods (namespace/name) collect saw bound with it.
	pod, namespace, uid string
	uidPods             map[string]bool
	// seqs holds the allocations bound to a matching pod.
	seqs map[uint64]struct{}
	// held lists, per device, the spells a selected allocation held it
	// for a matching pod: from the allocation (or from its binding to the
	// pod, if another pod was bound to it before) to its release,
	// supersession or binding to another pod, or on. What happens to a
	// device in a spell (health, driver, moves, unplug, a config that
	// moves it) is part of the pod's story.
	held map[string][]spell
	// elsewhere holds the live allocations bound to a pod that does not
	// match now.
	elsewhere map[uint64]bool
	// lastSeq is the last event collect saw. A second pass through a live
	// daemon's admin socket stops there: events appended since could bind
	// allocations that collect never saw.
	lastSeq uint64
	// pods and namespaces are some of the pods (namespace/name) and
	// namespaces collect saw bound to an allocation or claiming a device,
	// for the error that lists them when none matched; named, whether one
	// matched (then they are no longer kept).
	pods, namespaces nameSample
	named            bool
	// damaged is set when collect read around damage: what it could not
	// read may name the pod.
	damaged bool
}

// newPodSelection parses the --pod and --namespace flags; pod may be
// NAMESPACE/NAME, or a pod UID. It returns nil when neither is given.
func newPodSelection(pod, namespace string) (*podSelection, error) {
	if pod == "" && namespace == "" {
		return nil, nil
	}
	if isPodUID(pod) {
		return &podSelection{pod: pod, namespace: namespace, uid: pod, uidPods: map[string]bool{}, seqs: map[uint64]struct{}{},
			held: map[string][]spell{}, elsewhere: map[uint64]bool{}}, nil
	}
	if ns, name, ok := strings.Cut(pod, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, usageErrf("--pod %q: want NAME or NAMESPACE/NAME", pod)
		}
		if namespace != "" && namespace != ns {
			return nil, usageErrf("--pod %q and --namespace %q name different namespaces", pod, namespace)
		}
		pod, namespace = name, ns
	}
	return &podSelection{pod: pod, namespace: namespace, seqs: map[uint64]struct{}{}, held: map[string][]spell{},
		elsewhere: map[uint64]bool{}}, nil
}

// isPodUID reports whether s has the form of a pod's UID: an RFC 4122
// UUID as the API server makes them (36 characters, lower-case hex and
// dashes), or a static pod's as the kubelet makes it (32 lower-case hex
// digits, a hash of its manifest). A pod may be named so as well; --pod
// takes it as either.
func isPodUID(s string) bool {
	hex := func(c rune) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
	switch len(s) {
	case 32:
		for _, c := range s {
			if !hex(c) {
				return false
			}
		}
		return true
	case 36:
		for i, c := range s {
			if dash := i == 8 || i == 13 || i == 18 || i == 23; dash != (c == '-') || !dash && !hex(c) {
				return false
			}
		}
		return true
	}
	return false
}

// maxSampledNames bounds a nameSample: a node runs many more pods over
// the life of its ledger than an error can usefully list.
const maxSampledNames = 1024

// nameSample keeps names for an error that lists some of them (as
// someNames does): every one up to maxSampledNames, and past that only
// the first few in sorted order, so that memory does not grow with the
// log.
type nameSample struct {
	names map[string]bool
	// over is set once more than maxSampledNames were added.
	over bool
}

func (s *nameSample) add(name string) {
	if s.names[name] {
		return
	}
	if s.names == nil {
		s.names = map[string]bool{}
	}
	s.names[name] = true
	switch {
	case !s.over && len(s.names) > maxSampledNames:
		s.over = true
		for _, n := range slices.Sorted(maps.Keys(s.names))[someNamesShown:] {
			delete(s.names, n)
		}
	case s.over && len(s.names) > someNamesShown:
		delete(s.names, slices.Max(slices.Collect(maps.Keys(s.names))))
	}
}

// list is someNames of the names added.
func (s *nameSample) list() string {
	names := slices.Sorted(maps.Keys(s.names))
	if s.over {
		return someNames(names) + fmt.Sprintf(" and over %d more", maxSampledNames-someNamesShown)
	}
	return someNames(names)
}

// spell is a stretch of the log, from one sequence to another, inclusive,
// that allocation alloc held a device.
type spell struct{ alloc, from, to uint64 }

// holding reports whether a selected allocation held addr at seq.
func (ps *podSelection) holding(addr string, seq uint64) bool {
	return slices.ContainsFunc(ps.held[addr], func(s spell) bool { return s.from <= seq && seq <= s.to })
}

// hold opens a spell of allocation alloc, selected, on its devices from
// sequence from, unless one is open.
func (ps *podSelection) hold(alloc, from uint64, ids []string) {
	for _, addr := range ids {
		if !slices.ContainsFunc(ps.held[addr], func(s spell) bool { return s.alloc == alloc && s.to == math.MaxUint64 }) {
			ps.held[addr] = append(ps.held[addr], spell{alloc: alloc, from: from, to: math.MaxUint64})
		}
	}
}

// end closes the spells of allocation seq, at the event that ends it.
func (ps *podSelection) end(seq, at uint64) {
	if !ps.selected(seq) {
		return
	}
	for addr, spells := range ps.held {
		for i := range spells {
			if spells[i].alloc == seq && spells[i].to > at {
				spells[i].to = at
			}
		}
		ps.held[addr] = spells
	}
}

// bound notes allocation alloc bound, at sequence at, to a pod that
// matches or not. A binding to a matching pod selects it and holds its
// devices: from the allocation on if no other pod was bound to it before,
// from the binding on if one was. A binding to another pod ends the hold.
func (ps *podSelection) bound(alloc, at uint64, ids []string, matches bool) {
	if !matches {
		ps.end(alloc, at)
		ps.elsewhere[alloc] = true
		return
	}
	from := alloc
	if ps.elsewhere[alloc] {
		from = at
	}
	delete(ps.elsewhere, alloc)
	ps.seqs[alloc] = struct{}{}
	ps.hold(alloc, from, ids)
}

// names reports whether a container of namespace/pod, whose pod has uid
// ("" when the ledger does not say), is one asked for.
func (ps *podSelection) names(namespace, pod, uid string) bool {
	return (ps.pod == "" || pod == ps.pod || ps.uid != "" && uid == ps.uid) && (ps.namespace == "" || namespace == ps.namespace)
}

// saw notes a pod collect met, and whether it is one asked for.
func (ps *podSelection) saw(namespace, pod, uid string) bool {
	named := ps.names(namespace, pod, uid)
	if named && ps.uid != "" && uid == ps.uid {
		ps.uidPods[namespace+"/"+pod] = true
	}
	ps.named = ps.named || named
	if ps.named {
		ps.pods, ps.namespaces = nameSample{}, nameSample{}
		return named
	}
	ps.pods.add(namespace + "/" + pod)
	ps.namespaces.add(namespace)
	return named
}

// unknown is the usage error for a --pod or --namespace no allocation or
// conflict of the ledger names (after collect); nil when one does, or when
// collect read around damage.
func (ps *podSelection) unknown() error {
	if ps.named || ps.damaged {
		return nil
	}
	flag := "--namespace " + ps.namespace
	switch {
	case ps.pod != "" && ps.namespace != "":
		flag = "--pod " + ps.namespace + "/" + ps.pod
	case ps.pod != "":
		flag = "--pod " + ps.pod
	default:
		return usageErrf("%s: no allocation or conflict names it; the ledger's namespaces: %s", flag, ps.namespaces.list())
	}
	return usageErrf("%s: no allocation or conflict names it; the ledger's pods: %s", flag, ps.pods.list())
}

// collect is the first pass: it remembers every allocation bound to a
// matching pod, those live at the state before the first event included.
// Damage it reads around (see readAround) is no error: it keeps the
// bindings read before it.
func (ps *podSelection) collect(prs *priorStates) error {
	prior := func(s events.State) {
		for seq, a := range s.Allocations {
			if b := a.Binding; b != nil {
				ps.bound(seq, seq, a.DeviceIDs, ps.saw(b.Namespace, b.Pod, b.UID))
			}
		}
	}
	err := prs.src.read(prs.around(prior, func(e events.Envelope) error {
		ps.lastSeq = e.Seq
		switch p := e.Payload.(type) {
		case events.AllocationBound:
			ps.bound(p.AllocationSeq, e.Seq, p.DeviceIDs, ps.saw(p.Namespace, p.Pod, p.UID))
		case events.AllocationRecovered:
			if ps.saw(p.Namespace, p.Pod, "") {
				ps.bound(e.Seq, e.Seq, p.DeviceIDs, true)
			}
		case events.AllocationConflict:
			for _, c := range p.Claims {
				if c.Pod != "" {
					ps.saw(c.Namespace, c.Pod, "")
				}
			}
		case events.DevicesReleased:
			ps.end(p.AllocationSeq, e.Seq)
			delete(ps.elsewhere, p.AllocationSeq)
		case events.DevicesAllocated:
			for _, seq := range p.Supersedes {
				ps.end(seq, e.Seq)
				delete(ps.elsewhere, seq)
			}
		}
		return nil
	}))
	if readAround(err) {
		ps.damaged = true
		return nil
	}
	return err
}

// selected reports whether allocation seq is one of the pod's.
func (ps *podSelection) selected(seq uint64) bool {
	_, ok := ps.seqs[seq]
	return ok
}

// match reports whether e is an event of a selected allocation: its
// allocation, binding or release, or a conflict naming it or the pod.
func (ps *podSelection) match(e events.Envelope) bool {
	switch p := e.Payload.(type) {
	case events.DevicesAllocated:
		return ps.selected(e.Seq) || slices.ContainsFunc(p.Supersedes, ps.selected)
	case events.AllocationBound:
		return ps.selected(p.AllocationSeq)
	case events.AllocationRecovered:
		return ps.selected(e.Seq)
	case events.DevicesReleased:
		return ps.selected(p.AllocationSeq)
	case events.AllocationLeakSuspected:
		return ps.selected(p.AllocationSeq)
	case events.AllocationConflict:
		return slices.ContainsFunc(p.Claims, ps.claimed)
	case events.DeviceHealthChanged, events.DeviceChanged, events.DeviceRemoved, events.DeviceDiscovered, events.PoolMembershipChanged:
		// What befell a device while the pod held it.
		return slices.ContainsFunc(e.Devices(), func(addr string) bool { return ps.holding(addr, e.Seq) })
	case events.ConfigApplied:
		// A config that moved one of its devices.
		return slices.ContainsFunc(p.Changes, func(c events.PoolChange) bool {
			return slices.ContainsFunc(slices.Concat(c.Joined, c.Left), func(addr string) bool { return ps.holding(addr, e.Seq) })
		})
	}
	return false
}

// claimed reports whether a conflict's claim is a selected allocation or a
// container of the pod.
func (ps *podSelection) claimed(c events.Claim) bool {
	if c.AllocationSeq != 0 && ps.selected(c.AllocationSeq) {
		return true
	}
	return c.Pod != "" && ps.names(c.Namespace, c.Pod, "")
}

// errPassDone ends the second pass at the first pass's last event.
var errPassDone = errors.New("second pass done")

// readSelected is the second pass: src's events up to the first pass's
// last one.
func (ps *podSelection) readSelected(src eventSource, fn func(events.Envelope) error) error {
	err := src.read(func(e events.Envelope) error {
		if e.Seq > ps.lastSeq {
			return errPassDone
		}
		return fn(e)
	})
	if errors.Is(err, errPassDone) {
		return nil
	}
	return err
}

// tell says in words what an event did, for the story of one device (about
// is its address) or of a pod's allocations (about is ""): "discovered
// (8086:1889, vfio-pci, NUMA 0)", "bound to telco/testpmd/dpdk",
// "released after 3h12m". Events it has no story for are described as the
// plain table describes them.
func tell(e events.Envelope, about string) string {
	switch p := e.Payload.(type) {
	case events.DeviceDiscovered:
		d := p.Device
		facts := []string{d.Vendor + ":" + d.Device, dash(d.Driver)}
		if d.NUMANode >= 0 {
			facts = append(facts, fmt.Sprintf("NUMA %d", d.NUMANode))
		}
		return fmt.Sprintf("%sdiscovered (%s)", subjectPrefix(d.Address, about), strings.Join(facts, ", "))
	case events.DeviceChanged:
		// What the change made of the facts an operator asks after: a
		// reason names the driver or an interface, and a newer PCI ID
		// database renames a device that stays at its address.
		d := p.Device
		var now []string
		for _, f := range []struct{ name, value string }{
			{"driver", dash(d.Driver)},
			{"interfaces", dash(strings.Join(d.Interfaces, ","))},
			{"vendor_name", strconv.Quote(d.VendorName)},
			{"device_name", strconv.Quote(d.DeviceName)},
		} {
			if slices.Contains(p.Changed, f.name) {
				now = append(now, f.name+" now "+f.value)
			}
		}
		s := subjectPrefix(d.Address, about) + "changed " + strings.Join(p.Changed, ", ")
		return withReason(s, " ", parenthesized(strings.Join(now, "; ")))
	case events.DeviceRemoved:
		return withReason(subjectPrefix(p.Address, about)+"removed", ": ", p.Reason)
	case events.DeviceHealthChanged:
		verdict := "unhealthy"
		if p.Healthy {
			// Only changes are recorded and a device starts healthy, so a
			// healthy verdict always ends an unhealthy spell.
			verdict = "healthy again"
		}
		return withReason(subjectPrefix(p.Address, about)+verdict, ": ", p.Reason)
	case events.PoolMembershipChanged:
		if about == "" {
			return membershipText(p)
		}
		switch {
		case slices.Contains(p.Added, about):
			return withReason("joined "+p.Pool, " ", parenthesized(p.Reason))
		case slices.Contains(p.Removed, about):
			return withReason("left "+p.Pool, " ", parenthesized(p.Reason))
		}
	case events.ConfigApplied:
		// In a story, what the config did: the changes, not the pools.
		changes := make([]string, len(p.Changes))
		for i, c := range p.Changes {
			changes[i] = poolChangeText(c)
		}
		return withReason(fmt.Sprintf("config %.12s applied", p.SHA256), ": ", strings.Join(changes, "; "))
	case events.DevicesAllocated:
		if about == "" {
			return fmt.Sprintf("#%d allocated %s (%s)", e.Seq, strings.Join(p.DeviceIDs, ","), p.Pool) + allocatedNotes(p)
		}
		if !slices.Contains(p.DeviceIDs, about) {
			// It supersedes an allocation that held about: the whole of
			// that allocation ends here.
			return fmt.Sprintf("released (superseded by allocation #%d, of %s)", e.Seq, strings.Join(p.DeviceIDs, ","))
		}
		others := slices.DeleteFunc(slices.Clone(p.DeviceIDs), func(id string) bool { return id == about })
		if len(others) > 0 {
			return fmt.Sprintf("allocated (#%d, with %s)", e.Seq, strings.Join(others, ",")) + allocatedNotes(p)
		}
		return fmt.Sprintf("allocated (#%d)", e.Seq) + allocatedNotes(p)
	case events.AllocationRecovered:
		if about == "" {
			return fmt.Sprintf("#%d recovered %s (%s) from the kubelet, bound to %s/%s/%s: %s", e.Seq, strings.Join(p.DeviceIDs, ","), p.Pool,
				p.Namespace, p.Pod, p.Container, p.Reason)
		}
		return fmt.Sprintf("recovered from the kubelet (#%d, %s/%s/%s): %s", e.Seq, p.Namespace, p.Pod, p.Container, p.Reason)
	case events.AllocationBound:
		to := "bound to " + podRef(p.Namespace, p.Pod, p.Container, p.UID)
		if about == "" {
			return fmt.Sprintf("#%d %s", p.AllocationSeq, to)
		}
		return to
	case events.DevicesReleased:
		s := "released after " + humanDuration(p.HeldFor)
		if about == "" {
			s = fmt.Sprintf("#%d %s", p.AllocationSeq, s)
		}
		return withReason(s, " ", parenthesized(p.Reason))
	case events.AllocationLeakSuspected:
		s := "leak suspected"
		if about == "" {
			s = fmt.Sprintf("#%d %s", p.AllocationSeq, s)
		}
		return withReason(s, ": ", cmp.Or(p.Reason, "unclaimed for "+humanDuration(p.Age)))
	case events.AllocationConflict:
		// Who claims the device matters more than the wording of why: it
		// comes first, so that truncation takes the reason.
		claims := make([]string, len(p.Claims))
		for i, c := range p.Claims {
			claims[i] = claimText(c)
		}
		s := "conflict"
		if about == "" {
			s += " on " + p.Device
		}
		switch len(claims) {
		case 0:
		case 1:
			s += " with " + claims[0]
		default:
			s += " between " + strings.Join(claims, " and ")
		}
		return withReason(s, ": ", p.Reason)
	}
	return describe(e)
}

// membershipText names the devices a pool took and let go, in a story
// about several devices: "intel.com/sriov_vfio took 0000:3b:02.1 (from
// intel.com/sriov_net); let go of 0000:3b:02.2 (reload: SIGHUP)".
func membershipText(p events.PoolMembershipChanged) string {
	list := func(addrs []string) string {
		if len(addrs) > 4 {
			return fmt.Sprintf("%s and %d more", strings.Join(addrs[:4], ", "), len(addrs)-4)
		}
		return strings.Join(addrs, ", ")
	}
	var parts []string
	if len(p.Added) > 0 {
		parts = append(parts, "took "+list(p.Added))
	}
	if len(p.Removed) > 0 {
		parts = append(parts, "let go of "+list(p.Removed))
	}
	return withReason(p.Pool+" "+strings.Join(parts, "; "), " ", parenthesized(p.Reason))
}

// subjectPrefix is "ADDR " in a story about several devices, "" in the
// story of that device.
func subjectPrefix(addr, about string) string {
	if addr == about {
		return ""
	}
	return addr + " "
}

// allocatedNotes is what an allocation's event says beyond its devices:
// the allocations it ended, the other pools' that still hold them, and
// the devices the pool listed unhealthy.
func allocatedNotes(p events.DevicesAllocated) string {
	var s string
	if len(p.Supersedes) > 0 {
		s += "; supersedes " + seqList(p.Supersedes)
	}
	if len(p.HeldElsewhere) > 0 {
		s += "; conflict: also held by " + seqList(p.HeldElsewhere) + " of another pool"
	}
	if len(p.Unhealthy) > 0 {
		s += "; listed unhealthy: " + strings.Join(p.Unhealthy, ",")
	}
	return s
}

func seqList(seqs []uint64) string {
	names := make([]string, len(seqs))
	for i, seq := range seqs {
		names[i] = fmt.Sprintf("#%d", seq)
	}
	return strings.Join(names, ", ")
}

func withReason(s, sep, reason string) string {
	if reason == "" {
		return s
	}
	return s + sep + reason
}

func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// claimText names a conflict's claim: its allocation, its container, or
// both.
func claimText(c events.Claim) string {
	var parts []string
	if c.AllocationSeq != 0 {
		parts = append(parts, fmt.Sprintf("#%d", c.AllocationSeq))
	}
	if c.Pod != "" {
		parts = append(parts, strings.TrimSuffix(c.Namespace+"/"+c.Pod+"/"+c.Container, "/"))
	}
	if len(parts) == 0 {
		return "?"
	}
	return strings.Join(parts, " ")
}

// humanDuration writes d the way people say it: 45s, 12m5s, 3h12m, 2d3h.
// Below the largest unit it keeps one smaller one and drops the rest.
func humanDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d <= 0 {
		return "0s"
	}
	const day = 24 * time.Hour
	pair := func(big, small time.Duration, bigUnit, smallUnit string) string {
		s := fmt.Sprintf("%d%s", d/big, bigUnit)
		if r := (d % big) / small; r > 0 {
			s += fmt.Sprintf("%d%s", r, smallUnit)
		}
		return s
	}
	switch {
	case d >= day:
		return pair(day, time.Hour, "d", "h")
	case d >= time.Hour:
		return pair(time.Hour, time.Minute, "h", "m")
	case d >= time.Minute:
		return pair(time.Minute, time.Second, "m", "s")
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
