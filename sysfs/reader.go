package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/rs/zerolog"
)

// Default roots, as on a node.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevRoot   = "/dev"
	// DefaultPCIIDsSearchRoot is where the usual pci.ids locations
	// (usr/share/hwdata, usr/share/misc) are looked for.
	DefaultPCIIDsSearchRoot = "/"
)

// maxWorkers caps the goroutines of one scan: past a handful, parallel
// reads of sysfs stop paying.
const maxWorkers = 8

// ErrNoSysfsRoot is wrapped by the error of Scan and Device when the sysfs
// root does not exist or is not a directory; the error names the root.
var ErrNoSysfsRoot = errors.New("sysfs root not found")

// ErrNoDevice is wrapped by the error of Device when no PCI function has the
// address; the error reads "no PCI device <address> under <root>".
var ErrNoDevice = errors.New("no PCI device")

// Options configure a Reader. The zero value reads the node's /sys and /dev
// and looks for the PCI ID database in the usual places.
type Options struct {
	// SysfsRoot is the sysfs mount; "" means /sys.
	SysfsRoot string
	// DevRoot is the devfs mount, where vfio/<group> is looked for; ""
	// means /dev.
	DevRoot string
	// PCIIDsPath is a pci.ids or pci.ids.gz file to take names from. When
	// it is "", the usual locations are searched under PCIIDsSearchRoot.
	// A missing or unreadable database leaves names empty and is logged
	// once; it never fails a scan.
	PCIIDsPath string
	// PCIIDsSearchRoot is the root under which usr/share/hwdata/pci.ids,
	// usr/share/misc/pci.ids and their .gz forms are searched when
	// PCIIDsPath is ""; "" means /. Tests point it at an empty directory so
	// that they never depend on the host.
	PCIIDsSearchRoot string
	// Workers is how many goroutines read functions in parallel during a
	// Scan; 0 means GOMAXPROCS, at most 8. 1 reads sequentially.
	Workers int
	// Logger receives one warning when no PCI ID database is found and one
	// per distinct malformed attribute; the zero Logger discards.
	Logger zerolog.Logger
}

// Reader is a read-only view of the PCI functions under a sysfs root. It is
// safe for concurrent use; each Scan reads the tree afresh (nothing is
// cached but the PCI ID database, loaded on first use).
type Reader struct {
	sysfsRoot string
	devRoot   string
	busDir    string // <sysfs>/bus/pci/devices
	workers   int
	log       zerolog.Logger
	fs        fileSystem

	pciIDsPath       string
	pciIDsSearchRoot string
	idsOnce          sync.Once
	ids              *idDB
	idsSource        string

	warnMu sync.Mutex
	warned map[string]struct{}
}

// maxRemembered bounds how many distinct attribute warnings a Reader
// remembers so that each is logged once; past it, new ones are logged at
// debug level only (they still reach Device.Warnings).
const maxRemembered = 4096

// New returns a Reader for opts. It touches no file: a missing root is
// reported by Scan and Device.
func New(opts Options) *Reader {
	r := &Reader{
		sysfsRoot:        opts.SysfsRoot,
		devRoot:          opts.DevRoot,
		workers:          opts.Workers,
		log:              opts.Logger,
		fs:               osFS{},
		pciIDsPath:       opts.PCIIDsPath,
		pciIDsSearchRoot: opts.PCIIDsSearchRoot,
		warned:           map[string]struct{}{},
	}
	if r.sysfsRoot == "" {
		r.sysfsRoot = DefaultSysfsRoot
	}
	if r.devRoot == "" {
		r.devRoot = DefaultDevRoot
	}
	if r.pciIDsSearchRoot == "" {
		r.pciIDsSearchRoot = DefaultPCIIDsSearchRoot
	}
	if r.workers <= 0 {
		r.workers = min(runtime.GOMAXPROCS(0), maxWorkers)
	}
	r.busDir = filepath.Join(r.sysfsRoot, "bus", "pci", "devices")
	return r
}

