package sysfsgen

import "testing"

// TempNode builds n in a fresh temporary directory of tb, removed when the
// test ends, and fails the test if it cannot.
func TempNode(tb testing.TB, n Node) Roots {
	tb.Helper()
	r, err := Build(tb.TempDir(), n)
	if err != nil {
		tb.Fatalf("build fake node: %v", err)
	}
	return r
}

// TempScenario builds the named scenario in a fresh temporary directory of
// tb, removed when the test ends, and fails the test if it cannot.
func TempScenario(tb testing.TB, name string) Roots {
	tb.Helper()
	n, err := Scenario(name)
	if err != nil {
		tb.Fatalf("fake node: %v", err)
	}
	return TempNode(tb, n)
}
