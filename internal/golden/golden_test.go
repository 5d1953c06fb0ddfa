package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that notes failures instead of stopping.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.golden")
	r := &recorder{TB: t}
	Check(r, path, "a\n")
	if !r.failed {
		t.Error("a missing golden file passed")
	}

	*update = true
	r = &recorder{TB: t}
	Check(r, path, "a\n")
	*update = false
	if b, err := os.ReadFile(path); r.failed || err != nil || string(b) != "a\n" {
		t.Fatalf("-update wrote %q (%v, failed %v), want the output", b, err, r.failed)
	}

	for _, tc := range []struct {
		got  string
		fail bool
	}{{"a\n", false}, {"b\n", true}, {"a", true}} {
		r = &recorder{TB: t}
		Check(r, path, tc.got)
		if r.failed != tc.fail {
			t.Errorf("Check(%q) failed = %v, want %v", tc.got, r.failed, tc.fail)
		}
	}
}
