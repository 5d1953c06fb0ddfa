package allocation

import (
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/config"
)

func TestListDevice(t *testing.T) {
	onNode1 := vf("0000:af:02.0", pfC, 0, "iavf", "", 1)
	noNode := vf("0000:af:02.1", pfC, 1, "iavf", "", -1)
	cases := []struct {
		name     string
		exclude  bool
		m        Member
		health   string
		wantNUMA int64 // -1: no topology
	}{
		{"healthy with topology", false, Member{Device: onNode1, Healthy: true}, pluginapi.Healthy, 1},
		{"unhealthy", false, Member{Device: onNode1}, pluginapi.Unhealthy, 1},
		{"topology excluded", true, Member{Device: onNode1, Healthy: true}, pluginapi.Healthy, -1},
		{"node unknown", false, Member{Device: noNode, Healthy: true}, pluginapi.Healthy, -1},
		{"healthy but held by another pool's allocation", false, Member{Device: onNode1, Healthy: true, HeldElsewhere: []Hold{{Pool: "intel.com/old", Seq: 12}}}, pluginapi.Unhealthy, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := pool("intel.com", "intel_sriov_netdevice", config.NetDevice)
			res.ExcludeTopology = tc.exclude
			got := ListDevice(res, tc.m)
			if got.ID != tc.m.Device.Address || got.Health != tc.health {
				t.Errorf("ID %q health %q, want %q %q", got.ID, got.Health, tc.m.Device.Address, tc.health)
			}
			switch {
			case tc.wantNUMA < 0 && got.Topology != nil:
				t.Errorf("topology %v, want none", got.Topology)
			case tc.wantNUMA >= 0 && (got.Topology == nil || len(got.Topology.Nodes) != 1 || got.Topology.Nodes[0].ID != tc.wantNUMA):
				t.Errorf("topology %v, want node %d", got.Topology, tc.wantNUMA)
			}
		})
	}
}
