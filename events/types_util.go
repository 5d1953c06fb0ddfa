package events

import (
	"slices"
	"strings"
)

func sortTypes(ts []Type) { slices.Sort(ts) }

func joinTypes(ts []Type) string {
	ss := make([]string, len(ts))
	for i, t := range ts {
		ss[i] = string(t)
	}
	return strings.Join(ss, ", ")
}
