package events

import "time"

// The catalog. Every event type: its name, its payload, its subject, and its
// codec at each schema version. Add a field by bumping the type's version,
// writing the new decoder, and keeping the old decoder as an upcast.

// Event type names.
const (
	TypeDaemonStarted         Type = "DaemonStarted"
	TypeDaemonStopped         Type = "DaemonStopped"
	TypeConfigApplied         Type = "ConfigApplied"
	TypeConfigRejected        Type = "ConfigRejected"
	TypeDeviceDiscovered      Type = "DeviceDiscovered"
	TypeDeviceChanged         Type = "DeviceChanged"
	TypeDeviceRemoved         Type = "DeviceRemoved"
	TypeDeviceHealthChanged   Type = "DeviceHealthChanged"
	TypePoolMembershipChanged Type = "PoolMembershipChanged"
	TypePluginServing         Type = "PluginServing"
	TypePluginRegistered      Type = "PluginRegistered"
	TypeRegistrationFailed    Type = "RegistrationFailed"
	TypeKubeletRestarted      Type = "KubeletRestarted"
	TypeSocketLost            Type = "SocketLost"
	TypeDevicesAllocated      Type = "DevicesAllocated"
	TypeAllocationConflict    Type = "AllocationConflict"
	TypeAllocationBound       Type = "AllocationBound"
	TypeDevicesReleased       Type = "DevicesReleased"
	TypeSnapshotTaken         Type = "SnapshotTaken"
	TypeEventsDropped         Type = "EventsDropped"
)

// SubjectDaemon is the subject of events about the daemon itself.
const SubjectDaemon = "daemon"

// SubjectConfig is the subject of config events.
const SubjectConfig = "config"

// SubjectLedger is the subject of events about the ledger itself.
const SubjectLedger = "ledger"

// DaemonStarted records a daemon start. Its envelope's BootID identifies the
// run; every later event of that run carries the same one.
type DaemonStarted struct {
	Version      string `json:"version"`
	Node         string `json:"node,omitempty"`
	PID          int    `json:"pid"`
	ConfigPath   string `json:"config_path,omitempty"`
	SysfsRoot    string `json:"sysfs_root,omitempty"`
	KubeletDir   string `json:"kubelet_dir,omitempty"`
	Registration string `json:"registration,omitempty"`
	// KernelBootID is the kernel's boot id (/proc/sys/kernel/random/boot_id)
	// the run started under, "" when it could not be read. A start under
	// another one than the last run's follows a node reboot.
	KernelBootID string `json:"kernel_boot_id,omitempty"`
}

// DaemonStopped records an orderly stop (SIGTERM, or a fatal error the daemon
// could still record). A crash leaves no DaemonStopped: the next
// DaemonStarted follows directly.
type DaemonStopped struct {
	Reason string `json:"reason"`
	// Clean is true when every in-flight request finished and the sockets
	// were removed.
	Clean bool `json:"clean"`
}

// PoolSpec is the part of a pool's configuration the ledger keeps: enough to
// tell what the pool is and whether it changed.
type PoolSpec struct {
	// Resource is the full extended-resource name, "prefix/name".
	Resource        string `json:"resource"`
	DeviceType      string `json:"device_type"`
	ExcludeTopology bool   `json:"exclude_topology,omitempty"`
	AllocatePolicy  string `json:"allocate_policy,omitempty"`
	// Definition is the pool's configuration entry as canonical JSON, so a
	// change of any field, selectors included, is a change of the spec.
	Definition string `json:"definition,omitempty"`
}

// ConfigApplied records a configuration that was validated and is now in
// force. Pools lists every pool it defines, in the order of the file.
// Changes says what it changed from the config in force before it: one
// entry per pool added, removed, changed, or whose members change.
type ConfigApplied struct {
	Path    string       `json:"path"`
	SHA256  string       `json:"sha256"`
	Pools   []PoolSpec   `json:"pools"`
	Changes []PoolChange `json:"changes,omitempty"`
}

