package events

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/internal/golden"
)

// A snapshot format names one shape: the JSON fields of State, listed in
// testdata/snapshot/format-N.fields for format N. A change to them takes
// a new snapshotFormat (and its list, which -update writes); a list once
// written is never rewritten, or a build of the old shape would read the
// new one as its own, dropping what it does not know.
func TestSnapshotFieldsHaveTheirFormat(t *testing.T) {
	got := strings.Join(jsonFields(reflect.TypeFor[State](), ""), "\n") + "\n"
	path := filepath.Join("testdata", "snapshot", fmt.Sprintf("format-%d.fields", snapshotFormat))
	want, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err) && golden.Updating():
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	case err != nil:
		t.Fatalf("%v (a new snapshot format's list: go test ./events -run TestSnapshotFieldsHaveTheirFormat -update)", err)
	}
	if string(want) != got {
		t.Errorf("the fields of State are not those of snapshot format %d (%s): give the new shape a new snapshotFormat, and -update writes its list\n got:\n%s", snapshotFormat, path, got)
	}
}

// jsonFields lists the JSON field paths of t, whose values are under prefix.
func jsonFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		if t.Kind() == reflect.Map {
			prefix += "{}"
		} else if t.Kind() == reflect.Slice {
			prefix += "[]"
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return []string{prefix + " " + t.String()}
	}
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonFields(f.Type, strings.TrimPrefix(prefix+"."+name, "."))...)
	}
	slices.Sort(out)
	return out
}
