package node

import (
	"reflect"
	"strings"
	"testing"

	"github.com/devledger/devledger/events"
)

func TestConfigChanges(t *testing.T) {
	before := map[string]string{
		"intel.com/vfio": `{"Name":"vfio","Selectors":[{"Vendors":["8086"],"Drivers":["vfio-pci"],"PCIAddresses":null}],"ExcludeTopology":false}`,
		"intel.com/net":  `{"Name":"net","Selectors":[{"Drivers":["iavf"]}]}`,
		"intel.com/gone": `{"Name":"gone"}`,
	}
	pools := []events.PoolSpec{
		{Resource: "intel.com/vfio", Definition: `{"Name":"vfio","Selectors":[{"Vendors":["8086","15b3"],"Drivers":["vfio-pci"],"PCIAddresses":["0000:3b:02.1"]}],"ExcludeTopology":true}`},
		{Resource: "intel.com/net", Definition: before["intel.com/net"]},
		{Resource: "intel.com/new", Definition: `{"Name":"new"}`},
		{Resource: "intel.com/same", Definition: `{"Name":"same"}`},
	}
	before["intel.com/same"] = `{"Name":"same"}`
	was := map[string]string{"0000:3b:02.1": "intel.com/net", "0000:3b:02.2": "intel.com/gone", "0000:3b:02.3": "intel.com/vfio"}
	now := map[string]string{"0000:3b:02.1": "intel.com/vfio", "0000:3b:02.3": "intel.com/vfio", "0000:3b:02.4": "intel.com/new"}
	got := ConfigChanges(before, pools, was, now)
	want := []events.PoolChange{
		{Pool: "intel.com/vfio", Change: "changed", Fields: []string{
			"excludeTopology: false → true",
			`selectors[0].pciAddresses: null → ["0000:3b:02.1"]`,
			`selectors[0].vendors: ["8086"] → ["8086","15b3"]`,
		}, Joined: []string{"0000:3b:02.1"}},
		{Pool: "intel.com/net", Change: "members", Left: []string{"0000:3b:02.1"}},
		{Pool: "intel.com/new", Change: "added", Joined: []string{"0000:3b:02.4"}},
		{Pool: "intel.com/gone", Change: "removed", Left: []string{"0000:3b:02.2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ConfigChanges:\n got %+v\nwant %+v", got, want)
	}
	// Before the first placement nothing moves, and a field only one side
	// has is named as missing on the other.
	got = ConfigChanges(map[string]string{"a/b": `{"Name":"b"}`}, []events.PoolSpec{{Resource: "a/b", Definition: `{"Name":"b","AllocatePolicy":"packed"}`}}, nil, nil)
	want = []events.PoolChange{{Pool: "a/b", Change: "changed", Fields: []string{`allocatePolicy: (none) → "packed"`}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ConfigChanges before placement:\n got %+v\nwant %+v", got, want)
	}
}

// A pool the config drops names the live allocations that still hold its
// devices; a leak suspect, which no container claims, holds none.
func TestPoolRemovedNamesTheClaimedHoldsOnly(t *testing.T) {
	const x, y, a = "0000:3b:02.0", "0000:3b:02.1", "example.com/a"
	st := events.NewState()
	st.Allocations[7] = events.Allocation{Seq: 7, Pool: a, DeviceIDs: []string{x},
		Binding: &events.Binding{Namespace: "ns", Pod: "p", Container: "c"}}
	st.Allocations[9] = events.Allocation{Seq: 9, Pool: a, DeviceIDs: []string{y}, LeakSuspected: true}
	st.Holders[x], st.Holders[y] = []uint64{7}, []uint64{9}
	got := PoolRemoved(a, []string{x, y}, &st, "pool removed from the config", nil)
	if !strings.HasSuffix(got.Reason, "; still held: "+x+" by #7") {
		t.Errorf("reason %q, want it to end in the hold of %s by #7 alone", got.Reason, x)
	}
}
