package sysfsgen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Roots are the three roots of a built tree, to hand to the code under test
// as its sysfs, devfs and procfs roots.
type Roots struct {
	// Sysfs is <dir>/sys, standing for /sys.
	Sysfs string
	// Dev is <dir>/dev, standing for /dev.
	Dev string
	// Proc is <dir>/proc, standing for /proc (only net/route is written).
	Proc string
}

// ErrInvalidNode is wrapped by every error Build returns for a Node that
// does not describe a possible machine.
var ErrInvalidNode = errors.New("invalid node")

// Build writes the tree that n describes under dir (created if needed) as
// dir/sys, dir/dev and dir/proc. It refuses to build over an existing
// dir/sys. Errors name the function at fault and wrap ErrInvalidNode when n
// itself is wrong.
func Build(dir string, n Node) (Roots, error) {
	if err := validate(n); err != nil {
		return Roots{}, err
	}
	r := Roots{
		Sysfs: filepath.Join(dir, "sys"),
		Dev:   filepath.Join(dir, "dev"),
		Proc:  filepath.Join(dir, "proc"),
	}
	if _, err := os.Lstat(r.Sysfs); err == nil {
		return Roots{}, fmt.Errorf("build node in %s: %s already exists", dir, r.Sysfs)
	}
	for _, d := range []string{
		"bus/pci/devices", "bus/pci/drivers", "devices", "kernel/iommu_groups",
		"class/net", "class/infiniband",
	} {
		if err := os.MkdirAll(filepath.Join(r.Sysfs, d), 0o755); err != nil {
			return Roots{}, fmt.Errorf("build node in %s: %w", dir, err)
		}
	}
	for _, d := range []string{r.Dev, filepath.Join(r.Proc, "net")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Roots{}, fmt.Errorf("build node in %s: %w", dir, err)
		}
	}
	if n.VFIONoIOMMU {
		param := filepath.Join(r.Sysfs, noIOMMUParam)
		if err := os.MkdirAll(filepath.Dir(param), 0o755); err != nil {
			return Roots{}, fmt.Errorf("build node in %s: %w", dir, err)
		}
		if err := writeLine(param, "Y"); err != nil {
			return Roots{}, fmt.Errorf("build node in %s: %w", dir, err)
		}
	}
	b := &builder{r: r, nextIfindex: 2, noNUMA: n.WithoutNUMA}
	for _, f := range n.Functions {
		if err := b.addFunction(f); err != nil {
			return Roots{}, err
		}
	}
	if n.VFIO {
		if err := touch(filepath.Join(r.Dev, "vfio", "vfio")); err != nil {
			return Roots{}, err
		}
	}
	if n.VhostNet {
		for _, p := range []string{"vhost-net", "net/tun"} {
			if err := touch(filepath.Join(r.Dev, p)); err != nil {
				return Roots{}, err
			}
		}
	}
	if err := r.SetDefaultRoute(n.DefaultRouteInterface); err != nil {
		return Roots{}, err
	}
	return r, nil
}

