package allocation

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/devledger/devledger/config"
	goldenfile "github.com/devledger/devledger/internal/golden"
	"github.com/devledger/devledger/sysfs"
)

// vf is an SR-IOV VF of pf bound to driver, in IOMMU group group ("" for
// none), on NUMA node numa.
func vf(addr, pf string, index int, driver, group string, numa int) sysfs.Device {
	return sysfs.Device{
		Address:    addr,
		Vendor:     "8086",
		Device:     "154c",
		Class:      "020000",
		Driver:     driver,
		NUMANode:   numa,
		IOMMUGroup: group,
		VFIODevice: group != "" && driver == "vfio-pci",
		TotalVFs:   -1,
		NumVFs:     -1,
		PF:         pf,
		VFIndex:    index,
	}
}

// pool is a resource with the given device type and selector objects.
func pool(prefix, name string, dt config.DeviceType, sels ...config.Selector) *config.Resource {
	if len(sels) == 0 {
		sels = []config.Selector{{Path: "resourceList[0].selectors"}}
	}
	return &config.Resource{
		Path:           "resourceList[0]",
		Prefix:         prefix,
		Name:           name,
		DeviceType:     dt,
		Selectors:      sels,
		AllocatePolicy: config.PolicyNone,
	}
}

// devRoot builds a fake /dev with the given files (relative to /dev) and
// returns its root.
func devRoot(t testing.TB, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), string(got))
}
