package allocation

import "errors"

// Sentinel errors, wrapped with the device or request they concern and
// checked with errors.Is.
var (
	// ErrInvalidRequest is returned for a request the kubelet never sends:
	// no devices, a device listed twice, more must-include devices than
	// the size asked for, a negative size.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNoIOMMUGroup: a vfio-bound device has no IOMMU group, so no
	// /dev/vfio node to hand out.
	ErrNoIOMMUGroup = errors.New("vfio-bound device has no IOMMU group")
	// ErrUnsupported is returned for a pool Respond cannot answer for: an
	// auxNetDevice pool (its members are not PCI functions), or a CDI pool
	// whose kind is not a valid "vendor/class".
	ErrUnsupported = errors.New("unsupported pool")
)