// validate checks what Build would otherwise turn into a tree no kernel
// could show: malformed IDs, duplicate addresses or interface names, more
// VFs than the PF supports.
func validate(n Node) error {
	addrs := map[string]bool{}
	ifnames := map[string]bool{}
	var check func(f Function, pf *Function, index int) error
	check = func(f Function, pf *Function, index int) error {
		where := f.Address
		if pf != nil {
			where = fmt.Sprintf("%s VF %d", pf.Address, index)
			f = inheritFromPF(f, *pf)
			if f.Address == "" {
				a, err := VFAddress(pf.Address, pf.VFOffset, pf.VFStride, index)
				if err != nil {
					return fmt.Errorf("%w: %s: %w", ErrInvalidNode, where, err)
				}
				f.Address = a
			}
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: function %s: %s", ErrInvalidNode, where, fmt.Sprintf(format, args...))
		}
		if _, err := parseAddress(f.Address); err != nil {
			return bad("%v", err)
		}
		if addrs[f.Address] {
			return bad("address %s used twice", f.Address)
		}
		addrs[f.Address] = true
		for _, id := range []struct{ name, v string }{
			{"vendor", f.Vendor}, {"device", f.Device},
			{"subsystem vendor", f.SubsystemVendor}, {"subsystem device", f.SubsystemDevice},
		} {
			if id.v != "" && !isHex(id.v, 4) {
				return bad("%s %q is not four hex digits", id.name, id.v)
			}
		}
		if f.Vendor == "" || f.Device == "" {
			return bad("vendor and device are required")
		}
		if !isHex(f.Class, 6) {
			return bad("class %q is not six hex digits", f.Class)
		}
		if strings.ContainsAny(f.Driver, "/") || f.Driver == "." || f.Driver == ".." {
			return bad("driver %q is not a name", f.Driver)
		}
		if f.IOMMUGroup != "" && !isDecimal(f.IOMMUGroup) {
			return bad("IOMMU group %q is not a number", f.IOMMUGroup)
		}
		if pf != nil && len(f.VFs) > 0 {
			return bad("a VF cannot have VFs")
		}
		if len(f.VFs) > f.TotalVFs {
			return bad("%d VFs but TotalVFs is %d", len(f.VFs), f.TotalVFs)
		}
		for _, ifc := range f.Interfaces {
			if !validName(ifc.Name) {
				return bad("interface name %q", ifc.Name)
			}
			if ifnames[ifc.Name] {
				return bad("interface %s used twice", ifc.Name)
			}
			ifnames[ifc.Name] = true
		}
		for _, name := range f.Aux {
			if !validName(name) {
				return bad("auxiliary device name %q", name)
			}
		}
		for _, d := range f.RDMA {
			if !validName(d.Name) {
				return bad("RDMA device name %q", d.Name)
			}
		}
		if f.Virtio != "" && !validName(f.Virtio) {
			return bad("virtio child name %q", f.Virtio)
		}
		for i, vf := range f.VFs {
			if err := check(vf, &f, i); err != nil {
				return err
			}
		}
		return nil
	}
	for _, f := range n.Functions {
		if err := check(f, nil, 0); err != nil {
			return err
		}
	}
	if n.DefaultRouteInterface != "" && !validName(n.DefaultRouteInterface) {
		return fmt.Errorf("%w: default route interface %q", ErrInvalidNode, n.DefaultRouteInterface)
	}
	return nil
}

// inheritFromPF fills what a VF left empty from its PF, as the hardware
// would: IDs, class and NUMA node.
func inheritFromPF(vf, pf Function) Function {
	if vf.Vendor == "" {
		vf.Vendor = pf.Vendor
	}
	if vf.Device == "" {
		vf.Device = pf.VFDevice
		if vf.Device == "" {
			vf.Device = pf.Device
		}
	}
	if vf.Class == "" {
		vf.Class = pf.Class
	}
	vf.NUMANode = pf.NUMANode
	return vf
}

// builder carries what must stay consistent across the functions of one
// tree: the next free interface index, and whether the kernel has NUMA.
type builder struct {
	r           Roots
	nextIfindex int
	noNUMA      bool
}

// addFunction writes f and, for a PF, its VFs.
func (b *builder) addFunction(f Function) error {
	if err := b.writeFunction(f, ""); err != nil {
		return err
	}
	if f.TotalVFs == 0 {
		return nil
	}
	return b.addVFs(f, f.VFs)
}

