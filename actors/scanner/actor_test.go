package scanner

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/sysfs"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// The actor under test runs under a recording parent (actortest).
type family = actortest.Family

func spawnFamily(t *testing.T, props *actor.Props) *family { return actortest.Spawn(t, props) }

func next[T any](t *testing.T, f *family) T { return actortest.Next[T](t, f) }

// atRest waits until the scanner has answered a Quiet sent now, failing
// with its log after 10 s.
func atRest(t *testing.T, f *family, log *actortest.Log) {
	t.Helper()
	quiet := &ledger.Quiet{Done: make(chan struct{})}
	f.Sys.Root.Send(f.Child, quiet)
	select {
	case <-quiet.Done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the scanner never came to rest:\n%s", log.String())
	}
}

type fixture struct {
	roots    sysfsgen.Roots
	reader   *sysfs.Reader
	log      *store.Log
	recorder *ledger.Recorder
}

func newFixture(t *testing.T) *fixture { return fixtureOf(t, sysfsgen.ScenarioGPU) }

func fixtureOf(t *testing.T, scenario string) *fixture {
	t.Helper()
	roots := sysfsgen.TempScenario(t, scenario)
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &fixture{
		roots:    roots,
		reader:   sysfs.New(sysfs.Options{SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, PCIIDsPath: filepath.Join(t.TempDir(), "none")}),
		log:      l,
		recorder: ledger.NewRecorder(l, "boot-1", nil),
	}
}

// recorded returns "Type subject" of every event after seq.
func (fx *fixture) recorded(t *testing.T, after uint64) []string {
	t.Helper()
	var out []string
	if err := fx.log.Read(after+1, func(e events.Envelope) error {
		out = append(out, string(e.Type)+" "+e.Subject)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

var gpuScenario = []string{"0000:02:00.0", "0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0"}

func addresses(devs []sysfs.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Address
	}
	return out
}

func TestScannerRecordsWhatChanged(t *testing.T) {
	fx := newFixture(t)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))

	first := next[*Scanned](t, f)
	if !first.Changed || first.Reason != "start" {
		t.Errorf("first scan: Changed %v, Reason %q; want true, start", first.Changed, first.Reason)
	}
	if got := addresses(first.Devices); !slices.Equal(got, gpuScenario) {
		t.Errorf("first scan found %v, want %v", got, gpuScenario)
	}
	var want []string
	for _, a := range gpuScenario {
		want = append(want, "DeviceDiscovered "+a)
	}
	if got := fx.recorded(t, 0); !slices.Equal(got, want) {
		t.Errorf("first scan recorded %q, want %q", got, want)
	}

	f.Sys.Root.Send(f.Child, &Rescan{Reason: "unchanged"})
	again := next[*Scanned](t, f)
	if again.Changed || again.Reason != "unchanged" || len(again.Devices) != len(gpuScenario) {
		t.Errorf("unchanged rescan: Changed %v, Reason %q, %d devices; want false, unchanged, %d",
			again.Changed, again.Reason, len(again.Devices), len(gpuScenario))
	}
	last := fx.log.LastSeq()
	if last != uint64(len(gpuScenario)) {
		t.Errorf("unchanged rescan recorded something: last seq %d", last)
	}

	if err := fx.roots.Remove("0000:ab:00.0"); err != nil {
		t.Fatal(err)
	}
	if err := fx.roots.Unbind("0000:9a:00.0"); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "uevent"})
	changed := next[*Scanned](t, f)
	if !changed.Changed || slices.Contains(addresses(changed.Devices), "0000:ab:00.0") {
		t.Errorf("rescan after a removal: Changed %v, devices %v", changed.Changed, addresses(changed.Devices))
	}
	// Health is set by a removal, not by a change of driver.
	if _, ok := changed.HealthSet["0000:ab:00.0"]; !ok || len(changed.HealthSet) != 1 {
		t.Errorf("rescan after a removal set the health of %v, want only 0000:ab:00.0's", slices.Sorted(maps.Keys(changed.HealthSet)))
	}
	if got, want := fx.recorded(t, last), []string{"DeviceChanged 0000:9a:00.0", "DeviceRemoved 0000:ab:00.0"}; !slices.Equal(got, want) {
		t.Errorf("rescan recorded %q, want %q", got, want)
	}
	var ch events.DeviceChanged
	_ = fx.log.Read(last+1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DeviceChanged); ok {
			ch = p
		}
		return nil
	})
	if !slices.Equal(ch.Changed, []string{"driver", "vfio_device"}) {
		t.Errorf("unbinding vfio-pci changed %q, want [driver vfio_device]", ch.Changed)
	}

	f.Sys.Root.Send(f.Child, &Rescan{Reason: "again"})
	if next[*Scanned](t, f).Changed {
		t.Errorf("a rescan after the removal was recorded found changes again")
	}

	// Plugged back in: discovered anew.
	last = fx.log.LastSeq()
	if err := fx.roots.Add(sysfsgen.Function{Address: "0000:ab:00.0", Vendor: "10de", Device: "2330",
		Class: "030200", Driver: "vfio-pci", NUMANode: 1, IOMMUGroup: "53"}); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "hotplug"})
	if !next[*Scanned](t, f).Changed {
		t.Errorf("a rescan after a hotplug found no change")
	}
	if got, want := fx.recorded(t, last), []string{"DeviceDiscovered 0000:ab:00.0"}; !slices.Equal(got, want) {
		t.Errorf("hotplug recorded %q, want %q", got, want)
	}
	f.Silent(t)
}

