package allocation

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"
)

// CDISpec is the CDI spec of the pool res for its members: kind
// res.CDI.Kind, one device per member named by its PCI address, so that
// every name Respond hands out with CDI enabled ("<kind>=<address>")
// resolves in it. Devices are sorted by address, so equal input gives
// equal bytes.
//
// A device's container edits are the device nodes (permissions "rw") and
// mounts Respond gives that one device with CDI disabled, taken from
// Respond itself so the two cannot drift apart. Respond's variables are
// not copied: they describe a whole request, and Allocate still sets them
// with CDI enabled, where one device's values injected by the runtime
// would overwrite them. CDI refuses a device with no edits, so a device
// that gets no node (a function bound to a kernel network driver) sets one
// variable of its own instead (see cdiDeviceEnv); without it the name
// could not resolve and the container would not start.
//
// The version is the lowest CDI version that can express the spec
// (specs.MinimumRequiredVersion), not the library's newest: a runtime
// accepts only versions its own CDI library knows, and nodes run runtimes
// older than ours.
//
// A member Respond refuses (a vfio-bound function without an IOMMU group:
// ErrNoIOMMUGroup), one without an address, listed twice, or whose address
// is not a CDI device name (ErrInvalidRequest) is left out and reported in
// refused, one error each, naming the device; the spec holds the rest.
// err is set, and spec nil, only when the pool can have no spec: a kind
// that is not "vendor/class", or a pool Respond does not answer for
// (auxNetDevice, found on its first member); both wrap ErrUnsupported.
// CDISpec does not look at res.CDI.Enabled: whether a pool has a spec is
// the caller's call. With no members left the spec has no devices, which
// WriteCDISpec takes to mean that the pool's file must go.
func CDISpec(res *config.Resource, members []sysfs.Device, env Env) (spec *specs.Spec, refused []error, err error) {
	if err := validCDIKind(res.CDI.Kind); err != nil {
		return nil, nil, fmt.Errorf("CDI spec for %s: %w: %w", res.FullName(), err, ErrUnsupported)
	}
	plain := *res
	plain.CDI = config.CDI{}
	spec = &specs.Spec{Kind: res.CDI.Kind, Devices: []specs.Device{}}
	seen := make(map[string]bool, len(members))
	for i := range members {
		d := &members[i]
		var why error
		switch {
		case d.Address == "":
			why = fmt.Errorf("member %d has no PCI address: %w", i, ErrInvalidRequest)
		case seen[d.Address]:
			why = fmt.Errorf("device %s listed twice: %w", d.Address, ErrInvalidRequest)
		default:
			if err := validCDIDeviceName(d.Address); err != nil {
				why = fmt.Errorf("%w: %w", err, ErrInvalidRequest)
			}
		}
		if why != nil {
			refused = append(refused, fmt.Errorf("CDI spec for %s: %w", res.FullName(), why))
			continue
		}
		alloc, err := Respond(&plain, members[i:i+1], env)
		if errors.Is(err, ErrUnsupported) {
			return nil, nil, fmt.Errorf("CDI spec for %s: %w", res.FullName(), err)
		}
		if err != nil {
			refused = append(refused, fmt.Errorf("CDI spec: %w", err))
			continue
		}
		seen[d.Address] = true
		edits := cdiEdits(alloc)
		if len(edits.DeviceNodes) == 0 && len(edits.Mounts) == 0 {
			edits.Env = []string{cdiDeviceEnv(res, d.Address)}
		}
		spec.Devices = append(spec.Devices, specs.Device{Name: d.Address, ContainerEdits: edits})
	}
	slices.SortFunc(spec.Devices, func(a, b specs.Device) int { return strings.Compare(a.Name, b.Name) })
	spec.Version, err = specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("CDI spec for %s: %w", res.FullName(), err)
	}
	return spec, refused, nil
}

// cdiEdits are the container edits that hand a container the device nodes
// and mounts of a, as the kubelet would have handed them from a itself.
func cdiEdits(a events.ContainerAllocation) specs.ContainerEdits {
	var e specs.ContainerEdits
	for _, n := range a.Devices {
		e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: n.ContainerPath, HostPath: n.HostPath, Permissions: n.Permissions})
	}
	for _, m := range a.Mounts {
		// The kubelet bind-mounts a device plugin's mounts, read-write
		// unless it says otherwise.
		access := "rw"
		if m.ReadOnly {
			access = "ro"
		}
		e.Mounts = append(e.Mounts, &specs.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind", Options: []string{"rbind", access}})
	}
	return e
}

// cdiDeviceEnv is the variable a device without nodes or mounts sets, so
// that its CDI device has an edit: res.EnvVarName()_<ADDRESS>=<address>,
// the address upper-cased with ':' and '.' as '_'
// (PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE_0000_3B_02_0=0000:3b:02.0).
func cdiDeviceEnv(res *config.Resource, addr string) string {
	suffix := strings.ToUpper(strings.NewReplacer(":", "_", ".", "_").Replace(addr))
	return res.EnvVarName() + "_" + suffix + "=" + addr
}

// CDISpecPath is the path of the CDI spec file of the pool res in dir:
// devledger_<prefix>_<name>.json ("devledger_intel.com_intel_sriov_dpdk.json").
//
// The name follows the pool, not its kind: pools may share a kind, and a
// reload that changes a pool's kind would leave a kind-named file (as
// cdi.GenerateSpecName names it) behind. Resource names are unique and a
// prefix holds no '_', so distinct pools get distinct files; "devledger"
// keeps them apart from other programs' specs in the same directory.
func CDISpecPath(dir string, res *config.Resource) string {
	return filepath.Join(dir, "devledger_"+strings.ReplaceAll(res.FullName(), "/", "_")+".json")
}

// CDISpecGlob matches the name of every CDI spec file CDISpecPath names.
const CDISpecGlob = "devledger_*.json"

// WriteCDISpec writes spec, the CDI spec of the pool res, to its file in
// dir (CDISpecPath) with writeJSONFile, 0644, and returns the file's path.
// A file already holding these bytes is left untouched, so rewriting an
// unchanged pool changes nothing a cache could notice. Before the rename
// the file is validated with the library's own reader (cdi.ReadSpec, as a
// runtime reads it): a runtime sees the old spec or the new one, never a
// partial or invalid one, and on a validation error the old file stays.
//
// A spec with no devices (nil included) removes the file instead: CDI
// refuses a spec without devices, and a pool with no usable member has no
// name to resolve. spec's kind must be res.CDI.Kind (ErrInvalidRequest
// otherwise), so that a spec cannot land in another pool's file.
func WriteCDISpec(dir string, res *config.Resource, spec *specs.Spec) (path string, err error) {
	path = CDISpecPath(dir, res)
	if spec == nil || len(spec.Devices) == 0 {
		return path, RemoveCDISpec(dir, res)
	}
	if spec.Kind != res.CDI.Kind {
		return path, fmt.Errorf("write CDI spec %s: spec of kind %q for pool %s of kind %q: %w", path, spec.Kind, res.FullName(), res.CDI.Kind, ErrInvalidRequest)
	}
	return path, writeJSONFile("CDI spec", dir, path, spec, 0o644, func(tmpPath string) error {
		_, err := cdi.ReadSpec(tmpPath, 0)
		return err
	})
}

// RemoveCDISpec removes the CDI spec file of the pool res from dir. A file
// that is not there is no error.
func RemoveCDISpec(dir string, res *config.Resource) error {
	return removeFile("CDI spec", CDISpecPath(dir, res))
}
