package sysfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// The large tree takes a while to write, so one copy serves every test and
// benchmark of the process; TestMain removes it.
var (
	largeOnce  sync.Once
	largeDir   string
	largeRoots sysfsgen.Roots
	largeErr   error
)

func largeTree(tb testing.TB) sysfsgen.Roots {
	tb.Helper()
	largeOnce.Do(func() {
		largeDir, largeErr = os.MkdirTemp("", "devledger-sysfs-large-")
		if largeErr == nil {
			largeRoots, largeErr = sysfsgen.BuildScenario(largeDir, sysfsgen.ScenarioLarge)
		}
	})
	if largeErr != nil {
		tb.Fatalf("build large tree: %v", largeErr)
	}
	return largeRoots
}

func TestMain(m *testing.M) {
	code := m.Run()
	if largeDir != "" {
		_ = os.RemoveAll(largeDir)
	}
	os.Exit(code)
}

// baseline reads exactly the files a Scan reads, with os.ReadDir,
// os.ReadFile and os.Readlink and nothing else, and parses nothing: it is
// the floor any reader of these files pays. It is given the same number of
// goroutines as the Reader it is compared with and walks the same way: it
// lists bus/pci/devices, bus/pci/drivers and <dev>/vfio; then, for each
// function, it lists the function's directory and, picking entries by name,
// reads vendor, device, subsystem_vendor, subsystem_device, class,
// numa_node, acpi_index and sriov_totalvfs, reads the driver,
// iommu_group, physfn and virtfn<N> links, lists net/ and virtio<N>/net/
// and reads each interface's operstate, carrier and type, lists infiniband/
// and, when an interface's type is 32, lists each port's pkeys/ and reads
// them (with no interface at all, reads port 1's pkeys/0 of the first RDMA
// device), lists infiniband_verbs/ and infiniband_mad/ and reads each
// entry's ibdev, lists uio/, and reads the driver link of the first vdpa<N> child (and
// lists it when that is vhost_vdpa).
//
// TestBaselineReadsSameFiles checks that the two touch the same files.
type baseline struct {
	sysfs, dev string
	workers    int
	readFile   func(string) ([]byte, error)
	readlink   func(string) (string, error)
	readDir    func(string) ([]os.DirEntry, error)
}

func newBaseline(roots sysfsgen.Roots, workers int) *baseline {
	return &baseline{
		sysfs: roots.Sysfs, dev: roots.Dev, workers: workers,
		readFile: os.ReadFile, readlink: os.Readlink, readDir: os.ReadDir,
	}
}

// run reads the tree once and returns how many functions it listed.
func (bl *baseline) run() int {
	busDir := bl.sysfs + "/bus/pci/devices"
	fns, _ := bl.readDir(busDir)
	_, _ = bl.readDir(bl.sysfs + "/bus/pci/drivers")
	_, _ = bl.readDir(bl.dev + "/vfio")
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(bl.workers, len(fns))) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(fns) {
					return
				}
				bl.function(busDir + "/" + fns[i].Name())
			}
		})
	}
	wg.Wait()
	return len(fns)
}

