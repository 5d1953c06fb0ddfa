package allocation

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/sysfs"
)

// Member is one device of a pool as the allocator knows it.
type Member struct {
	Device  sysfs.Device
	Healthy bool
	// HealthSeq is the sequence number of the ledger event behind Healthy
	// (0: none known): of two verdicts, the higher is the newer.
	HealthSeq uint64
	// HeldElsewhere are other pools' live allocations of the device (it
	// moved here by a config change or driver rebind while in use) and the
	// pools it is leaving. This pool's kubelet cannot know, so the device
	// is listed unhealthy until they are released.
	HeldElsewhere []Hold
}

// Hold is a live allocation holding a device (Seq is its
// DevicesAllocated) or, with Seq 0, a pool the device is leaving that may
// still give it out (it has not heard of the move, or is allocating it).
type Hold struct {
	Pool string
	Seq  uint64
}

// Leaving says the hold is a pool the device is leaving.
func (h Hold) Leaving() bool { return h.Seq == 0 }

func (h Hold) String() string {
	if h.Leaving() {
		return "the move from " + h.Pool
	}
	return fmt.Sprintf("#%d of %s", h.Seq, h.Pool)
}

// Usable says whether the kubelet may give the device out: its probes
// pass and no other pool's allocation holds it.
func (m Member) Usable() bool { return m.Healthy && len(m.HeldElsewhere) == 0 }

// Preferred answers GetPreferredAllocation for one container of the pool
// res: up to size IDs, mustInclude first (in order, each once), then the
// best of the other available IDs. members are the pool's devices by ID
// and held the devices held by a live or in-flight allocation of the
// pool, or by another pool's (both read, never changed). Candidates rank
// by, in this order:
//
//  1. not held: a held device is offered only when the free ones run out
//     (the kubelet thinks it free; our ledger may not have seen it go);
//  2. one NUMA node: the node most must-include devices sit on, if any
//     sits on a known node, else the node with the most free candidates
//     among those with enough for the request (any node when none has
//     enough); other or unknown nodes come after. This holds with
//     excludeTopology too, where the kubelet aligns nothing itself;
//  3. the pool's policy over groups (a VF's PF, else the PCI bus
//     "0000:3b"), a group's load being its held members plus what this
//     answer already took from it:
//     - packed empties the most loaded group first, keeping other PFs free;
//     - spread takes one device at a time from the least loaded group;
//     - none (or unset) takes the lowest addresses.
//
// Within a group devices go lowest address first, and ties fall to the
// lowest group, then address: equal input gives the same answer. Unusable
// devices (Member.Usable), non-members and IDs not in available are never
// offered; repeated IDs count once. Fewer than size IDs come back when
// candidates run out: the kubelet fills the rest itself.
//
// Errors: size < 0, more distinct must-include IDs than size, or size
// above the distinct IDs of available and mustInclude (the kubelet never
// asks for more than it offers) wrap ErrInvalidRequest; a must-include
// non-member wraps ErrUnknownDevice. A must-include device is kept even
// when unhealthy: the kubelet has already given it to the pod.
//
// The kubelet asks before every Allocate, offering every free device, so
// this is on its path: held comes as a set, built once per call, the held
// devices alone (not every member) give the loads, and a pick of one
// builds no tiers.
func Preferred(res *config.Resource, members map[string]*Member, held map[string]bool, available, mustInclude []string, size int) ([]string, error) {
	if size < 0 {
		return nil, fmt.Errorf("preferred allocation for %s: size %d: %w", res.FullName(), size, ErrInvalidRequest)
	}
	// taken holds the members offered so far, by pointer (cheaper to hash
	// than an ID); others counts the distinct IDs that are not members.
	taken := make(map[*Member]struct{}, len(available)+len(mustInclude))
	var others map[string]struct{}
	out := make([]string, 0, size)
	for _, id := range mustInclude {
		m, ok := members[id]
		if !ok {
			return nil, fmt.Errorf("preferred allocation for %s: must-include device %s: %w", res.FullName(), id, ErrUnknownDevice)
		}
		if _, dup := taken[m]; dup {
			continue
		}
		taken[m] = struct{}{}
		out = append(out, id)
	}
	if len(out) > size {
		return nil, fmt.Errorf("preferred allocation for %s: %d must-include devices for size %d: %w", res.FullName(), len(out), size, ErrInvalidRequest)
	}
	need := size - len(out)
	if need == 0 {
		return out, nil
	}

	// Only packed and spread weigh the groups' loads.
	load := make(map[string]int)
	if res.AllocatePolicy == config.PolicyPacked || res.AllocatePolicy == config.PolicySpread {
		for id, h := range held {
			if m, ok := members[id]; ok && h {
				load[groupOf(&m.Device)]++
			}
		}
		for _, id := range out {
			load[groupOf(&members[id].Device)]++
		}
	}

	weighed := len(load) > 0
	cands := make([]candidate, 0, len(available))
	for _, id := range available {
		m, ok := members[id]
		if !ok {
			if others == nil {
				others = make(map[string]struct{})
			}
			others[id] = struct{}{}
			continue
		}
		n := len(taken)
		if taken[m] = struct{}{}; len(taken) == n {
			continue // a repeat: one hash, not a lookup and an insert
		}
		if m.Usable() {
			c := candidate{id: id, numa: m.Device.NUMANode, group: groupOf(&m.Device), held: held[id]}
			if weighed {
				c.load = load[c.group]
			}
			cands = append(cands, c)
		}
	}
	if distinct := len(taken) + len(others); size > distinct {
		return nil, fmt.Errorf("preferred allocation for %s: size %d of %d distinct available and must-include devices: %w", res.FullName(), size, distinct, ErrInvalidRequest)
	}

	node := preferredNode(members, out, cands, need)
	if need == 1 && len(cands) > 0 {
		return append(out, pickOne(res.AllocatePolicy, cands, node)), nil
	}
	return append(out, pickAll(res.AllocatePolicy, cands, node, load, need)...), nil
}

