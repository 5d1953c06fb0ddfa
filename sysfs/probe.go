package sysfs

import (
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// ProbeTarget is one pooled device to probe and what it must look like to
// be healthy. Its fields come from the scan that put the device in its pool.
type ProbeTarget struct {
	// Address is the function's PCI address in canonical form
	// ("0000:3b:01.2"); any form NormalizeAddress accepts is taken.
	Address string
	// Driver is the driver the device joined its pool with; "" means it
	// is not known (no function is pooled unbound: one in its pool with no
	// driver is there because it was before, bound to a driver this
	// process never saw), and the device is unhealthy while unbound.
	Driver string
	// VFIO asks that <dev-root>/vfio/<group> exists.
	VFIO bool
	// IOMMUGroup is the device's IOMMU group ("102"). When it is "" and
	// VFIO is set, the group is read from the iommu_group link.
	IOMMUGroup string
	// Link asks that the link be up with carrier: see LinkInterface for
	// whose. With no interface to check the check passes.
	Link bool
	// Interface is the device's own network interface, "" if none.
	Interface string
	// VF says the device is an SR-IOV VF, and PFInterface is then its
	// PF's interface ("" when unknown).
	VF          bool
	PFInterface string
}

// LinkInterface is the interface whose link t's link check reads: for a
// VF, its PF's (pf is then true; "" when unknown), else the device's own.
// A VF's own interface says nothing of its health: it is down on the host
// while the VF is free (the SR-IOV CNI sets it down as it hands it back)
// and in a pod's network namespace while held; its PF's port is what
// carries it.
func (t ProbeTarget) LinkInterface() (ifname string, pf bool) {
	if t.VF || t.PFInterface != "" {
		return t.PFInterface, true
	}
	return t.Interface, false
}

// ProbeResult is the verdict of one probe.
type ProbeResult struct {
	// Healthy is true when every check passed.
	Healthy bool
	// Reason says why the device is unhealthy, "" when it is healthy:
	//   "gone from sysfs", "driver unbound (was vfio-pci)",
	//   "driver is iavf (was vfio-pci)", "driver is vfio-pci (was none)",
	//   "/dev/vfio/102 missing", "link down on ens785f0 (PF)",
	//   "link down on eno1 (lowerlayerdown)",
	//   "no carrier on eno1", "no interface ens785f0 (PF)",
	//   "probe failed: cannot read net/ens785f0/operstate: permission denied".
	// An attribute that cannot be read fails the probe with a reason that
	// starts "probe failed: " and names the file: relative to the function
	// ("driver", "iommu_group"), to the class/net directory
	// ("net/ens785f0/carrier"), or the devfs node ("/dev/vfio/102").
	Reason string
	// Link is set when the link check failed (every check before it
	// passed), or when only the link was probed (ProbeLinks).
	Link bool
	// Inconclusive is set when the probe failed for want of something
	// this process needs to read (a file descriptor, memory: EMFILE,
	// ENFILE, ENOMEM, ENOBUFS), not for anything about the device or its
	// files. Such a result says nothing of the device's health; Reason
	// says what could not be read.
	Inconclusive bool
	// Files is how many files the probe touched (readlink, stat and read
	// calls), the cost the benchmarks compare.
	Files int
}

// Probe checks one pooled device with as few file operations as the
// target allows; on the healthy path of a VF with VFIO and a link to check
// that is four: the driver link (whose presence also proves the function
// is there), /dev/vfio/<group>, operstate and carrier.
//
// The checks, in order, stop at the first failure:
//   - the function is listed under bus/pci/devices;
//   - its driver link names t.Driver; with t.Driver "" the check fails
//     whether a driver is bound ("driver is iavf (was none)") or not ("no
//     driver bound");
//   - when t.VFIO, <dev-root>/vfio/<group> exists (or, in vfio's
//     no-IOMMU mode, <dev-root>/vfio/noiommu-<group>);
//   - when t.Link, the interface's operstate is "up" (or "unknown", which
//     the kernel also counts as up for drivers that do not track it) and
//     its carrier is 1. A carrier the kernel refuses to read (EINVAL on an
//     interface that is down) counts as no carrier.
//
// Probe never panics and never returns an error: whatever cannot be read
// is a failed probe whose Reason names the file.
func (r *Reader) Probe(t ProbeTarget) ProbeResult {
	p := r.newProber(nil, nil)
	return p.probe(t)
}

// probeParallelMin is the fewest targets ProbeAll spreads over goroutines:
// below it a round is a few dozen system calls, cheaper than starting them.
const probeParallelMin = 64

// ProbeAll probes every target as Probe does and returns the results in
// the same order. Large rounds run on the Reader's workers
// (Options.Workers). Within one round a PF interface that several VFs
// check is read once, by the first probe that gets to it, and its verdict
// serves the others; that probe's Files counts the reads.
func (r *Reader) ProbeAll(ts []ProbeTarget) []ProbeResult {
	return r.probeAll(ts, (*prober).probe)
}

// ProbeLinks makes only the link check of every target (the checks a link
// notification can change), as ProbeAll would make it; every result has
// Link set. A target that asks for no link check, or has no interface to
// check, passes.
func (r *Reader) ProbeLinks(ts []ProbeTarget) []ProbeResult {
	return r.probeAll(ts, func(p *prober, t ProbeTarget) ProbeResult {
		res := ProbeResult{Link: true}
		if reason, inconclusive := p.linkCheck(t, &res.Files); reason != "" {
			res.Inconclusive = inconclusive
			return res.fail(reason)
		}
		res.Healthy = true
		return res
	})
}

func (r *Reader) probeAll(ts []ProbeTarget, probe func(*prober, ProbeTarget) ProbeResult) []ProbeResult {
	results := make([]ProbeResult, len(ts))
	shared, groups := sharedPFLinks(ts), sharedGroups(ts)
	workers := r.workers
	if len(ts) < probeParallelMin {
		workers = 1
	}
	inParallel(workers, len(ts), func() func(int) {
		p := r.newProber(shared, groups)
		return func(i int) { results[i] = probe(p, ts[i]) }
	})
	return results
}

// sharedGroups has an entry for each IOMMU group that more than one
// vfio target of a round names, nil when there is none: what keeps a
// group closed is the same for every function in it, read once a round
// (a group of all the VFs of a PF behind a port without ACS would
// otherwise cost each VF a read of every other).
func sharedGroups(ts []ProbeTarget) map[string]*sharedGroup {
	return sharedBy[sharedGroup](ts, func(t *ProbeTarget) string {
		if !t.VFIO {
			return ""
		}
		return t.IOMMUGroup
	})
}

// sharedBy has a new V for each key that more than one target of ts
// gives (key "" gives none), nil when there is none.
func sharedBy[V any](ts []ProbeTarget, key func(*ProbeTarget) string) map[string]*V {
	var seen map[string]bool
	var shared map[string]*V
	for i := range ts {
		k := key(&ts[i])
		if k == "" {
			continue
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		if !seen[k] {
			seen[k] = true
			continue
		}
		if shared == nil {
			shared = make(map[string]*V)
		}
		if shared[k] == nil {
			shared[k] = new(V)
		}
	}
	return shared
}

// sharedGroup is groupBlocker's answer for one group, taken once per
// round.
type sharedGroup struct {
	once           sync.Once
	member, driver string
	err            error
}

// inParallel calls do(i) for every i in [0, n) on at most workers
// goroutines, sequentially when that is 1 or less. Each goroutine gets its
// own do from setup, so that it can keep its own buffers.
func inParallel(workers, n int, setup func() (do func(i int))) {
	workers = min(workers, n)
	if workers <= 1 {
		do := setup()
		for i := range n {
			do(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			do := setup()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				do(i)
			}
		})
	}
	wg.Wait()
}

// sharedPFLinks has an entry for each PF interface that more than one
// target of a round checks, nil when there is none.
func sharedPFLinks(ts []ProbeTarget) map[string]*sharedLink {
	return sharedBy[sharedLink](ts, func(t *ProbeTarget) string {
		if !t.Link {
			return ""
		}
		return t.PFInterface
	})
}

// sharedLink is the verdict on one interface's link, taken once per round.
type sharedLink struct {
	once sync.Once
	v    linkVerdict
}

// linkVerdict is what the link files of an interface said.
type linkVerdict struct {
	// down is the operstate when it is not up ("down", "dormant"), "" when
	// it is; noCarrier and gone are the other failures, failed a probe
	// failure's text, which names the file (inconclusive when
	// ProbeResult.Inconclusive would be).
	down         string
	noCarrier    bool
	gone         bool
	failed       string
	inconclusive bool
}

// reason phrases v for interface ifname, marked as the PF's when pf; ""
// means the link is up with carrier.
func (v linkVerdict) reason(ifname string, pf bool) string {
	suffix := ""
	if pf {
		suffix = " (PF)"
	}
	switch {
	case v.failed != "":
		return v.failed
	case v.gone:
		return "no interface " + ifname + suffix
	case v.down == "down":
		return "link down on " + ifname + suffix
	case v.down != "" && pf:
		return "link down on " + ifname + " (PF, " + v.down + ")"
	case v.down != "":
		return "link down on " + ifname + " (" + v.down + ")"
	case v.noCarrier:
		return "no carrier on " + ifname + suffix
	}
	return ""
}

// prober probes targets one after another with its own read buffer.
type prober struct {
	r      *Reader
	fs     fileSystem
	shared map[string]*sharedLink
	groups map[string]*sharedGroup
	buf    [64]byte
}

func (r *Reader) newProber(shared map[string]*sharedLink, groups map[string]*sharedGroup) *prober {
	return &prober{r: r, fs: r.fs, shared: shared, groups: groups}
}

func (p *prober) probe(t ProbeTarget) ProbeResult {
	var res ProbeResult
	addr := t.Address
	if !isPCIAddress(addr) {
		a, err := NormalizeAddress(addr)
		if err != nil {
			return res.fail("probe failed: " + err.Error())
		}
		addr = a
	}
	// The driver link comes first: when it reads, the function is there.
	driverLink := p.r.busDir + "/" + addr + "/driver"
	dir := driverLink[:len(driverLink)-len("/driver")]
	target, err := p.fs.readlink(driverLink)
	res.Files++
	switch {
	case err == nil:
		if drv := linkBase(target); drv != t.Driver {
			return res.fail("driver is " + quoteName(drv) + " (was " + orNone(t.Driver) + ")")
		}
	case errors.Is(err, fs.ErrNotExist):
		// No driver link: either the function went or it is unbound.
		err := p.fs.stat(dir)
		res.Files++
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return res.fail("gone from sysfs")
		case err != nil:
			return res.failRead("cannot stat the function's directory", err)
		case t.Driver != "":
			return res.fail("driver unbound (was " + t.Driver + ")")
		default:
			return res.fail("no driver bound")
		}
	default:
		return res.failRead("cannot read driver", err)
	}

	if t.VFIO {
		group := t.IOMMUGroup
		if group == "" {
			target, err := p.fs.readlink(dir + "/iommu_group")
			res.Files++
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return res.fail("no IOMMU group, so no /dev/vfio node")
			case err != nil:
				return res.failRead("cannot read iommu_group", err)
			}
			group = linkBase(target)
		}
		if !isDecimal(group) {
			return res.fail("probe failed: IOMMU group " + strconv.Quote(group) + " is not a group number")
		}
		err := p.fs.stat(p.r.devRoot + "/vfio/" + group)
		res.Files++
		if errors.Is(err, fs.ErrNotExist) {
			// vfio's no-IOMMU mode names the node noiommu-<group>.
			if p.fs.stat(p.r.devRoot+"/vfio/"+noIOMMUPrefix+group) == nil {
				err = nil
			}
			res.Files++
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return res.fail("/dev/vfio/" + group + " missing")
		case err != nil:
			return res.failRead("cannot stat /dev/vfio/"+group, err)
		}
		var member, drv string
		if sg := p.groups[t.IOMMUGroup]; sg != nil {
			// A vfio target is never the blocker of its own group (its
			// driver was checked first), so one answer serves them all.
			sg.once.Do(func() { sg.member, sg.driver, sg.err = p.groupBlocker(group, "", &res.Files) })
			member, drv, err = sg.member, sg.driver, sg.err
		} else {
			member, drv, err = p.groupBlocker(group, addr, &res.Files)
		}
		switch {
		case err != nil:
			return res.failRead("cannot read IOMMU group "+group, err)
		case member != "":
			return res.fail("IOMMU group " + group + " cannot be opened: " + member + " in it is bound to " + quoteName(drv))
		}
	}

	if reason, inconclusive := p.linkCheck(t, &res.Files); reason != "" {
		res.Link, res.Inconclusive = true, inconclusive
		return res.fail(reason)
	}
	res.Healthy = true
	return res
}

