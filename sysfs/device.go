package sysfs

import "slices"

// Device is what the kernel tells about one PCI function. Every field that
// could not be read is left at its unknown value ("" for strings, -1 for the
// integers documented so) and a warning naming the file is recorded in
// Warnings; a device is never dropped because one attribute is missing.
type Device struct {
	// Address is the full PCI address, domain included: "0000:3b:02.1".
	Address string `json:"address"`

	// Vendor, Device, SubsystemVendor and SubsystemDevice are four lower-case
	// hex digits without "0x" ("8086", "154c").
	Vendor          string `json:"vendor"`
	Device          string `json:"device"`
	SubsystemVendor string `json:"subsystem_vendor,omitempty"`
	SubsystemDevice string `json:"subsystem_device,omitempty"`

	// Class is the six hex digits of the class code without "0x"
	// ("020000" for an Ethernet controller); ClassName names its base class
	// ("Network controller") from a table built into this package, so it
	// does not depend on a PCI ID database. SubclassName names the
	// subclass ("Ethernet controller"), from the PCI ID database when one
	// is loaded and otherwise from a built-in table of the common ones; it
	// is "" for a subclass neither knows.
	Class        string `json:"class"`
	ClassName    string `json:"class_name,omitempty"`
	SubclassName string `json:"subclass_name,omitempty"`

	// VendorName and DeviceName come from the PCI ID database; both are empty
	// when no database was found or it does not know the IDs.
	VendorName string `json:"vendor_name,omitempty"`
	DeviceName string `json:"device_name,omitempty"`

	// Driver is the base name of the bound driver ("vfio-pci", "iavf"), or ""
	// when no driver is bound.
	Driver string `json:"driver,omitempty"`

	// NUMANode is the NUMA node of the function, -1 when the kernel reports
	// none, has no NUMA support (no numa_node attribute) or the attribute
	// is unreadable.
	NUMANode int `json:"numa_node"`

	// IOMMUGroup is the number of the IOMMU group ("42"), or "" when the
	// function is in none. VFIODevice tells whether the group's vfio node
	// exists: <dev-root>/vfio/<group>, or <dev-root>/vfio/noiommu-<group>
	// when vfio runs in its no-IOMMU mode (VFIONoIOMMU; a VM without a
	// virtual IOMMU).
	IOMMUGroup  string `json:"iommu_group,omitempty"`
	VFIODevice  bool   `json:"vfio_device,omitempty"`
	VFIONoIOMMU bool   `json:"vfio_noiommu,omitempty"`

	// ACPIIndex is the content of acpi_index, "" when absent.
	ACPIIndex string `json:"acpi_index,omitempty"`

	// SR-IOV. On a physical function with SR-IOV capability TotalVFs is
	// read from sriov_totalvfs and NumVFs counts its virtfnN links, the
	// VFs enabled (sriov_numvfs, which is not read: see readFunction);
	// both -1 when absent. On a virtual function PF is the physical
	// function's address and VFIndex its index N from the PF's virtfnN
	// link; on anything else PF is "" and VFIndex is -1.
	TotalVFs int    `json:"sriov_totalvfs"`
	NumVFs   int    `json:"sriov_numvfs"`
	PF       string `json:"pf,omitempty"`
	VFIndex  int    `json:"vf_index"`

	// Interfaces are the network interfaces of the function, from net/ or,
	// for virtio functions, virtio*/net/, sorted by name within each; on a
	// PF in switchdev mode, whose net/ also holds its VFs' and SFs'
	// representors, the uplink (port name "p<N>") comes first. PFInterface is the first
	// interface of the PF for a VF ("" when unknown or not a VF), as the
	// SR-IOV plugin names a VF's PF.
	Interfaces  []NetInterface `json:"interfaces,omitempty"`
	PFInterface string         `json:"pf_interface,omitempty"`

	// RDMADevices are the names under infiniband/ ("mlx5_0"), sorted; RDMA
	// reports whether there is at least one.
	RDMADevices []string `json:"rdma_devices,omitempty"`
	// RDMACharDevices are, by RDMA device, its character devices: their
	// names under /dev/infiniband ("uverbs2", "umad2", "issm2"), from the
	// function's infiniband_verbs/ and infiniband_mad/.
	RDMACharDevices map[string][]string `json:"rdma_char_devices,omitempty"`
	// PKey is, for a function with RDMA devices and no network interface
	// to carry its partition keys (an InfiniBand VF whose IPoIB interface
	// is in a pod's namespace), its default partition key: index 0 of
	// port 1 of its first RDMA device. "" otherwise.
	PKey string `json:"pkey,omitempty"`

	// VDPAType is "virtio" or "vhost" when a vdpa device sits on the function
	// (from the driver of its vdpaN child), "" otherwise.
	VDPAType string `json:"vdpa_type,omitempty"`
	// VDPADevice names that vdpa device ("vdpa0") when VDPAType is set.
	VDPADevice string `json:"vdpa_device,omitempty"`
	// UIO is the function's UIO device under a UIO driver (igb_uio), its
	// name under /dev ("uio0"), from its uio/ child; "" for none.
	UIO string `json:"uio,omitempty"`
	// VhostVDPA is a vhost vDPA device's character device, its name under
	// /dev ("vhost-vdpa-0"), from its vdpaN/vhost-vdpa-M child.
	VhostVDPA string `json:"vhost_vdpa,omitempty"`

	// AuxDevices are the auxiliary devices hanging off the function, the
	// children named "<driver>.<type>.<id>" ("mlx5_core.sf.2"), sorted by
	// name, with their type ("sf", "eth", "rdma").
	AuxDevices []AuxDevice `json:"aux_devices,omitempty"`

	// Warnings lists, one per file, attributes that were missing or
	// malformed, each starting with the file's path relative to the
	// function's directory ("numa_node: \"x\" is not a NUMA node number").
	// Optional attributes (numa_node, driver, iommu_group, acpi_index,
	// sriov_*) only warn when present and unreadable.
	Warnings []string `json:"warnings,omitempty"`

	// Incomplete says a read of the function, or of its PF, failed with
	// an error other than not-found (EIO, EMFILE, ENOMEM; its warning
	// names it): the fields above may lack what the kernel holds, and are
	// no news of the function. Carrier does not count: the kernel refuses
	// it while a link is down, and it is the link's state.
	Incomplete bool `json:"incomplete,omitempty"`
	// PFIncomplete says Incomplete is its PF's doing alone: the
	// function's own files read whole, and only what comes from the PF
	// (VFIndex, PFInterface) is in doubt.
	PFIncomplete bool `json:"-"`
}