// PoolChange is what a config changed of one pool.
type PoolChange struct {
	Pool string `json:"pool"`
	// Change is "added", "removed", "changed" (its definition) or
	// "members" (only which devices it takes).
	Change string `json:"change"`
	// Fields are the fields of the pool's entry that changed, each as
	// "path: old → new" ("selectors[0].vendors: [\"8086\"] → [\"15b3\"]").
	Fields []string `json:"fields,omitempty"`
	// Joined and Left are the devices present then that the config moves
	// into and out of the pool; none when it applied before the first
	// scan (at a start), when the scan's placement records them.
	Joined []string `json:"joined,omitempty"`
	Left   []string `json:"left,omitempty"`
}

// ConfigRejected records a configuration that failed validation; the one in
// force before stays. Errors are the validation errors, one per line with
// their field paths.
type ConfigRejected struct {
	Path   string   `json:"path"`
	SHA256 string   `json:"sha256,omitempty"`
	Errors []string `json:"errors"`
}

// DeviceFacts is what the ledger keeps of a PCI function as discovered.
type DeviceFacts struct {
	Address         string   `json:"address"`
	Vendor          string   `json:"vendor"`
	Device          string   `json:"device"`
	SubsystemVendor string   `json:"subsystem_vendor,omitempty"`
	SubsystemDevice string   `json:"subsystem_device,omitempty"`
	Class           string   `json:"class"`
	VendorName      string   `json:"vendor_name,omitempty"`
	DeviceName      string   `json:"device_name,omitempty"`
	Driver          string   `json:"driver,omitempty"`
	NUMANode        int      `json:"numa_node"`
	IOMMUGroup      string   `json:"iommu_group,omitempty"`
	VFIODevice      bool     `json:"vfio_device,omitempty"`
	PF              string   `json:"pf,omitempty"`
	VFIndex         int      `json:"vf_index"`
	Interfaces      []string `json:"interfaces,omitempty"`
	PFInterface     string   `json:"pf_interface,omitempty"`
	RDMADevices     []string `json:"rdma_devices,omitempty"`
}

func (d *DeviceFacts) encode(w *writer) {
	w.string(d.Address)
	w.string(d.Vendor)
	w.string(d.Device)
	w.string(d.SubsystemVendor)
	w.string(d.SubsystemDevice)
	w.string(d.Class)
	w.string(d.VendorName)
	w.string(d.DeviceName)
	w.string(d.Driver)
	w.int(d.NUMANode)
	w.string(d.IOMMUGroup)
	w.bool(d.VFIODevice)
	w.string(d.PF)
	w.int(d.VFIndex)
	w.strings(d.Interfaces)
	w.string(d.PFInterface)
	w.strings(d.RDMADevices)
}

func (d *DeviceFacts) decode(r *reader) {
	d.Address = r.string()
	d.Vendor = r.string()
	d.Device = r.string()
	d.SubsystemVendor = r.string()
	d.SubsystemDevice = r.string()
	d.Class = r.string()
	d.VendorName = r.string()
	d.DeviceName = r.string()
	d.Driver = r.string()
	d.NUMANode = r.int()
	d.IOMMUGroup = r.string()
	d.VFIODevice = r.bool()
	d.PF = r.string()
	d.VFIndex = r.int()
	d.Interfaces = r.strings()
	d.PFInterface = r.string()
	d.RDMADevices = r.strings()
}

// DeviceDiscovered records a PCI function seen for the first time (or again
// after it was removed).
type DeviceDiscovered struct {
	Device DeviceFacts `json:"device"`
}

// DeviceChanged records new facts about a known function (a driver rebind, a
// new interface name). Changed names the fields that differ.
type DeviceChanged struct {
	Device  DeviceFacts `json:"device"`
	Changed []string    `json:"changed"`
}

// DeviceRemoved records a function that vanished from sysfs. Its live
// allocations stay in the ledger, marked lost.
type DeviceRemoved struct {
	Address string `json:"address"`
	Reason  string `json:"reason,omitempty"`
}

// DeviceHealthChanged records a new health verdict for a device. Only
// changes are recorded, never a repeated verdict.
type DeviceHealthChanged struct {
	Address string `json:"address"`
	Healthy bool   `json:"healthy"`
	Reason  string `json:"reason,omitempty"`
}

// PoolMembershipChanged records devices joining or leaving a pool, with why
// ("config applied", "device removed", "driver changed to iavf").
type PoolMembershipChanged struct {
	Pool    string   `json:"pool"`
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Reason  string   `json:"reason,omitempty"`
}

