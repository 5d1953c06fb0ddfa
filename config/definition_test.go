package config

import (
	"slices"
	"strings"
	"testing"
)

func TestFileName(t *testing.T) {
	for goName, want := range map[string]string{"Name": "resourceName", "ExcludeTopology": "excludeTopology", "PCIAddresses": "pciAddresses",
		"PFNames": "pfNames", "IsRDMA": "isRdma", "Vendors": "vendors", "CDI": "cdi", "VDPAType": "vdpaType"} {
		if got := fileName(goName); got != want {
			t.Errorf("fileName(%s) = %s, want %s", goName, got, want)
		}
	}
}

// A change is named as the config file writes it: no parsed parts of a
// pfNames entry, no nanoseconds, additionalInfo's keys as given.
func TestDefinitionChangesNamesFileFields(t *testing.T) {
	def := func(pf, token, holdDown string) string {
		t.Helper()
		doc := `{"resourceList":[{"resourceName":"x","selectors":{"pfNames":["` + pf + `"],"rootDevices":["0000:3b:00.0#1"]},` +
			`"additionalInfo":{"*":{"Token":"` + token + `"}},"health":{"holdDown":"` + holdDown + `"}}]}`
		c, err := Parse("sriov.json", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return c.Resources[0].Definition()
	}
	got := DefinitionChanges(def("ens1f0#0-3", "a", "10s"), def("ens1f0#0-4", "b", "1m30s"))
	want := []string{
		`additionalInfo.*.Token: "a" → "b"`,
		`health.holdDown: "10s" → "1m30s"`,
		`selectors[0].pfNames: ["ens1f0#0-3"] → ["ens1f0#0-4"]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("DefinitionChanges:\n got %q\nwant %q", got, want)
	}
}

// A ledger an older build wrote holds its definitions: one written before
// a field existed lacks it, and one written before Definition left out the
// pool's place in the file has it. Neither is a change of the pool; a
// field set, or a selector added, still is.
func TestDefinitionChangesOfAnOlderBuild(t *testing.T) {
	parse := func(doc string) string {
		t.Helper()
		c, err := Parse("sriov.json", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return c.Resources[0].Definition()
	}
	now := parse(`{"resourceList":[{"resourceName":"x","selectors":{"vendors":["8086"]}}]}`)
	older := strings.Replace(now, `"AdvertiseEmpty":false,`, "", 1)
	placed := strings.Replace(strings.Replace(older, `"Path":""`, `"Path":"resourceList[0]"`, 1),
		`"Path":""`, `"Path":"resourceList[0].selectors"`, 1)
	if older == now || placed == older {
		t.Fatalf("the test's older definitions are the current one: %s", now)
	}
	for _, tc := range []struct {
		name, old, new string
		want           []string // nil: the same pool
	}{
		{"a field added since, at its zero value", older, now, nil},
		{"the place in the file too", placed, now, nil},
		{"a field added since, set", older,
			parse(`{"resourceList":[{"resourceName":"x","advertiseEmpty":true,"selectors":{"vendors":["8086"]}}]}`),
			[]string{"advertiseEmpty: (none) → true"}},
		{"a selector added, of zero values",
			parse(`{"resourceList":[{"resourceName":"x","selectors":[{"vendors":["8086"]}]}]}`),
			parse(`{"resourceList":[{"resourceName":"x","selectors":[{"vendors":["8086"]},{"isRdma":false}]}]}`),
			[]string{"selectors[1].acpiIndexes: (none) → null", "selectors[1].auxTypes: (none) → null",
				"selectors[1].ddpProfiles: (none) → null", "selectors[1].devices: (none) → null",
				"selectors[1].drivers: (none) → null", "selectors[1].isRdma: (none) → false",
				"selectors[1].linkTypes: (none) → null", "selectors[1].needVhostNet: (none) → false",
				"selectors[1].pKeys: (none) → null", "selectors[1].pciAddresses: (none) → null",
				"selectors[1].pfNames: (none) → null",
				"selectors[1].rootDevices: (none) → null", "selectors[1].vdpaType: (none) → \"\"",
				"selectors[1].vendors: (none) → null"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefinitionChanges(tc.old, tc.new); !slices.Equal(got, tc.want) {
				t.Errorf("DefinitionChanges:\n got %q\nwant %q", got, tc.want)
			}
			if same := SameDefinition(tc.old, tc.new); same != (tc.want == nil) {
				t.Errorf("SameDefinition = %v, want %v", same, tc.want == nil)
			}
		})
	}
}
