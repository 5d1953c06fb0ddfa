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
	"syscall"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/sysfs"
)

// DeviceInfoVersion is the device-info spec version the files follow.
const DeviceInfoVersion = "1.1.0"

// DefaultDeviceInfoDir is where the spec puts device plugins' device-info
// files, and where Multus and the SR-IOV CNI look for them.
const DefaultDeviceInfoDir = "/var/run/k8s.cni.cncf.io/devinfo/dp"

// DeviceInfo is a device-info file, the spec's "device-info" map, its
// fields in the NAD client's order so a file reads as the plugin's would.
type DeviceInfo struct {
	Type    string          `json:"type"`
	Version string          `json:"version"`
	PCI     *PCIDeviceInfo  `json:"pci,omitempty"`
	VDPA    *VDPADeviceInfo `json:"vdpa,omitempty"`
}

// VDPADeviceInfo is the spec's "vdpa" map, which KubeVirt's vDPA binding
// and Multus's network-status read.
type VDPADeviceInfo struct {
	// ParentDevice is the vdpa device ("vdpa0"), Driver its type ("vhost"
	// or "virtio"), Path its vhost-vdpa node (vhost only).
	ParentDevice string `json:"parent-device,omitempty"`
	Driver       string `json:"driver,omitempty"`
	Path         string `json:"path,omitempty"`
	PCIAddress   string `json:"pci-address,omitempty"`
	PFPCIAddress string `json:"pf-pci-address,omitempty"`
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

// NewDeviceInfo is the device-info of d: of type "vdpa" for a vDPA device,
// as the SR-IOV plugin writes it, else "pci", naming d's RDMA devices. Pass
// d as ForDeviceInfo gives it.
func NewDeviceInfo(d *sysfs.Device) DeviceInfo {
	if d.VDPAType != "" && d.VDPADevice != "" {
		v := &VDPADeviceInfo{ParentDevice: d.VDPADevice, Driver: d.VDPAType, PCIAddress: d.Address, PFPCIAddress: d.PF}
		if d.VhostVDPA != "" {
			v.Path = "/dev/" + d.VhostVDPA
		}
		return DeviceInfo{Type: "vdpa", Version: DeviceInfoVersion, VDPA: v}
	}
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

// ForDeviceInfo is d as the pool res describes it in its device-info file:
// with its RDMA devices only when the pool asks for them (isRdma), and
// as a vDPA device only when it asks for one (vdpaType), as the SR-IOV
// plugin writes it. A pool that does not gives the container none of
// those nodes, so the file must not name one for CNIs to act on.
func ForDeviceInfo(res *config.Resource, d sysfs.Device) sysfs.Device {
	w := wantsOf(res)
	if !w.rdma {
		d.RDMADevices = nil
	}
	if !w.vdpa {
		d.VDPAType, d.VDPADevice, d.VhostVDPA = "", "", ""
	}
	return d
}

// SameDeviceInfo tells whether a and b have the same device-info file.
func SameDeviceInfo(a, b *sysfs.Device) bool {
	return a.Address == b.Address && a.PF == b.PF && slices.Equal(a.RDMADevices, b.RDMADevices) &&
		a.VDPAType == b.VDPAType && a.VDPADevice == b.VDPADevice && a.VhostVDPA == b.VhostVDPA
}

// DeviceInfoPath is the device-info file of device addr of the pool
// resource in dir, named as the spec and the NAD client name it, each '/'
// as '-' ("intel.com-intel_sriov_netdevice-0000:af:06.0-device.json").
func DeviceInfoPath(dir, resource, addr string) string {
	return filepath.Join(dir, strings.ReplaceAll(resource+"-"+addr, "/", "-")+"-device.json")
}

// WriteDeviceInfo writes d's device-info file for the pool resource in dir
// with writeJSONFile, read-only (0444, as the plugin makes it). Concurrent
// writers of one device all succeed, the last rename winning, where the
// SR-IOV plugin's check-then-write fails one with "already exists".
func WriteDeviceInfo(dir, resource string, d sysfs.Device) error {
	if d.Address == "" {
		return fmt.Errorf("write device-info for %s: device has no PCI address: %w", resource, ErrInvalidRequest)
	}
	return writeJSONFile("device-info", dir, DeviceInfoPath(dir, resource, d.Address), NewDeviceInfo(&d), 0o444, nil)
}

// HasDeviceInfo tells whether dir holds a device-info file of device addr
// for the pool resource.
func HasDeviceInfo(dir, resource, addr string) bool {
	_, err := os.Lstat(DeviceInfoPath(dir, resource, addr))
	return err == nil
}

// writeJSONFile writes v as JSON to path in dir (creating dir, 0755),
// unless path holds those bytes already; what ("device-info") names the
// file in errors. It writes a temporary dot file, which no reader loads,
// sets perm, passes it to check (if not nil) and renames it over path:
// readers see the old file or the new one.
//
// Nothing is synced: the ledger is the durable record, the directories are
// tmpfs on nodes (/var/run), and a pool rewrites its files when it starts;
// two fsyncs would cost an Allocate more than its ledger commit.
func writeJSONFile(what, dir, path string, v any, perm fs.FileMode, check func(tmpPath string) error) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	if holds(path, data) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, err)
	}
	// A short name: path's own may be near the longest a name can be.
	tmp, err := os.CreateTemp(dir, ".devledger-*.tmp")
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

// holds says whether the file at path holds data and nothing more: one
// open, one read and one close (os.ReadFile makes six system calls), as
// every Allocate of a netDevice pool asks it of its device's file.
func holds(path string, data []byte) bool {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	buf := make([]byte, len(data)+1)
	n, err := syscall.Read(fd, buf)
	return err == nil && n == len(data) && bytes.Equal(buf[:n], data)
}
