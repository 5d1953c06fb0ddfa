package config

import (
	"strings"
	"time"
)

// Config is a parsed and validated configuration: the pools to build, in
// the order the file lists them. That order matters: a device joins only
// the first pool that accepts it.
type Config struct {
	// Source is the name the config was parsed under (the file path for
	// Load); every error and warning starts with it.
	Source string
	// Resources are the pools, one per resourceList entry, in file order.
	Resources []Resource
	// Warnings are findings that do not stop the config from loading (a
	// selector that cannot be evaluated on a node, a field the SR-IOV
	// plugin ignores for the pool's device type, a field name written in
	// another case), each formatted like an Error line.
	Warnings []string
}

// DeviceType says which functions a pool can take and what its members are.
type DeviceType string

const (
	// NetDevice pools take PCI network controllers (class 0x02), never a
	// physical function that has VFs enabled. This is the SR-IOV plugin's
	// default and ours.
	NetDevice DeviceType = "netDevice"
	// Accelerator pools take processing accelerators (class 0x12) only.
	Accelerator DeviceType = "accelerator"
	// AuxNetDevice pools take auxiliary devices (scalable functions) of
	// network controllers; their members are named by the auxiliary
	// device ("mlx5_core.sf.2"), not by a PCI address.
	AuxNetDevice DeviceType = "auxNetDevice"
	// GenericPCI is devledger's own type: PCI functions of any class (a
	// GPU, class 0x03, needs it). Like NetDevice it never takes a physical
	// function that has VFs enabled.
	GenericPCI DeviceType = "genericPCI"
)

// deviceTypes lists the accepted device types in the order messages name
// them.
var deviceTypes = []DeviceType{NetDevice, Accelerator, AuxNetDevice, GenericPCI}

// AllocatePolicy is how GetPreferredAllocation picks among a pool's free
// devices once must-include devices and NUMA locality are honoured.
type AllocatePolicy string

const (
	// PolicyNone weighs no groups: the lowest addresses go first. It is
	// the default. (The SR-IOV plugin's default answers nothing and leaves
	// the choice to the kubelet.)
	PolicyNone AllocatePolicy = "none"
	// PolicyPacked prefers devices that share a PF (or a PCI parent) with
	// devices already allocated, keeping whole PFs free.
	PolicyPacked AllocatePolicy = "packed"
	// PolicySpread prefers devices on the PFs with the fewest allocations,
	// spreading load and failure domains.
	PolicySpread AllocatePolicy = "spread"
)

var allocatePolicies = []AllocatePolicy{PolicyPacked, PolicySpread, PolicyNone}

// DefaultResourcePrefix is the prefix of a resource whose resourcePrefix is
// empty or absent, the SR-IOV plugin's default for --resource-prefix.
const DefaultResourcePrefix = "intel.com"

// Defaults of the health options. DefaultProbeInterval is the daemon's:
// a pool that sets no probeInterval is probed at the daemon's interval.
// MinProbeInterval is the shortest probeInterval accepted, the floor of
// the daemon's --probe-interval: probes paced faster (1ns, a unit
// mistyped) run back to back and take a core for nothing.
const (
	DefaultHoldDown      = 10 * time.Second
	DefaultProbeInterval = 5 * time.Second
	MinProbeInterval     = 10 * time.Millisecond
)