// A function whose read fails (EIO, EMFILE: here its vendor file is a
// directory, EISDIR) has not changed: its last complete read stands for
// it, in the ledger and in what the parent is told, so it keeps its pool.
// Once it reads again, a real change is recorded.
func TestScannerKeepsTheLastCompleteReadOfAFunction(t *testing.T) {
	const gpu = "0000:18:00.0"
	fx := newFixture(t)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
	was := byAddr(next[*Scanned](t, f).Devices)[gpu]
	last := fx.log.LastSeq()

	if err := fx.roots.Unbind(gpu); err != nil { // not seen: the read is incomplete
		t.Fatal(err)
	}
	vendor := filepath.Join(fx.roots.DevicePath(gpu), "vendor")
	unreadable(t, vendor)
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "unreadable"})
	m := next[*Scanned](t, f)
	if got := byAddr(m.Devices)[gpu]; m.Changed || !reflect.DeepEqual(got, was) {
		t.Errorf("a scan that could not read %s: Changed %v, told %+v; want its last complete read %+v", gpu, m.Changed, got, was)
	}
	if got := fx.recorded(t, last); len(got) > 0 {
		t.Errorf("a scan that could not read %s recorded %q", gpu, got)
	}

	if err := os.Remove(vendor); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vendor, []byte("0x"+was.Vendor+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "readable"})
	if got := byAddr(next[*Scanned](t, f).Devices)[gpu]; got.Driver != "" || got.Vendor != was.Vendor {
		t.Errorf("read again, %s has driver %q, vendor %q; want unbound, %s", gpu, got.Driver, got.Vendor, was.Vendor)
	}
	if got, want := fx.recorded(t, last), []string{"DeviceChanged " + gpu}; !slices.Equal(got, want) {
		t.Errorf("read again, recorded %q, want %q", got, want)
	}
	f.Silent(t)
}

// A VF whose PF reads incompletely (its acpi_index refuses every read:
// firmware whose _DSM fails) keeps what its own files say: rebound to
// vfio-pci meanwhile, it is recorded and told so. Only what comes from
// the PF (its interface, the VF's index) is taken from the last read.
func TestScannerReadsAVFWhosePFReadFails(t *testing.T) {
	const pf, vf = "0000:3b:00.0", "0000:3b:01.0"
	fx := fixtureOf(t, sysfsgen.ScenarioSRIOV)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
	was := byAddr(next[*Scanned](t, f).Devices)[vf]
	if was.Driver != "iavf" || was.PFInterface == "" {
		t.Fatalf("VF %s at start: %+v", vf, was)
	}
	last := fx.log.LastSeq()
	unreadable(t, filepath.Join(fx.roots.DevicePath(pf), "acpi_index"))
	if err := fx.roots.Bind(vf, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "rebound"})
	got := byAddr(next[*Scanned](t, f).Devices)[vf]
	if got.Driver != "vfio-pci" || !got.VFIODevice || got.PFInterface != was.PFInterface || got.VFIndex != was.VFIndex || got.Incomplete {
		t.Errorf("told %+v; want vfio-pci with its VFIO node, PF interface %q, index %d", got, was.PFInterface, was.VFIndex)
	}
	if got, want := fx.recorded(t, last), []string{"DeviceChanged " + vf}; !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}
	f.Silent(t)
}

