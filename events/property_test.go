package events

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// stream generates a random but valid event stream: what a daemon could
// write, restarts, config changes, conflicts and stale releases included. It
// folds what it generates to pick sensible targets.
type stream struct {
	rng   *rand.Rand
	s     State
	seq   uint64
	at    time.Time
	boots int
}

var (
	streamPools   = []string{"intel.com/sriov_a", "intel.com/sriov_b", "nvidia.com/gpu", "example.com/fpga", "example.com/qat"}
	streamDevices = func() []string {
		var as []string
		for bus := range 4 {
			for fn := range 10 {
				as = append(as, fmt.Sprintf("0000:%02x:02.%d", 0x3b+bus, fn))
			}
		}
		return as
	}()
)

func newStream(seed uint64) *stream {
	return &stream{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), s: NewState(), at: baseTime}
}

func (g *stream) pick(from []string) string { return from[g.rng.IntN(len(from))] }

func (g *stream) some(from []string, most int) []string {
	n := 1 + g.rng.IntN(most)
	out := make([]string, 0, n)
	for range n {
		out = append(out, g.pick(from))
	}
	return out
}

func (g *stream) liveAllocation() (Allocation, bool) {
	if len(g.s.Allocations) == 0 {
		return Allocation{}, false
	}
	seqs := slices.Sorted(maps.Keys(g.s.Allocations))
	return g.s.Allocations[seqs[g.rng.IntN(len(seqs))]], true
}

func (g *stream) payload() Payload {
	pool := g.pick(streamPools)
	dev := g.pick(streamDevices)
	switch r := g.rng.IntN(100); {
	case r < 20:
		ids := g.some(streamDevices, 3)
		if m := g.s.Pools[pool].Members; len(m) > 0 && g.rng.IntN(10) > 0 {
			ids = g.some(m, 2)
		}
		var supersedes []uint64
		for _, id := range ids {
			for _, seq := range g.s.Holders[id] {
				if g.s.Allocations[seq].Pool == pool && g.rng.IntN(2) == 0 {
					supersedes = append(supersedes, seq)
				}
			}
		}
		return DevicesAllocated{Pool: pool, DeviceIDs: ids, ContainerIndex: g.rng.IntN(3),
			Response: ContainerAllocation{Envs: map[string]string{"PCIDEVICE_X": ids[0]}, CDIDevices: ids}, Supersedes: supersedes}
	case r < 35:
		a, ok := g.liveAllocation()
		if !ok || g.rng.IntN(20) == 0 {
			return DevicesReleased{AllocationSeq: g.rng.Uint64N(g.seq + 2), Pool: pool, Reason: "stale"}
		}
		return DevicesReleased{AllocationSeq: a.Seq, Pool: a.Pool, DeviceIDs: a.DeviceIDs, HeldFor: g.at.Sub(a.At)}
	case r < 43:
		if a, ok := g.liveAllocation(); ok {
			return AllocationBound{AllocationSeq: a.Seq, Pool: a.Pool, DeviceIDs: a.DeviceIDs,
				Namespace: "ns", Pod: fmt.Sprintf("pod-%d", g.rng.IntN(50)), UID: "u", Container: "c"}
		}
		return AllocationBound{AllocationSeq: g.seq + 1000, Pool: pool}
	case r < 51:
		return DeviceHealthChanged{Address: dev, Healthy: g.rng.IntN(2) == 0, Reason: g.pick([]string{"", "link down", "link up"})}
	case r < 59:
		p := PoolMembershipChanged{Pool: pool, Reason: "scan"}
		if g.rng.IntN(3) > 0 {
			p.Added = g.some(streamDevices, 4)
		}
		if m := g.s.Pools[pool].Members; len(m) > 0 && g.rng.IntN(2) == 0 {
			p.Removed = g.some(m, 3)
		}
		return p
	case r < 64:
		f := facts(dev)
		f.NUMANode = g.rng.IntN(2)
		return DeviceDiscovered{Device: f}
	case r < 69:
		f := facts(dev)
		f.Driver = g.pick([]string{"vfio-pci", "iavf", "mlx5_core"})
		return DeviceChanged{Device: f, Changed: []string{"driver"}}
	case r < 73:
		return DeviceRemoved{Address: dev, Reason: g.pick([]string{"", "gone from sysfs"})}
	case r < 77:
		return PluginServing{Pool: pool, Socket: pool + ".sock", Mode: g.pick([]string{"legacy", "watcher"})}
	case r < 81:
		return PluginRegistered{Pool: pool, Socket: pool + ".sock", Mode: "watcher"}
	case r < 84:
		return RegistrationFailed{Pool: pool, Socket: pool + ".sock", Error: "refused", Attempt: 1 + g.rng.IntN(5)}
	case r < 86:
		return SocketLost{Pool: pool, Socket: pool + ".sock"}
	case r < 87:
		return KubeletRestarted{Socket: "kubelet.sock"}
	case r < 88:
		return KubeletStopped{Socket: "kubelet.sock", Reason: "streams ended"}
	case r < 90:
		var specs []PoolSpec
		for _, name := range streamPools {
			if g.rng.IntN(4) > 0 {
				specs = append(specs, PoolSpec{Resource: name, DeviceType: "netDevice", AllocatePolicy: g.pick([]string{"", "packed"})})
			}
		}
		return ConfigApplied{Path: "config.json", SHA256: fmt.Sprint(g.rng.Uint64()), Pools: specs}
	case r < 92:
		return ConfigRejected{Path: "config.json", Errors: []string{"bad", fmt.Sprint(g.seq)}}
	case r < 95:
		return AllocationConflict{Pool: pool, Device: dev, Claims: []Claim{{AllocationSeq: g.seq}, {Pod: "p"}}, Reason: "twice"}
	case r < 97:
		g.boots++
		return DaemonStarted{Version: "v1", PID: g.rng.IntN(1 << 20)}
	case r < 98:
		return DaemonStopped{Reason: "SIGTERM", Clean: g.rng.IntN(2) == 0}
	case r < 99:
		return SnapshotTaken{Seq: g.seq, Size: g.rng.IntN(1 << 20)}
	}
	return EventsDropped{FromSeq: 1, ToSeq: g.seq / 2, Count: g.seq / 2}
}

