// Package allocation owns the answers a pool gives the kubelet about its
// devices, as pure functions over config and sysfs facts: how a device is
// listed (ListDevice), which devices GetPreferredAllocation proposes
// (Preferred), what Allocate hands one container (Respond), and the Network
// Plumbing WG device-info file written for each allocated network function
// (WriteDeviceInfo, RemoveDeviceInfo, DeviceInfoPath).
//
// Nothing here talks to the kubelet, keeps state or knows about actors; the
// pool's allocator actor calls these functions with the facts it holds
// (the members and their health, the ledger's live allocations) and the
// gRPC layer copies the results into protobuf. The only file system access
// is the device-info file and a few existence checks under Env.DevRoot.
//
// Formats follow the SR-IOV network device plugin wherever it defines
// them, so that workloads and CNIs written for it keep working:
//
//   - PCIDEVICE_<PREFIX>_<NAME>: the allocated PCI addresses, comma-joined
//     in the kubelet's request order;
//   - PCIDEVICE_<PREFIX>_<NAME>_INFO: a JSON object keyed by PCI address,
//     then by provider ("generic", "vfio", "rdma", "vhost", "vdpa",
//     "extra"), then by field;
//   - device-info files named <prefix>-<name>-<address>-device.json with
//     the device-info spec's "pci" object, version 1.1.0.
//
// Where devledger differs it says so on the function concerned.
package allocation
