package allocation

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
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

// Index is a pool's members as Preferred ranks them, built once per
// change of the members (or of their health) and read by every call. The
// kubelet asks before every Allocate, offering every free device, and
// between two pods the pool's memory goes cold: a ranking that reads a
// Member struct per offered device pays cache misses per device. The
// index keeps what ranking reads in a few kilobytes: positions by ID (the
// IDs' bytes side by side), and per position the member's NUMA node,
// group and usability as numbers, and whether it is held (Mark).
// Positions follow the IDs' order and group numbers their names' order,
// so comparing numbers compares names.
type Index struct {
	pos     map[string]int32
	ids     []string // by position, sorted
	members []ranked // by position
	groups  int      // group numbers are 0..groups-1
	nodes   int      // the highest NUMA node + 1
	// elsewhere are the positions of the members another pool holds;
	// held marks them and what Mark was given last, by position.
	elsewhere []int32
	held      []bool
	// siblings, by position, are the vfio-bound members of the member's
	// IOMMU group, itself included, where the group has more than one;
	// nil when no group does (vfio gives a group to one pod at a time).
	siblings [][]int32
}

// ranked is what ranking reads of one member.
type ranked struct {
	numa, group int32
	usable      bool
}

// NewIndex indexes members (read, never kept).
func NewIndex(members map[string]*Member) *Index {
	ids := slices.Sorted(maps.Keys(members))
	x := &Index{pos: make(map[string]int32, len(ids)), ids: make([]string, len(ids)), members: make([]ranked, len(ids)), held: make([]bool, len(ids))}
	keys := strings.Join(ids, "")
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		names = append(names, groupOf(&members[id].Device))
	}
	groups := slices.Compact(slices.Sorted(slices.Values(names)))
	x.groups = len(groups)
	x.siblings = iommuSiblings(ids, members)
	off := 0
	for i, id := range ids {
		m := members[id]
		x.ids[i] = keys[off : off+len(id)]
		x.pos[x.ids[i]] = int32(i)
		off += len(id)
		g, _ := slices.BinarySearch(groups, names[i])
		x.members[i] = ranked{numa: int32(m.Device.NUMANode), group: int32(g), usable: m.Usable()}
		x.nodes = max(x.nodes, m.Device.NUMANode+1)
		if len(m.HeldElsewhere) > 0 {
			x.elsewhere = append(x.elsewhere, int32(i))
			x.held[i] = true
		}
	}
	return x
}

// iommuSiblings is Index.siblings of the members, by the positions of
// ids.
func iommuSiblings(ids []string, members map[string]*Member) [][]int32 {
	var byGroup map[string][]int32
	for i, id := range ids {
		if d := &members[id].Device; d.IOMMUGroup != "" && sysfs.IsVFIODriver(d.Driver) {
			if byGroup == nil {
				byGroup = make(map[string][]int32)
			}
			byGroup[d.IOMMUGroup] = append(byGroup[d.IOMMUGroup], int32(i))
		}
	}
	var out [][]int32
	for _, ps := range byGroup {
		if len(ps) < 2 {
			continue
		}
		if out == nil {
			out = make([][]int32, len(ids))
		}
		for _, p := range ps {
			out[p] = ps
		}
	}
	return out
}

// siblingHeld says whether a member that shares i's IOMMU group is held.
func (x *Index) siblingHeld(i int32, held []bool) bool {
	if x.siblings == nil {
		return false
	}
	for _, p := range x.siblings[i] {
		if p != i && held[p] {
			return true
		}
	}
	return false
}

// Mark notes the members held now: those held yields (some more than
// once; non-members are skipped) and those another pool holds. The pool
// marks them after its holds change, once it has answered the call that
// changed them, so that no GetPreferredAllocation walks its holders.
func (x *Index) Mark(held iter.Seq[string]) {
	clear(x.held)
	for _, i := range x.elsewhere {
		x.held[i] = true
	}
	for id := range held {
		if i, ok := x.pos[id]; ok {
			x.held[i] = true
		}
	}
}