// next returns the next event. Some payloads come as pointers, as a live
// daemon might build them; their records and folds are the same.
func (g *stream) next() Envelope {
	p := g.payload()
	g.seq++
	g.at = g.at.Add(time.Duration(1 + g.rng.Int64N(int64(time.Second))))
	e := New(p, g.at, fmt.Sprintf("boot-%d", g.boots))
	e.Seq = g.seq
	if g.rng.IntN(10) == 0 {
		ptr := reflect.New(reflect.TypeOf(p))
		ptr.Elem().Set(reflect.ValueOf(p))
		e.Payload = ptr.Interface().(Payload)
	}
	g.s = Apply(g.s, e)
	return e
}

func genStream(seed uint64, n int) []Envelope {
	g := newStream(seed)
	es := make([]Envelope, n)
	for i := range es {
		es[i] = g.next()
	}
	return es
}

func streamLength(t *testing.T) int {
	if testing.Short() {
		return 1000
	}
	return 5000
}

// Folding from a snapshot taken anywhere equals folding from scratch; the
// snapshot itself loses nothing.
func TestFoldFromSnapshot(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			es := genStream(seed, streamLength(t))
			full := fold(NewState(), es...)
			for _, cut := range []int{0, 1, len(es) / 3, len(es) / 2, len(es) - 1, len(es)} {
				s := fold(NewState(), es[:cut]...)
				snap, err := MarshalState(s)
				if err != nil {
					t.Fatal(err)
				}
				restored, err := UnmarshalState(snap)
				if err != nil {
					t.Fatalf("UnmarshalState at %d: %v", cut, err)
				}
				if !reflect.DeepEqual(restored, normalize(s)) {
					t.Fatalf("the snapshot at %d lost facts", cut)
				}
				again, _ := MarshalState(restored)
				if string(again) != string(snap) {
					t.Fatalf("a restored state encodes differently at %d", cut)
				}
				assertState(t, fold(restored, es[cut:]...), full)
			}
		})
	}
}

// Replay folds records; the live daemon folds the events it built. Both
// must reach the same state, whether replay decodes each record in full or
// lets UnmarshalForFold decode what the fold reads.
func TestReplayEqualsLive(t *testing.T) {
	es := genStream(4, streamLength(t))
	live, replayed, folded := NewState(), NewState(), NewState()
	for _, e := range es {
		live = Apply(live, e)
		rec := mustMarshal(t, e)
		d, err := Unmarshal(rec)
		if err != nil {
			t.Fatalf("event %d: %v", e.Seq, err)
		}
		replayed = Apply(replayed, d)
		f, err := UnmarshalForFold(rec)
		if err != nil {
			t.Fatalf("event %d: %v", e.Seq, err)
		}
		folded = Apply(folded, f)
	}
	assertState(t, replayed, live)
	assertState(t, folded, live)
}

func TestApplyDeterministic(t *testing.T) {
	es := genStream(5, streamLength(t))
	a, b := fold(NewState(), es...), fold(NewState(), es...)
	ja, _ := MarshalState(a)
	jb, _ := MarshalState(b)
	if string(ja) != string(jb) {
		t.Fatal("two folds of one stream differ")
	}
	// One event applied to two copies of one state.
	mid := fold(NewState(), es[:len(es)-100]...)
	for _, e := range es[len(es)-100:] {
		x, y := Apply(mid.Clone(), e), Apply(mid.Clone(), e)
		if !x.Equal(y) {
			t.Fatalf("event %d (%s) applied twice gives two states", e.Seq, e.Type)
		}
		mid = x
	}
}

