package sysfsgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The methods below change a built tree the way the kernel would change a
// live one. They are meant for one test goroutine at a time; none of them is
// safe to call concurrently with another on the same tree (readers may run
// concurrently and will see the change happen file by file, as on a real
// node).

// ErrNoFunction is wrapped by the errors of mutations aimed at an address
// that is not in the tree.
var ErrNoFunction = errors.New("no such PCI function")

// functionDir returns the real directory of addr, or an error wrapping
// ErrNoFunction.
func (r Roots) functionDir(addr string) (string, error) {
	dir := r.DevicePath(addr)
	if dir == "" {
		return "", fmt.Errorf("%w: %q is not a PCI address", ErrNoFunction, addr)
	}
	if _, err := os.Lstat(dir); err != nil {
		return "", fmt.Errorf("%w: %s under %s", ErrNoFunction, addr, r.Sysfs)
	}
	return dir, nil
}

// Bind binds the function at addr to driver, unbinding it first from the
// driver it has (see Unbind). Binding creates no interfaces or other
// children: add them with AddInterface. Binding to vfio-pci, or to one of
// its vendor variants (mlx5_vfio_pci, nvgrace_gpu_vfio_pci), creates
// dev/vfio/<group> (noiommu-<group> in vfio's no-IOMMU mode) when the
// function is in an IOMMU group.
func (r Roots) Bind(addr, driver string) error {
	dir, err := r.functionDir(addr)
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
	}
	if !validName(driver) {
		return fmt.Errorf("bind %s: driver name %q", addr, driver)
	}
	if _, err := os.Lstat(filepath.Join(dir, "driver")); err == nil {
		if err := r.Unbind(addr); err != nil {
			return err
		}
	}
	drv := filepath.Join(r.Sysfs, "bus", "pci", "drivers", driver)
	if _, err := os.Stat(drv); err != nil {
		if err := os.MkdirAll(drv, 0o755); err != nil {
			return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
		}
		for _, f := range []string{"bind", "unbind", "new_id", "remove_id"} {
			if err := touch(filepath.Join(drv, f)); err != nil {
				return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
			}
		}
	}
	if err := relLink(drv, filepath.Join(dir, "driver")); err != nil {
		return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
	}
	if err := relLink(dir, filepath.Join(drv, addr)); err != nil {
		return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
	}
	if isVFIODriver(driver) {
		if group := groupOf(dir); group != "" {
			if err := touch(filepath.Join(r.Dev, "vfio", r.groupNode(group))); err != nil {
				return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
			}
		}
	}
	if uioDrivers[driver] {
		if err := r.addUIO(dir); err != nil {
			return fmt.Errorf("bind %s to %s: %w", addr, driver, err)
		}
	}
	return nil
}

// uioDrivers are the UIO drivers, which give a function a uio/uio<N>
// child and dev/uio<N>.
var uioDrivers = map[string]bool{"igb_uio": true, "uio_pci_generic": true, "uio": true}

// addUIO gives the function at dir its UIO device, N one past the highest
// in dev/.
func (r Roots) addUIO(dir string) error {
	n := 0
	names, _ := readNames(r.Dev)
	for _, name := range names {
		if i, err := strconv.Atoi(strings.TrimPrefix(name, "uio")); err == nil && strings.HasPrefix(name, "uio") && i >= n {
			n = i + 1
		}
	}
	name := "uio" + strconv.Itoa(n)
	if err := os.MkdirAll(filepath.Join(dir, "uio", name), 0o755); err != nil {
		return err
	}
	return touch(filepath.Join(r.Dev, name))
}

// noIOMMUParam is vfio's no-IOMMU switch, under sys/.
const noIOMMUParam = "module/vfio/parameters/enable_unsafe_noiommu_mode"