// The PF's VFs destroyed and made anew between two scans (sriov_numvfs set
// to 0, then back): the scan finds them as they were, and only the
// kernel's remove events say they went, with whatever held them. Each is
// recorded removed, then discovered, healthy; by the next scan that reads
// sysfs when the one the events asked for could not.
func TestScannerRecordsVFsMadeAnew(t *testing.T) {
	const pf = "0000:3b:00.0"
	vfs := []string{"0000:3b:01.0", "0000:3b:01.1", "0000:3b:01.2", "0000:3b:01.3"}
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprintf("first scan failed=%v", failed), func(t *testing.T) {
			fx := fixtureOf(t, sysfsgen.ScenarioSRIOV)
			f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
			was := byAddr(next[*Scanned](t, f).Devices)
			last := fx.log.LastSeq()
			remakeVFs(t, fx, pf, vfs, was)
			rescan := &Rescan{Reason: "kernel: 16 device events", Removed: vfs}
			if failed {
				moved := fx.roots.Sysfs + ".moved"
				if err := os.Rename(fx.roots.Sysfs, moved); err != nil {
					t.Fatal(err)
				}
				f.Sys.Root.Send(f.Child, rescan)
				f.Silent(t)
				if err := os.Rename(moved, fx.roots.Sysfs); err != nil {
					t.Fatal(err)
				}
				rescan = &Rescan{Reason: "periodic"}
			}
			f.Sys.Root.Send(f.Child, rescan)
			m := next[*Scanned](t, f)
			want := madeAnew(vfs)
			for _, vf := range vfs {
				if d := m.HealthSet[vf]; !d.Present || !d.Healthy {
					t.Errorf("%s told %+v, want present and healthy", vf, d)
				}
			}
			if got := fx.recorded(t, last); !slices.Equal(got, want) {
				t.Errorf("recorded %q, want %q", got, want)
			}
			// Recorded, they are not again.
			f.Sys.Root.Send(f.Child, &Rescan{Reason: "periodic"})
			if m := next[*Scanned](t, f); m.Changed {
				t.Errorf("the next scan recorded %q", fx.recorded(t, last)[len(want):])
			}
			f.Silent(t)
		})
	}
}

// The kernel's removals that no scan has recorded yet outlive a crash of
// the scanner: here the scan they asked for fails (sysfs unreadable) and
// the scanner then panics. The VFs were made anew meanwhile, so nothing
// but those removals says they went: the restarted scanner records each
// removed, then discovered.
func TestScannerKeepsTheKernelsRemovalsThroughACrash(t *testing.T) {
	const pf = "0000:3b:00.0"
	vfs := []string{"0000:3b:01.0", "0000:3b:01.1", "0000:3b:01.2", "0000:3b:01.3"}
	fx := fixtureOf(t, sysfsgen.ScenarioSRIOV)
	crash := &crashOnce{what: "scan failed"}
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, Log: zerolog.New(crash)}))
	was := byAddr(next[*Scanned](t, f).Devices)
	last := fx.log.LastSeq()
	remakeVFs(t, fx, pf, vfs, was)
	moved := fx.roots.Sysfs + ".moved"
	if err := os.Rename(fx.roots.Sysfs, moved); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "kernel: 16 device events", Removed: vfs})
	atRest(t, f, &crash.log) // taken by the restarted scanner
	if n := crash.log.Count("", "scan failed"); n != 2 {
		t.Fatalf("%d failed scans logged, want the crashed one and the restarted one's:\n%s", n, crash.log.String())
	}
	if err := os.Rename(moved, fx.roots.Sysfs); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "periodic"})
	next[*Scanned](t, f)
	if got, want := fx.recorded(t, last), madeAnew(vfs); !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}
	f.Silent(t)
}