// The invariants of the fold hold after every event of a random stream.
func TestFoldInvariants(t *testing.T) {
	g := newStream(6)
	for range streamLength(t) {
		e := g.next()
		if err := checkInvariants(g.s); err != nil {
			t.Fatalf("after event %d (%s %+v): %v", e.Seq, e.Type, e.Payload, err)
		}
		if g.s.Seq != e.Seq || !g.s.Time.Equal(e.Time) {
			t.Fatalf("after event %d the state is at %d", e.Seq, g.s.Seq)
		}
	}
}

func checkInvariants(s State) error {
	for name, p := range s.Pools {
		if p.Spec.Resource != name {
			return fmt.Errorf("pool %s names itself %s", name, p.Spec.Resource)
		}
		if !slices.IsSorted(p.Members) || len(slices.Compact(slices.Clone(p.Members))) != len(p.Members) {
			return fmt.Errorf("pool %s: members %q not sorted and unique", name, p.Members)
		}
		for _, m := range p.Members {
			if _, ok := s.Devices[m]; !ok {
				return fmt.Errorf("pool %s: member %s is no device", name, m)
			}
		}
	}
	for addr, d := range s.Devices {
		if d.Facts.Address != addr {
			return fmt.Errorf("device %s says it is %s", addr, d.Facts.Address)
		}
		if d.Pool == "" {
			continue
		}
		if _, ok := slices.BinarySearch(s.Pools[d.Pool].Members, addr); !ok {
			return fmt.Errorf("device %s is in pool %s, which does not list it", addr, d.Pool)
		}
	}
	for seq, a := range s.Allocations {
		if a.Seq != seq {
			return fmt.Errorf("allocation %d says it is %d", seq, a.Seq)
		}
		for _, id := range a.DeviceIDs {
			if !slices.Contains(s.Holders[id], seq) {
				return fmt.Errorf("allocation %d holds %s, which does not list it", seq, id)
			}
		}
	}
	for id, seqs := range s.Holders {
		if len(seqs) == 0 {
			return fmt.Errorf("holders of %s: an empty list stays", id)
		}
		for _, seq := range seqs {
			if !slices.Contains(s.Allocations[seq].DeviceIDs, id) {
				return fmt.Errorf("holders of %s: allocation %d is not live or does not hold it", id, seq)
			}
		}
	}
	return nil
}

func TestCloneSharesNothing(t *testing.T) {
	g := newStream(7)
	for range streamLength(t) {
		g.next()
	}
	// Make sure every kind of reference is there to be shared.
	g.s = fold(g.s,
		ev(g.seq+1, ConfigRejected{Errors: []string{"e"}}),
		ev(g.seq+2, DevicesAllocated{Pool: poolA, DeviceIDs: []string{dev1}}),
		ev(g.seq+3, AllocationBound{AllocationSeq: g.seq + 2, Pool: poolA, Pod: "p"}),
		ev(g.seq+4, LedgerDamaged{Problem: "p1"}),
		ev(g.seq+5, DamageAcknowledged{Problems: []string{"p1"}}),
		ev(g.seq+6, LedgerDamaged{Problem: "p2"}),
	)
	orig := g.s
	before, _ := MarshalState(orig)
	c := orig.Clone()
	if !c.Equal(orig) {
		t.Fatal("a clone differs from its original")
	}
	shared := refs(reflect.ValueOf(orig), "s", map[uintptr]string{})
	for p, path := range refs(reflect.ValueOf(c), "clone", map[uintptr]string{}) {
		if other, ok := shared[p]; ok {
			t.Errorf("%s shares memory with %s", path, other)
		}
	}

	// Change everything in the clone, then fold more into it.
	c.Config.LastError[0] = "changed"
	for k, p := range c.Pools {
		if len(p.Members) > 0 {
			p.Members[0] = "changed"
		}
		delete(c.Pools, k)
	}
	for _, d := range c.Devices {
		if len(d.Facts.Interfaces) > 0 {
			d.Facts.Interfaces[0] = "changed"
		}
	}
	for _, a := range c.Allocations {
		a.DeviceIDs[0] = "changed"
		if a.Binding != nil {
			a.Binding.Pod = "changed"
		}
	}
	for _, h := range c.Holders {
		h[0] = 0
	}
	c.Ledger.Damage[0], c.Ledger.Acknowledged[0] = "changed", "changed"
	c = fold(c, genStream(8, 500)...)
	if after, _ := MarshalState(orig); string(after) != string(before) {
		t.Fatal("changing the clone changed the original")
	}
}