// Preferred answers GetPreferredAllocation for one container of the pool
// res: up to size IDs, mustInclude first (each once, those that are not
// members before those that are, each in the order given; the kubelet
// reads the answer as a set), then the best of the other available IDs
// among the indexed members. A device is held when Mark marked it or
// pending yields it (the devices of Allocates under way, some more than
// once). Candidates rank by, in this order:
//
//  1. not held: a held device is offered only when the free ones run out
//     (the kubelet thinks it free; our ledger may not have seen it go),
//     and so is a vfio-bound one whose IOMMU group a held member shares
//     (vfio gives a group to one pod at a time: the second would fail),
//     unless that member is a must-include one, given to this container;
//  2. one NUMA node: the node most must-include devices sit on, if any
//     sits on a known node, else, of the nodes with enough free
//     candidates for the request, the one the policy (rank 3) would take
//     its first device from, else the node with the most free
//     candidates; then the other known nodes, the one with the most free
//     candidates first, so that what one node cannot hold spans as few
//     nodes as it can; unknown nodes last, as the kubelet's own fallback
//     takes them. This holds with excludeTopology too, where the kubelet
//     aligns nothing itself;
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
// asks for more than it offers) wrap ErrInvalidRequest. The kubelet takes
// any other error as the pod's failure, so a must-include device is kept
// as given even when unhealthy or no longer a member (an init
// container's, after a reload moved it): the kubelet has already given
// it to the pod, and a preference is advice. The Allocate that follows
// says what is wrong with it.
func (x *Index) Preferred(res *config.Resource, pending iter.Seq[string], available, mustInclude []string, size int) ([]string, error) {
	if size < 0 {
		return nil, fmt.Errorf("preferred allocation for %s: size %d: %w", res.FullName(), size, ErrInvalidRequest)
	}
	// taken marks the members offered or seen so far; others counts the
	// distinct IDs that are not members.
	taken := make([]bool, len(x.members))
	seen := 0
	var others map[string]struct{}
	var must []int32    // what mustInclude gives
	var strays []string // and what it gives that is not a member
	// strayed marks strays: a client may name a message's worth of them.
	var strayed map[string]bool
	for _, id := range mustInclude {
		i, ok := x.pos[id]
		if !ok {
			if !strayed[id] {
				if strayed == nil {
					strayed = make(map[string]bool)
				}
				strayed[id] = true
				strays = append(strays, id)
			}
			continue
		}
		if !taken[i] {
			taken[i] = true
			seen++
			must = append(must, i)
		}
	}
	if len(must)+len(strays) > size {
		return nil, fmt.Errorf("preferred allocation for %s: %d must-include devices for size %d: %w", res.FullName(), len(must)+len(strays), size, ErrInvalidRequest)
	}
	need := size - len(must) - len(strays)
	if need == 0 {
		return append(strays, x.named(must)...), nil
	}

	// Only packed and spread weigh the groups' loads.
	weighed := res.AllocatePolicy == config.PolicyPacked || res.AllocatePolicy == config.PolicySpread
	var load []int
	if weighed {
		load = make([]int, x.groups)
	}
	isHeld := slices.Clone(x.held)
	for id := range pending {
		if i, ok := x.pos[id]; ok {
			isHeld[i] = true
		}
	}
	if weighed {
		for i, h := range isHeld {
			if h {
				load[x.members[i].group]++
			}
		}
		for _, i := range must {
			if !isHeld[i] { // a held one counts once, as held
				load[x.members[i].group]++
			}
		}
	}
	// A must-include device goes to this container, which opens its
	// group itself: that it is held (an init container's, which the
	// kubelet hands on) keeps no sibling from the same container.
	blocking := isHeld
	if x.siblings != nil && len(must) > 0 {
		blocking = slices.Clone(isHeld)
		for _, i := range must {
			blocking[i] = false
		}
	}
	cands := make([]candidate, 0, len(available))
	for _, id := range available {
		i, ok := x.pos[id]
		if !ok {
			if others == nil {
				others = make(map[string]struct{})
			}
			others[id] = struct{}{}
			continue
		}
		if taken[i] {
			continue // a repeat
		}
		taken[i] = true
		seen++
		if m := &x.members[i]; m.usable {
			c := candidate{pos: i, numa: m.numa, group: m.group, held: isHeld[i] || x.siblingHeld(i, blocking)}
			if weighed {
				c.load = int32(load[c.group])
			}
			cands = append(cands, c)
		}
	}
	for _, id := range strays {
		if _, ok := others[id]; !ok {
			seen++ // a stray not also available
		}
	}
	if distinct := seen + len(others); size > distinct {
		return nil, fmt.Errorf("preferred allocation for %s: size %d of %d distinct available and must-include devices: %w", res.FullName(), size, distinct, ErrInvalidRequest)
	}

	if need == 1 && len(must) == 0 {
		// The usual request, one device and none it must include: the
		// node nodeRanks favours is that of the policy's first free
		// candidate on a known node, which pickOne then takes.
		if i := firstFit(res.AllocatePolicy, cands, nil, 1); i >= 0 {
			return append(strays, x.ids[cands[i].pos]), nil
		}
	}
	ranks := x.nodeRanks(res.AllocatePolicy, must, cands, need)
	for i := range cands {
		cands[i].tier = tierOf(cands[i], ranks)
	}
	if need == 1 && len(cands) > 0 {
		return append(strays, x.named(append(must, pickOne(res.AllocatePolicy, cands)))...), nil
	}
	return append(strays, x.named(append(must, pickAll(res.AllocatePolicy, cands, load, need)...))...), nil
}

