package node

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

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
			c.Change, c.Fields = "changed", definitionChanges(old, spec.Definition)
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

// definitionChanges lists, sorted, the fields where two pool definitions
// (canonical JSON) differ, as "path: old → new". Objects are walked into (a
// selector's change names it); a list of plain values is one field.
func definitionChanges(old, new string) []string {
	a, b := map[string]string{}, map[string]string{}
	flattenJSON(old, a)
	flattenJSON(new, b)
	paths := maps.Clone(a) // the union of both's paths
	maps.Copy(paths, b)
	var out []string
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		x, inA := a[path]
		y, inB := b[path]
		switch {
		case !inA:
			x = "(none)"
		case !inB:
			y = "(none)"
		case x == y:
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", path, x, y))
	}
	return out
}

// flattenJSON puts each leaf of a JSON document into out, keyed by its
// path (selectors[0].vendors). A document that does not parse is one
// leaf, its text.
func flattenJSON(doc string, out map[string]string) {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		out["definition"] = doc
		return
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(strings.TrimPrefix(path+"."+fileName(k), "."), x)
			}
			return
		case []any:
			if slices.ContainsFunc(v, func(x any) bool { _, obj := x.(map[string]any); return obj }) {
				for i, x := range v {
					walk(fmt.Sprintf("%s[%d]", path, i), x)
				}
				return
			}
		}
		b, _ := json.Marshal(v)
		out[path] = string(b)
	}
	walk("", v)
}

// fileName is the name the config file gives a field of a definition,
// whose keys are the Go fields': Name is resourceName, a leading
// initialism is lower case (PCIAddresses is pciAddresses, IsRDMA isRdma).
func fileName(goName string) string {
	if name, ok := renamed[goName]; ok {
		return name
	}
	r := []rune(goName)
	n := 0
	for n < len(r) && unicode.IsUpper(r[n]) {
		n++
	}
	if n > 1 && n < len(r) {
		n-- // the last capital starts the next word: PCIAddresses
	}
	for i := range n {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// renamed are the fields whose file name fileName's rule does not give.
var renamed = map[string]string{"Name": "resourceName", "Prefix": "resourcePrefix", "IsRDMA": "isRdma"}