// groupNode is the name of group's node under dev/vfio: noiommu-<group>
// when vfio runs in no-IOMMU mode, as the kernel names it.
func (r Roots) groupNode(group string) string {
	if b, err := os.ReadFile(filepath.Join(r.Sysfs, noIOMMUParam)); err == nil && strings.TrimSpace(string(b)) == "Y" {
		return "noiommu-" + group
	}
	return group
}

// Unbind unbinds the function at addr from its driver, if it has one. As on
// a real node, what the driver created goes with it: the net/ interfaces,
// infiniband/ devices, virtio, vdpa, uio and auxiliary children (and their
// class/ and bus/ links, and a uio device's dev/ node). Unbinding the last
// member of an IOMMU group bound to vfio-pci or a variant of it removes
// its dev/vfio node.
func (r Roots) Unbind(addr string) error {
	dir, err := r.functionDir(addr)
	if err != nil {
		return fmt.Errorf("unbind %s: %w", addr, err)
	}
	target, err := os.Readlink(filepath.Join(dir, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unbind %s: %w", addr, err)
	}
	driver := filepath.Base(target)
	if err := os.Remove(filepath.Join(dir, "driver")); err != nil {
		return fmt.Errorf("unbind %s: %w", addr, err)
	}
	if err := removeIfPresent(filepath.Join(r.Sysfs, "bus", "pci", "drivers", driver, addr)); err != nil {
		return fmt.Errorf("unbind %s: %w", addr, err)
	}
	if isVFIODriver(driver) {
		if group := groupOf(dir); group != "" && !r.groupHasVFIOMember(group) {
			if err := removeIfPresent(filepath.Join(r.Dev, "vfio", r.groupNode(group))); err != nil {
				return fmt.Errorf("unbind %s: %w", addr, err)
			}
		}
	}
	uios, _ := readNames(filepath.Join(dir, "uio"))
	for _, n := range uios {
		if err := removeIfPresent(filepath.Join(r.Dev, n)); err != nil {
			return fmt.Errorf("unbind %s: %w", addr, err)
		}
	}
	if err := r.removeChildren(dir); err != nil {
		return fmt.Errorf("unbind %s: %w", addr, err)
	}
	return nil
}

// removeChildren removes every real subdirectory of a function directory
// (all of them are created by its driver) and the links elsewhere in the
// tree that point into them.
func (r Roots) removeChildren(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		child := filepath.Join(dir, e.Name())
		if err := r.removeClassLinks(child); err != nil {
			return err
		}
		if err := removeIfPresent(filepath.Join(r.Sysfs, "bus", "auxiliary", "devices", e.Name())); err != nil {
			return err
		}
		if err := os.RemoveAll(child); err != nil {
			return err
		}
	}
	return nil
}