// named is the IDs of positions ps.
func (x *Index) named(ps []int32) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = x.ids[p]
	}
	return out
}

// pickAll takes up to need candidates, tier by tier; load (nil when the
// policy weighs none) is by group.
func pickAll(policy config.AllocatePolicy, cands []candidate, load []int, need int) []int32 {
	var out []int32
	tier := make([]candidate, 0, len(cands))
	for t, left := int32(0), len(cands); left > 0 && len(out) < need; t++ {
		tier = tier[:0]
		for _, c := range cands {
			if c.tier == t {
				tier = append(tier, c)
			}
		}
		left -= len(tier)
		out = append(out, pick(policy, tier, load, need-len(out))...)
	}
	return out
}

// pickOne is pickAll for the usual request, one device: the first
// candidate of the first tier by the policy's order, with no tier built.
// cands is not empty.
func pickOne(policy config.AllocatePolicy, cands []candidate) int32 {
	return slices.MinFunc(cands, firstOrder(policy)).pos
}

// candidate is a member Preferred may offer: its position, NUMA node and
// group number in the Index, and its tier (tierOf) once ranked.
type candidate struct {
	pos, numa, group, tier int32
	// load is the group's load when c is ranked (firstOrder reads it for
	// packed and spread only).
	load int32
	held bool
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

// nodeRanks is the order in which Preferred takes NUMA nodes (its rank
// 2), as each node's rank at node+1: the node it favours 0, the other
// known nodes after it by their free candidates, most first (the lowest
// node on a tie), unknown nodes (-1, at 0) last. Any node that can hold
// the request keeps it on one node, so policy chooses among them: taking
// the node with the most free would scatter packed and none over every
// node, and use up the node that a larger request needs whole.
func (x *Index) nodeRanks(policy config.AllocatePolicy, must []int32, cands []candidate, need int) []int32 {
	count := make([]int, x.nodes)
	for _, i := range must {
		if n := x.members[i].numa; n >= 0 {
			count[n]++
		}
	}
	node := busiest(count)
	free := make([]int, x.nodes)
	for _, c := range cands {
		if c.numa >= 0 && !c.held {
			free[c.numa]++
		}
	}
	if node < 0 {
		if first := firstFit(policy, cands, free, need); first >= 0 {
			node = cands[first].numa
		}
	}
	if node < 0 {
		node = busiest(free)
	}
	order := make([]int32, x.nodes)
	for n := range order {
		order[n] = int32(n)
	}
	slices.SortFunc(order, func(a, b int32) int {
		switch {
		case a == b:
			return 0
		case a == node:
			return -1
		case b == node:
			return 1
		}
		return cmp.Or(cmp.Compare(free[b], free[a]), cmp.Compare(a, b))
	})
	ranks := make([]int32, x.nodes+1)
	ranks[0] = int32(x.nodes)
	for r, n := range order {
		ranks[n+1] = int32(r)
	}
	return ranks
}

// firstFit is the index in cands of the free candidate on a known node
// that policy takes first (firstOrder, before tiers are set), of the
// nodes with at least need free candidates by free (any node when free
// is nil); -1 when there is none.
func firstFit(policy config.AllocatePolicy, cands []candidate, free []int, need int) int {
	first, order := -1, firstOrder(policy)
	for i, c := range cands {
		if c.numa >= 0 && !c.held && (free == nil || free[c.numa] >= need) && (first < 0 || order(c, cands[first]) < 0) {
			first = i
		}
	}
	return first
}

// busiest returns the node with the highest count, the lowest such node
// on a tie, or -1 when every count is 0.
func busiest(count []int) int32 {
	best, bestN := int32(-1), 0
	for n, c := range count {
		if c > bestN {
			best, bestN = int32(n), c
		}
	}
	return best
}

// firstOrder is the order of pickOne and pick: by tier, then packed by
// (-load, group, address), spread by (load, group, address), none by
// address.
func firstOrder(policy config.AllocatePolicy) func(a, b candidate) int {
	return func(a, b candidate) int {
		t := cmp.Compare(a.tier, b.tier)
		if t != 0 || policy != config.PolicyPacked && policy != config.PolicySpread {
			return cmp.Or(t, cmp.Compare(a.pos, b.pos))
		}
		l := cmp.Compare(a.load, b.load)
		if policy == config.PolicyPacked {
			l = -l
		}
		return cmp.Or(l, cmp.Compare(a.group, b.group), cmp.Compare(a.pos, b.pos))
	}
}

// tierOf is c's tier: its node's rank (nodeRanks) if free, that plus
// the number of ranks if held.
func tierOf(c candidate, ranks []int32) int32 {
	i := ranks[max(c.numa+1, 0)]
	if c.held {
		i += int32(len(ranks))
	}
	return i
}

// pick takes up to need candidates of one tier by policy, adding them to
// load: spread by spread, the others in firstOrder, with each group's load
// as earlier tiers left it, looked up once, not per comparison.
func pick(policy config.AllocatePolicy, tier []candidate, load []int, need int) []int32 {
	need = min(need, len(tier))
	if policy == config.PolicySpread {
		slices.SortFunc(tier, func(a, b candidate) int { return cmp.Compare(a.pos, b.pos) })
		return spread(tier, load, need)
	}
	if load != nil {
		for i := range tier {
			tier[i].load = int32(load[tier[i].group])
		}
	}
	slices.SortFunc(tier, firstOrder(policy))
	out := make([]int32, 0, need)
	for _, c := range tier[:need] {
		if load != nil {
			load[c.group]++
		}
		out = append(out, c.pos)
	}
	return out
}

// spread takes need candidates from tier (sorted by address) one at a
// time, each from the least loaded group that has any left.
func spread(tier []candidate, load []int, need int) []int32 {
	queue := make(map[int32][]candidate)
	var groups []int32
	for _, c := range tier {
		if _, ok := queue[c.group]; !ok {
			groups = append(groups, c.group)
		}
		queue[c.group] = append(queue[c.group], c)
	}
	slices.Sort(groups)
	out := make([]int32, 0, need)
	for len(out) < need {
		best, found := int32(0), false
		for _, g := range groups {
			if len(queue[g]) > 0 && (!found || load[g] < load[best]) {
				best, found = g, true
			}
		}
		out = append(out, queue[best][0].pos)
		queue[best] = queue[best][1:]
		load[best]++
	}
	return out
}
