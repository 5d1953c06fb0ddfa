package allocation

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/config"
)

// ListDevice is how ListAndWatch shows m to the kubelet: the PCI address as
// ID, "Healthy" or "Unhealthy", and the NUMA node as topology unless the
// pool excludes topology or the node is unknown (-1), in which case
// Topology is nil, as in the SR-IOV plugin.
func ListDevice(res *config.Resource, m Member) *pluginapi.Device {
	dev := &pluginapi.Device{ID: m.Device.Address, Health: pluginapi.Unhealthy}
	if m.Usable() {
		dev.Health = pluginapi.Healthy
	}
	if !res.ExcludeTopology && m.Device.NUMANode >= 0 {
		dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(m.Device.NUMANode)}}}
	}
	return dev
}
