package allocation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devledger/devledger/sysfs"
)

// DeviceInfoVersion is the version of the Network Plumbing WG device-info
// spec the files follow, as its SPEC.md and the NAD client state it.
const DeviceInfoVersion = "1.1.0"

// DefaultDeviceInfoDir is where the spec puts device plugins' device-info
// files, and where Multus and the SR-IOV CNI look for them.
const DefaultDeviceInfoDir = "/var/run/k8s.cni.cncf.io/devinfo/dp"

// DeviceInfo is a device-info file: the spec's "device-info" map. Fields
// are in the order of the NAD client's types, so a file reads as the
// SR-IOV plugin's would.
type DeviceInfo struct {
	Type    string         `json:"type"`
	Version string         `json:"version"`
	PCI     *PCIDeviceInfo `json:"pci,omitempty"`
}

// PCIDeviceInfo is the spec's "pci" map.
type PCIDeviceInfo struct {
	// PCIAddress is the function's address, "dddd:bb:dd.f".
	PCIAddress string `json:"pci-address"`
	// RDMADevice names the function's RDMA devices, comma-joined as the
	// plugin writes them ("mlx5_2").
	RDMADevice string `json:"rdma-device,omitempty"`
	// PFPCIAddress is the PF's address for a VF. The SR-IOV plugin leaves
	// it out; the spec allows it and CNIs use it to find the PF.
	PFPCIAddress string `json:"pf-pci-address,omitempty"`
}

// NewDeviceInfo is the device-info of d: type "pci", the spec version, the
// address, the PF address for a VF and the RDMA devices when d has any.
// The SR-IOV plugin names RDMA devices only for pools with isRdma: a
// caller that wants exactly that passes d with RDMADevices cleared. vDPA
// devices are described as "pci" too: the spec's "vdpa" map requires the
// vDPA device's name and path, which sysfs.Device does not carry.
func NewDeviceInfo(d *sysfs.Device) DeviceInfo {
	return DeviceInfo{
		Type:    "pci",
		Version: DeviceInfoVersion,
		PCI: &PCIDeviceInfo{
			PCIAddress:   d.Address,
			RDMADevice:   strings.Join(d.RDMADevices, ","),
			PFPCIAddress: d.PF,
		},
	}
}

// SameDeviceInfo tells whether a and b have the same device-info file: the
// facts it holds (address, RDMA devices, PF) are equal.
func SameDeviceInfo(a, b *sysfs.Device) bool {
	return a.Address == b.Address && a.PF == b.PF && slices.Equal(a.RDMADevices, b.RDMADevices)
}

// DeviceInfoPath is the path of the device-info file of the device addr of
// the pool resource ("intel.com/intel_sriov_netdevice") in dir, named as
// the spec and the NAD client name it: every '/' of the resource and of
// the address becomes '-', so the file is
// <prefix>-<name>-<addr>-device.json
// ("intel.com-intel_sriov_netdevice-0000:af:06.0-device.json").
func DeviceInfoPath(dir, resource, addr string) string {
	return filepath.Join(dir, strings.ReplaceAll(resource+"-"+addr, "/", "-")+"-device.json")
}

// WriteDeviceInfo writes the device-info file of d for the pool resource in
// dir with writeJSONFile, read-only (0444, as the plugin makes it). An
// Allocate of a device given out before therefore writes nothing, readers
// see the old file or the new one, and concurrent writers for the same
// device all succeed, the last rename winning; the SR-IOV plugin's
// check-then-write fails one of them with "already exists".
func WriteDeviceInfo(dir, resource string, d sysfs.Device) error {
	if d.Address == "" {
		return fmt.Errorf("write device-info for %s: device has no PCI address: %w", resource, ErrInvalidRequest)
	}
	return writeJSONFile("device-info", dir, DeviceInfoPath(dir, resource, d.Address), NewDeviceInfo(&d), 0o444, nil)
}

// RemoveDeviceInfo removes the device-info file of the device addr of the
// pool resource from dir. A file that is not there is no error.
func RemoveDeviceInfo(dir, resource, addr string) error {
	return removeFile("device-info", DeviceInfoPath(dir, resource, addr))
}

// writeJSONFile writes v as JSON to path in dir, the what file
// ("device-info"), creating dir (0755) when it is missing, unless the file
// holds those bytes already. The file is written whole or not at all: the
// bytes go to a uniquely named temporary dot file in dir (a name no reader
// loads), made perm, checked by check (when not nil) and renamed over path.
//
// Nothing is synced: the ledger is the durable record of what was handed
// out, the directories are tmpfs on real nodes (/var/run), and a pool
// writes its files again when it starts (two fsyncs here would cost an
// Allocate more than its ledger commit).
func writeJSONFile(what, dir, path string, v any, perm fs.FileMode, check func(tmpPath string) error) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(perm), tmp.Close())
	if err == nil && check != nil {
		err = check(tmp.Name())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	return nil
}

// removeFile removes path, the what file ("device-info"). A file that is
// not there is no error.
func removeFile(what, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s %s: %w", what, path, err)
	}
	return nil
}
