// Package allocation owns the answers a pool gives the kubelet about its
// devices, as pure functions over config and sysfs facts: ListDevice
// (ListAndWatch), Index.Preferred (GetPreferredAllocation), Respond
// (Allocate), and the files an allocation needs: Network Plumbing WG
// device-info files (WriteDeviceInfo) and CDI specs (WriteCDISpec).
//
// It keeps no state and knows neither the kubelet nor actors: the pool's
// allocator passes in the facts it holds and the gRPC layer copies the
// results into protobuf. Besides those files it only checks for device
// nodes under Env.DevRoot.
//
// Formats (PCIDEVICE_<PREFIX>_<NAME> and its _INFO, device-info files)
// follow the SR-IOV network device plugin, so that workloads and CNIs
// written for it keep working; where devledger differs, the function
// concerned says so.
package allocation