// crashOnce is a log writer that panics at the first line that says
// what, as a fault in the scanner past that line would; it writes every
// line to log.
type crashOnce struct {
	what string
	once sync.Once
	log  actortest.Log
}

func (c *crashOnce) Write(p []byte) (int, error) {
	n, err := c.log.Write(p)
	if strings.Contains(string(p), c.what) {
		c.once.Do(func() { panic("injected after: " + c.what) })
	}
	return n, err
}

// A VF being torn down loses its PF's virtfn link, then its own physfn
// link, before its driver and directory go: a scan then reads it as a VF
// of no index, or as no VF. That is no news: it keeps its last read
// until it is gone.
func TestScannerKeepsAVFBeingTornDown(t *testing.T) {
	const pf, vf = "0000:3b:00.0", "0000:3b:01.0"
	fx := fixtureOf(t, sysfsgen.ScenarioSRIOV)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
	was := byAddr(next[*Scanned](t, f).Devices)[vf]
	last := fx.log.LastSeq()
	for _, step := range []struct{ dev, link string }{{pf, "virtfn0"}, {vf, "physfn"}} {
		if err := fx.roots.RemoveAttr(step.dev, step.link); err != nil {
			t.Fatal(err)
		}
		f.Sys.Root.Send(f.Child, &Rescan{Reason: "tearing down"})
		if got := byAddr(next[*Scanned](t, f).Devices)[vf]; !reflect.DeepEqual(got, was) {
			t.Errorf("%s gone: told %+v; want its last read %+v", step.link, got, was)
		}
		if got := fx.recorded(t, last); len(got) > 0 {
			t.Errorf("%s gone: recorded %q", step.link, got)
		}
	}
	f.Silent(t)
}

// A function that never reads whole (an attribute that always fails:
// firmware whose _DSM makes acpi_index refuse every read; here a
// directory) has no last complete read to stand in for it: it is taken
// as read, by the ledger and the parent alike, and its changes are
// recorded.
func TestScannerTakesAFunctionNeverReadWholeAsRead(t *testing.T) {
	const gpu = "0000:18:00.0"
	fx := newFixture(t)
	acpi := filepath.Join(fx.roots.DevicePath(gpu), "acpi_index")
	if err := os.Mkdir(acpi, 0o755); err != nil {
		t.Fatal(err)
	}
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
	if d := byAddr(next[*Scanned](t, f).Devices)[gpu]; !d.Incomplete {
		t.Fatalf("%s with acpi_index a directory read whole: %+v", gpu, d)
	}
	last := fx.log.LastSeq()
	if err := fx.roots.Unbind(gpu); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(acpi, 0o755); err != nil { // the tree's Unbind may take it
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "unbound"})
	if told := byAddr(next[*Scanned](t, f).Devices)[gpu]; told.Driver != "" {
		t.Errorf("the parent was told %s has driver %q, want none", gpu, told.Driver)
	}
	if got, want := fx.recorded(t, last), []string{"DeviceChanged " + gpu}; !slices.Equal(got, want) {
		t.Errorf("unbound, recorded %q, want %q", got, want)
	}
	f.Silent(t)
}