// groupBlocker finds a function other than addr in IOMMU group group
// that keeps vfio from opening the group, and its driver: one bound to a
// driver that uses the kernel's DMA API. The kernel hands a group to a
// user (VFIO_GROUP_SET_CONTAINER, or an iommufd bind) only when every
// function in it is unbound or on a driver that manages no DMA of its
// own: a vfio driver, pci-stub, or pcieport on a bridge. A GPU on
// vfio-pci whose audio function stays on snd_hda_intel is such a case:
// every VM given the GPU fails to start. "" when there is none.
func (p *prober) groupBlocker(group, addr string, files *int) (member, driver string, err error) {
	dir := p.r.sysfsRoot + "/kernel/iommu_groups/" + group + "/devices"
	names, err := p.fs.readDirNames(dir)
	*files++
	if err != nil {
		return "", "", err
	}
	slices.Sort(names)
	for _, m := range names {
		if m == addr {
			continue
		}
		target, err := p.fs.readlink(dir + "/" + m + "/driver")
		*files++
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // unbound, or gone meanwhile
		case err != nil:
			return "", "", err
		}
		if drv := linkBase(target); !IsVFIODriver(drv) && drv != "pci-stub" && drv != "pcieport" {
			return m, drv, nil
		}
	}
	return "", "", nil
}