// Resource is one pool: a Kubernetes extended resource and the rules that
// pick its devices.
type Resource struct {
	// Path locates the resource in the file ("resourceList[2]").
	Path string
	// Name is resourceName, valid as the name part of an extended
	// resource.
	Name string
	// Prefix is resourcePrefix; when the file leaves it empty,
	// Options.ResourcePrefix, or DefaultResourcePrefix.
	Prefix string
	// DeviceType is deviceType, NetDevice when the file leaves it empty.
	DeviceType DeviceType
	// ExcludeTopology stops the NUMA node from being advertised for the
	// pool's devices.
	ExcludeTopology bool
	// AdvertiseEmpty (advertiseEmpty) serves and registers the pool while
	// it has no devices, with capacity 0. By default a pool is served once
	// its first device joins and withdrawn when its last one leaves, as
	// the SR-IOV plugin skips a pool with no devices.
	AdvertiseEmpty bool
	// AdditionalInfo is extra information handed to containers in the
	// PCIDEVICE_<PREFIX>_<NAME>_INFO variable, keyed by PCI address or "*"
	// for every device; nil when absent.
	AdditionalInfo map[string]map[string]string
	// Selectors are the selector objects in order; a device matching any of
	// them is accepted. A config written with one object (not a list) has
	// exactly one, and SelectorList is false.
	Selectors    []Selector
	SelectorList bool
	// AllocatePolicy is allocatePolicy, PolicyNone by default.
	AllocatePolicy AllocatePolicy
	// Health holds the health options, defaults filled in.
	Health Health
	// CDI holds the Container Device Interface options.
	CDI CDI
}

// FullName is the extended resource name the pool is registered under:
// "prefix/name".
func (r *Resource) FullName() string { return r.Prefix + "/" + r.Name }

// EnvVarName is the variable that carries the pool's allocated PCI
// addresses into a container; see the package function EnvVarName.
func (r *Resource) EnvVarName() string { return EnvVarName(r.Prefix, r.Name) }

// EnvVarName forms the SR-IOV plugin's variable name for a resource:
// "PCIDEVICE_" + prefix + "_" + name with every '.' replaced by '_' and
// then upper-cased, so intel.com/intel_sriov_netdevice gives
// PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE. Only dots are replaced: a '-'
// stays a '-', exactly as the plugin writes it. The plugin's companion
// variable with device details is this name plus "_INFO".
func EnvVarName(prefix, name string) string {
	return strings.ToUpper(strings.ReplaceAll("PCIDEVICE_"+prefix+"_"+name, ".", "_"))
}

// KubeVirtEnvVarName is the variable KubeVirt's virt-launcher reads the
// pool's PCI addresses from when a VM asks for it as a host device or GPU;
// see the package function KubeVirtEnvVarName.
func (r *Resource) KubeVirtEnvVarName() string { return KubeVirtEnvVarName(r.Prefix, r.Name) }

// KubeVirtEnvVarName forms the variable KubeVirt's virt-launcher reads a
// host device's PCI addresses from (its ResourceNameToEnvVar with
// "PCI_RESOURCE"): "PCI_RESOURCE_" + the full resource name upper-cased,
// every '/' and '.' replaced by '_', so nvidia.com/h100_vfio gives
// PCI_RESOURCE_NVIDIA_COM_H100_VFIO. As in KubeVirt, a '-' stays a '-'.
// The value virt-launcher expects is the addresses comma-joined. Two
// resources share this name exactly when they share EnvVarName's, which
// loading a config warns of.
func KubeVirtEnvVarName(prefix, name string) string {
	return "PCI_RESOURCE_" + strings.ToUpper(strings.NewReplacer("/", "_", ".", "_").Replace(prefix+"/"+name))
}

// Health holds a pool's health options (the health field).
type Health struct {
	// Link makes a network function unhealthy while its link is down or
	// has no carrier: a VF's PF's link, any other function's own
	// (sysfs.ProbeTarget.LinkInterface). Off by default: the SR-IOV
	// plugin does not look at links.
	Link bool
	// HoldDown is how long a device stays unhealthy after it recovers
	// before it is offered again (holdDown, default 10s).
	HoldDown time.Duration
	// Debounce is how long a change must persist before it counts
	// (debounce, default 0: every change counts).
	Debounce time.Duration
	// ProbeInterval is how often the device is probed (probeInterval);
	// at least MinProbeInterval when set, 0 when not: then the daemon's
	// --probe-interval (DefaultProbeInterval unless given) applies.
	ProbeInterval time.Duration
}

