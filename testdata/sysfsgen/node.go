package sysfsgen

// NoNUMA is the NUMANode of a function the kernel places on no NUMA node
// (what a virtual machine or a single-socket machine reports).
const NoNUMA = -1

// Node describes a fake machine: its PCI functions and the few things outside
// sysfs that device discovery looks at.
type Node struct {
	// Functions are the PCI functions other than VFs; the VFs of a PF are
	// listed in its Function.VFs.
	Functions []Function

	// DefaultRouteInterface names the interface that carries the default
	// route in proc/net/route; "" writes a table with no default route.
	DefaultRouteInterface string

	// VFIO creates dev/vfio/vfio (the vfio module is loaded). dev/vfio/<group>
	// is created for every IOMMU group with a member bound to vfio-pci (or
	// a variant of it) whether or not VFIO is set.
	VFIO bool

	// VFIONoIOMMU runs vfio in its unsafe no-IOMMU mode, as in a virtual
	// machine without a virtual IOMMU: the module parameter
	// enable_unsafe_noiommu_mode reads Y, and the node of a group with a
	// member bound to vfio-pci is dev/vfio/noiommu-<group>.
	VFIONoIOMMU bool

	// VhostNet creates dev/vhost-net and dev/net/tun.
	VhostNet bool

	// WithoutNUMA is a kernel built without CONFIG_NUMA (as some ARM and
	// 32-bit ones are): no function has a numa_node attribute, whatever
	// its NUMANode says. Roots.SetNumVFs keeps to it; functions added
	// later with Roots.Add get one.
	WithoutNUMA bool
}

// Function describes one PCI function.
type Function struct {
	// Address is the full PCI address, domain included ("0000:3b:00.0").
	// For a VF it may be left empty: it is then computed from the PF's
	// address, VFOffset and VFStride, as the kernel does.
	Address string

	// Vendor and Device are four hex digits ("8086", "1592"). A VF left
	// empty inherits the PF's Vendor and VFDevice.
	Vendor string
	Device string

	// SubsystemVendor and SubsystemDevice default to Vendor and "0000".
	SubsystemVendor string
	SubsystemDevice string

	// Class is the six hex digits of the class code ("020000"). A VF left
	// empty inherits the PF's class.
	Class string

	// Driver is the bound driver ("ice", "vfio-pci"); "" leaves the
	// function unbound.
	Driver string

	// NUMANode is written to numa_node; use NoNUMA for none. VFs always get
	// their PF's node, as on real hardware.
	NUMANode int

	// IOMMUGroup is the group number ("42"); "" puts the function in no
	// group (no iommu_group link), as on a machine without an IOMMU.
	IOMMUGroup string

	// ACPIIndex, when not empty, is written to acpi_index.
	ACPIIndex string

	// TotalVFs > 0 makes the function an SR-IOV PF: sriov_totalvfs,
	// sriov_numvfs (len(VFs)), sriov_offset, sriov_stride and
	// sriov_vf_device are written, and each VF gets a physfn link and the PF
	// a virtfn<N> link per VF.
	TotalVFs int
	// VFOffset and VFStride place the VFs' routing IDs after the PF's; 0
	// means 1.
	VFOffset int
	VFStride int
	// VFDevice is the device ID of the VFs ("1889"); defaults to Device.
	VFDevice string
	// VFs are the enabled virtual functions; VFs[i] is virtfn i.
	VFs []Function

	// Interfaces are the network interfaces of the function, under net/ or,
	// when Virtio is set, under <Virtio>/net/.
	Interfaces []Interface

	// Virtio names the virtio child device of a virtio-pci function
	// ("virtio0"); VirtioDriver is its driver, "virtio_net" when the
	// function has interfaces and "virtio_blk" otherwise when left empty.
	Virtio       string
	VirtioDriver string

	// RDMA are the function's RDMA devices, under infiniband/.
	RDMA []RDMADevice

	// VDPADriver, when set ("vhost_vdpa", "virtio_vdpa"), adds a vdpa0
	// child bound to that driver.
	VDPADriver string

	// Aux are auxiliary devices hanging off the function
	// ("mlx5_core.sf.2").
	Aux []string
}

// Interface describes one network interface.
type Interface struct {
	// Name is the interface name ("ens785f0v1"); it must be unique in the
	// node.
	Name string
	// Type is the ARPHRD type written to type; 0 means 1 (Ethernet). 32 is
	// InfiniBand.
	Type int
	// Down writes operstate "down" and carrier "0"; otherwise "up" and "1".
	Down bool
	// Address is the hardware address; one is made up from ifindex when
	// empty.
	Address string
	// SwitchID and PortName, when set, are written to phys_switch_id and
	// phys_port_name, as for the ports of a NIC in switchdev mode (the
	// uplink "p0", a VF's representor "pf0vf3"). Left empty, the files are
	// absent: the kernel refuses to read them on other interfaces.
	SwitchID string
	PortName string
}

// RDMADevice describes one RDMA device (a directory under infiniband/).
type RDMADevice struct {
	// Name is the device name ("mlx5_0").
	Name string
	// Ports are its ports; none means a single port 1 with Ethernet link
	// layer and no pkeys.
	Ports []IBPort
}

// IBPort describes one port of an RDMA device.
type IBPort struct {
	// Number is the port number, from 1.
	Number int
	// LinkLayer is "InfiniBand" or "Ethernet" (the default).
	LinkLayer string
	// PKeys are written to pkeys/0, pkeys/1, ... as given ("0xffff");
	// "0x0000" marks an empty slot, as the kernel shows it.
	PKeys []string
}