// PluginServing records that a pool's gRPC server listens on Socket. Mode is
// "legacy" or "watcher".
type PluginServing struct {
	Pool   string `json:"pool"`
	Socket string `json:"socket"`
	Mode   string `json:"mode"`
}

// PluginRegistered records the kubelet's acknowledgement of a pool.
type PluginRegistered struct {
	Pool   string `json:"pool"`
	Socket string `json:"socket"`
	Mode   string `json:"mode"`
}

// RegistrationFailed records a registration the kubelet refused or that could
// not reach it; Error is the kubelet's reason. Attempt counts from 1.
// KubeletHolds, when set, is the socket path the kubelet refused because it
// holds an endpoint for it already ("device plugin already connected"), and
// Action says what the daemon did about the failure (schema version 2;
// empty in version 1 records).
type RegistrationFailed struct {
	Pool         string `json:"pool"`
	Socket       string `json:"socket"`
	Mode         string `json:"mode"`
	Error        string `json:"error"`
	Attempt      int    `json:"attempt"`
	KubeletHolds string `json:"kubelet_holds,omitempty"`
	Action       string `json:"action,omitempty"`
}

// KubeletRestarted records a new kubelet: its registration socket appeared
// again, or a kubelet recorded gone answered again or registered a pool
// through its plugin watcher. Every registration before it is void.
// StoppedAt is when the kubelet before it was recorded gone
// (KubeletStopped), zero when no stop was recorded: one that came back
// before anyone saw it go.
type KubeletRestarted struct {
	Socket    string    `json:"socket"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
}

// SocketLost records that a pool's socket vanished (the kubelet empties
// device-plugins/ when it starts); the pool is no longer registered.
type SocketLost struct {
	Pool   string `json:"pool"`
	Socket string `json:"socket"`
}

// Mount is a host path mounted into the container.
type Mount struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	ReadOnly      bool   `json:"read_only,omitempty"`
}

// DeviceNode is a device node handed to the container.
type DeviceNode struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	Permissions   string `json:"permissions"`
}

// ContainerAllocation is the answer devledger gave the kubelet for one
// container: everything the container runtime received.
type ContainerAllocation struct {
	Envs        map[string]string `json:"envs,omitempty"`
	Mounts      []Mount           `json:"mounts,omitempty"`
	Devices     []DeviceNode      `json:"devices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []string          `json:"cdi_devices,omitempty"`
}

func (c *ContainerAllocation) encode(w *writer) {
	w.stringMap(c.Envs)
	w.uvarint(uint64(len(c.Mounts)))
	for _, m := range c.Mounts {
		w.string(m.ContainerPath)
		w.string(m.HostPath)
		w.bool(m.ReadOnly)
	}
	w.uvarint(uint64(len(c.Devices)))
	for _, d := range c.Devices {
		w.string(d.ContainerPath)
		w.string(d.HostPath)
		w.string(d.Permissions)
	}
	w.stringMap(c.Annotations)
	w.strings(c.CDIDevices)
}

func (c *ContainerAllocation) decode(r *reader) {
	if r.forFold { // Apply never reads a response
		skipContainerAllocation(r)
		return
	}
	c.Envs = r.stringMap()
	if n := r.length(3); n > 0 {
		c.Mounts = make([]Mount, n)
		for i := range c.Mounts {
			c.Mounts[i] = Mount{ContainerPath: r.string(), HostPath: r.string(), ReadOnly: r.bool()}
		}
	}
	if n := r.length(3); n > 0 {
		c.Devices = make([]DeviceNode, n)
		for i := range c.Devices {
			c.Devices[i] = DeviceNode{ContainerPath: r.string(), HostPath: r.string(), Permissions: r.string()}
		}
	}
	c.Annotations = r.stringMap()
	c.CDIDevices = r.strings()
}

// skipContainerAllocation reads what decode reads, with the same checks, and
// keeps none of it.
func skipContainerAllocation(r *reader) {
	for range r.length(2) { // Envs
		r.rawBytes()
		r.rawBytes()
	}
	for range r.length(3) { // Mounts
		r.rawBytes()
		r.rawBytes()
		r.bool()
	}
	for range r.length(3) { // Devices
		r.rawBytes()
		r.rawBytes()
		r.rawBytes()
	}
	for range r.length(2) { // Annotations
		r.rawBytes()
		r.rawBytes()
	}
	r.skipStrings() // CDIDevices
}

