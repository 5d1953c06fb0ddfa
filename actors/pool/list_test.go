package pool

import (
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/sysfs"
)

func listAllocator(addrs ...string) *allocator {
	ms := make([]allocation.Member, len(addrs))
	for i, a := range addrs {
		ms[i] = allocation.Member{Device: sysfs.Device{Address: a, NUMANode: -1}, Healthy: true}
	}
	p := &allocator{cfg: &Config{Resource: &config.Resource{Prefix: "example.com", Name: "vf"}}, verdicts: events.Health{}, life: newLifetime()}
	p.members, p.order = index(ms)
	return p
}

func healths(list []*pluginapi.Device) map[string]string {
	out := map[string]string{}
	for _, d := range list {
		out[d.ID] = d.Health
	}
	return out
}

// A health change makes a new list in which only the changed devices'
// entries are new; the list handed out before stays as it was, entries
// included, since a stream may be marshalling it.
func TestDeviceListReplacesOnlyChangedEntries(t *testing.T) {
	const a, b, c = "0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"
	p := listAllocator(c, a, b)
	first := p.deviceList()
	if got := []string{first[0].ID, first[1].ID, first[2].ID}; got[0] != a || got[1] != b || got[2] != c {
		t.Fatalf("list in order %v, want %s %s %s", got, a, b, c)
	}
	if again := p.deviceList(); &again[0] != &first[0] {
		t.Error("nothing changed, yet the list was built again")
	}

	if !p.setHealth(&SetHealth{Address: b, Healthy: false, Seq: 1}) || p.setHealth(&SetHealth{Address: b, Healthy: false, Seq: 2}) {
		t.Fatal("setHealth: want a change once, then none")
	}
	if p.setHealth(&SetHealth{Address: "0000:99:00.0", Healthy: false, Seq: 3}) {
		t.Fatal("setHealth changed a device that is not a member")
	}
	second := p.deviceList()
	if h := healths(second); h[a] != pluginapi.Healthy || h[b] != pluginapi.Unhealthy || h[c] != pluginapi.Healthy {
		t.Errorf("after b failed: %v", h)
	}
	if h := healths(first); h[b] != pluginapi.Healthy {
		t.Errorf("the list handed out before changed: %v", h)
	}
	if second[0] != first[0] || second[2] != first[2] || second[1] == first[1] {
		t.Error("want new entry for b only, the others shared")
	}

	p.setHealth(&SetHealth{Address: b, Healthy: true, Seq: 4})
	p.setHealth(&SetHealth{Address: c, Healthy: false, Seq: 5})
	third := p.deviceList()
	if h := healths(third); h[a] != pluginapi.Healthy || h[b] != pluginapi.Healthy || h[c] != pluginapi.Unhealthy {
		t.Errorf("after b recovered and c failed: %v", h)
	}

	// New members: the list is built again, health kept.
	ms := []allocation.Member{{Device: sysfs.Device{Address: a, NUMANode: -1}, Healthy: true}, {Device: sysfs.Device{Address: c, NUMANode: -1}, Healthy: false}}
	p.members, p.order = index(ms)
	p.list = nil
	if h := healths(p.deviceList()); len(h) != 2 || h[a] != pluginapi.Healthy || h[c] != pluginapi.Unhealthy {
		t.Errorf("after new members: %v", h)
	}
}

// Verdicts carry the sequence number of their ledger event, and the pool
// keeps the newest: an older one is ignored, whether it comes as a verdict
// or with members; one for a device that is not a member yet is kept for
// when it joins.
// The list is of the members: new members (as a retry after a refused
// change sets them from the ledger, with no placement applied) are a new
// list, not entries patched at the old list's positions.
func TestDeviceListFollowsTheMemberList(t *testing.T) {
	const a, b = "0000:3b:02.0", "0000:3b:02.1"
	p := listAllocator(a, b)
	_ = p.deviceList() // a stream is open: the list is built
	p.setMemberList([]allocation.Member{{Device: sysfs.Device{Address: b, NUMANode: -1}, Healthy: true}})
	p.setHealth(&SetHealth{Address: b, Healthy: false, Seq: 1})
	if got := healths(p.deviceList()); len(got) != 1 || got[b] != pluginapi.Unhealthy {
		t.Errorf("list %v, want %s alone, unhealthy", got, b)
	}
}

