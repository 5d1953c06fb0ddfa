package grpcapi

import (
	"fmt"
	"strings"
	"testing"
)

// What a message quotes of a client's device IDs: a real one whole, one
// past MaxQuotedID bytes cut at a character boundary with its length, and
// of a list the first 16 and a count.
func TestQuotedIDsAreBounded(t *testing.T) {
	long := strings.Repeat("a", MaxQuotedID-1) + "é" + "z" // é straddles the cut
	many := make([]string, 18)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		name, got, want string
	}{
		{"a PCI address", QuoteID("0000:3b:02.0"), `"0000:3b:02.0"`},
		{"an ID of MaxQuotedID bytes", QuoteID(strings.Repeat("a", MaxQuotedID)), `"` + strings.Repeat("a", MaxQuotedID) + `"`},
		{"a longer ID", QuoteID(long), fmt.Sprintf(`"%s"… (%d bytes)`, long[:MaxQuotedID-1], len(long))},
		{"a list", IDList([]string{"0000:3b:02.0", "0000:3b:02.1"}), "0000:3b:02.0,0000:3b:02.1"},
		{"a list with a longer ID", IDList([]string{"x", long}), fmt.Sprintf("x,%s… (%d bytes)", long[:MaxQuotedID-1], len(long))},
		{"a long list", IDList(many), "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 and 2 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