// DevicesAllocated is the heart of the ledger: the kubelet asked for DeviceIDs
// of Pool for one container and was answered with Response. The allocation is
// identified by this event's sequence number. It is on disk before Allocate
// returns.
type DevicesAllocated struct {
	Pool      string   `json:"pool"`
	DeviceIDs []string `json:"device_ids"`
	// Request is the kubelet's request as received: the IDs of this container
	// request, and its index within the AllocateRequest.
	ContainerIndex int                 `json:"container_index"`
	Response       ContainerAllocation `json:"response"`
	// Supersedes are the live allocations of Pool that held any of
	// DeviceIDs when the kubelet allocated them again. The kubelet gives
	// out only devices it holds free, so their containers are gone: the
	// fold releases them here, with no DevicesReleased of their own. Each
	// is named once: not again by a later container of the request, nor
	// while an Allocate under way names it (should that one fail, the
	// allocation stays live until released).
	Supersedes []uint64 `json:"supersedes,omitempty"`
	// HeldElsewhere are the live allocations of other pools that held any
	// of DeviceIDs (the device moved pools while held): both hold it now,
	// a conflict the kubelet could not see.
	HeldElsewhere []uint64 `json:"held_elsewhere,omitempty"`
	// Unhealthy are the devices of DeviceIDs the pool listed unhealthy
	// when the kubelet allocated them (a race the kubelet can lose): by
	// their health verdict, or as still arriving from a pool that may give
	// them out. One another pool's allocation held is in HeldElsewhere.
	Unhealthy []string `json:"unhealthy,omitempty"`
}

// Claim is one holder of a device: an allocation of ours, or a container the
// kubelet reports.
type Claim struct {
	AllocationSeq uint64 `json:"allocation_seq,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
	Pod           string `json:"pod,omitempty"`
	Container     string `json:"container,omitempty"`
}

// AllocationConflict records a device the kubelet reports in two or more
// containers at once, of one pool or of two (the device moved while held).
// The reconciler records it. An Allocate that gives out a device another
// pool's live allocation holds says so in its own DevicesAllocated
// (HeldElsewhere), and a container holding a device the ledger says is
// free is an AllocationRecovered.
type AllocationConflict struct {
	Pool   string  `json:"pool"`
	Device string  `json:"device"`
	Claims []Claim `json:"claims"`
	Reason string  `json:"reason"`
}

// AllocationBound records that the devices of allocation AllocationSeq belong
// to a container of a pod, as the kubelet's PodResources reports.
type AllocationBound struct {
	AllocationSeq uint64   `json:"allocation_seq"`
	Pool          string   `json:"pool"`
	DeviceIDs     []string `json:"device_ids"`
	Namespace     string   `json:"namespace"`
	Pod           string   `json:"pod"`
	UID           string   `json:"uid,omitempty"`
	Container     string   `json:"container"`
}

// DevicesReleased records that no container holds the devices of allocation
// AllocationSeq any more. HeldFor is the time since the allocation.
type DevicesReleased struct {
	AllocationSeq uint64        `json:"allocation_seq"`
	Pool          string        `json:"pool"`
	DeviceIDs     []string      `json:"device_ids"`
	HeldFor       time.Duration `json:"held_for"`
	Reason        string        `json:"reason,omitempty"`
}

// SnapshotTaken records that the folded state up to and including Seq was
// saved as a snapshot of Size bytes.
type SnapshotTaken struct {
	Seq    uint64 `json:"snapshot_seq"`
	Size   int    `json:"size"`
	Reason string `json:"reason,omitempty"`
}

// EventsDropped records that retention deleted events FromSeq..ToSeq (Count
// of them, Bytes in all), all older than the snapshot at SnapshotSeq.
type EventsDropped struct {
	FromSeq     uint64 `json:"from_seq"`
	ToSeq       uint64 `json:"to_seq"`
	Count       uint64 `json:"count"`
	Bytes       int64  `json:"bytes"`
	SnapshotSeq uint64 `json:"snapshot_seq"`
	Reason      string `json:"reason"`
}