// addVFs writes the VFs of the PF pf (already written) and links them both
// ways.
func (b *builder) addVFs(pf Function, vfs []Function) error {
	pfDir := b.r.DevicePath(pf.Address)
	for i, vf := range vfs {
		vf = inheritFromPF(vf, pf)
		if vf.Address == "" {
			a, err := VFAddress(pf.Address, pf.VFOffset, pf.VFStride, i)
			if err != nil {
				return fmt.Errorf("add VF %d of %s: %w", i, pf.Address, err)
			}
			vf.Address = a
		}
		if err := b.writeFunction(vf, pf.Address); err != nil {
			return err
		}
		vfDir := b.r.DevicePath(vf.Address)
		if err := relLink(pfDir, filepath.Join(vfDir, "physfn")); err != nil {
			return err
		}
		if err := relLink(vfDir, filepath.Join(pfDir, "virtfn"+strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

// writeFunction writes one function's directory, its attributes, its links
// and its children. pf is the PF's address for a VF, "" otherwise.
func (b *builder) writeFunction(f Function, pf string) error {
	r := b.r
	dir := r.DevicePath(f.Address)
	if dir == "" {
		return fmt.Errorf("add function %q: malformed address", f.Address)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("add function %s: already present", f.Address)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("add function %s: %w", f.Address, err)
	}
	svendor, sdevice := f.SubsystemVendor, f.SubsystemDevice
	if svendor == "" {
		svendor = f.Vendor
	}
	if sdevice == "" {
		sdevice = "0000"
	}
	attrs := []struct{ name, value string }{
		{"vendor", "0x" + f.Vendor},
		{"device", "0x" + f.Device},
		{"subsystem_vendor", "0x" + svendor},
		{"subsystem_device", "0x" + sdevice},
		{"class", "0x" + f.Class},
		{"revision", "0x01"},
		{"numa_node", strconv.Itoa(f.NUMANode)},
		{"enable", "1"},
		{"modalias", fmt.Sprintf("pci:v0000%sd0000%ssv0000%ssd0000%sbc%ssc%si%s",
			strings.ToUpper(f.Vendor), strings.ToUpper(f.Device),
			strings.ToUpper(svendor), strings.ToUpper(sdevice),
			strings.ToUpper(f.Class[0:2]), strings.ToUpper(f.Class[2:4]), strings.ToUpper(f.Class[4:6]))},
	}
	if b.noNUMA {
		// pci-sysfs.c defines numa_node under CONFIG_NUMA only.
		attrs = slices.DeleteFunc(attrs, func(a struct{ name, value string }) bool { return a.name == "numa_node" })
	}
	if f.ACPIIndex != "" {
		attrs = append(attrs, struct{ name, value string }{"acpi_index", f.ACPIIndex})
	}
	if f.TotalVFs > 0 && pf == "" {
		vfDevice := f.VFDevice
		if vfDevice == "" {
			vfDevice = f.Device
		}
		offset, stride := orOne(f.VFOffset), orOne(f.VFStride)
		attrs = append(attrs,
			struct{ name, value string }{"sriov_totalvfs", strconv.Itoa(f.TotalVFs)},
			struct{ name, value string }{"sriov_numvfs", strconv.Itoa(len(f.VFs))},
			struct{ name, value string }{"sriov_offset", strconv.Itoa(offset)},
			struct{ name, value string }{"sriov_stride", strconv.Itoa(stride)},
			struct{ name, value string }{"sriov_vf_device", vfDevice},
		)
	}
	for _, a := range attrs {
		if err := writeLine(filepath.Join(dir, a.name), a.value); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
	}
	if err := relLink(filepath.Join(r.Sysfs, "bus", "pci"), filepath.Join(dir, "subsystem")); err != nil {
		return err
	}
	if err := relLink(dir, filepath.Join(r.Sysfs, "bus", "pci", "devices", f.Address)); err != nil {
		return err
	}
	if f.IOMMUGroup != "" {
		groupDir := filepath.Join(r.Sysfs, "kernel", "iommu_groups", f.IOMMUGroup)
		if err := os.MkdirAll(filepath.Join(groupDir, "devices"), 0o755); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
		if err := relLink(dir, filepath.Join(groupDir, "devices", f.Address)); err != nil {
			return err
		}
		if err := relLink(groupDir, filepath.Join(dir, "iommu_group")); err != nil {
			return err
		}
		if r.groupNode(f.IOMMUGroup) != f.IOMMUGroup {
			// vfio names the groups it makes in no-IOMMU mode.
			if err := writeLine(filepath.Join(groupDir, "name"), "vfio-noiommu"); err != nil {
				return fmt.Errorf("add function %s: %w", f.Address, err)
			}
		}
	}
	if f.Driver != "" {
		if err := r.Bind(f.Address, f.Driver); err != nil {
			return err
		}
	}
	netParent := dir
	if f.Virtio != "" {
		netParent = filepath.Join(dir, f.Virtio)
		driver := f.VirtioDriver
		if driver == "" {
			driver = "virtio_blk"
			if len(f.Interfaces) > 0 {
				driver = "virtio_net"
			}
		}
		if err := os.MkdirAll(netParent, 0o755); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
		if err := bindChild(r.Sysfs, netParent, "virtio", driver); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
	}
	for _, ifc := range f.Interfaces {
		if err := b.writeInterface(netParent, ifc); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
	}
	for _, d := range f.RDMA {
		if err := writeRDMA(r, dir, d); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
	}
	if f.VDPADriver != "" {
		vdpa := filepath.Join(dir, "vdpa0")
		if err := os.MkdirAll(vdpa, 0o755); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
		if err := r.bindVDPA(vdpa, f.VDPADriver); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
	}
	for _, name := range f.Aux {
		aux := filepath.Join(dir, name)
		if err := os.MkdirAll(aux, 0o755); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
		if err := os.MkdirAll(filepath.Join(r.Sysfs, "bus", "auxiliary", "devices"), 0o755); err != nil {
			return fmt.Errorf("add function %s: %w", f.Address, err)
		}
		if err := relLink(aux, filepath.Join(r.Sysfs, "bus", "auxiliary", "devices", name)); err != nil {
			return err
		}
	}
	return nil
}

// writeInterface writes parent/net/<name>/ and its class/net link.
func (b *builder) writeInterface(parent string, ifc Interface) error {
	dir := filepath.Join(parent, "net", ifc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	typ := ifc.Type
	if typ == 0 {
		typ = 1
	}
	ifindex := b.nextIfindex
	b.nextIfindex++
	addr := ifc.Address
	if addr == "" {
		addr = fmt.Sprintf("02:00:00:00:%02x:%02x", (ifindex>>8)&0xff, ifindex&0xff)
		if typ == 32 {
			addr = fmt.Sprintf("00:00:10:87:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:%02x:%02x:%02x",
				(ifindex>>16)&0xff, (ifindex>>8)&0xff, ifindex&0xff)
		}
	}
	oper, carrier := "up", "1"
	if ifc.Down {
		oper, carrier = "down", "0"
	}
	for _, a := range []struct{ name, value string }{
		{"operstate", oper},
		{"carrier", carrier},
		{"type", strconv.Itoa(typ)},
		{"address", addr},
		{"ifindex", strconv.Itoa(ifindex)},
	} {
		if err := writeLine(filepath.Join(dir, a.name), a.value); err != nil {
			return err
		}
	}
	for _, a := range []struct{ name, value string }{
		{"phys_switch_id", ifc.SwitchID},
		{"phys_port_name", ifc.PortName},
	} {
		if a.value == "" {
			continue
		}
		if err := writeLine(filepath.Join(dir, a.name), a.value); err != nil {
			return err
		}
	}
	return relLink(dir, filepath.Join(b.r.Sysfs, "class", "net", ifc.Name))
}

// writeRDMA writes infiniband/<dev>/ under the function dir and its
// class/infiniband link.
func writeRDMA(r Roots, fnDir string, d RDMADevice) error {
	sysfs := r.Sysfs
	dir := filepath.Join(fnDir, "infiniband", d.Name)
	ports := d.Ports
	if len(ports) == 0 {
		ports = []IBPort{{Number: 1}}
	}
	for _, p := range ports {
		pdir := filepath.Join(dir, "ports", strconv.Itoa(p.Number))
		if err := os.MkdirAll(filepath.Join(pdir, "pkeys"), 0o755); err != nil {
			return err
		}
		ll := p.LinkLayer
		if ll == "" {
			ll = "Ethernet"
		}
		if err := writeLine(filepath.Join(pdir, "link_layer"), ll); err != nil {
			return err
		}
		if err := writeLine(filepath.Join(pdir, "state"), "4: ACTIVE"); err != nil {
			return err
		}
		for i, k := range p.PKeys {
			if err := writeLine(filepath.Join(pdir, "pkeys", strconv.Itoa(i)), k); err != nil {
				return err
			}
		}
	}
	if err := writeLine(filepath.Join(dir, "node_type"), "1: CA"); err != nil {
		return err
	}
	if err := relLink(dir, filepath.Join(sysfs, "class", "infiniband", d.Name)); err != nil {
		return err
	}
	return writeRDMAChars(r, fnDir, d.Name)
}

// writeRDMAChars gives the RDMA device rdma its character devices, as the
// kernel's ib_uverbs and ib_umad do: uverbsN under the function's
// infiniband_verbs/, umadN and issmN under its infiniband_mad/ (N the
// number rdma's name ends in, else one past the highest in the tree), each
// naming rdma in its ibdev, linked from class/, with its node under
// dev/infiniband/ beside rdma_cm.
func writeRDMAChars(r Roots, fnDir, rdma string) error {
	n, err := strconv.Atoi(rdma[strings.LastIndexFunc(rdma, func(c rune) bool { return c < '0' || c > '9' })+1:])
	if err != nil {
		names, _ := readNames(filepath.Join(r.Sysfs, "class", "infiniband_verbs"))
		for _, name := range names {
			if i, err := strconv.Atoi(strings.TrimPrefix(name, "uverbs")); err == nil && i >= n {
				n = i + 1
			}
		}
	}
	for _, c := range []struct{ class, name string }{
		{"infiniband_verbs", "uverbs"}, {"infiniband_mad", "umad"}, {"infiniband_mad", "issm"},
	} {
		name := c.name + strconv.Itoa(n)
		dir := filepath.Join(fnDir, c.class, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(r.Sysfs, "class", c.class), 0o755); err != nil {
			return err
		}
		if err := writeLine(filepath.Join(dir, "ibdev"), rdma); err != nil {
			return err
		}
		if err := relLink(dir, filepath.Join(r.Sysfs, "class", c.class, name)); err != nil {
			return err
		}
		if err := touch(filepath.Join(r.Dev, "infiniband", name)); err != nil {
			return err
		}
	}
	return touch(filepath.Join(r.Dev, "infiniband", "rdma_cm"))
}

// bindVDPA binds the vdpa device at dir to driver. vhost_vdpa gives it a
// character device, as the kernel's does: a vhost-vdpa-N child (N one past
// the highest in dev/) and dev/vhost-vdpa-N; a device that leaves
// vhost_vdpa loses them.
func (r Roots) bindVDPA(dir, driver string) error {
	names, _ := readNames(dir)
	for _, n := range names {
		if strings.HasPrefix(n, "vhost-vdpa-") {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return err
			}
			if err := removeIfPresent(filepath.Join(r.Dev, n)); err != nil {
				return err
			}
		}
	}
	if err := removeIfPresent(filepath.Join(dir, "driver")); err != nil {
		return err
	}
	if err := bindChild(r.Sysfs, dir, "vdpa", driver); err != nil {
		return err
	}
	if driver != "vhost_vdpa" {
		return nil
	}
	n := 0
	devs, _ := readNames(r.Dev)
	for _, name := range devs {
		if i, err := strconv.Atoi(strings.TrimPrefix(name, "vhost-vdpa-")); err == nil && i >= n {
			n = i + 1
		}
	}
	name := "vhost-vdpa-" + strconv.Itoa(n)
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		return err
	}
	return touch(filepath.Join(r.Dev, name))
}

// bindChild links child/driver to sys/bus/<bus>/drivers/<driver>, creating
// the driver directory.
func bindChild(sysfs, child, bus, driver string) error {
	drv := filepath.Join(sysfs, "bus", bus, "drivers", driver)
	if err := os.MkdirAll(drv, 0o755); err != nil {
		return err
	}
	return relLink(drv, filepath.Join(child, "driver"))
}

// SetDefaultRoute rewrites proc/net/route so that the default route goes
// through ifname, or so that there is none when ifname is "". The table also
// holds a link-local route for the same interface, as a real one would.
func (r Roots) SetDefaultRoute(ifname string) error {
	var sb strings.Builder
	sb.WriteString("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n")
	if ifname != "" {
		// 192.168.1.1 via ifname, then 192.168.1.0/24 on it; addresses are
		// little-endian hex, as the kernel prints them.
		fmt.Fprintf(&sb, "%s\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", ifname)
		fmt.Fprintf(&sb, "%s\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n", ifname)
	}
	path := filepath.Join(r.Proc, "net", "route")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("set default route: %w", err)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("set default route: %w", err)
	}
	return nil
}

// DevicePath is the real directory of the function at addr
// (sys/devices/pci<domain>:<bus>/<addr>), whether or not it exists; "" when
// addr is not a PCI address.
func (r Roots) DevicePath(addr string) string {
	a, err := parseAddress(addr)
	if err != nil {
		return ""
	}
	return filepath.Join(r.Sysfs, "devices", "pci"+a.domain+":"+fmt.Sprintf("%02x", a.bus), addr)
}

// pciAddress is a parsed PCI address.
type pciAddress struct {
	domain   string
	bus      int
	device   int
	function int
}

func (a pciAddress) String() string {
	return fmt.Sprintf("%s:%02x:%02x.%x", a.domain, a.bus, a.device, a.function)
}

// parseAddress accepts only the canonical form the kernel uses:
// lower-case, four hex digits of domain, "dddd:bb:dd.f".
func parseAddress(s string) (pciAddress, error) {
	var a pciAddress
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' ||
		!isHex(s[0:4], 4) || !isHex(s[5:7], 2) || !isHex(s[8:10], 2) || !isHex(s[11:12], 1) {
		return a, fmt.Errorf("PCI address %q is not of the form 0000:00:00.0", s)
	}
	a.domain = s[0:4]
	bus, _ := strconv.ParseUint(s[5:7], 16, 8)
	dev, _ := strconv.ParseUint(s[8:10], 16, 8)
	fn, _ := strconv.ParseUint(s[11:12], 16, 8)
	if dev > 0x1f || fn > 7 {
		return a, fmt.Errorf("PCI address %q: device above 1f or function above 7", s)
	}
	a.bus, a.device, a.function = int(bus), int(dev), int(fn)
	return a, nil
}

// VFAddress is the address of VF index of the PF at pf, given the PF's
// sriov_offset and sriov_stride (0 means 1): the VF's routing ID is the PF's
// plus offset plus index times stride, within the PF's domain.
func VFAddress(pf string, offset, stride, index int) (string, error) {
	a, err := parseAddress(pf)
	if err != nil {
		return "", err
	}
	if index < 0 {
		return "", fmt.Errorf("VF index %d is negative", index)
	}
	rid := a.bus<<8 | a.device<<3 | a.function
	rid += orOne(offset) + index*orOne(stride)
	if rid > 0xffff {
		return "", fmt.Errorf("VF %d of %s falls beyond bus ff", index, pf)
	}
	vf := pciAddress{domain: a.domain, bus: rid >> 8, device: (rid >> 3) & 0x1f, function: rid & 7}
	return vf.String(), nil
}

func orOne(n int) int {
	if n <= 0 {
		return 1
	}
	return n
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validName reports whether s can be one path element.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// relLink makes link a symlink to target, with a relative target as the
// kernel's are.
func relLink(target, link string) error {
	rel, err := filepath.Rel(filepath.Dir(link), target)
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := os.Symlink(rel, link); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	return nil
}

// writeLine writes value and a newline, as sysfs attributes read.
func writeLine(path, value string) error {
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// touch creates an empty regular file (a stand-in for a device node) and its
// directory.
func touch(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}
