package sysfs

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// scan is the state one Scan (or one Device call) shares between its
// workers. It is read-only once built.
type scan struct {
	r   *Reader
	ids *idDB

	// drivers is the set of drivers registered under bus/pci/drivers, so
	// that a driver link can be checked without a stat per function; nil
	// when not listed (Device calls), and then each link is stat'ed.
	drivers map[string]bool
	// vfio is the set of names under <dev>/vfio; nil when not listed, and
	// then each group is stat'ed.
	vfio map[string]bool
}

// newScan prepares a scan. listed reads bus/pci/drivers and <dev>/vfio once
// up front, which pays when many functions follow.
func (r *Reader) newScan(listed bool) *scan {
	sc := &scan{r: r, ids: r.loadIDs()}
	if !listed {
		return sc
	}
	sc.drivers = map[string]bool{}
	if names, err := r.fs.readDirNames(filepath.Join(r.sysfsRoot, "bus", "pci", "drivers")); err == nil {
		for _, n := range names {
			sc.drivers[n] = true
		}
	}
	sc.vfio = map[string]bool{}
	if names, err := r.fs.readDirNames(filepath.Join(r.devRoot, "vfio")); err == nil {
		for _, n := range names {
			sc.vfio[n] = true
		}
	}
	return sc
}

// worker reads functions one after another; each goroutine of a scan has
// its own, with its own read buffer and string table.
type worker struct {
	sc  *scan
	fs  fileSystem
	buf [256]byte
	// strs interns the short strings that repeat across functions (IDs,
	// driver names, operstates) so that a thousand VFs share one "8086".
	strs map[string]string
}

func (sc *scan) newWorker() *worker {
	return &worker{sc: sc, fs: sc.r.fs, strs: make(map[string]string, 64)}
}

// intern returns b as a string, the same string for the same bytes.
func (w *worker) intern(b []byte) string {
	if s, ok := w.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	w.strs[s] = s
	return s
}

// fnResult is one function as read, with what the second pass of a scan
// needs to link VFs to PFs.
type fnResult struct {
	dev Device
	// gone is set when the function's directory no longer exists.
	gone bool
	// virtfns are a PF's VFs, from its virtfn<N> links.
	virtfns []virtfn
}

type virtfn struct {
	addr  string
	index int
}

// entries records which of the names a function directory holds matter to
// us, so that optional attributes absent from it are not opened at all.
type entries struct {
	acpiIndex, totalVFs, numVFs       bool
	driver, iommuGroup, physfn        bool
	net, infiniband, uio              bool
	vendor, device, subVendor, subDev bool
	class, numaNode                   bool
	virtfns                           []int
	virtio, vdpa                      []string
	rdmaChars                         []string // infiniband_verbs, infiniband_mad
	aux                               []AuxDevice
}

