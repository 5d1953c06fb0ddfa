package node

import (
	"maps"
	"slices"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
)

// ConfigChanges says, for a ConfigApplied, what pools (the new config's, in
// file order) change from before (each old pool's definition). was and now
// place each device (address → pool) before and under the new config; both
// are nil when no device is placed yet. A pool appears once: added,
// removed, changed (its definition) or with only its members changed.
func ConfigChanges(before map[string]string, pools []events.PoolSpec, was, now map[string]string) []events.PoolChange {
	joined, left := map[string][]string{}, map[string][]string{}
	for _, addr := range slices.Sorted(maps.Keys(was)) {
		if pool := was[addr]; now[addr] != pool {
			left[pool] = append(left[pool], addr)
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(now)) {
		if pool := now[addr]; was[addr] != pool {
			joined[pool] = append(joined[pool], addr)
		}
	}
	var out []events.PoolChange
	defined := make(map[string]bool, len(pools))
	for _, spec := range pools {
		defined[spec.Resource] = true
		c := events.PoolChange{Pool: spec.Resource, Joined: joined[spec.Resource], Left: left[spec.Resource]}
		old, ok := before[spec.Resource]
		switch {
		case !ok:
			c.Change = "added"
		case old != spec.Definition:
			c.Change, c.Fields = "changed", config.DefinitionChanges(old, spec.Definition)
		case len(c.Joined) > 0 || len(c.Left) > 0:
			c.Change = "members"
		default:
			continue
		}
		out = append(out, c)
	}
	for _, name := range slices.Sorted(maps.Keys(before)) {
		if !defined[name] {
			out = append(out, events.PoolChange{Pool: name, Change: "removed", Left: left[name]})
		}
	}
	return out
}
