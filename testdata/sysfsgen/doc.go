// Package sysfsgen writes fake sysfs, devfs and procfs trees for tests.
//
// A tree mirrors the layout the Linux kernel exposes, symlinks included, so
// that code reading it cannot tell it from a real node:
//
//	sys/devices/pci<domain>:<bus>/<address>/           the PCI function (a real directory)
//	sys/bus/pci/devices/<address>                      -> ../../../devices/pci.../<address>
//	sys/bus/pci/drivers/<driver>/<address>             -> back to the function
//	<function>/driver                                  -> ../../../bus/pci/drivers/<driver>
//	<function>/iommu_group                             -> ../../../kernel/iommu_groups/<n>
//	<function>/physfn, <function>/virtfn<N>            relative links between PF and VFs
//	<function>/net/<if>/{operstate,carrier,type,address,ifindex}
//	<function>/net/<if>/{phys_switch_id,phys_port_name}      on a switchdev port
//	<function>/virtio<N>/net/<if>/...                  where virtio NICs keep their interface
//	<function>/infiniband/<dev>/ports/<n>/pkeys/<i>    RDMA devices
//	<function>/infiniband_verbs/uverbs<N>/ibdev, <function>/infiniband_mad/{umad,issm}<N>/ibdev
//	                                                   their character devices, named by dev/infiniband/<name>
//	<function>/vdpa<N>/driver, <function>/<drv>.<type>.<N>   vDPA and auxiliary devices
//	<function>/vdpa<N>/vhost-vdpa-<M>                  a vhost vDPA device's, named by dev/vhost-vdpa-<M>
//	<function>/uio/uio<N>                              a UIO driver's (igb_uio), named by dev/uio<N>
//	sys/class/net/<if>, sys/class/infiniband*/<dev>    -> into the function
//	dev/vfio/vfio, dev/vfio/<group>, dev/vhost-net, dev/net/tun,
//	dev/infiniband/{rdma_cm,uverbs<N>,...}             (empty regular files)
//	proc/net/route                                     the routing table, default route included
//
// Functions sit directly under their host bridge directory (no PCI bridges
// are modelled), so every link from a function to the top of the tree climbs
// exactly three levels, as the relative links above show.
//
// A tree is described declaratively by a [Node] and written by [Build]; named
// scenarios ([Scenario], [Scenarios]) cover the machines the tests need. The
// methods of [Roots] change a built tree the way the kernel would (bind and
// unbind drivers, hot-unplug and hot-plug functions, change the number of VFs,
// take links down), for tests of health checking and hot-plug.
//
// The package never reads or writes anything outside the directory it is
// given.
package sysfsgen
