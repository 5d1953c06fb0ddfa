package reconciler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
)

// key names one device of one resource.
type key struct{ resource, device string }

// holderRef is a container the kubelet says holds a device.
type holderRef struct{ namespace, pod, container string }

func (h holderRef) String() string { return h.namespace + "/" + h.pod + "/" + h.container }

// refOf is the container an allocation is bound to.
func refOf(b *events.Binding) holderRef { return holderRef{b.Namespace, b.Pod, b.Container} }

// foldInput is one PodResources answer and the ledger's view.
type foldInput struct {
	pools  map[string]events.Pool // those of the config in force
	allocs map[uint64]events.Allocation
	now    time.Time
	grace  time.Duration
	// seen are the last round's findings: conflicts, recorded once when
	// they appear (and kept while the kubelet settles), and devices in a
	// container but in no live allocation, recovered only on a second
	// sight (the first list may predate the allocation reaching the
	// reconciler).
	seen map[string]bool
	// settling: the kubelet has just started and may list no pod it has
	// not synced yet, so a pod missing from its list is not gone, and an
	// allocation no container claims may be held by one of those.
	settling bool
}

// conflictSeen starts the foldInput.seen keys of conflicts, and
// conflictFirst those of conflicts seen once with a device that no live
// allocation of a pool reporting it holds.
const (
	conflictSeen  = "multi|"
	conflictFirst = "first|"
)

// foldResult is what a round records, and what it saw (foldInput.seen).
type foldResult struct {
	payloads []events.Payload
	seen     map[string]bool
}

// fold returns the events that bring the live allocations in line with
// what the kubelet reports; a steady state yields none. It is pure: the
// caller records the payloads, then applies them.
func fold(in foldInput, pods []*podresourcesapi.PodResources) foldResult {
	// Ours are the resources of the pools in force and those of live
	// allocations: a pool removed from the config leaves its allocations
	// live until their containers go, and only the kubelet says when.
	ours := map[string]bool{}
	for name := range in.pools {
		ours[name] = true
	}
	for _, a := range in.allocs {
		ours[a.Pool] = true
	}
	reported := map[key][]holderRef{}
	listed := map[[2]string]bool{} // namespace, pod
	for _, p := range pods {
		listed[[2]string{p.GetNamespace(), p.GetName()}] = true
		for _, c := range p.GetContainers() {
			ref := holderRef{namespace: p.GetNamespace(), pod: p.GetName(), container: c.GetName()}
			for _, cd := range c.GetDevices() {
				if !ours[cd.GetResourceName()] {
					continue
				}
				for _, id := range cd.GetDeviceIds() {
					k := key{cd.GetResourceName(), id}
					if !slices.Contains(reported[k], ref) {
						reported[k] = append(reported[k], ref)
					}
				}
			}
		}
	}

	// The newest live allocation of a device is the one that holds it; an
	// older one was superseded (the kubelet allocated the device again).
	holder := map[key]uint64{}
	for seq, a := range in.allocs {
		for _, id := range a.DeviceIDs {
			k := key{a.Pool, id}
			if seq > holder[k] {
				holder[k] = seq
			}
		}
	}

	// Each allocation's container first: a conflict names the allocation
	// of a container that reports a device it holds (bound), which the
	// round binds to it, and records the bindings after the conflict.
	var attributed []events.Payload
	bound := map[uint64]holderRef{}
	for _, seq := range slices.Sorted(maps.Keys(in.allocs)) {
		a := in.allocs[seq]
		// ref is the container that holds it: the one it is bound to
		// while that reports a device of it, or else the only one that
		// reports its first device reported. Two containers reporting
		// one device (a conflict, recorded first) bind it to neither.
		var ref *holderRef
		holdsAny, claimed, supersededBy := false, false, uint64(0)
		for _, id := range a.DeviceIDs {
			k := key{a.Pool, id}
			if h := holder[k]; h != seq {
				supersededBy = max(supersededBy, h)
				continue
			}
			holdsAny = true
			refs := reported[k]
			claimed = claimed || len(refs) > 0
			if b := a.Binding; b != nil && slices.Contains(refs, refOf(b)) {
				r := refOf(b)
				ref = &r
			} else if ref == nil && len(refs) == 1 {
				ref = &refs[0]
			}
		}
		if ref != nil {
			bound[seq] = *ref
		}
		held := in.now.Sub(a.At)
		switch {
		case !holdsAny && supersededBy != 0:
			attributed = append(attributed, events.DevicesReleased{AllocationSeq: seq, Pool: a.Pool,
				DeviceIDs: slices.Clone(a.DeviceIDs), HeldFor: held, Reason: fmt.Sprintf("superseded by allocation #%d", supersededBy)})
		case ref != nil:
			if b := a.Binding; b == nil || b.Namespace != ref.namespace || b.Pod != ref.pod || b.Container != ref.container {
				attributed = append(attributed, events.AllocationBound{AllocationSeq: seq, Pool: a.Pool,
					DeviceIDs: slices.Clone(a.DeviceIDs), Namespace: ref.namespace, Pod: ref.pod, Container: ref.container})
			}
		case claimed:
			// Only containers in conflict hold it: the conflict says so.
		case a.Binding != nil && in.settling && !listed[[2]string{a.Binding.Namespace, a.Binding.Pod}]:
			// Its pod may be one the new kubelet has not synced: wait.
		case a.Binding != nil:
			b := a.Binding
			attributed = append(attributed, events.DevicesReleased{AllocationSeq: seq, Pool: a.Pool,
				DeviceIDs: slices.Clone(a.DeviceIDs), HeldFor: held,
				Reason: fmt.Sprintf("%s/%s/%s no longer holds it", b.Namespace, b.Pod, b.Container)})
		case !a.LeakSuspected && held > in.grace && !in.settling:
			// A suspect stops holding its devices against other pools
			// (events.Allocation.Claimed): only a kubelet that has its
			// pods back can say that no container claims it.
			attributed = append(attributed, events.AllocationLeakSuspected{AllocationSeq: seq, Pool: a.Pool,
				DeviceIDs: slices.Clone(a.DeviceIDs), Age: held,
				Reason: fmt.Sprintf("no container has claimed it for %s", held.Round(time.Second))})
		}
	}

	out := foldResult{seen: map[string]bool{}}
	if in.settling {
		// The pods of a conflict recorded may be ones the kubelet has
		// not synced yet: listed again, it is the same conflict.
		for k := range in.seen {
			if strings.HasPrefix(k, conflictSeen) {
				out.seen[k] = true
			}
		}
	}
	// lost are the devices the kubelet reports and the ledger holds in no
	// live allocation, by resource and container, in the order met.
	type lostKey struct {
		resource string
		ref      holderRef
	}
	lost := map[lostKey][]string{}
	var lostOrder []lostKey
	keys := slices.SortedFunc(maps.Keys(reported), func(a, b key) int {
		return cmp.Or(strings.Compare(a.resource, b.resource), strings.Compare(a.device, b.device))
	})
	// A device is one whichever pool names it: one that moved pools while
	// held may be reported under both resources, each by a container.
	under := map[string][]string{} // device → the resources reporting it, sorted
	for _, k := range keys {
		// The kubelet lists pods in no set order (a map's): sorted, a
		// standing conflict reads the same every round.
		slices.SortFunc(reported[k], func(a, b holderRef) int { return strings.Compare(a.String(), b.String()) })
		under[k.device] = append(under[k.device], k.resource)
	}
	for _, k := range keys {
		refs := reported[k]
		// Once per device: under its first resource when several report it.
		if rs := under[k.device]; len(rs) > 1 && rs[0] == k.resource || len(rs) == 1 && len(refs) > 1 {
			out.payloads = append(out.payloads, conflict(k.device, rs, reported, holder, bound, in, &out)...)
		}
		if holder[k] == 0 {
			// The ledger lost it or released it too soon: the kubelet's
			// word wins. One allocation per container, on a second sight.
			seenKey := "lost|" + k.resource + "|" + k.device + "|" + refs[0].String()
			out.seen[seenKey] = true
			if !in.seen[seenKey] {
				continue
			}
			g := lostKey{k.resource, refs[0]}
			if lost[g] == nil {
				lostOrder = append(lostOrder, g)
			}
			lost[g] = append(lost[g], k.device)
		}
	}
	for _, g := range lostOrder {
		it := "it"
		if len(lost[g]) > 1 {
			it = "them"
		}
		out.payloads = append(out.payloads, events.AllocationRecovered{Pool: g.resource, DeviceIDs: lost[g],
			Namespace: g.ref.namespace, Pod: g.ref.pod, Container: g.ref.container,
			Reason: "the kubelet reports " + g.ref.String() + " holding " + it + ", and the ledger has no live allocation of " + it})
	}

	out.payloads = append(out.payloads, attributed...)
	return out
}