// unreadable puts a directory in the place of the file at path: its
// reads fail (EISDIR), as an EIO or EMFILE would on a node.
func unreadable(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// madeAnew is what a scan records of vfs removed and made again: each
// removed, then discovered.
func madeAnew(vfs []string) []string {
	var out []string
	for _, vf := range vfs {
		out = append(out, "DeviceRemoved "+vf, "DeviceDiscovered "+vf)
	}
	return out
}

// remakeVFs has the kernel take pf's VFs away and make four again, each
// bound to the driver and named as vfs[i] was in was.
func remakeVFs(t *testing.T, fx *fixture, pf string, vfs []string, was map[string]sysfs.Device) {
	t.Helper()
	if err := fx.roots.SetNumVFs(pf, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := fx.roots.SetNumVFs(pf, 4, func(i int) sysfsgen.Function {
		f := sysfsgen.Function{Driver: was[vfs[i]].Driver}
		for _, ifc := range was[vfs[i]].Interfaces {
			f.Interfaces = append(f.Interfaces, sysfsgen.Interface{Name: ifc.Name})
		}
		return f
	}); err != nil {
		t.Fatal(err)
	}
}

func byAddr(devs []sysfs.Device) map[string]sysfs.Device {
	m := make(map[string]sysfs.Device, len(devs))
	for _, d := range devs {
		m[d.Address] = d
	}
	return m
}

func TestScannerStartsFromWhatTheLedgerKnows(t *testing.T) {
	fx := newFixture(t)
	devs, err := fx.reader.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.recorder.Record(context.Background(), Diff(nil, devs, nil)...); err != nil {
		t.Fatal(err)
	}
	st, err := fx.recorder.Replay()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		known map[string]events.Device
	}{
		{"given the replayed state", st.Clone().Devices},
		{"replaying the ledger itself", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fx.log.LastSeq()
			f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, Known: tc.known}))
			if s := next[*Scanned](t, f); s.Changed {
				t.Errorf("first scan of an unchanged node: Changed true")
			}
			if got := fx.recorded(t, before); len(got) != 0 {
				t.Errorf("first scan of an unchanged node recorded %q", got)
			}
		})
	}
}

// TestScannerTakesTheScanBegunAhead: the first scan is the one begun
// before the actor (a function removed since is still in it); the next
// reads sysfs afresh.
func TestScannerTakesTheScanBegunAhead(t *testing.T) {
	fx := newFixture(t)
	ahead := fx.reader.ScanAhead()
	if _, err := ahead(); err != nil {
		t.Fatal(err)
	}
	if err := fx.roots.Remove("0000:ab:00.0"); err != nil {
		t.Fatal(err)
	}
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, First: ahead}))
	if got := addresses(next[*Scanned](t, f).Devices); !slices.Equal(got, gpuScenario) {
		t.Errorf("first scan found %v, want the scan begun ahead: %v", got, gpuScenario)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "again"})
	if got := addresses(next[*Scanned](t, f).Devices); slices.Contains(got, "0000:ab:00.0") {
		t.Errorf("the rescan found %v: it took the scan begun ahead again", got)
	}
}

func TestScannerReportsNothingItCouldNotRecord(t *testing.T) {
	fx := newFixture(t)
	if err := fx.log.Close(); err != nil {
		t.Fatal(err)
	}
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, Known: map[string]events.Device{}}))
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "retry"})
	f.Silent(t)
}

func TestScannerRescansPeriodically(t *testing.T) {
	fx := newFixture(t)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, Interval: 10 * time.Millisecond}))
	if next[*Scanned](t, f).Reason != "start" {
		t.Fatal("first scan is not the start scan")
	}
	if err := fx.roots.Remove("0000:ab:00.0"); err != nil {
		t.Fatal(err)
	}
	// The removal unbinds the driver first: a scan may catch it half done
	// and record that change before the removal.
	removed := []string{"DeviceRemoved 0000:ab:00.0"}
	halfDone := []string{"DeviceChanged 0000:ab:00.0", "DeviceRemoved 0000:ab:00.0"}
	deadline := time.Now().Add(5 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		s := next[*Scanned](t, f)
		if s.Reason != "periodic" {
			t.Fatalf("scan reason %q, want periodic", s.Reason)
		}
		if got = fx.recorded(t, uint64(len(gpuScenario))); s.Changed && slices.Contains(got, removed[0]) {
			break
		}
	}
	if !slices.Equal(got, removed) && !slices.Equal(got, halfDone) {
		t.Errorf("periodic scans recorded %q, want %q", got, removed)
	}
}