// SysfsRoot is the sysfs root the Reader reads.
func (r *Reader) SysfsRoot() string { return r.sysfsRoot }

// DevRoot is the devfs root the Reader looks for VFIO nodes in.
func (r *Reader) DevRoot() string { return r.devRoot }

// PCIIDsSource is the PCI ID database file names come from, loading it if
// no scan has yet; "" when none was found or it could not be read.
func (r *Reader) PCIIDsSource() string {
	r.loadIDs()
	return r.idsSource
}

// loadIDs loads the PCI ID database once per Reader, and says once if there
// is none.
func (r *Reader) loadIDs() *idDB {
	r.idsOnce.Do(func() {
		path, err := findPCIIDs(r.pciIDsPath, r.pciIDsSearchRoot)
		if err == nil {
			r.ids, err = loadPCIIDs(path)
		}
		if err != nil {
			r.log.Warn().Err(err).Msg("no PCI ID database: vendor and device names will be empty (install hwdata or pciutils, or pass a pci.ids path)")
			return
		}
		r.idsSource = path
		r.log.Debug().Str("path", path).Int("vendors", len(r.ids.vendors)).Msg("PCI ID database loaded")
	})
	return r.ids
}

// checkRoot returns an error wrapping ErrNoSysfsRoot unless the sysfs root
// is a directory.
func (r *Reader) checkRoot() error {
	st, err := os.Stat(r.sysfsRoot)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", r.sysfsRoot, ErrNoSysfsRoot)
		}
		return fmt.Errorf("%s: %w: %w", r.sysfsRoot, ErrNoSysfsRoot, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %w (not a directory)", r.sysfsRoot, ErrNoSysfsRoot)
	}
	return nil
}