func (bl *baseline) function(dir string) {
	entries, _ := bl.readDir(dir)
	hasNet, hasIB, vdpaDone := false, false, false
	var virtio, chars []string
	for _, e := range entries {
		switch n := e.Name(); {
		case n == "vendor", n == "device", n == "subsystem_vendor", n == "subsystem_device",
			n == "class", n == "numa_node", n == "acpi_index", n == "sriov_totalvfs":
			_, _ = bl.readFile(dir + "/" + n)
		case n == "driver", n == "iommu_group", n == "physfn", strings.HasPrefix(n, "virtfn"):
			_, _ = bl.readlink(dir + "/" + n)
		case n == "net":
			hasNet = true
		case n == "infiniband":
			hasIB = true
		case n == "infiniband_verbs", n == "infiniband_mad":
			chars = append(chars, n)
		case n == "uio":
			_, _ = bl.readDir(dir + "/uio")
		case strings.HasPrefix(n, "virtio"):
			virtio = append(virtio, n)
		case strings.HasPrefix(n, "vdpa") && !vdpaDone:
			vdpaDone = true
			if drv, err := bl.readlink(dir + "/" + n + "/driver"); err == nil && strings.HasSuffix(drv, "/vhost_vdpa") {
				_, _ = bl.readDir(dir + "/" + n)
			}
		}
	}
	ibType := false
	if hasNet {
		ibType = bl.interfaces(dir+"/net") || ibType
	}
	for _, v := range virtio {
		ibType = bl.interfaces(dir+"/"+v+"/net") || ibType
	}
	if !hasIB {
		return
	}
	devs, _ := bl.readDir(dir + "/infiniband")
	if len(devs) > 0 {
		for _, c := range chars {
			names, _ := bl.readDir(dir + "/" + c)
			for _, n := range names {
				_, _ = bl.readFile(dir + "/" + c + "/" + n.Name() + "/ibdev")
			}
		}
	}
	if !ibType {
		if !hasNet && len(virtio) == 0 && len(devs) > 0 {
			_, _ = bl.readFile(dir + "/infiniband/" + devs[0].Name() + "/ports/1/pkeys/0")
		}
		return
	}
	for _, d := range devs {
		ports, _ := bl.readDir(dir + "/infiniband/" + d.Name() + "/ports")
		for _, p := range ports {
			pk := dir + "/infiniband/" + d.Name() + "/ports/" + p.Name() + "/pkeys"
			keys, _ := bl.readDir(pk)
			for _, k := range keys {
				_, _ = bl.readFile(pk + "/" + k.Name())
			}
		}
	}
}

// interfaces reads the interfaces under dir and reports whether one has
// type 32 (a byte comparison, not a parse: the baseline must know whether
// Scan goes on to read pkeys).
func (bl *baseline) interfaces(dir string) (infiniband bool) {
	ifs, err := bl.readDir(dir)
	if err != nil {
		return false
	}
	for _, i := range ifs {
		base := dir + "/" + i.Name()
		_, _ = bl.readFile(base + "/operstate")
		_, _ = bl.readFile(base + "/carrier")
		t, _ := bl.readFile(base + "/type")
		infiniband = infiniband || bytes.Equal(t, []byte("32\n"))
	}
	return infiniband
}

// BenchmarkScanLarge measures a full Scan of the large tree (1,032
// functions) against the baseline above, both in the same run: every round
// times one baseline pass and one Scan, in alternating order, after one
// untimed pass of each warms the caches. It reports ns/op and
// baseline-ns/op (mean time of one Scan and of one baseline pass),
// x-baseline (the median over rounds of Scan time over baseline time in
// that round, so that a neighbour stalling one pass does not decide the
// figure; the target is at most 1.5) and allocs/device (heap allocations of
// a Scan per function). At least minRounds rounds run whatever b.N is, so
// that -benchtime 1x still compares several samples. The PCI ID database is
// loaded before the timer starts, as a Reader loads it once.
func BenchmarkScanLarge(b *testing.B) {
	roots := largeTree(b)
	r := testReader(b, roots, Options{PCIIDsPath: samplePCIIDs})
	if r.PCIIDsSource() == "" {
		b.Fatal("sample pci.ids did not load")
	}
	bl := newBaseline(roots, r.workers)
	devs, err := r.Scan()
	if err != nil || len(devs) != sysfsgen.LargeFunctions {
		b.Fatalf("Scan = %d functions, %v; want %d", len(devs), err, sysfsgen.LargeFunctions)
	}
	if n := bl.run(); n != sysfsgen.LargeFunctions {
		b.Fatalf("baseline listed %d functions, want %d", n, sysfsgen.LargeFunctions)
	}

	rounds := max(b.N, minRounds)
	var mallocs uint64
	var ms runtime.MemStats
	b.ResetTimer()
	compareRounds(b, rounds, func() time.Duration { return timeIt(func() { bl.run() }) }, func() time.Duration {
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		d := timeIt(func() {
			if _, err := r.Scan(); err != nil {
				b.Fatal(err)
			}
		})
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		return d
	})
	b.ReportMetric(float64(mallocs)/float64(rounds*sysfsgen.LargeFunctions), "allocs/device")
}

// minRounds is the fewest rounds BenchmarkScanLarge times, whatever b.N.
const minRounds = 15

