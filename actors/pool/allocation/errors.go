package allocation

import "errors"

// Sentinel errors, wrapped with the device or request they concern and
// checked with errors.Is.
var (
	// ErrUnknownDevice is returned when a request names a device that is
	// not a member of the pool.
	ErrUnknownDevice = errors.New("unknown device")
	// ErrInvalidRequest is returned for a request the kubelet never sends:
	// no devices, a device listed twice, more must-include devices than
	// the size asked for, a negative size.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNoIOMMUGroup is returned when a vfio-bound device has no IOMMU
	// group, so no /dev/vfio node can be handed to the container.
	ErrNoIOMMUGroup = errors.New("vfio-bound device has no IOMMU group")
	// ErrUnsupported is returned for a pool Respond cannot answer for:
	// an auxNetDevice pool (its members are auxiliary devices, not the PCI
	// functions Respond is given), or a CDI pool whose kind is not a
	// valid "vendor/class".
	ErrUnsupported = errors.New("unsupported pool")
)
