package allocation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"
)

// CDISpec is the CDI spec of the pool res: kind res.CDI.Kind, one device
// per member named by its PCI address, so that every "<kind>=<address>"
// Respond hands out resolves. Devices are sorted by address (equal input,
// equal bytes). Whether a pool has a spec (res.CDI.Enabled) is the
// caller's call.
//
// A device's edits are the nodes and mounts Respond gives it alone with
// CDI off, taken from Respond so the two cannot drift. Respond's variables
// are not copied: they describe the whole request and Allocate still sets
// them, where a runtime injecting one device's copy would overwrite them.
// CDI refuses a device with no edits, so one with no node or mount (bound
// to a kernel network driver) gets a variable of its own (cdiDeviceEnv),
// or its name would not resolve and the container would not start.
//
// The version is the lowest that can express the spec, not the library's
// newest: a runtime accepts only versions its own CDI library knows.
//
// Members Respond refuses (ErrNoIOMMUGroup), and those without an address,
// listed twice or not valid CDI device names (ErrInvalidRequest), are left
// out, each reported in refused. err, with a nil spec, wraps
// ErrUnsupported when the pool can have no spec: a kind not
// "vendor/class", or an auxNetDevice pool (found at its first member).
// With no members left the spec has no devices: WriteCDISpec removes it.
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

// cdiDeviceEnv is the variable of a device without nodes or mounts:
// DEVLEDGER_CDI_ and res.EnvVarName() past its PCIDEVICE_, then
// _<ADDRESS>=<address>, ':' and '.' as '_', upper-cased
// (DEVLEDGER_CDI_INTEL_COM_INTEL_SRIOV_NETDEVICE_0000_3B_02_0=0000:3b:02.0).
// Not in PCIDEVICE_: what reads every PCIDEVICE_ variable for the
// container's devices (the Kubernetes e2e helpers, Kata's agent) would
// count each device twice.
func cdiDeviceEnv(res *config.Resource, addr string) string {
	suffix := strings.ToUpper(strings.NewReplacer(":", "_", ".", "_").Replace(addr))
	return "DEVLEDGER_CDI_" + strings.TrimPrefix(res.EnvVarName(), "PCIDEVICE_") + "_" + suffix + "=" + addr
}

// CDISpecPath is the CDI spec file of the pool res in dir:
// devledger_<prefix>_<name>.json ("devledger_intel.com_intel_sriov_dpdk.json").
// It is named after the pool, not the kind (as cdi.GenerateSpecName would):
// pools may share a kind, and a reload that changes it would leave a file
// behind. Resource names are unique and a prefix holds no '_', so pools get
// distinct files; "devledger_" keeps them apart from other programs' specs.
func CDISpecPath(dir string, res *config.Resource) string {
	return filepath.Join(dir, "devledger_"+strings.ReplaceAll(res.FullName(), "/", "_")+".json")
}

// CDISpecGlob matches the name of every CDI spec file CDISpecPath names.
const CDISpecGlob = "devledger_*.json"

// WriteCDISpec writes spec, the pool's CDI spec, to CDISpecPath in dir,
// 0644, with writeJSONFile, and returns the path. The new file is first
// read with cdi.ReadSpec, as a runtime reads it: an invalid spec leaves the
// old file. A spec with no devices (or nil) removes the file, as CDI
// refuses one. spec.Kind must be res.CDI.Kind (ErrInvalidRequest
// otherwise), so a spec cannot land in another pool's file.
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

// CDIConflicts are the devices of the pool's spec in dir that another spec
// there defines too, as a runtime's CDI cache finds them: it resolves such
// a name through neither (a plugin's spec left behind, or another pool's
// of the same kind naming a device that moved). Each error names the two
// files; none when there is no conflict or no spec.
func CDIConflicts(dir string, res *config.Resource) []error {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return []error{fmt.Errorf("read CDI specs in %s: %w", dir, err)}
	}
	var out []error
	for _, err := range c.GetErrors()[CDISpecPath(dir, res)] {
		if strings.Contains(err.Error(), "conflicting device") {
			out = append(out, err)
		}
	}
	return out
}

// RemoveCDISpec removes the pool's CDI spec file from dir; a missing file
// is no error.
func RemoveCDISpec(dir string, res *config.Resource) error {
	path := CDISpecPath(dir, res)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove CDI spec %s: %w", path, err)
	}
	return nil
}