// linkCheck makes t's link check, adding the files it touches to *files,
// and says why it failed, "" when it passed or there is nothing to check,
// and whether the failure is inconclusive (ProbeResult.Inconclusive).
func (p *prober) linkCheck(t ProbeTarget, files *int) (reason string, inconclusive bool) {
	if !t.Link {
		return "", false
	}
	ifname, pf := t.LinkInterface()
	if ifname == "" {
		return "", false
	}
	var v linkVerdict
	if sl := p.shared[ifname]; pf && sl != nil {
		sl.once.Do(func() { sl.v = p.link(ifname, files) })
		v = sl.v
	} else {
		v = p.link(ifname, files)
	}
	if v.gone && !pf {
		// The device's own interface left the host: a pod holds the device
		// (the host-device CNI moves it into the pod's namespace), or udev
		// renames it. The next scan has no interface, or the new name, to
		// check; that the function is there and bound is checked above.
		return "", false
	}
	return v.reason(ifname, pf), v.inconclusive
}

// link reads whether interface ifname is up with carrier, adding the files
// it touches to *files.
func (p *prober) link(ifname string, files *int) linkVerdict {
	if !validIfName(ifname) {
		return linkVerdict{failed: "probe failed: " + strconv.Quote(ifname) + " is not an interface name"}
	}
	rel := func(file string) string { return "net/" + ifname + "/" + file }
	n, err := p.fs.readFile(p.r.sysfsRoot+"/class/net/"+ifname+"/operstate", p.buf[:])
	*files++
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return linkVerdict{gone: true}
	case err != nil:
		return linkVerdict{failed: "probe failed: cannot read " + rel("operstate") + ": " + errText(err), inconclusive: resourceErr(err)}
	case n == len(p.buf):
		return linkVerdict{failed: "probe failed: " + rel("operstate") + ": longer than any value the kernel writes there"}
	}
	state, ok := parseWord(p.buf[:n])
	if !ok {
		return linkVerdict{failed: "probe failed: " + rel("operstate") + ": " + quote(p.buf[:n]) + " is not an operational state"}
	}
	switch string(state) {
	case "up", "unknown":
	default:
		return linkVerdict{down: string(state)}
	}

	n, err = p.fs.readFile(p.r.sysfsRoot+"/class/net/"+ifname+"/carrier", p.buf[:])
	*files++
	switch {
	case errors.Is(err, syscall.EINVAL):
		return linkVerdict{noCarrier: true}
	case errors.Is(err, fs.ErrNotExist):
		return linkVerdict{gone: true}
	case err != nil:
		return linkVerdict{failed: "probe failed: cannot read " + rel("carrier") + ": " + errText(err), inconclusive: resourceErr(err)}
	case n == len(p.buf):
		return linkVerdict{failed: "probe failed: " + rel("carrier") + ": longer than any value the kernel writes there"}
	}
	switch c, ok := parseCarrier(p.buf[:n]); {
	case !ok:
		return linkVerdict{failed: "probe failed: " + rel("carrier") + ": " + quote(p.buf[:n]) + " is neither 0 nor 1"}
	case c == 0:
		return linkVerdict{noCarrier: true}
	}
	return linkVerdict{}
}