// readFunction reads everything about the function addr. Every attribute
// the kernel always provides (IDs, class) warns when missing; optional
// ones (numa_node, driver, iommu_group, SR-IOV, acpi_index, net, ...) warn
// only when present but unreadable or malformed. numa_node is optional
// because pci-sysfs.c defines it under CONFIG_NUMA only: a kernel built
// without (some ARM and 32-bit ones) puts every function on no node.
func (w *worker) readFunction(addr string) fnResult {
	dir := w.sc.r.busDir + "/" + addr
	res := fnResult{dev: Device{
		Address:  addr,
		NUMANode: -1,
		TotalVFs: -1,
		NumVFs:   -1,
		VFIndex:  -1,
	}}
	d := &res.dev
	names, err := w.fs.readDirNames(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			res.gone = true
			return res
		}
		w.unreadable(d, ".: cannot list the function's directory", err)
		return res
	}
	var e entries
	for _, n := range names {
		switch n {
		case "vendor":
			e.vendor = true
		case "device":
			e.device = true
		case "subsystem_vendor":
			e.subVendor = true
		case "subsystem_device":
			e.subDev = true
		case "class":
			e.class = true
		case "numa_node":
			e.numaNode = true
		case "acpi_index":
			e.acpiIndex = true
		case "sriov_totalvfs":
			e.totalVFs = true
		case "sriov_numvfs":
			e.numVFs = true
		case "driver":
			e.driver = true
		case "iommu_group":
			e.iommuGroup = true
		case "physfn":
			e.physfn = true
		case "net":
			e.net = true
		case "infiniband":
			e.infiniband = true
		case "uio":
			e.uio = true
		case "infiniband_verbs", "infiniband_mad":
			e.rdmaChars = append(e.rdmaChars, n)
		default:
			if i, ok := numberedName(n, "virtfn"); ok {
				e.virtfns = append(e.virtfns, i)
			} else if _, ok := numberedName(n, "virtio"); ok {
				e.virtio = append(e.virtio, n)
			} else if _, ok := numberedName(n, "vdpa"); ok {
				e.vdpa = append(e.vdpa, n)
			} else if t, ok := auxType(n); ok {
				e.aux = append(e.aux, AuxDevice{Name: n, Type: w.intern([]byte(t))})
			}
		}
	}

	var hex [8]byte
	d.Vendor = w.hexAttr(d, dir, "vendor", e.vendor, 4, hex[:])
	d.Device = w.hexAttr(d, dir, "device", e.device, 4, hex[:])
	d.SubsystemVendor = w.hexAttr(d, dir, "subsystem_vendor", e.subVendor, 4, hex[:])
	d.SubsystemDevice = w.hexAttr(d, dir, "subsystem_device", e.subDev, 4, hex[:])
	d.Class = w.hexAttr(d, dir, "class", e.class, 6, hex[:])
	d.ClassName, d.SubclassName = className(d.Class, w.sc.ids)
	d.VendorName, d.DeviceName = w.sc.ids.names(d.Vendor, d.Device)

	if b, ok := w.attr(d, dir, "numa_node", e.numaNode, false); ok {
		if n, ok := parseInt(b, -1, 1<<16); ok {
			d.NUMANode = n
		} else {
			w.malformed(d, "numa_node", b, "is not a NUMA node number")
		}
	}
	if b, ok := w.attr(d, dir, "acpi_index", e.acpiIndex, false); ok {
		if v, ok := parseACPIIndex(b); ok {
			d.ACPIIndex = w.intern(v)
		} else {
			w.malformed(d, "acpi_index", b, "is not a decimal number")
		}
	}
	if b, ok := w.attr(d, dir, "sriov_totalvfs", e.totalVFs, false); ok {
		if n, ok := parseInt(b, 0, 0xffff); ok {
			d.TotalVFs = n
		} else {
			w.malformed(d, "sriov_totalvfs", b, "is not a VF count")
		}
	}
	if e.numVFs {
		// Its VFs are its virtfnN links: sriov_numvfs itself is not read.
		// Since 2021 the kernel reads it under a lock that a write of
		// sriov_numvfs holds until its VFs are gone, and a VF bound to
		// vfio-pci goes only once its user (a VM) closes it: the read
		// would wait as long, uninterruptibly, and the scan with it.
		d.NumVFs = len(e.virtfns)
	}

	if e.driver {
		w.readDriver(d, dir)
	}
	if e.iommuGroup {
		if t, ok := w.link(d, dir, "iommu_group"); ok {
			if g := linkBase(t); isDecimal(g) {
				d.IOMMUGroup = g
				d.VFIODevice = w.vfioExists(g)
				if !d.VFIODevice && w.vfioExists(noIOMMUPrefix+g) {
					d.VFIODevice, d.VFIONoIOMMU = true, true
				}
			} else {
				d.Warnings = append(d.Warnings, "iommu_group: link target "+strconv.Quote(t)+" does not name a group")
			}
		}
	}
	if e.physfn {
		if t, ok := w.link(d, dir, "physfn"); ok {
			if pf := linkBase(t); isPCIAddress(pf) {
				d.PF = w.intern([]byte(pf))
			} else {
				d.Warnings = append(d.Warnings, "physfn: link target "+strconv.Quote(t)+" does not name a PCI function")
			}
		}
	}
	if len(e.virtfns) > 0 {
		slices.Sort(e.virtfns)
		res.virtfns = make([]virtfn, 0, len(e.virtfns))
		for _, i := range e.virtfns {
			name := "virtfn" + strconv.Itoa(i)
			if t, ok := w.link(d, dir, name); ok {
				if vf := linkBase(t); isPCIAddress(vf) {
					res.virtfns = append(res.virtfns, virtfn{addr: vf, index: i})
				} else {
					d.Warnings = append(d.Warnings, name+": link target "+strconv.Quote(t)+" does not name a PCI function")
				}
			}
		}
	}

	if e.net {
		d.Interfaces = w.readInterfaces(d, dir, "net", d.Interfaces)
		if len(d.Interfaces) > 1 {
			w.uplinkFirst(d, dir)
		}
	}
	if len(e.virtio) > 0 {
		slices.Sort(e.virtio)
		for _, v := range e.virtio {
			d.Interfaces = w.readInterfaces(d, dir, v+"/net", d.Interfaces)
		}
	}
	if e.uio {
		d.UIO = w.firstNumbered(d, dir, "uio", "uio")
	}
	if e.infiniband {
		w.readRDMA(d, dir)
		if len(e.rdmaChars) > 0 && len(d.RDMADevices) > 0 {
			slices.Sort(e.rdmaChars)
			w.readRDMAChars(d, dir, e.rdmaChars)
		}
	}
	if len(e.vdpa) > 0 {
		slices.Sort(e.vdpa)
		w.readVDPA(d, dir, e.vdpa[0])
	}
	if len(e.aux) > 0 {
		slices.SortFunc(e.aux, func(a, b AuxDevice) int {
			if a.Name < b.Name {
				return -1
			}
			if a.Name > b.Name {
				return 1
			}
			return 0
		})
		d.AuxDevices = e.aux
	}
	// Hot-unplugged after its directory was listed: its files went with it.
	if len(d.Warnings) > 0 {
		if err := w.fs.stat(dir); errors.Is(err, fs.ErrNotExist) {
			res.gone = true
		}
	}
	return res
}

