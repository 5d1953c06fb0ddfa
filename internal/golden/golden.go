// Package golden is for tests: it compares output with golden files under
// testdata, and rewrites them (and other fixtures) when the tests run with
// -update. Only test code imports it: the -update flag it registers exists
// in test binaries alone.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files and fixtures under testdata with this build's output")

// Updating reports whether the tests run with -update.
func Updating() bool { return *update }

// Check fails t unless the file at path holds got. With -update it writes
// got there instead (making its directory).
func Check(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from this build's output (rerun with -update if the change is intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}