// Scan reads every PCI function listed under bus/pci/devices and returns
// them sorted by address. A root without bus/pci/devices, or with an empty
// one, gives an empty list and no error. Functions that vanish while the
// scan runs are left out; a function with unreadable attributes is kept,
// with those fields unknown and a warning each.
func (r *Reader) Scan() ([]Device, error) {
	names, err := r.fs.readDirNames(r.busDir)
	if err != nil {
		if rootErr := r.checkRoot(); rootErr != nil {
			return nil, rootErr
		}
		// The root is there, and may have come since the listing failed
		// (a hostPath mounted as the scan began): list again before
		// taking no bus/pci/devices for no PCI functions.
		if names, err = r.fs.readDirNames(r.busDir); errors.Is(err, fs.ErrNotExist) {
			return []Device{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list PCI functions in %s: %w", r.busDir, err)
		}
	}
	addrs := names[:0]
	for _, n := range names {
		if isPCIAddress(n) {
			addrs = append(addrs, n)
		} else {
			r.warnOnce(n, filepath.Join(r.busDir, n)+": not a PCI address, ignored")
		}
	}
	slices.Sort(addrs)

	sc := r.newScan(true)
	results := make([]fnResult, len(addrs))
	inParallel(r.workers, len(addrs), func() func(int) {
		w := sc.newWorker()
		return func(i int) { results[i] = w.readFunction(addrs[i]) }
	})

	// Second pass: a VF's index and its PF's interface come from the PF.
	byAddr := make(map[string]int, len(results))
	for i := range results {
		byAddr[results[i].dev.Address] = i
	}
	vfIndex := make(map[string]int)
	for i := range results {
		for _, vf := range results[i].virtfns {
			vfIndex[vf.addr] = vf.index
		}
	}
	devs := make([]Device, 0, len(results))
	for i := range results {
		res := &results[i]
		if res.gone {
			continue
		}
		if res.dev.PF != "" {
			var pf *fnResult
			if j, ok := byAddr[res.dev.PF]; ok && !results[j].gone {
				pf = &results[j]
			}
			linkVF(res, pf, vfIndex)
		}
		devs = append(devs, res.dev)
	}
	r.logWarnings(devs)
	return devs, nil
}

// ScanAhead begins a Scan on a goroutine of its own and returns at once;
// the function it returns waits for that scan and gives its result, the
// same on every call. The daemon reads the node while it replays its
// ledger.
func (r *Reader) ScanAhead() func() ([]Device, error) {
	done := make(chan struct{})
	var devs []Device
	var err error
	go func() {
		defer close(done)
		devs, err = r.Scan()
	}()
	return func() ([]Device, error) {
		<-done
		return devs, err
	}
}

// Device reads the one PCI function at addr (any form NormalizeAddress
// accepts). For a VF it also reads the PF, for the VF index and the PF's
// interface. The error wraps ErrInvalidAddress for a malformed address,
// ErrNoSysfsRoot for a missing root and ErrNoDevice for an address that is
// not there.
func (r *Reader) Device(addr string) (Device, error) {
	a, err := NormalizeAddress(addr)
	if err != nil {
		return Device{}, err
	}
	if err := r.checkRoot(); err != nil {
		return Device{}, err
	}
	sc := r.newScan(false)
	w := sc.newWorker()
	res := w.readFunction(a)
	if res.gone {
		return Device{}, fmt.Errorf("%w %s under %s", ErrNoDevice, a, r.sysfsRoot)
	}
	if res.dev.PF != "" {
		var pf *fnResult
		pfRes := w.readFunction(res.dev.PF)
		if !pfRes.gone {
			pf = &pfRes
		}
		vfIndex := make(map[string]int, len(pfRes.virtfns))
		for _, vf := range pfRes.virtfns {
			vfIndex[vf.addr] = vf.index
		}
		linkVF(&res, pf, vfIndex)
	}
	r.logWarnings([]Device{res.dev})
	return res.dev, nil
}

// linkVF fills a VF's VFIndex and PFInterface from its PF (nil when the PF
// could not be read), with a warning when the two disagree.
func linkVF(vf, pf *fnResult, vfIndex map[string]int) {
	d := &vf.dev
	if pf == nil {
		d.Warnings = append(d.Warnings, "physfn: PF "+d.PF+" is not listed under bus/pci/devices")
		return
	}
	if i, ok := vfIndex[d.Address]; ok {
		d.VFIndex = i
	} else {
		d.Warnings = append(d.Warnings, "physfn: PF "+d.PF+" has no virtfn link to this VF")
	}
	if len(pf.dev.Interfaces) > 0 {
		d.PFInterface = pf.dev.Interfaces[0].Name
	}
	// The PF's interface, or the VF's index, may be what it lacks.
	if pf.dev.Incomplete && !d.Incomplete {
		d.Incomplete, d.PFIncomplete = true, true
	}
}

// warnOnce logs msg at warn level the first time key is seen by this
// Reader, at debug level after that.
func (r *Reader) warnOnce(key, msg string) {
	ev := r.log.Debug()
	if r.firstTime(key) {
		ev = r.log.Warn()
	}
	ev.Msg(msg)
}

// firstTime says whether key is met for the first time, and remembers it.
// Past maxRemembered keys, none is: a key it cannot remember would be
// logged at warn on every scan.
func (r *Reader) firstTime(key string) bool {
	r.warnMu.Lock()
	defer r.warnMu.Unlock()
	if _, seen := r.warned[key]; seen || len(r.warned) >= maxRemembered {
		return false
	}
	r.warned[key] = struct{}{}
	return true
}

// logWarnings logs each attribute warning of devs at warn level the first
// time this Reader meets it and at debug level after that, so that a broken
// attribute does not repeat at warn on every periodic scan.
func (r *Reader) logWarnings(devs []Device) {
	for i := range devs {
		d := &devs[i]
		for _, w := range d.Warnings {
			ev := r.log.Debug()
			if r.firstTime(d.Address + " " + w) {
				ev = r.log.Warn()
			}
			ev.Str("bdf", d.Address).Str("sysfs_root", r.sysfsRoot).Msg(w)
		}
	}
}