// CDI holds a pool's Container Device Interface options (the cdi field).
type CDI struct {
	// Enabled makes Allocate answer with CDI device names instead of
	// device specs and mounts.
	Enabled bool
	// Kind is the CDI kind "vendor/class" of the pool's devices. When the
	// file leaves it empty it is the resource prefix and the SR-IOV
	// plugin's class for the device type: net-pci (netDevice), net-accel
	// (accelerator), net-sf (auxNetDevice), pci (genericPCI).
	Kind string
}

// Selector is one selector object. Fields within it are ANDed; the values
// of one field are ORed. An empty list or false means the field does not
// filter, as in the SR-IOV plugin. Fields that the pool's device type does
// not use are dropped when parsing, with a warning.
type Selector struct {
	// Path locates the object in the file: "resourceList[0].selectors" for
	// a single object, "resourceList[0].selectors[1]" in a list.
	Path string
	// Vendors and Devices are PCI vendor and device IDs as the kernel
	// writes them: four lower-case hex digits ("8086", "154c").
	Vendors []string
	Devices []string
	// Drivers are names of bound drivers ("vfio-pci").
	Drivers []string
	// PCIAddresses are full PCI addresses ("0000:3b:02.1").
	PCIAddresses []string
	// ACPIIndexes are contents of the acpi_index attribute ("101").
	ACPIIndexes []string
	// PFNames select VFs (or SFs) by their PF's interface name, and
	// RootDevices by their PF's PCI address, each optionally limited to
	// function indexes ("eth0#0,2-7").
	PFNames     []PFSelector
	RootDevices []PFSelector
	// LinkTypes are link types of the function's interface ("ether",
	// "infiniband").
	LinkTypes []string
	// DDPProfiles are Intel DDP profile names. They cannot be read on
	// this node, so a selector object with ddpProfiles accepts no device
	// (the SR-IOV plugin rejects a device whose profile it cannot read).
	DDPProfiles []string
	// PKeys are InfiniBand partition keys matched against the default
	// (index 0) key, compared as numbers ("0x7fff" equals "0x7FFF").
	PKeys []string
	// IsRDMA requires an RDMA device on the function.
	IsRDMA bool
	// NeedVhostNet asks for /dev/vhost-net and /dev/net/tun in the
	// container. It does not filter: like the SR-IOV plugin, a device is
	// pooled without them when the node lacks /dev/vhost-net.
	NeedVhostNet bool
	// VDPAType requires a vDPA device of that type: "virtio" or "vhost".
	VDPAType string
	// AuxTypes are auxiliary device types; only "sf" is supported.
	AuxTypes []string
}

// empty reports whether the selector object filters nothing.
func (s *Selector) empty() bool {
	return len(s.Vendors) == 0 && len(s.Devices) == 0 && len(s.Drivers) == 0 &&
		len(s.PCIAddresses) == 0 && len(s.ACPIIndexes) == 0 && len(s.PFNames) == 0 &&
		len(s.RootDevices) == 0 && len(s.LinkTypes) == 0 && len(s.DDPProfiles) == 0 &&
		len(s.PKeys) == 0 && !s.IsRDMA && s.VDPAType == "" && len(s.AuxTypes) == 0
}

// PFSelector is one pfNames or rootDevices entry: a PF (interface name or
// PCI address) and, after '#', the indexes of its functions to take.
type PFSelector struct {
	// Raw is the entry as written ("eth0#0,2-7").
	Raw string
	// PF is the part before '#': an interface name for pfNames, a PCI
	// address for rootDevices. It is compared without regard to case, as
	// the SR-IOV plugin does.
	PF string
	// Indexes are the ranges after '#'; nil means every function of the
	// PF.
	Indexes []IndexRange
}

// Includes reports whether function index i is selected.
func (p PFSelector) Includes(i int) bool {
	if p.Indexes == nil {
		return true
	}
	for _, r := range p.Indexes {
		if i >= r.First && i <= r.Last {
			return true
		}
	}
	return false
}

// IndexRange is an inclusive range of VF (or SF) indexes; a single index
// N is the range N-N.
type IndexRange struct {
	First, Last int
}
