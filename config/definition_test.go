package config

import "testing"

func TestFileName(t *testing.T) {
	for goName, want := range map[string]string{"Name": "resourceName", "ExcludeTopology": "excludeTopology", "PCIAddresses": "pciAddresses",
		"PFNames": "pfNames", "IsRDMA": "isRdma", "Vendors": "vendors", "CDI": "cdi", "VDPAType": "vdpaType"} {
		if got := fileName(goName); got != want {
			t.Errorf("fileName(%s) = %s, want %s", goName, got, want)
		}
	}
}
