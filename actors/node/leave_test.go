package node

import (
	"math"
	"slices"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// A device placed out of a pool that may still give it out is listed as
// held in its new pool until that pool lets it go (in the placement that
// moved it, or a later one) or stops; a device placed back in the pool it
// was leaving needs no letting go; one placed in no pool for a while is
// held wherever it lands until its old pool lets it go; a pool removed by
// a reload holds what
// it listed until it has stopped, wherever that goes, even into a pool of
// the same name added again.
func TestMovedDeviceHeldUntilItsOldPoolLetsGo(t *testing.T) {
	const x, y = "0000:3b:02.0", "0000:3b:02.1"
	const a, b, c = "example.com/a", "example.com/b", "example.com/c"
	pidA, pidB, pidC := actor.NewPID("nonhost", "a"), actor.NewPID("nonhost", "b"), actor.NewPID("nonhost", "c")
	n := &coordinator{
		owner:    map[string]string{x: a, y: a},
		pools:    map[string]*actor.PID{a: pidA, b: pidB, c: pidC},
		leaving:  map[string][]leave{},
		stopping: map[string]poolStopped{},
		allocs:   events.NewState(),
	}
	usable := func(addr, pool string) bool {
		return n.member(sysfs.Device{Address: addr}, pool).Usable()
	}
	place := func(owner map[string]string) {
		n.gen++
		n.leave(owner)
		n.owner = owner
	}

	place(map[string]string{x: b, y: a}) // gen 1: x moves to b
	if usable(x, b) || !usable(y, a) {
		t.Fatalf("after the move: x usable in b %v (want false), y in a %v (want true)", usable(x, b), usable(y, a))
	}
	if hs := n.member(sysfs.Device{Address: x}, b).HeldElsewhere; len(hs) != 1 || !hs[0].Leaving() || hs[0].Pool != a {
		t.Errorf("x in b is held by %v, want the move from a", hs)
	}
	if got := n.letGo(pidB, 1, []string{x}); got != nil {
		t.Errorf("b let go of %v, which it never held", got)
	}
	if got := n.letGo(pidA, 0, []string{x}); got != nil {
		t.Errorf("a, in a placement before the move, let go of %v", got)
	}
	if got := n.letGo(pidA, 1, []string{x}); !slices.Equal(got, []string{x}) || !usable(x, b) {
		t.Errorf("a let go of %v in gen 1; x usable in b: %v; want x, true", got, usable(x, b))
	}

	// x goes to no pool, then to c, before b lets it go: held in c by b.
	place(map[string]string{y: a})
	place(map[string]string{x: c, y: a})
	if hs := n.member(sysfs.Device{Address: x}, c).HeldElsewhere; len(hs) != 1 || hs[0].Pool != b {
		t.Errorf("x, in no pool and then c, is held in c by %v, want the move from b", hs)
	}
	if got := n.letGo(pidB, n.gen, []string{x}); !slices.Equal(got, []string{x}) || !usable(x, c) {
		t.Errorf("b let go of %v, x usable in c %v; want x, true", got, usable(x, c))
	}
	place(map[string]string{x: b, y: a}) // back in b, leaving c
	if got := n.letGo(pidC, n.gen, []string{x}); !slices.Equal(got, []string{x}) || !usable(x, b) {
		t.Errorf("c let go of %v, x usable in b %v; want x, true", got, usable(x, b))
	}

	// x moves to c, and back to b before c lets it go: b lists it as
	// held by nothing but c, which must let it go; then c takes it back.
	place(map[string]string{x: c, y: a})
	place(map[string]string{x: b, y: a})
	if hs := n.member(sysfs.Device{Address: x}, b).HeldElsewhere; len(hs) != 1 || hs[0].Pool != c {
		t.Errorf("x back in b is held by %v, want the move from c only", hs)
	}
	place(map[string]string{x: c, y: a}) // back in c, leaving b
	if hs := n.member(sysfs.Device{Address: x}, c).HeldElsewhere; len(hs) != 1 || hs[0].Pool != b {
		t.Errorf("x back in c is held by %v, want the move from b only", hs)
	}

	// A reload removes a: y goes to b, held until a has stopped.
	delete(n.pools, a)
	n.stopping[pidA.Id] = poolStopped{pool: a, pid: pidA, members: map[string]bool{y: true}}
	place(map[string]string{x: c, y: b})
	if usable(y, b) {
		t.Error("y usable in b while a, removed, is still stopping")
	}
	if got := n.letGo(pidA, math.MaxUint64, nil); !slices.Equal(got, []string{y}) || !usable(y, b) {
		t.Errorf("a stopped: let go of %v, y usable in b %v; want y, true", got, usable(y, b))
	}

	// A reload removes c, and x goes to no pool; a later reload adds c
	// again while the old c is still stopping: x, placed in the new c, is
	// held there until the old one has stopped.
	if got := n.letGo(pidB, n.gen, []string{x}); !slices.Equal(got, []string{x}) {
		t.Errorf("b let go of %v, want x", got)
	}
	delete(n.pools, c)
	n.stopping[pidC.Id] = poolStopped{pool: c, pid: pidC, members: map[string]bool{x: true}}
	place(map[string]string{y: b})
	pidC2 := actor.NewPID("nonhost", "c2")
	n.pools[c] = pidC2
	place(map[string]string{x: c, y: b})
	place(map[string]string{x: c, y: b}) // still one hold, not two
	if hs := n.member(sysfs.Device{Address: x}, c).HeldElsewhere; len(hs) != 1 || hs[0].Pool != c {
		t.Errorf("x in the new c is held by %v, want the old c's leaving once", hs)
	}
	if got := n.letGo(pidC, math.MaxUint64, nil); !slices.Equal(got, []string{x}) || !usable(x, c) {
		t.Errorf("the old c stopped: let go of %v, x usable in the new c %v; want x, true", got, usable(x, c))
	}
}

// A pool's own live allocation of a device does not hold it against that
// pool (it gives it out again, superseding it), only against the others.
func TestAPoolsOwnAllocationIsNoHoldElsewhere(t *testing.T) {
	const x = "0000:3b:02.0"
	const a, b = "example.com/a", "example.com/b"
	st := events.NewState()
	st.Allocations[7] = events.Allocation{Seq: 7, Pool: a, DeviceIDs: []string{x},
		Binding: &events.Binding{Namespace: "ns", Pod: "p", Container: "c"}}
	st.Holders[x] = []uint64{7}
	n := &coordinator{pools: map[string]*actor.PID{}, leaving: map[string][]leave{}, allocs: st}
	if hs := n.heldElsewhere(x, a); len(hs) != 0 {
		t.Errorf("x in a, which holds it by #7, is held elsewhere by %v, want none", hs)
	}
	if hs := n.heldElsewhere(x, b); len(hs) != 1 || hs[0].Pool != a || hs[0].Seq != 7 {
		t.Errorf("x in b is held by %v, want a's #7", hs)
	}
}
