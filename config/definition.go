package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Definition is a pool's configuration as canonical JSON, without where it
// sits in the file: a pool added above another does not change the other.
func (r *Resource) Definition() string {
	c := *r
	c.Path = ""
	c.Selectors = slices.Clone(r.Selectors)
	for i := range c.Selectors {
		c.Selectors[i].Path = ""
	}
	def, _ := json.Marshal(&c)
	return string(def)
}

// SameDefinition reports whether two pool definitions (canonical JSON)
// configure the same pool: DefinitionChanges names nothing between them.
// A definition an older build recorded may differ from this build's of the
// same entry in text alone, and a daemon upgraded on the node must not
// take that for a new config.
func SameDefinition(a, b string) bool { return a == b || len(DefinitionChanges(a, b)) == 0 }

// DefinitionChanges lists, sorted, the fields where two pool definitions
// (canonical JSON) differ, as "path: old → new". Objects are walked into (a
// selector's change names it); a list of plain values is one field. What
// an older build's definition holds or lacks only because of its build is
// no change: where the pool and its selectors sat in the file (recorded
// before Definition left it out), and a field added since at its zero
// value, beside fields both name (a new selector's fields all count).
func DefinitionChanges(old, new string) []string {
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
		case placement(path):
			continue
		case !inA:
			if unwritten(path, y, a) {
				continue
			}
			x = "(none)"
		case !inB:
			if unwritten(path, x, b) {
				continue
			}
			y = "(none)"
		case x == y:
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", path, x, y))
	}
	return out
}

// placement reports whether path is where a pool or a selector sits in
// the file, which an older build's definitions held.
func placement(path string) bool {
	return path == "path" || strings.HasPrefix(path, "selectors[") && strings.HasSuffix(path, "].path")
}

// unwritten reports whether a field that only one definition has, at
// value, is one the other's build did not write: a zero value (no
// additionalInfo key: any key there is the config's), in an object the
// other definition has fields of.
func unwritten(path, value string, other map[string]string) bool {
	switch value {
	case "false", "0", `""`, "null", "[]", "{}", `"0s"`:
	default:
		return false
	}
	if path == "additionalInfo" || strings.HasPrefix(path, "additionalInfo.") {
		return false
	}
	parent := path[:max(strings.LastIndex(path, "."), 0)]
	for p := range other {
		if p[:max(strings.LastIndex(p, "."), 0)] == parent {
			return true
		}
	}
	return false
}

// flattenJSON puts each leaf of a JSON document into out, keyed by its
// path (selectors[0].vendors) and written as the config file writes it: a
// pfNames or rootDevices entry as written, a duration as "10s", the keys
// under additionalInfo as given. A document that does not parse is one
// leaf, its text.
func flattenJSON(doc string, out map[string]string) {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		out["definition"] = doc
		return
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				if path != "additionalInfo" && !strings.HasPrefix(path, "additionalInfo.") {
					k = fileName(k)
				}
				walk(strings.TrimPrefix(path+"."+k, "."), y)
			}
			return
		case []any:
			if raws, ok := rawEntries(x); ok {
				v = raws // PFSelectors: their parsed parts say nothing more
			} else if slices.ContainsFunc(x, func(y any) bool { _, obj := y.(map[string]any); return obj }) {
				for i, y := range x {
					walk(fmt.Sprintf("%s[%d]", path, i), y)
				}
				return
			}
		case float64:
			if durationFields[path] {
				v = time.Duration(x).String()
			}
		}
		b, _ := json.Marshal(v)
		out[path] = string(b)
	}
	walk("", v)
}

// durationFields are the paths of a definition that hold a time.Duration,
// which JSON writes in nanoseconds.
var durationFields = map[string]bool{"health.holdDown": true, "health.debounce": true, "health.probeInterval": true}

// rawEntries returns the entries as written of a list of PFSelectors
// (objects with a Raw field); false for any other list.
func rawEntries(list []any) ([]string, bool) {
	raws := make([]string, 0, len(list))
	for _, y := range list {
		obj, _ := y.(map[string]any)
		raw, ok := obj["Raw"].(string)
		if !ok {
			return nil, false
		}
		raws = append(raws, raw)
	}
	return raws, len(raws) > 0
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