// compareRounds times rounds pairs of one baseline pass and one pass of
// ours, in alternating order, then stops b's timer and reports ns/op and
// baseline-ns/op (the mean of each) and x-baseline (the median over
// rounds of ours over baseline in that round, so that a neighbour stalling
// one pass does not decide the figure). Each function times itself, so
// that it can keep bookkeeping out of the figure.
func compareRounds(b *testing.B, rounds int, baseline, ours func() time.Duration) {
	var sumOurs, sumBase time.Duration
	ratios := make([]float64, 0, rounds)
	for i := range rounds {
		var o, bt time.Duration
		if i%2 == 0 {
			bt = baseline()
		}
		o = ours()
		if i%2 == 1 {
			bt = baseline()
		}
		sumOurs += o
		sumBase += bt
		ratios = append(ratios, float64(o)/float64(bt))
	}
	b.StopTimer()
	slices.Sort(ratios)
	b.ReportMetric(float64(sumOurs.Nanoseconds())/float64(rounds), "ns/op")
	b.ReportMetric(float64(sumBase.Nanoseconds())/float64(rounds), "baseline-ns/op")
	b.ReportMetric(ratios[len(ratios)/2], "x-baseline")
}

func timeIt(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// recorder collects the file operations of a scan or of the baseline as
// "op path" lines.
type recorder struct {
	mu  sync.Mutex
	ops []string
}

func (rc *recorder) add(op, path string) {
	rc.mu.Lock()
	rc.ops = append(rc.ops, op+" "+path)
	rc.mu.Unlock()
}

// recordingFS is osFS that records what it is asked to do.
type recordingFS struct {
	osFS
	rc *recorder
}

func (f recordingFS) readFile(path string, buf []byte) (int, error) {
	f.rc.add("read", path)
	return f.osFS.readFile(path, buf)
}

func (f recordingFS) readlink(path string) (string, error) {
	f.rc.add("readlink", path)
	return f.osFS.readlink(path)
}

func (f recordingFS) readDirNames(path string) ([]string, error) {
	f.rc.add("list", path)
	return f.osFS.readDirNames(path)
}

func (f recordingFS) stat(path string) error {
	f.rc.add("stat", path)
	return f.osFS.stat(path)
}

// TestBaselineReadsSameFiles checks the premise of BenchmarkScanLarge: the
// baseline lists, reads and follows exactly what a Scan does, no more and
// no less, on every scenario.
func TestBaselineReadsSameFiles(t *testing.T) {
	for _, scenario := range sysfsgen.Scenarios() {
		t.Run(scenario, func(t *testing.T) {
			var roots sysfsgen.Roots
			if scenario == sysfsgen.ScenarioLarge {
				if testing.Short() {
					t.Skip("large tree")
				}
				roots = largeTree(t)
			} else {
				roots = sysfsgen.TempScenario(t, scenario)
			}
			var ours, theirs recorder
			r := sampleReader(t, roots)
			r.fs = recordingFS{rc: &ours}
			scanOK(t, r)

			bl := newBaseline(roots, r.workers)
			bl.readFile = func(p string) ([]byte, error) { theirs.add("read", p); return os.ReadFile(p) }
			bl.readlink = func(p string) (string, error) { theirs.add("readlink", p); return os.Readlink(p) }
			bl.readDir = func(p string) ([]os.DirEntry, error) {
				theirs.add("list", p)
				entries, err := os.ReadDir(p)
				if errors.Is(err, fs.ErrNotExist) {
					return nil, err
				}
				return entries, err
			}
			bl.run()

			slices.Sort(ours.ops)
			slices.Sort(theirs.ops)
			if len(ours.ops) == 0 {
				t.Fatal("scan recorded nothing")
			}
			if !slices.Equal(ours.ops, theirs.ops) {
				t.Errorf("scan and baseline differ:\nonly scan:     %q\nonly baseline: %q",
					minus(ours.ops, theirs.ops), minus(theirs.ops, ours.ops))
			}
		})
	}
}

// minus returns the elements of a (sorted) not in b (sorted), a few at most.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, found := slices.BinarySearch(b, s); !found {
			out = append(out, s)
			if len(out) == 10 {
				break
			}
		}
	}
	return out
}
