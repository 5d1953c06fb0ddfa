package allocation

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/sysfs"
)

// Three PFs: A (0000:3b:00.0) and B (0000:3b:00.1) on NUMA node 0, C
// (0000:af:00.0) on node 1, four VFs each. A's VFs are 3b:02.x, B's
// 3b:0a.x, C's af:02.x.
const (
	pfA = "0000:3b:00.0"
	pfB = "0000:3b:00.1"
	pfC = "0000:af:00.0"
)

func preferredMembers() map[string]Member {
	m := make(map[string]Member)
	add := func(pf, slot string, numa int) {
		for i := range 4 {
			addr := fmt.Sprintf("%s.%d", slot, i)
			m[addr] = Member{Device: vf(addr, pf, i, "vfio-pci", "", numa), Healthy: true}
		}
	}
	add(pfA, "0000:3b:02", 0)
	add(pfB, "0000:3b:0a", 0)
	add(pfC, "0000:af:02", 1)
	return m
}

func ids(m map[string]Member) []string {
	var out []string
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func TestPreferred(t *testing.T) {
	all := ids(preferredMembers())
	cases := []struct {
		name      string
		policy    config.AllocatePolicy // "" behaves as none
		members   func(map[string]Member)
		held      []string
		available []string // nil: every member
		must      []string
		size      int
		want      []string
	}{
		{
			name: "none takes the lowest addresses",
			size: 2,
			want: []string{"0000:3b:02.0", "0000:3b:02.1"},
		},
		{
			name: "none written out",
			size: 1, policy: config.PolicyNone,
			want: []string{"0000:3b:02.0"},
		},
		{
			name: "must-include first and in order, then its NUMA node",
			must: []string{"0000:af:02.3", "0000:af:02.1"},
			size: 4,
			want: []string{"0000:af:02.3", "0000:af:02.1", "0000:af:02.0", "0000:af:02.2"},
		},
		{
			name: "must-include repeated counts once",
			must: []string{"0000:af:02.3", "0000:af:02.3"},
			size: 2,
			want: []string{"0000:af:02.3", "0000:af:02.0"},
		},
		{
			name: "must-include filling size",
			must: []string{"0000:3b:0a.2"},
			size: 1,
			want: []string{"0000:3b:0a.2"},
		},
		{
			name:    "must-include kept even when unhealthy",
			members: func(m map[string]Member) { unhealthy(m, "0000:3b:0a.2") },
			must:    []string{"0000:3b:0a.2"},
			size:    2,
			want:    []string{"0000:3b:0a.2", "0000:3b:02.0"},
		},
		{
			name:    "unhealthy never offered",
			members: func(m map[string]Member) { unhealthy(m, "0000:3b:02.0", "0000:3b:02.2") },
			size:    3,
			want:    []string{"0000:3b:02.1", "0000:3b:02.3", "0000:3b:0a.0"},
		},
		{
			// vfio gives a group to one pod at a time: a device whose
			// group a held one shares would fail in the pod it went to.
			name:      "a vfio device whose IOMMU group a held one shares comes last",
			members:   func(m map[string]Member) { iommu(m, "7", "0000:3b:02.0", "0000:3b:02.1") },
			held:      []string{"0000:3b:02.0"},
			available: without(all, "0000:3b:02.0"),
			size:      3,
			want:      []string{"0000:3b:02.2", "0000:3b:02.3", "0000:3b:0a.0"},
		},
		{
			name:      "a vfio device whose IOMMU group a held one shares, when nothing else is free",
			members:   func(m map[string]Member) { iommu(m, "7", "0000:3b:02.0", "0000:3b:02.1") },
			held:      []string{"0000:3b:02.0"},
			available: []string{"0000:3b:02.1"},
			size:      1,
			want:      []string{"0000:3b:02.1"},
		},
		{
			// The kubelet hands an init container's devices on to the
			// next container as must-include: the same pod, which opens
			// the group itself.
			name:      "a held must-include device's IOMMU group sibling is not held back",
			members:   func(m map[string]Member) { iommu(m, "7", "0000:3b:02.0", "0000:3b:02.1") },
			held:      []string{"0000:3b:02.0"},
			available: without(all, "0000:3b:02.0"),
			must:      []string{"0000:3b:02.0"},
			size:      2,
			want:      []string{"0000:3b:02.0", "0000:3b:02.1"},
		},
		{
			name: "functions on a kernel driver share an IOMMU group as they please",
			members: func(m map[string]Member) {
				iommu(m, "7", "0000:3b:02.0", "0000:3b:02.1")
				for _, a := range []string{"0000:3b:02.0", "0000:3b:02.1"} {
					e := m[a]
					e.Device.Driver = "iavf"
					m[a] = e
				}
			},
			held:      []string{"0000:3b:02.0"},
			available: without(all, "0000:3b:02.0"),
			size:      1,
			want:      []string{"0000:3b:02.1"},
		},
		{
			name: "held by another pool's allocation never offered",
			members: func(m map[string]Member) {
				e := m["0000:3b:02.0"]
				e.HeldElsewhere = []Hold{{Pool: "intel.com/old", Seq: 7}}
				m["0000:3b:02.0"] = e
			},
			size: 2,
			want: []string{"0000:3b:02.1", "0000:3b:02.2"},
		},
		{
			name:      "unknown and unavailable never offered",
			available: []string{"0000:ff:00.0", "0000:3b:02.3", "0000:3b:02.3", "0000:af:02.0"},
			size:      3,
			want:      []string{"0000:3b:02.3", "0000:af:02.0"},
		},
		{
			name: "held avoided",
			held: []string{"0000:3b:02.0", "0000:3b:02.1"},
			size: 2,
			want: []string{"0000:3b:02.2", "0000:3b:02.3"},
		},
		{
			name:      "held offered last when free ones run out",
			held:      []string{"0000:3b:02.0"},
			available: []string{"0000:3b:02.0", "0000:3b:02.1"},
			size:      2,
			want:      []string{"0000:3b:02.1", "0000:3b:02.0"},
		},
		{
			name:      "held devices do not count towards a node",
			held:      []string{"0000:3b:02.0", "0000:3b:02.1"},
			available: []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:af:02.0", "0000:af:02.1"},
			size:      2,
			want:      []string{"0000:af:02.0", "0000:af:02.1"},
		},
		{
			name:      "NUMA node that can satisfy beats lower addresses",
			available: []string{"0000:3b:02.0", "0000:3b:02.1", "0000:af:02.0", "0000:af:02.1", "0000:af:02.2"},
			size:      3,
			want:      []string{"0000:af:02.0", "0000:af:02.1", "0000:af:02.2"},
		},
		{
			name:      "NUMA with no node big enough starts on the fullest",
			available: []string{"0000:3b:02.0", "0000:af:02.0", "0000:af:02.1"},
			size:      3,
			want:      []string{"0000:af:02.0", "0000:af:02.1", "0000:3b:02.0"},
		},
		{
			// Node 0 holds four, node 1 three, node 2 one with the lowest
			// address: the two that node 0 cannot hold come from node 1,
			// so the pod spans two nodes, not three.
			name:      "NUMA overflow takes the next fullest node",
			members:   func(m map[string]Member) { numa(m, 2, "0000:3b:02.0") },
			available: []string{"0000:3b:02.0", "0000:3b:0a.0", "0000:3b:0a.1", "0000:3b:0a.2", "0000:3b:0a.3", "0000:af:02.0", "0000:af:02.1", "0000:af:02.2"},
			size:      6,
			want:      []string{"0000:3b:0a.0", "0000:3b:0a.1", "0000:3b:0a.2", "0000:3b:0a.3", "0000:af:02.0", "0000:af:02.1"},
		},
		{
			// The kubelet's best-effort alignment hands over a node's
			// devices as must-include and asks for the rest.
			name:      "NUMA overflow after must-include fills their node",
			members:   func(m map[string]Member) { numa(m, 2, "0000:3b:02.0") },
			available: []string{"0000:3b:02.0", "0000:af:02.0", "0000:af:02.1", "0000:af:02.2"},
			must:      []string{"0000:3b:0a.0", "0000:3b:0a.1", "0000:3b:0a.2", "0000:3b:0a.3"},
			size:      6,
			want:      []string{"0000:3b:0a.0", "0000:3b:0a.1", "0000:3b:0a.2", "0000:3b:0a.3", "0000:af:02.0", "0000:af:02.1"},
		},
		{
			name:      "NUMA overflow takes known nodes before unknown ones",
			members:   func(m map[string]Member) { numa(m, -1, "0000:3b:02.0") },
			available: []string{"0000:3b:02.0", "0000:3b:0a.0", "0000:3b:0a.1", "0000:af:02.0"},
			size:      3,
			want:      []string{"0000:3b:0a.0", "0000:3b:0a.1", "0000:af:02.0"},
		},
		{
			name: "NUMA tie goes to the lower node",
			available: []string{
				"0000:af:02.0", "0000:af:02.1", "0000:3b:0a.0", "0000:3b:0a.1",
			},
			size: 2,
			want: []string{"0000:3b:0a.0", "0000:3b:0a.1"},
		},
		{
			// Both nodes can hold the request: which one is the policy's
			// choice, not that of the node with more free devices.
			name:      "none takes the lowest addresses when several nodes can hold the request",
			available: []string{"0000:3b:02.0", "0000:3b:02.1", "0000:af:02.0", "0000:af:02.1", "0000:af:02.2"},
			size:      2,
			want:      []string{"0000:3b:02.0", "0000:3b:02.1"},
		},
		{
			name:   "packed keeps to the PF with allocations on the node with fewer free",
			policy: config.PolicyPacked,
			held:   []string{"0000:af:02.0"},
			size:   1,
			want:   []string{"0000:af:02.1"},
		},
		{
			name:   "spread takes the least used PF on a node with as many free",
			policy: config.PolicySpread,
			held:   []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:0a.0", "0000:3b:0a.1"},
			size:   2,
			want:   []string{"0000:af:02.0", "0000:af:02.1"},
		},
		{
			name:    "unknown NUMA nodes come after the preferred node",
			members: func(m map[string]Member) { numa(m, -1, "0000:3b:02.0", "0000:3b:02.1") },
			size:    3,
			want:    []string{"0000:3b:02.2", "0000:3b:02.3", "0000:3b:0a.0"},
		},
		{
			name:   "packed prefers the PF with allocations",
			policy: config.PolicyPacked,
			held:   []string{"0000:3b:0a.0"},
			size:   4,
			want:   []string{"0000:3b:0a.1", "0000:3b:0a.2", "0000:3b:0a.3", "0000:3b:02.0"},
		},
		{
			// A pool's holders, pending Allocates and other pools' holds
			// may each name a device: B's two held VFs outweigh A's one.
			name:   "packed counts a device held twice once",
			policy: config.PolicyPacked,
			held:   []string{"0000:3b:02.0", "0000:3b:0a.0", "0000:3b:02.0", "0000:3b:0a.1", "0000:3b:02.0"},
			size:   1,
			want:   []string{"0000:3b:0a.2"},
		},
		{
			// The kubelet passes an init container's devices, which the
			// pool holds, as must-include to its app container: B holds
			// one (the must-include), A two, so B is the least used.
			name:   "spread counts a held must-include device once",
			policy: config.PolicySpread,
			held:   []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:0a.0"},
			must:   []string{"0000:3b:0a.0"},
			size:   2,
			want:   []string{"0000:3b:0a.0", "0000:3b:0a.1"},
		},
		{
			name:   "packed, one device, from the PF with allocations",
			policy: config.PolicyPacked,
			held:   []string{"0000:3b:0a.0"},
			size:   1,
			want:   []string{"0000:3b:0a.1"},
		},
		{
			name:   "packed, one device, with no allocations: the lowest PF's lowest",
			policy: config.PolicyPacked,
			size:   1,
			want:   []string{"0000:3b:02.0"},
		},
		{
			name:   "packed with no allocations fills the lowest PF first",
			policy: config.PolicyPacked,
			size:   5,
			want:   []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:3b:02.3", "0000:3b:0a.0"},
		},
		{
			name:   "packed follows the must-include device's PF",
			policy: config.PolicyPacked,
			must:   []string{"0000:3b:0a.3"},
			size:   3,
			want:   []string{"0000:3b:0a.3", "0000:3b:0a.0", "0000:3b:0a.1"},
		},
		{
			name:   "spread starts on the PF with fewest allocations and evens out",
			policy: config.PolicySpread,
			held:   []string{"0000:3b:02.0", "0000:3b:02.1"},
			size:   3,
			want:   []string{"0000:3b:0a.0", "0000:3b:0a.1", "0000:3b:02.2"},
		},
		{
			name:   "spread with no allocations alternates PFs",
			policy: config.PolicySpread,
			size:   4,
			want:   []string{"0000:3b:02.0", "0000:3b:0a.0", "0000:3b:02.1", "0000:3b:0a.1"},
		},
		{
			name:    "size beyond the usable candidates gives every usable one",
			policy:  config.PolicySpread,
			held:    []string{"0000:3b:02.0"},
			members: func(m map[string]Member) { unhealthy(m, "0000:af:02.1", "0000:af:02.3") },
			size:    12,
			want: []string{
				"0000:3b:0a.0", "0000:3b:02.1", "0000:3b:0a.1", "0000:3b:02.2", "0000:3b:0a.2", "0000:3b:02.3", "0000:3b:0a.3",
				"0000:af:02.0", "0000:af:02.2",
				"0000:3b:02.0",
			},
		},
		{
			name: "size zero",
			size: 0,
			want: []string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			members := preferredMembers()
			if tc.members != nil {
				tc.members(members)
			}
			res := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
			res.AllocatePolicy = tc.policy
			avail := tc.available
			if avail == nil {
				avail = all
			}
			got, err := preferred(res, members, tc.held, avail, tc.must, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func unhealthy(m map[string]Member, ids ...string) {
	for _, id := range ids {
		e := m[id]
		e.Healthy = false
		m[id] = e
	}
}

// without is ids less drop.
func without(ids []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(drop, id) })
}

func iommu(m map[string]Member, group string, ids ...string) {
	for _, id := range ids {
		e := m[id]
		e.Device.IOMMUGroup = group
		m[id] = e
	}
}

func numa(m map[string]Member, node int, ids ...string) {
	for _, id := range ids {
		e := m[id]
		e.Device.NUMANode = node
		m[id] = e
	}
}

func TestPreferredErrors(t *testing.T) {
	res := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	members := preferredMembers()
	all := ids(members)
	cases := []struct {
		name string
		must []string
		size int
		want error
	}{
		{"more must-include than size", []string{"0000:3b:02.0", "0000:3b:02.1"}, 1, ErrInvalidRequest},
		{"negative size", nil, -1, ErrInvalidRequest},
		{"size beyond what is offered", []string{"0000:3b:02.0"}, 13, ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := preferred(res, members, nil, all, tc.must, tc.size)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %q, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A must-include device that is not a member (an init container's that a
// reload moved out of the pool) is kept as given, not an error, which the
// kubelet would take as the pod's failure; the rest are chosen as ever.
func TestPreferredKeepsAMustIncludeNonMember(t *testing.T) {
	res := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
	members := preferredMembers()
	const stray = "0000:ff:00.0"
	got, err := preferred(res, members, nil, ids(members), []string{stray, stray}, 2)
	if err != nil {
		t.Fatalf("a must-include non-member: %v", err)
	}
	want, err := preferred(res, members, nil, ids(members), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, append([]string{stray}, want...)) {
		t.Errorf("got %q, want %s then what a request of one gets, %q", got, stray, want)
	}
	if got, err := preferred(res, members, nil, ids(members), []string{stray, "0000:3b:02.0"}, 1); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("two must-include devices, one a stray, for size 1: %q, %v; want ErrInvalidRequest", got, err)
	}
}

// TestPreferredDeterministic shuffles available and rebuilds the maps (so
// their iteration order changes) and expects the same answer every time,
// for every policy.
func TestPreferredDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, policy := range []config.AllocatePolicy{config.PolicyNone, config.PolicyPacked, config.PolicySpread} {
		t.Run(string(policy), func(t *testing.T) {
			res := pool("intel.com", "intel_sriov_dpdk", config.NetDevice)
			res.AllocatePolicy = policy
			var first []string
			for i := range 50 {
				members := preferredMembers()
				avail := ids(members)
				r.Shuffle(len(avail), func(i, j int) { avail[i], avail[j] = avail[j], avail[i] })
				held := []string{"0000:3b:02.1", "0000:3b:0a.2", "0000:af:02.0"}
				r.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				got, err := preferred(res, members, held, avail, []string{"0000:3b:0a.3"}, 6)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first = got
					continue
				}
				if !slices.Equal(got, first) {
					t.Fatalf("run %d: %q, first run %q", i, got, first)
				}
			}
		})
	}
}

func TestGroupOf(t *testing.T) {
	for _, tc := range []struct {
		dev  sysfs.Device
		want string
	}{
		{vf("0000:3b:02.1", pfA, 1, "iavf", "", 0), pfA},
		{sysfs.Device{Address: "0000:65:00.0"}, "0000:65"},
		{sysfs.Device{Address: "10000:e5:00.1"}, "10000:e5"},
		{sysfs.Device{Address: "odd"}, "odd"},
	} {
		if got := groupOf(&tc.dev); got != tc.want {
			t.Errorf("groupOf(%s) = %q, want %q", tc.dev.Address, got, tc.want)
		}
	}
}

// TestPreferredSpreadGPUs groups non-VF functions by bus: two GPUs on one
// bus and one on another spread across buses first.
func TestPreferredSpreadGPUs(t *testing.T) {
	res := pool("nvidia.com", "gpu", config.GenericPCI)
	res.AllocatePolicy = config.PolicySpread
	members := map[string]Member{}
	for _, a := range []string{"0000:65:00.0", "0000:65:00.1", "0000:66:00.0"} {
		members[a] = Member{Device: sysfs.Device{Address: a, NUMANode: 0, VFIndex: -1}, Healthy: true}
	}
	got, err := preferred(res, members, nil, ids(members), nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0000:65:00.0", "0000:66:00.0"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// preferred calls Index.Preferred with members and held as the tables give
// them, held in its order, repeats and all: every other one marked (Mark),
// the others pending, so that every table tests both.
func preferred(res *config.Resource, members map[string]Member, held []string, available, must []string, size int) ([]string, error) {
	ms := make(map[string]*Member, len(members))
	for id, m := range members {
		ms[id] = &m
	}
	var marked, pending []string
	for i, id := range held {
		if i%2 == 0 {
			marked = append(marked, id)
		} else {
			pending = append(pending, id)
		}
	}
	x := NewIndex(ms)
	x.Mark(slices.Values(marked))
	return x.Preferred(res, slices.Values(pending), available, must, size)
}

// TestPickOneIsPickAllOfOne: the pick of one device, which skips the
// tiers, takes what the pick of many would take first, for every policy,
// on random candidates (groups, NUMA nodes, loads and holds drawn from
// small sets, so that ties are common).
func TestPickOneIsPickAllOfOne(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const groups = 5
	for _, policy := range []config.AllocatePolicy{config.PolicyNone, config.PolicyPacked, config.PolicySpread} {
		for i := range 2000 {
			load := make([]int, groups)
			for g := range load {
				load[g] = r.IntN(3)
			}
			cands := make([]candidate, 1+r.IntN(12))
			for j := range cands {
				g := int32(r.IntN(groups))
				cands[j] = candidate{pos: g*64 + int32(r.IntN(64)), numa: int32(r.IntN(3) - 1), group: g, held: r.IntN(3) == 0}
				if policy != config.PolicyNone {
					cands[j].load = int32(load[g])
				}
			}
			// pickAll needs distinct members, as Preferred gives it.
			cands = slices.CompactFunc(slices.SortedFunc(slices.Values(cands), func(a, b candidate) int { return cmp.Compare(a.pos, b.pos) }),
				func(a, b candidate) bool { return a.pos == b.pos })
			r.Shuffle(len(cands), func(a, b int) { cands[a], cands[b] = cands[b], cands[a] })
			// Nodes -1, 0 and 1 in a random order, as nodeRanks gives them.
			ranks := make([]int32, 3)
			for n, r := range r.Perm(3) {
				ranks[n] = int32(r)
			}
			for j := range cands {
				cands[j].tier = tierOf(cands[j], ranks)
			}
			want := pickAll(policy, slices.Clone(cands), slices.Clone(load), 1)
			if got := pickOne(policy, slices.Clone(cands)); len(want) != 1 || got != want[0] {
				t.Fatalf("%s, case %d, ranks %v: pickOne = %d, pickAll of one = %v\ncandidates %+v\nloads %v", policy, i, ranks, got, want, cands, load)
			}
		}
	}
}
