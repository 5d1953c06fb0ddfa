package node

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/devledger/devledger/actors/pool"
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
		case !config.SameDefinition(old, spec.Definition):
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

// PoolRemoved records that the pool name lost the members removed (the
// config dropped it, or a start found none of them there); why says when,
// and moves where each device goes (nil when not known yet). It names the
// live allocations of the pool, in allocs, that still hold a member: they
// stay live until their containers go, and a pool the device joins lists
// it as held until then.
func PoolRemoved(name string, removed []string, allocs *events.State, why string, moves map[string]string) events.PoolMembershipChanged {
	var held []string
	for _, addr := range removed {
		for _, seq := range allocs.Holders[addr] {
			if a := allocs.Allocations[seq]; a.Pool == name && a.Claimed() {
				held = append(held, fmt.Sprintf("%s by #%d", addr, seq))
			}
		}
	}
	reason := why + pool.MovedList("moved to", removed, moves)
	if len(held) > 0 {
		reason += "; still held: " + strings.Join(held, ", ")
	}
	return events.PoolMembershipChanged{Pool: name, Removed: slices.Clone(removed), Reason: reason}
}
