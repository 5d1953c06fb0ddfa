package config

import (
	"path/filepath"
	"testing"

	"github.com/devledger/devledger/sysfs"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// An InfiniBand VF whose IPoIB netdev is not in the host's namespace (moved
// into a pod by the CNI, or ib_ipoib not loaded on it) still has its RDMA
// device and its port's pkeys in sysfs. The SR-IOV plugin takes its link
// type from the PF (GenNetDevice) and its default pkey from
// infiniband/<dev>/ports/1/pkeys/0 of the PCI function (sriovnet
// GetDefaultPKeyFromPci), so a pKeys pool keeps it.
func TestAPKeysPoolTakesAnInfiniBandVFWhoseInterfaceIsInAPod(t *testing.T) {
	vf := func(group, ifname, rdma string) sysfsgen.Function {
		f := sysfsgen.Function{Driver: "mlx5_core", IOMMUGroup: group,
			RDMA: []sysfsgen.RDMADevice{{Name: rdma, Ports: []sysfsgen.IBPort{{Number: 1, LinkLayer: "InfiniBand", PKeys: []string{"0x8001", "0xffff"}}}}}}
		if ifname != "" {
			f.Interfaces = []sysfsgen.Interface{{Name: ifname, Type: 32}}
		}
		return f
	}
	pf := sysfsgen.Function{
		Address: "0000:d8:00.0", Vendor: "15b3", Device: "101b", Class: "020700",
		Driver: "mlx5_core", NUMANode: 1, IOMMUGroup: "50",
		TotalVFs: 8, VFOffset: 1, VFStride: 1, VFDevice: "101c",
		Interfaces: []sysfsgen.Interface{{Name: "ibp216s0", Type: 32}},
		RDMA:       []sysfsgen.RDMADevice{{Name: "mlx5_0", Ports: []sysfsgen.IBPort{{Number: 1, LinkLayer: "InfiniBand", PKeys: []string{"0xffff"}}}}},
		VFs:        []sysfsgen.Function{vf("150", "", "mlx5_4"), vf("151", "ibp216s0v1", "mlx5_5")},
	}
	roots := sysfsgen.TempNode(t, sysfsgen.Node{Functions: []sysfsgen.Function{pf}})
	r := sysfs.New(sysfs.Options{SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, PCIIDsSearchRoot: t.TempDir(), PCIIDsPath: filepath.Join(t.TempDir(), "none")})
	devs, err := r.Scan()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("c.json", []byte(`{"resourceList": [{"resourceName": "ib_8001", "selectors": {"vendors": ["15b3"], "pKeys": ["0x8001"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sel := c.Select(devs, Env{})
	for _, addr := range []string{"0000:d8:00.1", "0000:d8:00.2"} {
		p, ok := sel.Placement(addr)
		if !ok {
			t.Fatalf("%s not scanned", addr)
		}
		if p.Pool == "" {
			t.Errorf("%s joins no pool: %s", addr, p.Reason)
		}
	}
}