func TestNewestVerdictWins(t *testing.T) {
	const a, b = "0000:3b:02.0", "0000:3b:02.1"
	p := listAllocator(a)
	if !p.setHealth(&SetHealth{Address: a, Healthy: false, Seq: 20}) {
		t.Fatal("a verdict changed nothing")
	}
	if p.setHealth(&SetHealth{Address: a, Healthy: true, Seq: 15}) || p.members[a].Healthy {
		t.Errorf("an older verdict was applied: %+v", p.members[a])
	}
	// b is not a member yet: its verdict waits.
	if p.setHealth(&SetHealth{Address: b, Healthy: false, Seq: 22}) {
		t.Error("a verdict on a stranger changed a member")
	}
	// The members come with older health (the node had not heard yet):
	// the newer verdicts stand; a newer one in the members wins.
	ms := []allocation.Member{
		{Device: sysfs.Device{Address: a, NUMANode: -1}, Healthy: true, HealthSeq: 10},
		{Device: sysfs.Device{Address: b, NUMANode: -1}, Healthy: true, HealthSeq: 5},
	}
	p.members, p.order = p.index(ms)
	if p.members[a].Healthy || p.members[b].Healthy {
		t.Errorf("older member health won: a %+v, b %+v", p.members[a], p.members[b])
	}
	ms[0].Healthy, ms[0].HealthSeq = true, 30 // a came back: discovered again at #30
	p.members, p.order = p.index(ms)
	if !p.members[a].Healthy || p.members[a].HealthSeq != 30 {
		t.Errorf("the newer health of the members lost: %+v", p.members[a])
	}
	if p.setHealth(&SetHealth{Address: a, Healthy: false, Seq: 25}) {
		t.Error("a verdict older than the rediscovery was applied")
	}
}

// GetPreferredAllocation ranks the members as they are now: the index it
// keeps between calls follows health changes and new members.
func TestPreferredFollowsTheMembers(t *testing.T) {
	const a, b, c = "0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"
	p := listAllocator(a, b, c)
	p.life = newLifetime()
	first := func() string {
		t.Helper()
		resp, err := p.preferred(&pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: []string{c, b, a}, AllocationSize: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerResponses[0].DeviceIDs[0]
	}
	if got := first(); got != a {
		t.Fatalf("preferred %s of healthy members, want %s", got, a)
	}
	p.setHealth(&SetHealth{Address: a, Healthy: false, Seq: 1})
	if got := first(); got != b {
		t.Errorf("preferred %s with %s unhealthy, want %s", got, a, b)
	}
	ms := []allocation.Member{
		{Device: sysfs.Device{Address: b, NUMANode: -1}, HeldElsewhere: []allocation.Hold{{Pool: "example.com/other", Seq: 7}}},
		{Device: sysfs.Device{Address: c, NUMANode: -1}, Healthy: true},
	}
	p.setMemberList(ms)
	if got := first(); got != c {
		t.Errorf("preferred %s with %s gone and %s held elsewhere, want %s", got, a, b, c)
	}
}

// GetPreferredAllocation offers a held device last, as the pool's holds
// are now: one an Allocate has in flight, then its landed allocation,
// and, once the reconciler's release comes, no longer.
func TestPreferredFollowsTheHolds(t *testing.T) {
	const z = "0000:3b:02.2"
	f, g, allocated := poolWithAllocateHeld(t, func(c *Config) { c.Members = append(c.Members, member(z)) })
	first := func() string {
		t.Helper()
		reply := make(chan preferredReply, 1)
		f.Sys.Root.Send(f.Child, &preferredReq{reply: reply, req: &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{z, y, x}, AllocationSize: 1}}}})
		select {
		case r := <-reply:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.resp.ContainerResponses[0].DeviceIDs[0]
		case <-time.After(10 * time.Second):
			t.Fatal("the pool never answered GetPreferredAllocation")
			return ""
		}
	}
	if got := first(); got != y {
		t.Errorf("preferred %s with an Allocate of %s in flight, want %s", got, x, y)
	}
	g.release()
	if err := <-allocated; err != nil {
		t.Fatal(err)
	}
	seq := actortest.Next[*AllocationRecorded](t, f).Event.Seq
	if got := first(); got != y {
		t.Errorf("preferred %s with %s allocated (#%d), want %s", got, x, seq, y)
	}
	f.Sys.Root.Send(f.Child, &Reconciled{Event: events.Envelope{Seq: seq + 1,
		Payload: events.DevicesReleased{AllocationSeq: seq, Pool: "example.com/vf", DeviceIDs: []string{x}}}})
	if got := first(); got != x {
		t.Errorf("preferred %s with %s released, want %s", got, x, x)
	}
}