// attr reads the attribute name of the function in dir if present (the
// directory listing said so). A missing attribute warns only when required.
func (w *worker) attr(d *Device, dir, name string, present, required bool) ([]byte, bool) {
	if !present {
		if required {
			d.Warnings = append(d.Warnings, name+": missing")
		}
		return nil, false
	}
	return w.read(d, dir+"/"+name, name)
}

// read reads one file; rel names it in warnings, relative to the function.
func (w *worker) read(d *Device, path, rel string) ([]byte, bool) {
	n, err := w.fs.readFile(path, w.buf[:])
	if err != nil {
		w.unreadable(d, rel, err)
		return nil, false
	}
	if n == len(w.buf) {
		d.Warnings = append(d.Warnings, rel+": longer than any value the kernel writes there")
		return nil, false
	}
	return w.buf[:n], true
}

// hexAttr reads and normalises an ID attribute, "" when it is missing or
// malformed.
func (w *worker) hexAttr(d *Device, dir, name string, present bool, digits int, scratch []byte) string {
	b, ok := w.attr(d, dir, name, present, true)
	if !ok {
		return ""
	}
	v, ok := parseHex(b, digits, scratch)
	if !ok {
		w.malformed(d, name, b, "is not "+strconv.Itoa(digits)+" hex digits")
		return ""
	}
	return w.intern(v)
}

// unreadable notes that reading rel, relative to the function's
// directory, failed with err: a warning, and unless rel was not found (an
// attribute the function lacks, or a function going away), an incomplete
// read (Device.Incomplete).
func (w *worker) unreadable(d *Device, rel string, err error) {
	d.Warnings = append(d.Warnings, rel+": "+errText(err))
	if !errors.Is(err, fs.ErrNotExist) {
		d.Incomplete = true
	}
}

