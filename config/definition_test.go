package config

import (
	"slices"
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
