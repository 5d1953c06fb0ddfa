// Package sysfs is devledger's read-only view of a node's PCI devices: it
// walks a sysfs root (default /sys) and a devfs root (default /dev) and reports
// every PCI function with its IDs, driver, NUMA node, IOMMU group, SR-IOV
// relations, network interfaces and RDMA devices, with names from the PCI ID
// database. It is the only package that reads /sys; both roots are parameters
// so tests run against fake trees.
package sysfs