func (w *worker) malformed(d *Device, rel string, content []byte, what string) {
	d.Warnings = append(d.Warnings, rel+": "+quote(content)+" "+what)
}

// link reads the symlink name in dir.
func (w *worker) link(d *Device, dir, name string) (string, bool) {
	t, err := w.fs.readlink(dir + "/" + name)
	if err != nil {
		w.unreadable(d, name, err)
		return "", false
	}
	return t, true
}

// readDriver sets Driver from the driver link, unless the link is dangling
// (its driver is not registered), which is reported: a function whose
// driver cannot be confirmed is better treated as unbound.
func (w *worker) readDriver(d *Device, dir string) {
	t, ok := w.link(d, dir, "driver")
	if !ok {
		return
	}
	name := linkBase(t)
	if name == "" {
		d.Warnings = append(d.Warnings, "driver: link target "+strconv.Quote(t)+" does not name a driver")
		return
	}
	if !w.sc.drivers[name] {
		if err := w.fs.stat(dir + "/driver"); err != nil {
			d.Warnings = append(d.Warnings, "driver: link to "+strconv.Quote(t)+" is dangling")
			return
		}
	}
	d.Driver = w.intern([]byte(name))
}

// noIOMMUPrefix starts the name of a group's node under /dev/vfio in vfio's
// no-IOMMU mode: noiommu-<group>.
const noIOMMUPrefix = "noiommu-"

// vfioExists tells whether <dev>/vfio/<name> exists.
func (w *worker) vfioExists(name string) bool {
	if w.sc.vfio != nil {
		return w.sc.vfio[name]
	}
	return w.fs.stat(filepath.Join(w.sc.r.devRoot, "vfio", name)) == nil
}

// readInterfaces appends the interfaces under dir/sub ("net" or
// "virtio0/net"), sorted by name. A virtio child without net/ (a block
// device) is not an error.
func (w *worker) readInterfaces(d *Device, dir, sub string, ifs []NetInterface) []NetInterface {
	names, err := w.fs.readDirNames(dir + "/" + sub)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) || sub == "net" {
			w.unreadable(d, sub, err)
		}
		return ifs
	}
	slices.Sort(names)
	for _, name := range names {
		ifc := NetInterface{Name: name, Carrier: -1}
		rel := sub + "/" + name
		base := dir + "/" + rel
		warned, incomplete := len(d.Warnings), d.Incomplete
		if b, ok := w.read(d, base+"/operstate", rel+"/operstate"); ok {
			if v, ok := parseWord(b); ok {
				ifc.OperState = w.intern(v)
			} else {
				w.malformed(d, rel+"/operstate", b, "is not an operational state")
			}
		}
		// The kernel refuses to read carrier (EINVAL) while the interface is
		// administratively down: that is "unknown", not a fault.
		if n, err := w.fs.readFile(base+"/carrier", w.buf[:]); err == nil && n < len(w.buf) {
			if c, ok := parseCarrier(w.buf[:n]); ok {
				ifc.Carrier = c
			} else {
				w.malformed(d, rel+"/carrier", w.buf[:n], "is neither 0 nor 1")
			}
		} else if err == nil {
			d.Warnings = append(d.Warnings, rel+"/carrier: longer than any value the kernel writes there")
		} else if !errors.Is(err, syscall.EINVAL) {
			d.Warnings = append(d.Warnings, rel+"/carrier: "+errText(err))
		}
		if b, ok := w.read(d, base+"/type", rel+"/type"); ok {
			if t, ok := parseLinkType(b); ok {
				ifc.LinkType = w.intern([]byte(t))
			} else {
				w.malformed(d, rel+"/type", b, "is not an ARPHRD number")
			}
		}
		// Renamed or gone since the listing (udev renames a new VF's
		// netdev moments after it appears): not an interface of this name.
		if len(d.Warnings) > warned {
			if err := w.fs.stat(base); errors.Is(err, fs.ErrNotExist) {
				d.Warnings, d.Incomplete = d.Warnings[:warned], incomplete
				continue
			}
		}
		ifs = append(ifs, ifc)
	}
	return ifs
}