// A ledger that refuses a scan's changes (here one opened read-only; on a
// node, a full disk) is logged as an error once, not once per scan.
func TestALedgerThatRefusesScansIsLoggedOnce(t *testing.T) {
	fx := newFixture(t)
	ro := storetest.ReopenReadOnly(t, fx.log)
	var log actortest.Log
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: ledger.NewRecorder(ro, "boot-1", nil), Known: map[string]events.Device{}, Log: zerolog.New(&log)}))
	const scans = 4
	for i := range scans - 1 { // and the start's
		f.Sys.Root.Send(f.Child, &Rescan{Reason: fmt.Sprint("try ", i)})
	}
	atRest(t, f, &log)
	all, errorLines := log.Count("", "cannot record scan results"), log.Count("error", "cannot record scan results")
	if all != scans || errorLines != 1 {
		t.Errorf("%d scans the ledger refused logged %d lines, %d of them errors; want %d lines, 1 error:\n%s", scans, all, errorLines, scans, log.String())
	}
	f.Silent(t)
}

// A scan that cannot read sysfs (here the root is gone; on a node, EMFILE
// listing bus/pci/devices) is logged as an error once, not once per
// periodic scan, and the first scan that reads again says so.
func TestAFailedScanIsLoggedOnce(t *testing.T) {
	fx := newFixture(t)
	moved := fx.roots.Sysfs + ".moved"
	if err := os.Rename(fx.roots.Sysfs, moved); err != nil {
		t.Fatal(err)
	}
	var log actortest.Log
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, Known: map[string]events.Device{},
		Interval: 5 * time.Millisecond, Log: zerolog.New(&log)}))
	for deadline := time.Now().Add(10 * time.Second); log.Count("", "scan failed") < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("no four failed scans:\n%s", log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.Rename(moved, fx.roots.Sysfs); err != nil {
		t.Fatal(err)
	}
	if got := addresses(next[*Scanned](t, f).Devices); !slices.Equal(got, gpuScenario) {
		t.Errorf("read again: %q, want %q", got, gpuScenario)
	}
	if n, again := log.Count("error", "scan failed"), log.Count("info", "sysfs read again"); n != 1 || again != 1 {
		t.Errorf("an outage logged %d errors and %d recoveries, want one each:\n%s", n, again, log.String())
	}
}

// A scan that lists no PCI function where the ledger knows some (here
// bus/ is gone; on a node, a hostPath not mounted) failed: a PCI bus
// never empties. Nothing is recorded removed, and the parent is told
// nothing until a scan reads the functions again.
func TestAScanListingNoFunctionIsAFailedRead(t *testing.T) {
	fx := newFixture(t)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
	next[*Scanned](t, f)
	last := fx.log.LastSeq()
	bus, moved := filepath.Join(fx.roots.Sysfs, "bus"), filepath.Join(fx.roots.Sysfs, "bus.moved")
	if err := os.Rename(bus, moved); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "unmounted"})
	quiet := &ledger.Quiet{Done: make(chan struct{})}
	f.Sys.Root.Send(f.Child, quiet)
	<-quiet.Done
	f.Silent(t)
	if got := fx.recorded(t, last); len(got) > 0 {
		t.Errorf("a scan that listed no function recorded %q", got)
	}
	if err := os.Rename(moved, bus); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "mounted"})
	if got := addresses(next[*Scanned](t, f).Devices); !slices.Equal(got, gpuScenario) {
		t.Errorf("read again: %q, want %q", got, gpuScenario)
	}
	if got := fx.recorded(t, last); len(got) > 0 {
		t.Errorf("read again, recorded %q", got)
	}
}