// conflict is the conflict of a device the kubelet reports in more than
// one container, under one or several of our resources (rs, sorted):
// each container holds it, whichever pool gave it out. It is recorded
// once as it appears, named after the pool of the newest live allocation
// of it (the one that gave it out again), and each allocation is the
// claim of the container the round leaves it bound to (the one that
// alone reports it, if it was bound to none).
func conflict(device string, rs []string, reported map[key][]holderRef, holder map[key]uint64, bound map[uint64]holderRef, in foldInput, out *foldResult) []events.Payload {
	var claims []events.Claim
	var names []string
	pool, newest := rs[0], uint64(0)
	for _, r := range rs {
		k := key{r, device}
		if holder[k] > newest {
			pool, newest = r, holder[k]
		}
		for _, ref := range reported[k] {
			c := events.Claim{Namespace: ref.namespace, Pod: ref.pod, Container: ref.container}
			if to, ok := bound[holder[k]]; ok && to == ref {
				c.AllocationSeq = holder[k]
			}
			claims = append(claims, c)
			name := ref.String()
			if len(rs) > 1 {
				name += " (" + r + ")"
			}
			names = append(names, name)
		}
	}
	seenKey := conflictSeen + strings.Join(rs, ",") + "|" + device + "|" + strings.Join(names, ",")
	if in.seen[seenKey] {
		out.seen[seenKey] = true
		return nil
	}
	if unheld(device, rs, holder) {
		// A container may report a device whose allocation has not
		// reached the reconciler yet (the kubelet lists it as the Allocate
		// returns): as with a device lost, on a second sight, when its
		// claim names the allocation if there is one.
		firstKey := conflictFirst + seenKey
		out.seen[firstKey] = true
		if !in.seen[firstKey] {
			return nil
		}
	}
	out.seen[seenKey] = true
	reason := fmt.Sprintf("the kubelet reports the device in %d containers: %s", len(claims), strings.Join(names, ", "))
	if len(rs) > 1 {
		reason = fmt.Sprintf("the kubelet reports the device in %d containers of %d pools: %s", len(claims), len(rs), strings.Join(names, ", "))
	}
	return []events.Payload{events.AllocationConflict{Pool: pool, Device: device, Claims: claims, Reason: reason}}
}

// unheld says whether a resource of rs reports device that no live
// allocation of its pool holds.
func unheld(device string, rs []string, holder map[key]uint64) bool {
	return slices.ContainsFunc(rs, func(r string) bool { return holder[key{r, device}] == 0 })
}