// removeClassLinks removes the class/ links to the interfaces, RDMA
// devices and their character devices in child, a subdirectory of a
// function: child is net/, infiniband/, infiniband_verbs/ or
// infiniband_mad/ itself, or a child device (virtio) holding them.
func (r Roots) removeClassLinks(child string) error {
	for _, class := range []string{"net", "infiniband", "infiniband_verbs", "infiniband_mad"} {
		dir := filepath.Join(child, class)
		if filepath.Base(child) == class {
			dir = child
		}
		names, err := readNames(dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if err := removeIfPresent(filepath.Join(r.Sysfs, "class", class, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupHasVFIOMember reports whether a function of IOMMU group is still
// bound to vfio-pci or a variant of it.
func (r Roots) groupHasVFIOMember(group string) bool {
	members, err := readNames(filepath.Join(r.Sysfs, "kernel", "iommu_groups", group, "devices"))
	if err != nil {
		return false
	}
	for _, m := range members {
		target, err := os.Readlink(filepath.Join(r.Sysfs, "bus", "pci", "devices", m, "driver"))
		if err == nil && isVFIODriver(filepath.Base(target)) {
			return true
		}
	}
	return false
}

// isVFIODriver reports whether the kernel gives a function bound to driver
// a vfio group node: vfio-pci and its variants, which register with vfio
// as vfio-pci does and whose names end in "_vfio_pci" (or "-vfio-pci").
func isVFIODriver(driver string) bool {
	d := strings.ReplaceAll(driver, "-", "_")
	return d == "vfio_pci" || strings.HasSuffix(d, "_vfio_pci")
}

// Remove hot-unplugs the function at addr: its directory, its bus, driver and
// IOMMU group links, the class links of its interfaces and, for a PF, all its
// VFs. Removing a VF alone leaves the PF's virtfn link to it, dangling, and
// sriov_numvfs as they were, as the kernel's remove attribute does: only
// disabling SR-IOV (sriov_numvfs set to 0) removes the links.
func (r Roots) Remove(addr string) error {
	dir, err := r.functionDir(addr)
	if err != nil {
		return fmt.Errorf("remove %s: %w", addr, err)
	}
	if err := r.removeVFs(dir); err != nil {
		return fmt.Errorf("remove %s: %w", addr, err)
	}
	if err := r.Unbind(addr); err != nil {
		return fmt.Errorf("remove %s: %w", addr, err)
	}
	if group := groupOf(dir); group != "" {
		groupDir := filepath.Join(r.Sysfs, "kernel", "iommu_groups", group)
		if err := removeIfPresent(filepath.Join(groupDir, "devices", addr)); err != nil {
			return fmt.Errorf("remove %s: %w", addr, err)
		}
		if rest, err := readNames(filepath.Join(groupDir, "devices")); err == nil && len(rest) == 0 {
			if err := os.RemoveAll(groupDir); err != nil {
				return fmt.Errorf("remove %s: %w", addr, err)
			}
		}
	}
	if err := removeIfPresent(filepath.Join(r.Sysfs, "bus", "pci", "devices", addr)); err != nil {
		return fmt.Errorf("remove %s: %w", addr, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", addr, err)
	}
	return nil
}

// removeVFs removes every VF a PF directory links to with virtfn<N>.
func (r Roots) removeVFs(pfDir string) error {
	names, err := readNames(pfDir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "virtfn") {
			continue
		}
		t, err := os.Readlink(filepath.Join(pfDir, n))
		if err != nil {
			return err
		}
		// A VF removed alone before left its link dangling.
		if _, err := os.Stat(filepath.Join(pfDir, n)); err == nil {
			if err := r.Remove(filepath.Base(t)); err != nil {
				return err
			}
		}
		if err := removeIfPresent(filepath.Join(pfDir, n)); err != nil {
			return err
		}
	}
	return nil
}

// Add hot-plugs f (and its VFs, for a PF) into the tree. It fails when the
// address or an interface name is already taken.
func (r Roots) Add(f Function) error {
	if err := validate(Node{Functions: []Function{f}}); err != nil {
		return fmt.Errorf("add %s: %w", f.Address, err)
	}
	b := &builder{r: r, nextIfindex: r.nextIfindex()}
	return b.addFunction(f)
}

// SetNumVFs does what writing n to the PF's sriov_numvfs does: it removes
// the PF's VFs, then creates n new ones at the addresses sriov_offset and
// sriov_stride give, each in a new IOMMU group when the PF is in one. makeVF,
// when not nil, describes VF i (its Address, NUMANode and IOMMUGroup are
// ignored, other empty fields are inherited from the PF); nil makes unbound
// VFs with the PF's vendor, sriov_vf_device and class. Unlike the kernel it
// does not insist on going through 0 first.
func (r Roots) SetNumVFs(pf string, n int, makeVF func(index int) Function) error {
	dir, err := r.functionDir(pf)
	if err != nil {
		return fmt.Errorf("set %s sriov_numvfs to %d: %w", pf, n, err)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")
	}
	total, err := strconv.Atoi(read("sriov_totalvfs"))
	if err != nil {
		return fmt.Errorf("set %s sriov_numvfs to %d: not an SR-IOV PF", pf, n)
	}
	if n < 0 || n > total {
		return fmt.Errorf("set %s sriov_numvfs to %d: out of range 0..%d", pf, n, total)
	}
	if err := r.removeVFs(dir); err != nil {
		return fmt.Errorf("set %s sriov_numvfs to %d: %w", pf, n, err)
	}
	if err := writeLine(filepath.Join(dir, "sriov_numvfs"), strconv.Itoa(n)); err != nil {
		return fmt.Errorf("set %s sriov_numvfs to %d: %w", pf, n, err)
	}
	offset, _ := strconv.Atoi(read("sriov_offset"))
	stride, _ := strconv.Atoi(read("sriov_stride"))
	numa, _ := strconv.Atoi(read("numa_node"))
	pfSpec := Function{
		Address:  pf,
		Vendor:   read("vendor"),
		Device:   read("device"),
		Class:    read("class"),
		NUMANode: numa,
		TotalVFs: total,
		VFOffset: offset,
		VFStride: stride,
		VFDevice: read("sriov_vf_device"),
	}
	nextGroup := -1
	if groupOf(dir) != "" {
		nextGroup = r.nextIOMMUGroup()
	}
	vfs := make([]Function, n)
	for i := range vfs {
		var vf Function
		if makeVF != nil {
			vf = makeVF(i)
		}
		vf.Address = ""
		vf.VFs = nil
		vf.IOMMUGroup = ""
		if nextGroup >= 0 {
			vf.IOMMUGroup = strconv.Itoa(nextGroup)
			nextGroup++
		}
		vfs[i] = vf
	}
	pfSpec.VFs = vfs
	if err := validate(Node{Functions: []Function{pfSpec}}); err != nil {
		return fmt.Errorf("set %s sriov_numvfs to %d: %w", pf, n, err)
	}
	// VFs have a numa_node where their PF does: where the kernel has NUMA.
	_, err = os.Stat(filepath.Join(dir, "numa_node"))
	b := &builder{r: r, nextIfindex: r.nextIfindex(), noNUMA: errors.Is(err, fs.ErrNotExist)}
	if err := b.addVFs(pfSpec, vfs); err != nil {
		return fmt.Errorf("set %s sriov_numvfs to %d: %w", pf, n, err)
	}
	return nil
}

// BindVDPA binds the vdpa0 device of the function at addr to driver
// ("vhost_vdpa", "virtio_vdpa"), as vdpa's own bind and unbind files do
// (see bindVDPA): the function stays on its PCI driver.
func (r Roots) BindVDPA(addr, driver string) error {
	dir, err := r.functionDir(addr)
	if err != nil {
		return fmt.Errorf("bind the vdpa device of %s to %s: %w", addr, driver, err)
	}
	vdpa := filepath.Join(dir, "vdpa0")
	if _, err := os.Stat(vdpa); err != nil {
		return fmt.Errorf("bind the vdpa device of %s to %s: %w", addr, driver, err)
	}
	if err := r.bindVDPA(vdpa, driver); err != nil {
		return fmt.Errorf("bind the vdpa device of %s to %s: %w", addr, driver, err)
	}
	return nil
}

// AddInterface adds a network interface to the function at addr, under its
// virtio child when it has one (as virtio-net does), else under net/. The
// name must not be taken.
func (r Roots) AddInterface(addr string, ifc Interface) error {
	dir, err := r.functionDir(addr)
	if err != nil {
		return fmt.Errorf("add interface %s to %s: %w", ifc.Name, addr, err)
	}
	if !validName(ifc.Name) {
		return fmt.Errorf("add interface to %s: name %q", addr, ifc.Name)
	}
	if _, err := os.Lstat(filepath.Join(r.Sysfs, "class", "net", ifc.Name)); err == nil {
		return fmt.Errorf("add interface %s to %s: name taken", ifc.Name, addr)
	}
	parent := dir
	names, _ := readNames(dir)
	for _, n := range names {
		if strings.HasPrefix(n, "virtio") {
			parent = filepath.Join(dir, n)
			break
		}
	}
	b := &builder{r: r, nextIfindex: r.nextIfindex()}
	if err := b.writeInterface(parent, ifc); err != nil {
		return fmt.Errorf("add interface %s to %s: %w", ifc.Name, addr, err)
	}
	return nil
}

// SetOperState writes state ("up", "down", "lowerlayerdown", ...) to the
// operstate of interface ifname.
func (r Roots) SetOperState(ifname, state string) error {
	return r.writeIfAttr(ifname, "operstate", state)
}

// SetCarrier writes 1 or 0 to the carrier of interface ifname.
func (r Roots) SetCarrier(ifname string, carrier bool) error {
	v := "0"
	if carrier {
		v = "1"
	}
	return r.writeIfAttr(ifname, "carrier", v)
}

// SetLinkDown makes interface ifname look like a link that lost its
// partner: operstate "down", carrier 0.
func (r Roots) SetLinkDown(ifname string) error {
	if err := r.SetOperState(ifname, "down"); err != nil {
		return err
	}
	return r.SetCarrier(ifname, false)
}

// SetLinkUp undoes SetLinkDown: operstate "up", carrier 1.
func (r Roots) SetLinkUp(ifname string) error {
	if err := r.SetOperState(ifname, "up"); err != nil {
		return err
	}
	return r.SetCarrier(ifname, true)
}

func (r Roots) writeIfAttr(ifname, attr, value string) error {
	if !validName(ifname) {
		return fmt.Errorf("set %s of interface %q: bad name", attr, ifname)
	}
	dir := filepath.Join(r.Sysfs, "class", "net", ifname)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("set %s of interface %s: %w", attr, ifname, err)
	}
	if err := writeLine(filepath.Join(dir, attr), value); err != nil {
		return fmt.Errorf("set %s of interface %s: %w", attr, ifname, err)
	}
	return nil
}

// WriteAttr writes content, exactly as given (no newline added), to the file
// name of the function at addr; name is a path relative to the function's
// directory ("numa_node", "net/eth0/carrier"). It is how tests plant
// malformed attributes.
func (r Roots) WriteAttr(addr, name, content string) error {
	path, err := r.attrPath(addr, name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write %s of %s: %w", name, addr, err)
	}
	return nil
}

// RemoveAttr removes the file or link name (relative to the function's
// directory) of the function at addr; removing what is absent is an error.
func (r Roots) RemoveAttr(addr, name string) error {
	path, err := r.attrPath(addr, name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s of %s: %w", name, addr, err)
	}
	return nil
}

func (r Roots) attrPath(addr, name string) (string, error) {
	dir, err := r.functionDir(addr)
	if err != nil {
		return "", fmt.Errorf("attribute %s of %s: %w", name, addr, err)
	}
	clean := filepath.Clean(name)
	if name == "" || filepath.IsAbs(name) || clean == "." || clean == ".." ||
		strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("attribute %q of %s: not a path inside the function", name, addr)
	}
	return filepath.Join(dir, clean), nil
}

// nextIfindex is one past the highest ifindex of the tree's interfaces.
func (r Roots) nextIfindex() int {
	next := 2
	names, _ := readNames(filepath.Join(r.Sysfs, "class", "net"))
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(r.Sysfs, "class", "net", n, "ifindex"))
		if err != nil {
			continue
		}
		if i, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && i >= next {
			next = i + 1
		}
	}
	return next
}

// nextIOMMUGroup is one past the highest IOMMU group number in the tree.
func (r Roots) nextIOMMUGroup() int {
	next := 0
	names, _ := readNames(filepath.Join(r.Sysfs, "kernel", "iommu_groups"))
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil && i >= next {
			next = i + 1
		}
	}
	return next
}

// groupOf is the IOMMU group of the function directory dir, "" when none.
func groupOf(dir string) string {
	t, err := os.Readlink(filepath.Join(dir, "iommu_group"))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

func readNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func removeIfPresent(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