// pickAll takes up to need candidates, tier by tier (tierOf).
func pickAll(policy config.AllocatePolicy, cands []candidate, node int, load map[string]int, need int) []string {
	var out []string
	tier := make([]candidate, 0, len(cands))
	for t := 0; t < 4 && len(out) < need; t++ {
		tier = tier[:0]
		for _, c := range cands {
			if tierOf(c, node) == t {
				tier = append(tier, c)
			}
		}
		out = append(out, pick(policy, tier, load, need-len(out))...)
	}
	return out
}

// pickOne is pickAll for the usual request, one device: the first
// candidate of the first tier by the policy's order, with no tier built.
// cands is not empty.
func pickOne(policy config.AllocatePolicy, cands []candidate, node int) string {
	return slices.MinFunc(cands, firstOrder(policy, node)).id
}

// candidate is a device Preferred may offer.
type candidate struct {
	id    string
	numa  int
	group string
	held  bool
	// load is the group's load when c is ranked (firstOrder reads it for
	// packed and spread only).
	load int
}

// groupOf is the group a policy balances over: a VF's PF, any other
// function's PCI domain and bus.
func groupOf(d *sysfs.Device) string {
	if d.PF != "" {
		return d.PF
	}
	if i := strings.LastIndexByte(d.Address, ':'); i > 0 {
		return d.Address[:i]
	}
	return d.Address
}

// preferredNode is the NUMA node Preferred favours (its rank 2), -1 for
// none.
func preferredNode(members map[string]*Member, must []string, cands []candidate, need int) int {
	count := make(map[int]int)
	for _, id := range must {
		if n := members[id].Device.NUMANode; n >= 0 {
			count[n]++
		}
	}
	if len(count) > 0 {
		return busiest(count, 0)
	}
	for _, c := range cands {
		if c.numa >= 0 && !c.held {
			count[c.numa]++
		}
	}
	if n := busiest(count, need); n >= 0 {
		return n
	}
	return busiest(count, 0)
}

// busiest returns the node with the highest count of at least atLeast,
// the lowest such node on a tie, or -1 when none qualifies.
func busiest(count map[int]int, atLeast int) int {
	best, bestN := -1, 0
	for n, c := range count {
		if c < atLeast || c == 0 {
			continue
		}
		if best < 0 || c > bestN || c == bestN && n < best {
			best, bestN = n, c
		}
	}
	return best
}

// firstOrder is the order of pickOne and pick: by tier, then packed by
// (-load, group, address), spread by (load, group, address), none by
// address.
func firstOrder(policy config.AllocatePolicy, node int) func(a, b candidate) int {
	return func(a, b candidate) int {
		if t := cmp.Compare(tierOf(a, node), tierOf(b, node)); t != 0 || policy != config.PolicyPacked && policy != config.PolicySpread {
			return cmp.Or(t, strings.Compare(a.id, b.id))
		}
		l := cmp.Compare(a.load, b.load)
		if policy == config.PolicyPacked {
			l = -l
		}
		return cmp.Or(l, strings.Compare(a.group, b.group), strings.Compare(a.id, b.id))
	}
}

// tierOf is c's tier: 0 free on node, 1 free elsewhere, 2 held on node,
// 3 held elsewhere; with no node (-1), 0 free and 2 held.
func tierOf(c candidate, node int) int {
	i := 0
	if node >= 0 && c.numa != node {
		i = 1
	}
	if c.held {
		i += 2
	}
	return i
}

// pick takes up to need candidates of one tier by policy, adding them to
// load: spread by spread, the others in firstOrder, with each group's load
// as earlier tiers left it, looked up once, not per comparison.
func pick(policy config.AllocatePolicy, tier []candidate, load map[string]int, need int) []string {
	need = min(need, len(tier))
	if policy == config.PolicySpread {
		slices.SortFunc(tier, func(a, b candidate) int { return strings.Compare(a.id, b.id) })
		return spread(tier, load, need)
	}
	for i := range tier {
		tier[i].load = load[tier[i].group]
	}
	slices.SortFunc(tier, firstOrder(policy, -1))
	out := make([]string, 0, need)
	for _, c := range tier[:need] {
		load[c.group]++
		out = append(out, c.id)
	}
	return out
}

// spread takes need candidates from tier (sorted by address) one at a
// time, each from the least loaded group that has any left.
func spread(tier []candidate, load map[string]int, need int) []string {
	queue := make(map[string][]candidate)
	var groups []string
	for _, c := range tier {
		if _, ok := queue[c.group]; !ok {
			groups = append(groups, c.group)
		}
		queue[c.group] = append(queue[c.group], c)
	}
	slices.Sort(groups)
	out := make([]string, 0, need)
	for len(out) < need {
		best, found := "", false
		for _, g := range groups {
			if len(queue[g]) > 0 && (!found || load[g] < load[best]) {
				best, found = g, true
			}
		}
		out = append(out, queue[best][0].id)
		queue[best] = queue[best][1:]
		load[best]++
	}
	return out
}