func (res ProbeResult) fail(reason string) ProbeResult {
	res.Healthy = false
	res.Reason = reason
	return res
}

// failRead fails the probe because what could not be read, with err.
func (res ProbeResult) failRead(what string, err error) ProbeResult {
	res = res.fail("probe failed: " + what + ": " + errText(err))
	res.Inconclusive = resourceErr(err)
	return res
}

// resourceErr reports whether err says this process lacked what a read
// needs (a file descriptor, memory), which says nothing of the file.
func resourceErr(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// validIfName reports whether s can be a network interface name: 1 to 15
// bytes (IFNAMSIZ less the NUL), no '/', no white space, not "." or "..".
// It keeps a name from a target from reaching outside class/net.
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '/' || c == 0 || isSpace(c) || c == ':' {
			return false
		}
	}
	return true
}

func orNone(driver string) string {
	if driver == "" {
		return "none"
	}
	return driver
}

// quoteName shows a driver name as is unless it is empty or holds what no
// driver name does.
func quoteName(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// ProbeTarget is the target that keeps d as it is now: its current driver
// (VFIO when that is a VFIO driver, see IsVFIODriver), its IOMMU group, its
// first interface and its PF's interface; link says whether the link is
// checked (a pool's health.link).
func (d *Device) ProbeTarget(link bool) ProbeTarget {
	t := ProbeTarget{
		Address:     d.Address,
		Driver:      d.Driver,
		VFIO:        IsVFIODriver(d.Driver),
		IOMMUGroup:  d.IOMMUGroup,
		Link:        link,
		VF:          d.IsVF(),
		PFInterface: d.PFInterface,
	}
	if len(d.Interfaces) > 0 {
		t.Interface = d.Interfaces[0].Name
	}
	return t
}

// IsVFIODriver reports whether a function bound to driver is reached
// through /dev/vfio/<group>: vfio-pci and its vendor variants, whose names
// end in "_vfio_pci" (mlx5_vfio_pci, hisi_acc_vfio_pci, nvgrace_gpu_vfio_pci),
// or in "-vfio-pci" as their modules are named.
func IsVFIODriver(driver string) bool {
	d := strings.ReplaceAll(driver, "-", "_")
	return d == "vfio_pci" || strings.HasSuffix(d, "_vfio_pci")
}