// NetInterface is one network interface of a PCI function.
type NetInterface struct {
	// Name is the interface name ("ens785f0v1").
	Name string `json:"name"`
	// OperState is the content of operstate ("up", "down", ...), "" when
	// unknown.
	OperState string `json:"operstate,omitempty"`
	// Carrier is 1 (carrier), 0 (no carrier) or -1 (unknown; the kernel
	// refuses to read it on a down interface).
	Carrier int `json:"carrier"`
	// LinkType is "ether", "infiniband" or the numeric ARPHRD type when it
	// is another one; "" when unknown.
	LinkType string `json:"link_type,omitempty"`
	// PKeys are the partition keys of an InfiniBand interface ("0xffff",
	// "0x" and four lower-case hex digits): the non-empty entries of
	// infiniband/<dev>/ports/<n>/pkeys/ of the function, in port then index
	// order. Set only when LinkType is "infiniband".
	PKeys []string `json:"pkeys,omitempty"`
}

// AuxDevice is an auxiliary bus device exposed by a PCI function.
type AuxDevice struct {
	// Name is the device name ("mlx5_core.sf.2").
	Name string `json:"name"`
	// Type is the middle part of the name ("sf").
	Type string `json:"type"`
}

// IsVF reports whether the function is an SR-IOV virtual function.
func (d *Device) IsVF() bool { return d.PF != "" }

// IsPFWithVFs reports whether the function is a physical function with at
// least one virtual function enabled.
func (d *Device) IsPFWithVFs() bool { return d.NumVFs > 0 }

// RDMA reports whether the function has an RDMA device.
func (d *Device) RDMA() bool { return len(d.RDMADevices) > 0 }

// RDMAEnabled reports whether RDMA is enabled on the function: it has an
// RDMA device, or the auxiliary device its driver makes for one
// ("mlx5_core.rdma.3"). The RDMA device leaves the host's sysfs when a
// pod's network namespace takes it (RDMA exclusive mode) and is missing
// while mlx5_ib is not loaded; the auxiliary device stays. The SR-IOV
// plugin asks devlink's enable_rdma in those cases; this is its sysfs
// counterpart.
func (d *Device) RDMAEnabled() bool {
	return d.RDMA() || slices.ContainsFunc(d.AuxDevices, func(a AuxDevice) bool { return a.Type == "rdma" })
}
