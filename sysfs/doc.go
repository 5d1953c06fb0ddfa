// Package sysfs is devledger's read-only view of a node's PCI devices: it
// walks a sysfs root (default /sys) and a devfs root (default /dev) and
// reports every PCI function with its IDs, class, driver, NUMA node, IOMMU
// group and VFIO node, SR-IOV relations (PF, VF index), network interfaces
// (including those of virtio functions), RDMA devices and InfiniBand pkeys,
// vDPA and auxiliary devices, with vendor and device names from the PCI ID
// database (jaypipes/pcidb). It is the only package that reads /sys; both
// roots are parameters so tests run against fake trees (see
// testdata/sysfsgen).
//
// A Reader never fails because of one function: a missing or malformed
// attribute leaves its field unknown and adds a warning naming the file to
// Device.Warnings. A missing PCI ID database leaves names empty and is
// logged once; the database is never fetched from the network. Only a
// missing sysfs root (ErrNoSysfsRoot) or an unlistable bus/pci/devices
// fails a Scan.
//
// A Scan reads each function's directory listing first and opens only the
// attributes it lists, reads functions in parallel, then links VFs to their
// PFs. BenchmarkScanLarge compares it with reading the same files through
// os.ReadFile, os.Readlink and os.ReadDir.
//
// Probe and ProbeAll are the health checker's view: a few reads per pooled
// device (driver link, /dev/vfio node, operstate and carrier), each
// failure a reason naming the file. WatchKernel (Linux only) passes on
// the kernel's uevents and link notifications from netlink, and Coalesce
// turns their storms into batches; both are hints to read sysfs again,
// never a state of their own.
package sysfs
