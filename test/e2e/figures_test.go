package e2e

import (
	"testing"
	"time"
)

// logFigure puts one figure in the test log, in a form a script can pick
// out of `go test -v` output:
//
//	FIGURE <scenario> <metric> <milliseconds>ms
//
// Figures are reported for a person (and a regression shows between runs);
// no test asserts them.
func logFigure(t testing.TB, scenario, metric string, d time.Duration) {
	t.Helper()
	t.Logf("FIGURE %s %s %.1fms", scenario, metric, float64(d.Microseconds())/1000)
}