// uplinkFirst moves the uplink of a PF in switchdev mode to the front of
// its interfaces. In that mode the PF's net/ also lists the representors
// of its VFs and SFs, which may sort before the uplink (eth10 before
// eth2); the SR-IOV plugin names a VF's or SF's PF by the uplink: the
// interface with a switch ID whose port name is "p<N>" (representors are
// "pf0vf3", "pf0sf88"). A PF with SFs need not be SR-IOV capable (no
// sriov_totalvfs when firmware has SR-IOV off), so any function with more
// than one interface is looked at. The kernel
// refuses both files (EOPNOTSUPP) on an interface that is no switch port;
// another error leaves the read incomplete, as the uplink may be the
// interface it failed on.
func (w *worker) uplinkFirst(d *Device, dir string) {
	attr := func(ifname, name string) ([]byte, bool) {
		n, err := w.fs.readFile(dir+"/net/"+ifname+"/"+name, w.buf[:])
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EINVAL):
			return nil, false
		case err != nil:
			w.unreadable(d, "net/"+ifname+"/"+name, err)
			return nil, false
		case n == len(w.buf):
			return nil, false
		}
		return bytes.TrimSpace(w.buf[:n]), true
	}
	ifs := d.Interfaces
	for i := range ifs {
		if id, ok := attr(ifs[i].Name, "phys_switch_id"); !ok || len(id) == 0 {
			continue
		}
		if port, ok := attr(ifs[i].Name, "phys_port_name"); !ok || !isUplinkPortName(port) {
			continue
		}
		uplink := ifs[i]
		copy(ifs[1:i+1], ifs[:i])
		ifs[0] = uplink
		return
	}
}

// isUplinkPortName reports whether name is a physical port's name, "p"
// and a port number.
func isUplinkPortName(name []byte) bool {
	return len(name) > 1 && name[0] == 'p' && isDecimal(string(name[1:]))
}

// readRDMA lists infiniband/ and, when the function has an InfiniBand
// interface, gives it the non-empty pkeys of the RDMA devices' ports.
func (w *worker) readRDMA(d *Device, dir string) {
	names, err := w.fs.readDirNames(dir + "/infiniband")
	if err != nil {
		w.unreadable(d, "infiniband", err)
		return
	}
	slices.Sort(names)
	d.RDMADevices = names
	ib := -1
	for i := range d.Interfaces {
		if d.Interfaces[i].LinkType == "infiniband" {
			ib = i
			break
		}
	}
	if ib < 0 {
		if len(d.Interfaces) == 0 && len(names) > 0 {
			w.readDefaultPKey(d, dir, names[0])
		}
		return
	}
	var keys []string
	for _, dev := range names {
		portsRel := "infiniband/" + dev + "/ports"
		ports, err := w.fs.readDirNames(dir + "/" + portsRel)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				w.unreadable(d, portsRel, err)
			}
			continue
		}
		sortNumeric(ports)
		for _, p := range ports {
			pkeysRel := portsRel + "/" + p + "/pkeys"
			entries, err := w.fs.readDirNames(dir + "/" + pkeysRel)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					w.unreadable(d, pkeysRel, err)
				}
				continue
			}
			sortNumeric(entries)
			for _, k := range entries {
				rel := pkeysRel + "/" + k
				b, ok := w.read(d, dir+"/"+rel, rel)
				if !ok {
					continue
				}
				key, empty, ok := parsePKey(b)
				switch {
				case !ok:
					w.malformed(d, rel, b, "is not a partition key")
				case !empty && !slices.Contains(keys, key):
					keys = append(keys, key)
				}
			}
		}
	}
	// Every InfiniBand interface of the function shares the ports' keys:
	// sysfs does not say which port an IPoIB interface sits on.
	for i := range d.Interfaces {
		if d.Interfaces[i].LinkType == "infiniband" {
			d.Interfaces[i].PKeys = keys
		}
	}
}