// refs records the address of every map, slice array and pointer under v.
func refs(v reflect.Value, path string, into map[uintptr]string) map[uintptr]string {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			into[v.Pointer()] = path
			refs(v.Elem(), path, into)
		}
	case reflect.Map:
		if !v.IsNil() {
			into[v.Pointer()] = path
			for it := v.MapRange(); it.Next(); {
				refs(it.Value(), fmt.Sprintf("%s[%v]", path, it.Key()), into)
			}
		}
	case reflect.Slice:
		if v.Cap() > 0 {
			into[v.Pointer()] = path
			for i := range v.Len() {
				refs(v.Index(i), fmt.Sprintf("%s[%d]", path, i), into)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				refs(v.Field(i), path+"."+v.Type().Field(i).Name, into)
			}
		}
	}
	return into
}

func TestEqual(t *testing.T) {
	s := fold(NewState(), baseEvents()...)
	if !s.Equal(s.Clone()) {
		t.Error("a state differs from its clone")
	}
	// Nil and empty, UTC and another zone, are the same facts.
	o := s.Clone()
	o.Time = o.Time.In(time.FixedZone("X", 7200))
	p := o.Pools[poolA]
	p.Members = append(make([]string, 0, 8), p.Members...)
	o.Pools[poolA] = p
	o.Config.LastError = []string{}
	a := s.Allocations[allocSeq]
	a.DeviceIDs = nil
	s.Allocations[allocSeq] = a
	a.DeviceIDs = []string{}
	o.Allocations[allocSeq] = a
	if !s.Equal(o) {
		t.Error("a state differs from itself in another zone")
	}
	o.Pools[poolA] = Pool{}
	if s.Equal(o) {
		t.Error("states with different pools are equal")
	}
	if !NewState().Equal(State{}) {
		t.Error("NewState differs from the zero State")
	}
}

// Every time in a state compares by instant: each one moved to another
// zone leaves the state equal, and moved in time makes it differ.
func TestEqualComparesEveryTimeByInstant(t *testing.T) {
	es := baseEvents()
	for _, p := range []Payload{
		AllocationBound{AllocationSeq: 9, Pool: poolA, DeviceIDs: []string{dev1}, Namespace: "ns", Pod: "p", Container: "c"},
		KubeletStopped{Socket: "k.sock"}, KubeletRestarted{Socket: "k.sock"}, KubeletStopped{Socket: "k.sock"},
		AttributionChanged{Available: false}, DaemonStopped{Reason: "SIGTERM"},
	} {
		es = append(es, ev(uint64(len(es)+1), p))
	}
	s := fold(NewState(), es...)
	zone := time.FixedZone("X", 7200)
	o := s.Clone()
	if n := eachTime(reflect.ValueOf(&o).Elem(), func(t time.Time) time.Time { return t.In(zone) }); n < 10 {
		t.Fatalf("%d times set in the state, want the fold to set at least 10", n)
	}
	if !s.Equal(o) {
		t.Errorf("a state differs from itself in another zone:\n%+v\n%+v", s, o)
	}
	eachTime(reflect.ValueOf(&o).Elem(), func(t time.Time) time.Time { return t.Add(time.Second) })
	if s.Equal(o) {
		t.Error("a state equals itself a second later")
	}
}

// eachTime puts f(t) in the place of every non-zero time t in v (settable)
// and returns how many there were.
func eachTime(v reflect.Value, f func(time.Time) time.Time) int {
	if t, ok := v.Interface().(time.Time); ok {
		if t.IsZero() {
			return 0
		}
		v.Set(reflect.ValueOf(f(t)))
		return 1
	}
	n := 0
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n += eachTime(v.Field(i), f)
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			n += eachTime(v.Elem(), f)
		}
	case reflect.Slice:
		for i := range v.Len() {
			n += eachTime(v.Index(i), f)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			n += eachTime(e, f)
			v.SetMapIndex(k, e)
		}
	}
	return n
}

func TestUnmarshalStateErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"not JSON", "\x00", ErrCorrupt},
		{"wrong shape", `{"format":1,"state":{"pools":[]}}`, ErrCorrupt},
		{"no format", `{"state":{}}`, ErrSnapshotFormat},
		{"newer format", `{"format":6,"state":{}}`, ErrSnapshotFormat},
		{"newer shape under a format this build reads", `{"format":3,"state":{"kubelet":{"flaps":2}}}`, ErrSnapshotFormat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := UnmarshalState([]byte(tc.in)); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	s, err := UnmarshalState([]byte(`{"format":1,"state":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	// A state read back is ready for Apply.
	fold(s, baseEvents()...)
}
