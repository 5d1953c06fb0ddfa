package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/devledger/devledger/events"
)

// devicesBehind is the first pass of dump --iface and --pf: the devices
// behind a network interface (the function that has it and, when that is a
// PF, its VFs) or behind a PF (the PF and its VFs), as the ledger's device
// facts tell, whenever they told it: a VF renamed or rebound is still
// found (after retention, by the names it had at the cut and since). It
// returns a usage error naming what the ledger knows when nothing is
// behind it. Damage it reads around (see readAround) is no error: it
// selects what it read, and nothing rather than a usage error, as what it
// could not read may name the interface or the PF.
func devicesBehind(prs *priorStates, iface, pf string) (map[string]bool, error) {
	pfOf := map[string]string{}
	ifaces := map[string]map[string]bool{}
	note := func(d events.DeviceFacts) {
		if d.PF != "" {
			pfOf[d.Address] = d.PF
		}
		for _, name := range d.Interfaces {
			if ifaces[name] == nil {
				ifaces[name] = map[string]bool{}
			}
			ifaces[name][d.Address] = true
		}
	}
	prior := func(s events.State) {
		for _, addr := range slices.Sorted(maps.Keys(s.Devices)) {
			note(s.Devices[addr].Facts)
		}
	}
	err := prs.src.read(prs.around(prior, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.DeviceDiscovered:
			note(p.Device)
		case events.DeviceChanged:
			note(p.Device)
		}
		return nil
	}))
	damaged := readAround(err)
	if err != nil && !damaged {
		return nil, err
	}
	set, err := behindOf(pfOf, ifaces, iface, pf)
	if err != nil && damaged {
		return map[string]bool{}, nil
	}
	return set, err
}

// behindOf is the set devicesBehind selects, from the PF of each VF and
// the functions that had each interface.
func behindOf(pfOf map[string]string, ifaces map[string]map[string]bool, iface, pf string) (map[string]bool, error) {
	roots := map[string]bool{}
	if iface != "" {
		if len(ifaces[iface]) == 0 {
			return nil, usageErrf("--iface %s: no device the ledger knows had it; its interfaces: %s", iface, someNames(slices.Sorted(maps.Keys(ifaces))))
		}
		maps.Copy(roots, ifaces[iface])
	}
	if pf != "" {
		if iface != "" && !roots[pf] {
			return nil, usageErrf("--iface %s and --pf %s: the interface is not the PF's", iface, pf)
		}
		pfs := map[string]bool{}
		for _, p := range pfOf {
			pfs[p] = true
		}
		if !pfs[pf] {
			return nil, usageErrf("--pf %s: no VF the ledger knows names it as its PF; the PFs: %s", pf, someNames(slices.Sorted(maps.Keys(pfs))))
		}
		roots = map[string]bool{pf: true}
	}
	set := maps.Clone(roots)
	for addr, p := range pfOf {
		if roots[p] {
			set[addr] = true
		}
	}
	return set, nil
}

// someNamesShown is how many names someNames lists.
const someNamesShown = 8

// someNames lists names for an error message, the first eight of them.
func someNames(names []string) string {
	switch {
	case len(names) == 0:
		return "none"
	case len(names) > someNamesShown:
		return strings.Join(names[:someNamesShown], ", ") + fmt.Sprintf(" and %d more", len(names)-someNamesShown)
	}
	return strings.Join(names, ", ")
}

// holdings follows, from every event read (matched or not) and the state
// before the first (see priorStates), which live allocation holds each
// device and the container it is bound to, so that a story can say whom a
// health change befell. It keeps live allocations only.
type holdings struct {
	devices map[uint64][]string
	bound   map[uint64]boundPod
}

// boundPod is the container a live allocation is bound to, and its pod's
// UID where the ledger has it.
type boundPod struct{ namespace, pod, container, uid string }

// String names it as a binding does (podRef): with its pod's UID where
// the ledger has it.
func (b boundPod) String() string { return podRef(b.namespace, b.pod, b.container, b.uid) }

func newHoldings() *holdings {
	return &holdings{devices: map[uint64][]string{}, bound: map[uint64]boundPod{}}
}

// prior takes the live allocations of s, the state before the first event.
func (h *holdings) prior(s events.State) {
	for seq, a := range s.Allocations {
		h.devices[seq] = a.DeviceIDs
		if b := a.Binding; b != nil {
			h.bound[seq] = boundPod{b.Namespace, b.Pod, b.Container, b.UID}
		}
	}
}

func (h *holdings) note(e events.Envelope) {
	switch p := e.Payload.(type) {
	case events.DevicesAllocated:
		for _, seq := range p.Supersedes {
			h.end(seq)
		}
		h.devices[e.Seq] = p.DeviceIDs
	case events.AllocationRecovered:
		h.devices[e.Seq] = p.DeviceIDs
		h.bound[e.Seq] = boundPod{p.Namespace, p.Pod, p.Container, ""}
	case events.AllocationBound:
		if _, live := h.devices[p.AllocationSeq]; live {
			h.bound[p.AllocationSeq] = boundPod{p.Namespace, p.Pod, p.Container, p.UID}
		}
	case events.DevicesReleased:
		h.end(p.AllocationSeq)
	}
}

// superseded are the devices of the live allocations e, a
// DevicesAllocated, supersedes (before note takes e in).
func (h *holdings) superseded(e events.Envelope) []string {
	p, ok := e.Payload.(events.DevicesAllocated)
	if !ok {
		return nil
	}
	var ids []string
	for _, seq := range p.Supersedes {
		ids = append(ids, h.devices[seq]...)
	}
	return ids
}

func (h *holdings) end(seq uint64) {
	delete(h.devices, seq)
	delete(h.bound, seq)
}

// boundTo says what the live allocations bound to a container of a pod
// that names matches hold, one line each in sequence order: "#12 held
// 0000:3b:02.1 for telco/cnf-0/main".
func (h *holdings) boundTo(names func(namespace, pod, uid string) bool) []string {
	var lines []string
	for _, seq := range slices.Sorted(maps.Keys(h.bound)) {
		b := h.bound[seq]
		if names(b.namespace, b.pod, b.uid) {
			lines = append(lines, fmt.Sprintf("#%d held %s for %s", seq, strings.Join(h.devices[seq], ","), b))
		}
	}
	return lines
}

// of names what holds addr: "telco/cnf-0/main", "#12 (unbound)", or ""
// for nothing.
func (h *holdings) of(addr string) string {
	var names []string
	for _, seq := range slices.Sorted(maps.Keys(h.devices)) {
		if !slices.Contains(h.devices[seq], addr) {
			continue
		}
		if b, ok := h.bound[seq]; ok {
			names = append(names, b.String())
		} else {
			names = append(names, fmt.Sprintf("#%d (unbound)", seq))
		}
	}
	return strings.Join(names, " and ")
}