// readRDMAChars sets RDMACharDevices from the character devices under the
// class directories classes of the function (uverbsN in infiniband_verbs,
// umadN and issmN in infiniband_mad), each given to the RDMA device its
// ibdev names.
func (w *worker) readRDMAChars(d *Device, dir string, classes []string) {
	for _, class := range classes {
		names, err := w.fs.readDirNames(dir + "/" + class)
		if err != nil {
			w.unreadable(d, class, err)
			continue
		}
		slices.Sort(names)
		for _, name := range names {
			rel := class + "/" + name + "/ibdev"
			b, ok := w.read(d, dir+"/"+rel, rel)
			if !ok {
				continue
			}
			v, ok := parseWord(b)
			ibdev := string(v)
			if !ok || !slices.Contains(d.RDMADevices, ibdev) {
				w.malformed(d, rel, b, "names no RDMA device of the function")
				continue
			}
			if d.RDMACharDevices == nil {
				d.RDMACharDevices = map[string][]string{}
			}
			d.RDMACharDevices[ibdev] = append(d.RDMACharDevices[ibdev], w.intern([]byte(name)))
		}
	}
}

// firstNumbered lists the function's rel and returns the first name in
// it, by name, that is prefix and a number ("uio0"), "" if none is.
func (w *worker) firstNumbered(d *Device, dir, rel, prefix string) string {
	names, err := w.fs.readDirNames(dir + "/" + rel)
	if err != nil {
		w.unreadable(d, rel, err)
		return ""
	}
	slices.Sort(names)
	for _, n := range names {
		if _, ok := numberedName(n, prefix); ok {
			return n
		}
	}
	return ""
}

// readDefaultPKey sets PKey from index 0 of port 1 of the RDMA device dev,
// where the SR-IOV plugin reads it (sriovnet's GetDefaultPKeyFromPci): no
// interface carries the function's keys. A port with no partition keys
// (RoCE) has no such file, which is not a fault.
func (w *worker) readDefaultPKey(d *Device, dir, dev string) {
	rel := "infiniband/" + dev + "/ports/1/pkeys/0"
	n, err := w.fs.readFile(dir+"/"+rel, w.buf[:])
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		w.unreadable(d, rel, err)
		return
	}
	b := w.buf[:n]
	key, empty, ok := parsePKey(b)
	switch {
	case !ok:
		w.malformed(d, rel, b, "is not a partition key")
	case !empty:
		d.PKey = key
	}
}

// readVDPA sets VDPAType from the driver of the vdpa child, and for a vhost
// one VhostVDPA. An unbound vdpa device has no type yet, which is not a
// fault.
func (w *worker) readVDPA(d *Device, dir, child string) {
	rel := child + "/driver"
	t, err := w.fs.readlink(dir + "/" + rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.unreadable(d, rel, err)
		}
		return
	}
	typ, ok := vdpaType(linkBase(t))
	if !ok {
		d.Warnings = append(d.Warnings, rel+": unknown vdpa driver "+strconv.Quote(linkBase(t)))
		return
	}
	d.VDPAType, d.VDPADevice = typ, w.intern([]byte(child))
	if typ != "vhost" {
		return
	}
	// vhost_vdpa's character device is a child of the vdpa device.
	d.VhostVDPA = w.firstNumbered(d, dir, child, "vhost-vdpa-")
}

// sortNumeric sorts names that are decimal numbers by value ("2" before
// "10"), others after them by name.
func sortNumeric(names []string) {
	slices.SortFunc(names, func(a, b string) int {
		ai, aok := decimal(a)
		bi, bok := decimal(b)
		switch {
		case aok && bok:
			return ai - bi
		case aok:
			return -1
		case bok:
			return 1
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
}

// decimal parses a short non-negative decimal number.
func decimal(s string) (int, bool) {
	if !isDecimal(s) {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// errText is an error's text without the path an *fs.PathError repeats,
// since warnings already name the file.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
