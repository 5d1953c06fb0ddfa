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

// A snapshot an older build wrote lacks what its format lacked; it still
// matches the fold of the log up to it (the check of a node upgraded in
// place must not call it damage), and a snapshot of a newer format that
// lacks the same does not.
func TestSnapshotMatchesWhatEachFormatKept(t *testing.T) {
	ps := []Payload{
		DaemonStarted{Version: "v1", KernelBootID: "k-1"},
		DaemonStarted{Version: "v1", KernelBootID: "k-2"},
		KubeletStopped{Socket: "kubelet.sock"},
		KubeletRestarted{Socket: "kubelet.sock"},
	}
	var problems []string
	for i := range 33 {
		problems = append(problems, fmt.Sprint("problem ", i))
		ps = append(ps, LedgerDamaged{Problem: problems[i]})
	}
	ps = append(ps, DamageAcknowledged{Problems: problems}, DaemonStopped{Reason: "SIGTERM"})
	es := baseEvents()
	for _, p := range ps {
		es = append(es, ev(uint64(len(es)+1), p))
	}
	full := fold(NewState(), es...)
	if full.Daemon.Reboots == 0 || full.Kubelet.Outages == 0 || full.Daemon.StoppedAt.IsZero() || len(full.Ledger.Acknowledged) != 33 {
		t.Fatalf("the fold lacks what the formats differ in: %+v %+v %+v", full.Daemon, full.Kubelet, full.Ledger)
	}
	// lacking[f-1] is what format f lacked of the next: a format-f
	// snapshot lacks that and what every format after it added.
	lacking := []func(s *State){
		func(s *State) {
			for addr, d := range s.Devices {
				d.HealthSeq = 0
				s.Devices[addr] = d
			}
		},
		func(s *State) { s.Daemon.StoppedAt = time.Time{} },
		func(s *State) {
			s.Daemon.LastSeq, s.Daemon.LastAt, s.Daemon.KernelBootID, s.Daemon.Reboots = 0, time.Time{}, "", 0
			s.Kubelet = KubeletState{Restarts: s.Kubelet.Restarts, LastRestart: s.Kubelet.LastRestart}
		},
		func(s *State) { s.Ledger.Acknowledged = s.Ledger.Acknowledged[1:] },
	}
	for format := 1; format <= len(lacking); format++ {
		snap := full.Clone()
		for _, lack := range lacking[format-1:] {
			lack(&snap)
		}
		if !SnapshotMatches(full, snap, format) {
			t.Errorf("a format-%d snapshot does not match the fold", format)
		}
		if SnapshotMatches(full, snap, format+1) {
			t.Errorf("a format-%d snapshot lacking what format %d lacked matches the fold", format+1, format)
		}
	}
}