// The kernel's removals are kept through a scan whose changes the ledger
// refuses (here a full disk), and that scan is retried at the next tick:
// until the disk has room nothing is told, and then the VFs made anew are
// recorded removed, then discovered.
func TestScannerKeepsTheKernelsRemovalsThroughARefusedAppend(t *testing.T) {
	const pf = "0000:3b:00.0"
	vfs := []string{"0000:3b:01.0", "0000:3b:01.1", "0000:3b:01.2", "0000:3b:01.3"}
	const interval = 20 * time.Millisecond
	disk := storetest.NewFullDisk(t, 1<<20)
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	l, err := store.Open(filepath.Join(disk.Dir, "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	fx := &fixture{roots: roots, log: l, recorder: ledger.NewRecorder(l, "boot-1", nil),
		reader: sysfs.New(sysfs.Options{SysfsRoot: roots.Sysfs, DevRoot: roots.Dev, PCIIDsPath: filepath.Join(t.TempDir(), "none")})}
	var log actortest.Log
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder, Interval: interval, Log: zerolog.New(&log)}))
	first := next[*Scanned](t, f)
	was := byAddr(first.Devices)

	// bbolt writes into pages the file has until it needs more: use them
	// up with changes that change nothing.
	disk.Fill(t)
	same := events.DeviceChanged{Device: FactsOf(was[pf])}
	refused := false
	for i := 0; i < 5000 && !refused; i++ {
		_, err := fx.recorder.Record(context.Background(), same)
		refused = err != nil
	}
	if !refused {
		t.Fatal("the ledger recorded on a full disk")
	}
	last := fx.log.LastSeq()

	remakeVFs(t, fx, pf, vfs, was)
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "kernel: 16 device events", Removed: vfs})
	atRest(t, f, &log)
	if log.Count("", "cannot record scan results") == 0 {
		t.Fatalf("the rescan was not refused:\n%s", log.String())
	}
	f.Drain(t)
	for _, ok := f.Heard(); ok; _, ok = f.Heard() { // scans before the rescan
	}
	f.NothingFor(t, 5*interval) // each retry refused again

	disk.Free(t)
	m := next[*Scanned](t, f)
	if !m.Changed || m.Reason != "periodic" {
		t.Errorf("once the disk has room: Changed %v, Reason %q; want true, periodic", m.Changed, m.Reason)
	}
	if got, want := fx.recorded(t, last), madeAnew(vfs); !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}

	// Recorded, the ledger's next refusal is news again: an error.
	disk.Fill(t)
	for refused := false; !refused; {
		_, err := fx.recorder.Record(context.Background(), same)
		refused = err != nil
	}
	if err := fx.roots.Unbind(vfs[0]); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); log.Count("error", "cannot record scan results") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a refusal after a recorded scan was not logged as an error:\n%s", log.String())
		}
	}
}

// A function the kernel removed may come back as another card in its
// slot: the old card's last complete read does not stand in for the new
// one's incomplete read (here its acpi_index refuses every read). The
// new card is recorded as read.
func TestScannerForgetsTheLastReadOfAFunctionTheKernelRemoved(t *testing.T) {
	const gpu = "0000:18:00.0"
	fx := newFixture(t)
	f := spawnFamily(t, Props(Config{Reader: fx.reader, Recorder: fx.recorder}))
	was := byAddr(next[*Scanned](t, f).Devices)[gpu]
	last := fx.log.LastSeq()
	if err := fx.roots.Remove(gpu); err != nil {
		t.Fatal(err)
	}
	if err := fx.roots.Add(sysfsgen.Function{Address: gpu, Vendor: "10de", Device: "2331", Class: "030200",
		Driver: "vfio-pci", NUMANode: was.NUMANode, IOMMUGroup: was.IOMMUGroup}); err != nil {
		t.Fatal(err)
	}
	acpi := filepath.Join(fx.roots.DevicePath(gpu), "acpi_index")
	if err := os.RemoveAll(acpi); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(acpi, 0o755); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Rescan{Reason: "kernel: 2 device events", Removed: []string{gpu}})
	if told := byAddr(next[*Scanned](t, f).Devices)[gpu]; told.Device != "2331" {
		t.Errorf("the parent was told %s is device %q, want the new card's 2331", gpu, told.Device)
	}
	if got, want := fx.recorded(t, last), []string{"DeviceRemoved " + gpu, "DeviceDiscovered " + gpu}; !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}
	var discovered events.DeviceFacts
	_ = fx.log.Read(last+1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DeviceDiscovered); ok {
			discovered = p.Device
		}
		return nil
	})
	if discovered.Device != "2331" {
		t.Errorf("recorded %s discovered as device %q, want the new card's 2331", gpu, discovered.Device)
	}
	f.Silent(t)
}
