package events

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	goldenfile "github.com/devledger/devledger/internal/golden"
)

// TestGolden pins the encoded form of every event type: a change of the
// format is a diff of testdata/golden/<Type>.golden. The same run checks the
// fuzz seeds made from the samples, so they follow the format.
func TestGolden(t *testing.T) {
	for _, typ := range Types() {
		t.Run(string(typ), func(t *testing.T) {
			e := sampleEnvelope(t, typ)
			rec := mustMarshal(t, e)
			js, err := json.MarshalIndent(e, "", "  ")
			if err != nil {
				t.Fatalf("render as JSON: %v", err)
			}
			golden := fmt.Sprintf("# %s, schema version %d: Marshal of its sample in samples_test.go\n"+
				"# (seq %d, time %s, boot id %s), then the envelope as encoding/json renders it.\n"+
				"# A diff here is a change of the ledger's format. Rewrite with: go test ./events -run TestGolden -update\n"+
				"\n-- record, %d bytes --\n%s\n-- json --\n%s\n",
				typ, e.Version, e.Seq, e.Time.Format("2006-01-02T15:04:05.999999999Z07:00"), e.BootID, len(rec), hex.Dump(rec), js)
			seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", rec)
			compareGolden(t, filepath.Join("testdata", "golden", string(typ)+".golden"), golden)
			compareGolden(t, filepath.Join("testdata", "fuzz", "FuzzUnmarshal", "golden-"+string(typ)), seed)
			// What the file pins still decodes to the sample.
			back, err := Unmarshal(recordOfGolden(t, golden))
			if err != nil || !reflect.DeepEqual(back, e) {
				t.Errorf("the golden record decodes to %#v, %v", back, err)
			}
		})
	}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".golden")
		if _, ok := catalog[Type(name)]; !ok {
			t.Errorf("%s pins %s, which the catalog does not have (a shipped type never leaves it)", f, name)
		}
	}
}

// compareGolden fails unless the file at path holds want; with -update it
// writes want there instead.
func compareGolden(t *testing.T, path, want string) {
	t.Helper()
	if goldenfile.Updating() {
		goldenfile.Check(t, path, want)
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from this build's output: %s\n"+
			"If the format change is meant, bump the type's schema version, keep the old decoder, and run with -update.",
			path, firstDiff(want, string(got)))
	}
}

// firstDiff names the first line where got and want differ, with both.
func firstDiff(got, want string) string {
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			return fmt.Sprintf("line %d\n got: %s\nwant: %s", i+1, g, w)
		}
	}
	return "no line differs"
}

// recordOfGolden reads the record back from the hex dump of a golden file.
func recordOfGolden(t *testing.T, golden string) []byte {
	t.Helper()
	_, dump, _ := strings.Cut(golden, " bytes --\n")
	dump, _, _ = strings.Cut(dump, "\n-- json --")
	var rec []byte
	for line := range strings.SplitSeq(strings.TrimSpace(dump), "\n") {
		// 00000000  01 a2 21 ...  |..!.|: the bytes sit between the offset
		// and the text column.
		line, _, _ = strings.Cut(line, "|")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		b, err := hex.DecodeString(strings.Join(fields[1:], ""))
		if err != nil {
			t.Fatalf("hex dump line %q: %v", line, err)
		}
		rec = append(rec, b...)
	}
	return rec
}

// TestOldVersionsDecode reads records of schema versions this build no
// longer writes, pinned in testdata/oldversions/<Type>.v<N>.golden when the
// version was bumped: an old ledger must still read, upcast to the current
// struct.
func TestOldVersionsDecode(t *testing.T) {
	tests := []struct {
		file string
		want Payload
	}{
		{"RegistrationFailed.v1.golden", RegistrationFailed{Pool: "intel.com/intel_sriov_dpdk",
			Socket: "/var/lib/kubelet/device-plugins/intel.com-intel_sriov_dpdk.sock", Mode: "legacy",
			Error: "rpc error: code = Unavailable desc = connection refused", Attempt: 3}},
		{"ConfigApplied.v1.golden", func() Payload {
			p := samples[TypeConfigApplied].(ConfigApplied)
			p.Changes = nil
			return p
		}()},
		{"DaemonStarted.v1.golden", func() Payload {
			p := samples[TypeDaemonStarted].(DaemonStarted)
			p.KernelBootID = ""
			return p
		}()},
		{"KubeletRestarted.v1.golden", KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}},
		{"DevicesAllocated.v1.golden", func() Payload {
			p := samples[TypeDevicesAllocated].(DevicesAllocated)
			p.Supersedes, p.HeldElsewhere, p.Unhealthy = nil, nil, nil
			return p
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "oldversions", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			e, err := Unmarshal(recordOfGolden(t, string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(e.Payload, tc.want) {
				t.Errorf("decoded %#v, want %#v", e.Payload, tc.want)
			}
		})
	}
}
