package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// A VM without a virtual IOMMU runs vfio in no-IOMMU mode, where a group's
// node is /dev/vfio/noiommu-<group>: its VFs are healthy, go unhealthy when
// that node goes, and Allocate gives the node under the name a DPDK
// application opens, /dev/vfio/<group>.
func TestNoIOMMUPoolIsHealthy(t *testing.T) {
	const cfg = `{"resourceList": [{"resourceName": "vf", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}}]}`
	const pool, vf, other = "intel.com/vf", "0000:00:05.0", "0000:00:06.0"
	n := newTestNode(t, sysfsgen.ScenarioNoIOMMU, cfg, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Probe both, then take the other's node away and probe again: once
	// the other is unhealthy, vf was probed twice.
	d.Send(&node.ProbeHealth{Addresses: []string{vf, other}})
	if err := os.Remove(filepath.Join(n.roots.Dev, "vfio", "noiommu-1")); err != nil {
		t.Fatal(err)
	}
	d.Send(&node.ProbeHealth{Addresses: []string{vf, other}})
	health := func(ds []*pluginapi.Device, id string) string {
		for _, x := range ds {
			if x.ID == id {
				return x.Health
			}
		}
		return "absent"
	}
	list, err := n.kubelet.WaitDevices(ctx, pool, func(ds []*pluginapi.Device) bool { return health(ds, other) == pluginapi.Unhealthy })
	if err != nil {
		t.Fatalf("%s never went unhealthy without its noiommu node: %v", other, err)
	}
	if h := health(list, vf); h != pluginapi.Healthy {
		t.Fatalf("%s is %s with /dev/vfio/noiommu-0 there, want Healthy", vf, h)
	}

	resp, err := n.kubelet.Allocate(ctx, pool, []string{vf})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, spec := range resp.ContainerResponses[0].Devices {
		if spec.ContainerPath == "/dev/vfio/0" {
			found = strings.HasSuffix(spec.HostPath, "/vfio/noiommu-0")
		}
	}
	if !found {
		t.Errorf("Allocate gave %v, want /dev/vfio/noiommu-0 as /dev/vfio/0", resp.ContainerResponses[0].Devices)
	}
}
