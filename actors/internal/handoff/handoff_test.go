package handoff

import "testing"

func TestFirstGivesOnce(t *testing.T) {
	known := map[string]int{"a": 1}
	take := First(known)
	if got := take(); got["a"] != 1 {
		t.Fatalf("first call = %v, want the value", got)
	}
	for range 2 {
		if got := take(); got != nil {
			t.Fatalf("later call = %v, want nil", got)
		}
	}
}
