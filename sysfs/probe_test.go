package sysfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// Functions of the sriov scenario the probe tests use.
const (
	probePF      = "0000:3b:00.0" // ice, ens785f0
	probeIAVF    = "0000:3b:01.0" // iavf, ens785f0v0
	probeVFIO    = "0000:3b:01.2" // vfio-pci, group 102
	probeDownVF  = "0000:af:01.0" // iavf, ens801f0v0 (link down)
	probeMgmtNIC = "0000:02:00.0" // igb, eno1
)

// faultFS is osFS with errors planted on paths ending in a given suffix.
type faultFS struct {
	osFS
	faults map[string]error
}

func (f faultFS) fault(path string) error {
	for suffix, err := range f.faults {
		if strings.HasSuffix(path, suffix) {
			return &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
	return nil
}

func (f faultFS) readFile(path string, buf []byte) (int, error) {
	if err := f.fault(path); err != nil {
		return 0, err
	}
	return f.osFS.readFile(path, buf)
}

func (f faultFS) readlink(path string) (string, error) {
	if err := f.fault(path); err != nil {
		return "", err
	}
	return f.osFS.readlink(path)
}

func (f faultFS) readDirNames(path string) ([]string, error) {
	if err := f.fault(path); err != nil {
		return nil, err
	}
	return f.osFS.readDirNames(path)
}

func (f faultFS) stat(path string) error {
	if err := f.fault(path); err != nil {
		return err
	}
	return f.osFS.stat(path)
}

// sriovTargets are the targets of every function of a scan, as a pool with
// health.link would probe them.
func probeTargets(devs []Device) map[string]ProbeTarget {
	m := make(map[string]ProbeTarget, len(devs))
	for i := range devs {
		m[devs[i].Address] = devs[i].ProbeTarget(devs[i].Class[:2] == "02")
	}
	return m
}

func TestProbe(t *testing.T) {
	tests := []struct {
		name   string
		addr   string
		target func(t *ProbeTarget) // changes the target taken from a fresh scan
		mutate func(r sysfsgen.Roots) error
		faults map[string]error
		want   string // "" for healthy
		files  int
		// inconclusive: the failure is this process's, not the device's
		inconclusive bool
	}{
		{name: "iavf VF, PF link up", addr: probeIAVF, files: 3},
		{name: "vfio VF, PF link up", addr: probeVFIO, files: 5},
		{name: "PF", addr: probePF, files: 3},
		{name: "NIC, own link up", addr: probeMgmtNIC, files: 3},
		{name: "no link check", addr: probeVFIO, target: func(t *ProbeTarget) { t.Link = false }, files: 3},
		{name: "group read when not given", addr: probeVFIO,
			target: func(t *ProbeTarget) { t.IOMMUGroup = "" }, files: 6},
		{name: "short address", addr: probeVFIO, target: func(t *ProbeTarget) { t.Address = "3B:01.2" }, files: 5},
		{name: "link down, not asked", addr: probeDownVF, target: func(t *ProbeTarget) { t.Link = false }, files: 1},
		// Free VFs are down on the host (the SR-IOV CNI sets a VF down as
		// it hands it back), and a held one's interface is in its pod.
		{name: "VF down on the host, PF up", addr: probeDownVF, files: 3},
		{
			name: "VF's interface in a pod, PF up", addr: probeIAVF,
			mutate: func(r sysfsgen.Roots) error { return os.Remove(filepath.Join(r.Sysfs, "class", "net", "ens785f0v0")) },
			files:  3,
		},
		{
			name: "unbound", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.Unbind(probeVFIO) },
			want:   "driver unbound (was vfio-pci)", files: 2,
		},
		{
			name: "rebound to another driver", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.Bind(probeVFIO, "iavf") },
			want:   "driver is iavf (was vfio-pci)", files: 1,
		},
		{
			name: "driver not known, unbound", addr: probeVFIO,
			target: func(t *ProbeTarget) { t.Driver, t.VFIO, t.Link = "", false, false },
			mutate: func(r sysfsgen.Roots) error { return r.Unbind(probeVFIO) },
			want:   "no driver bound", files: 2,
		},
		{
			name: "driver not known, now bound", addr: probeIAVF,
			target: func(t *ProbeTarget) { t.Driver = "" },
			want:   "driver is iavf (was none)", files: 1,
		},
		{
			name: "removed", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.Remove(probeVFIO) },
			want:   "gone from sysfs", files: 2,
		},
		{
			name: "PF removed takes its VFs", addr: probeIAVF,
			mutate: func(r sysfsgen.Roots) error { return r.Remove(probePF) },
			want:   "gone from sysfs", files: 2,
		},
		{
			name: "vfio node gone", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return os.Remove(filepath.Join(r.Dev, "vfio", "102")) },
			want:   "/dev/vfio/102 missing", files: 3, // and noiommu-102
		},
		// vfio opens a group only when no function in it is on a driver
		// that uses the DMA API: a GPU's audio function left on its sound
		// driver keeps every VM from the GPU.
		{
			name: "group shared with a function on a kernel driver", addr: probeVFIO,
			mutate: addToGroup102("snd_hda_intel"),
			want:   `IOMMU group 102 cannot be opened: 0000:3b:0f.1 in it is bound to snd_hda_intel`, files: 4,
		},
		{name: "group shared with an unbound function", addr: probeVFIO, mutate: addToGroup102(""), files: 6},
		{name: "group shared with a function on vfio-pci", addr: probeVFIO, mutate: addToGroup102("vfio-pci"), files: 6},
		{name: "group shared with a function on a vfio variant", addr: probeVFIO, mutate: addToGroup102("mlx5_vfio_pci"), files: 6},
		{name: "group shared with a function on pci-stub", addr: probeVFIO, mutate: addToGroup102("pci-stub"), files: 6},
		{name: "group shared with a bridge on pcieport", addr: probeVFIO, mutate: addToGroup102("pcieport"), files: 6},
		{
			name: "group unreadable", addr: probeVFIO,
			faults: map[string]error{"/iommu_groups/102/devices": syscall.EACCES},
			want:   "probe failed: cannot read IOMMU group 102: permission denied", files: 3,
		},
		{
			name: "PF link down", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.SetLinkDown("ens785f0") },
			want:   "link down on ens785f0 (PF)", files: 4,
		},
		{
			name: "PF link lower layer down", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.SetOperState("ens785f0", "lowerlayerdown") },
			want:   "link down on ens785f0 (PF, lowerlayerdown)", files: 4,
		},
		{
			name: "own link down", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error { return r.SetLinkDown("eno1") },
			want:   "link down on eno1", files: 2,
		},
		{
			name: "own link dormant", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error { return r.SetOperState("eno1", "dormant") },
			want:   "link down on eno1 (dormant)", files: 2,
		},
		{
			name: "no carrier", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error { return r.SetCarrier("eno1", false) },
			want:   "no carrier on eno1", files: 3,
		},
		{
			name: "PF no carrier", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.SetCarrier("ens785f0", false) },
			want:   "no carrier on ens785f0 (PF)", files: 5,
		},
		{
			name: "operstate unknown with carrier counts as up", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error { return r.SetOperState("eno1", "unknown") },
			files:  3,
		},
		{
			name: "carrier refused", addr: probeMgmtNIC,
			faults: map[string]error{"/eno1/carrier": syscall.EINVAL},
			want:   "no carrier on eno1", files: 3,
		},
		{
			name: "operstate unreadable", addr: probeVFIO,
			faults: map[string]error{"/ens785f0/operstate": syscall.EACCES},
			want:   "probe failed: cannot read net/ens785f0/operstate: permission denied", files: 4,
		},
		{
			name: "carrier unreadable", addr: probeMgmtNIC,
			faults: map[string]error{"/eno1/carrier": syscall.EIO},
			want:   "probe failed: cannot read net/eno1/carrier: input/output error", files: 3,
		},
		{
			// Unregistered between its operstate and its carrier: the PF's
			// port carries nothing now, whatever its operstate said.
			name: "PF interface gone at its carrier", addr: probeVFIO,
			faults: map[string]error{"/ens785f0/carrier": syscall.ENOENT},
			want:   "no interface ens785f0 (PF)", files: 5,
		},
		{
			name: "driver link unreadable", addr: probeIAVF,
			faults: map[string]error{probeIAVF + "/driver": syscall.EACCES},
			want:   "probe failed: cannot read driver: permission denied", files: 1,
		},
		{
			name: "function directory unreadable", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.Unbind(probeVFIO) },
			faults: map[string]error{"/devices/" + probeVFIO: syscall.EACCES},
			want:   "probe failed: cannot stat the function's directory: permission denied", files: 2,
		},
		{
			name: "vfio node unreadable", addr: probeVFIO,
			faults: map[string]error{"/vfio/102": syscall.EACCES},
			want:   "probe failed: cannot stat /dev/vfio/102: permission denied", files: 2,
		},
		{
			name: "iommu_group unreadable", addr: probeVFIO,
			target: func(t *ProbeTarget) { t.IOMMUGroup = "" },
			faults: map[string]error{"/iommu_group": syscall.EACCES},
			want:   "probe failed: cannot read iommu_group: permission denied", files: 2,
		},
		{
			name: "out of file descriptors at the driver link", addr: probeIAVF,
			faults: map[string]error{probeIAVF + "/driver": syscall.EMFILE},
			want:   "probe failed: cannot read driver: too many open files", files: 1,
			inconclusive: true,
		},
		{
			name: "out of file descriptors on the node", addr: probeVFIO,
			mutate: func(r sysfsgen.Roots) error { return r.Unbind(probeVFIO) },
			faults: map[string]error{"/devices/" + probeVFIO: syscall.ENFILE},
			want:   "probe failed: cannot stat the function's directory: too many open files in system", files: 2,
			inconclusive: true,
		},
		{
			name: "out of memory at the vfio node", addr: probeVFIO,
			faults: map[string]error{"/vfio/102": syscall.ENOMEM},
			want:   "probe failed: cannot stat /dev/vfio/102: cannot allocate memory", files: 2,
			inconclusive: true,
		},
		{
			name: "out of file descriptors at the PF's operstate", addr: probeVFIO,
			faults: map[string]error{"/ens785f0/operstate": syscall.EMFILE},
			want:   "probe failed: cannot read net/ens785f0/operstate: too many open files", files: 4,
			inconclusive: true,
		},
		{
			name: "out of buffers at the carrier", addr: probeMgmtNIC,
			faults: map[string]error{"/eno1/carrier": syscall.ENOBUFS},
			want:   "probe failed: cannot read net/eno1/carrier: no buffer space available", files: 3,
			inconclusive: true,
		},
		{
			name: "operstate is a directory", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error {
				if err := r.RemoveAttr(probeMgmtNIC, "net/eno1/operstate"); err != nil {
					return err
				}
				return os.Mkdir(filepath.Join(r.DevicePath(probeMgmtNIC), "net", "eno1", "operstate"), 0o755)
			},
			want: "probe failed: cannot read net/eno1/operstate: is a directory", files: 2,
		},
		{
			name: "garbage carrier", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error { return r.WriteAttr(probeMgmtNIC, "net/eno1/carrier", "2\n") },
			want:   `probe failed: net/eno1/carrier: "2" is neither 0 nor 1`, files: 3,
		},
		{
			name: "garbage operstate", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error { return r.WriteAttr(probeMgmtNIC, "net/eno1/operstate", "UP!\n") },
			want:   `probe failed: net/eno1/operstate: "UP!" is not an operational state`, files: 2,
		},
		{
			name: "huge operstate", addr: probeMgmtNIC,
			mutate: func(r sysfsgen.Roots) error {
				return r.WriteAttr(probeMgmtNIC, "net/eno1/operstate", strings.Repeat("u", 4096))
			},
			want: "probe failed: net/eno1/operstate: longer than any value the kernel writes there", files: 2,
		},
		{
			// The host-device CNI moved it into a pod, or udev renames it:
			// the next scan has what to check.
			name: "own interface gone from the host", addr: probeMgmtNIC,
			target: func(t *ProbeTarget) { t.Interface = "eno9" },
			files:  2,
		},
		{
			// A VF never checks its own link, even with its PF's unknown.
			name: "VF down on the host, PF interface unknown", addr: probeDownVF,
			target: func(t *ProbeTarget) { t.PFInterface = "" },
			files:  1,
		},
		{
			name: "PF interface gone", addr: probeVFIO,
			target: func(t *ProbeTarget) { t.PFInterface = "ens9f9" },
			want:   "no interface ens9f9 (PF)", files: 4,
		},
		{
			name: "interface name climbing out", addr: probeMgmtNIC,
			target: func(t *ProbeTarget) { t.Interface = "../../x" },
			want:   `probe failed: "../../x" is not an interface name`, files: 1,
		},
		{
			name: "malformed address", addr: probeIAVF,
			target: func(t *ProbeTarget) { t.Address = "../../../etc" },
			want:   `probe failed: not a PCI address: "../../../etc" (want 0000:00:00.0)`,
		},
		{
			name: "group that is no number", addr: probeVFIO,
			target: func(t *ProbeTarget) { t.IOMMUGroup = "../x" },
			want:   `probe failed: IOMMU group "../x" is not a group number`, files: 1,
		},
		{
			name: "no link to check", addr: "0000:02:00.0",
			target: func(t *ProbeTarget) { t.Interface, t.PFInterface = "", "" },
			files:  1,
		},
	}
	// Cases that change nothing share one tree.
	intact := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := intact
			if tc.mutate != nil {
				roots = sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
			}
			r := sampleReader(t, roots)
			target, ok := probeTargets(scanOK(t, r))[tc.addr]
			if !ok {
				t.Fatalf("no function %s", tc.addr)
			}
			if tc.target != nil {
				tc.target(&target)
			}
			if tc.mutate != nil {
				if err := tc.mutate(roots); err != nil {
					t.Fatal(err)
				}
			}
			if tc.faults != nil {
				r.fs = faultFS{faults: tc.faults}
			}
			got := r.Probe(target)
			want := ProbeResult{Healthy: tc.want == "", Reason: tc.want, Files: tc.files, Link: isLinkReason(tc.want), Inconclusive: tc.inconclusive}
			if got != want {
				t.Errorf("Probe(%+v)\n got %+v\nwant %+v", target, got, want)
			}
			if got := r.ProbeLinks([]ProbeTarget{target}); want.Link && (got[0].Reason != want.Reason || got[0].Inconclusive != want.Inconclusive) {
				t.Errorf("ProbeLinks(%+v)\n got %+v\nwant the reason %q, inconclusive %v", target, got[0], want.Reason, want.Inconclusive)
			}
		})
	}
}

// addToGroup102 hot-plugs a function bound to driver ("" for none) into
// probeVFIO's IOMMU group, as a second function of one card behind a
// port without ACS is.
func addToGroup102(driver string) func(sysfsgen.Roots) error {
	return func(r sysfsgen.Roots) error {
		return r.Add(sysfsgen.Function{Address: "0000:3b:0f.1", Vendor: "10de", Device: "22ba",
			Class: "040300", Driver: driver, IOMMUGroup: "102"})
	}
}

// In vfio's no-IOMMU mode (a VM without a virtual IOMMU) a group's node is
// /dev/vfio/noiommu-<group>: the scan says so, and the probe finds the
// device healthy, and unhealthy once that node is gone.
func TestProbeNoIOMMU(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioNoIOMMU)
	r := sampleReader(t, roots)
	const addr = "0000:00:05.0"
	devs := scanOK(t, r)
	i := slices.IndexFunc(devs, func(d Device) bool { return d.Address == addr })
	if i < 0 {
		t.Fatalf("no %s in the scan", addr)
	}
	if d := devs[i]; !d.VFIODevice || !d.VFIONoIOMMU || d.IOMMUGroup != "0" {
		t.Errorf("%s: group %q, vfio node %v, no-IOMMU %v; want 0, true, true", addr, d.IOMMUGroup, d.VFIODevice, d.VFIONoIOMMU)
	}
	target := devs[i].ProbeTarget(false)
	if got := r.Probe(target); !got.Healthy {
		t.Errorf("Probe = %+v, want healthy", got)
	}
	if err := os.Remove(filepath.Join(roots.Dev, "vfio", "noiommu-0")); err != nil {
		t.Fatal(err)
	}
	if got := r.Probe(target); got.Healthy || got.Reason != "/dev/vfio/0 missing" {
		t.Errorf("Probe with noiommu-0 gone = %+v, want /dev/vfio/0 missing", got)
	}
}

// TestProbeAllMatchesProbe checks, sequential and on workers, that ProbeAll
// gives each target's Probe result in the targets' order, also for vfio
// targets of different groups that were not given their group.
func TestProbeAllMatchesProbe(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	if err := roots.SetLinkDown("ens785f0"); err != nil {
		t.Fatal(err)
	}
	if err := roots.Unbind("0000:af:01.1"); err != nil {
		t.Fatal(err)
	}
	devs := scanOK(t, sampleReader(t, roots))
	// A kernel driver in group 102 closes it, not group 103.
	if err := roots.Add(sysfsgen.Function{Address: "0000:3b:0f.3", Vendor: "8086", Device: "1889", Class: "020000",
		Driver: "iavf", IOMMUGroup: "102"}); err != nil {
		t.Fatal(err)
	}
	var ts []ProbeTarget
	for range 20 { // past probeParallelMin
		for i := range devs {
			ts = append(ts, devs[i].ProbeTarget(true))
			// Targets not given their group share no group's answer.
			notGiven := devs[i].ProbeTarget(true)
			notGiven.IOMMUGroup = ""
			ts = append(ts, notGiven)
		}
	}
	ts = append(ts, ProbeTarget{Address: "0000:3b:07.7", Driver: "iavf"})
	for _, workers := range []int{1, 4} {
		r := testReader(t, roots, Options{PCIIDsPath: samplePCIIDs, Workers: workers})
		got := r.ProbeAll(ts)
		if len(got) != len(ts) {
			t.Fatalf("workers %d: %d results for %d targets", workers, len(got), len(ts))
		}
		unhealthy, gotFiles, wantFiles := 0, 0, 0
		for i := range ts {
			want := r.Probe(ts[i])
			if got[i].Healthy != want.Healthy || got[i].Reason != want.Reason {
				t.Errorf("workers %d: target %d (%s): ProbeAll %+v, Probe %+v", workers, i, ts[i].Address, got[i], want)
			}
			if !got[i].Healthy {
				unhealthy++
			}
			gotFiles += got[i].Files
			wantFiles += want.Files
		}
		// Fewer in all: a PF interface and a shared group are read once
		// a round, by whichever target comes first.
		if gotFiles > wantFiles {
			t.Errorf("workers %d: ProbeAll read %d files, Probe %d", workers, gotFiles, wantFiles)
		}
		if got[len(got)-1].Reason != "gone from sysfs" {
			t.Errorf("absent function: %+v", got[len(got)-1])
		}
		if unhealthy == 0 {
			t.Error("no unhealthy device after the mutations")
		}
	}
	if got := New(Options{}).ProbeAll(nil); len(got) != 0 {
		t.Errorf("ProbeAll(nil) = %v", got)
	}
}

// TestProbeAllReadsASharedGroupOnce: three vfio targets in one IOMMU
// group (probeVFIO and two functions hot-plugged into its group) share
// one reading of the group per round, a listing and a driver link per
// function, where each would read every other; and share its verdict,
// once a function of the group is on a kernel driver.
func TestProbeAllReadsASharedGroupOnce(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	for _, a := range []string{"0000:3b:0f.1", "0000:3b:0f.2"} {
		if err := roots.Add(sysfsgen.Function{Address: a, Vendor: "8086", Device: "1889", Class: "020000",
			Driver: "vfio-pci", IOMMUGroup: "102"}); err != nil {
			t.Fatal(err)
		}
	}
	r := sampleReader(t, roots)
	targets := probeTargets(scanOK(t, r))
	ts := []ProbeTarget{targets[probeVFIO], targets["0000:3b:0f.1"], targets["0000:3b:0f.2"]}
	for _, blocked := range []bool{false, true} {
		if blocked {
			if err := roots.Add(sysfsgen.Function{Address: "0000:3b:0f.3", Vendor: "8086", Device: "1889", Class: "020000",
				Driver: "iavf", IOMMUGroup: "102"}); err != nil {
				t.Fatal(err)
			}
		}
		var rc recorder
		r.fs = recordingFS{rc: &rc}
		res := r.ProbeAll(ts)
		lists, links := 0, 0
		for _, op := range rc.ops {
			switch {
			case strings.HasPrefix(op, "list ") && strings.HasSuffix(op, "/iommu_groups/102/devices"):
				lists++
			case strings.HasPrefix(op, "readlink ") && strings.Contains(op, "/iommu_groups/102/devices/"):
				links++
			}
		}
		if want := 4; lists != 1 || links > want {
			t.Errorf("blocked=%v: the group listed %d times, %d driver links read; want once, at most %d", blocked, lists, links, want)
		}
		want := ""
		if blocked {
			want = "IOMMU group 102 cannot be opened: 0000:3b:0f.3 in it is bound to iavf"
		}
		checkRound(t, fmt.Sprintf("blocked=%v", blocked), ts, res, len(rc.ops), want)
	}
}

// TestProbeAllReadsPFLinkOnce checks that the VFs of a PF without
// interfaces of their own share one reading of the PF's link per round,
// whatever its verdict.
func TestProbeAllReadsPFLinkOnce(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	r := sampleReader(t, roots)
	targets := probeTargets(scanOK(t, r))
	// VFs 1-3 of 0000:af:00.0 are vfio-bound: they check ens801f0.
	ts := []ProbeTarget{targets["0000:af:01.1"], targets["0000:af:01.2"], targets["0000:af:01.3"]}
	for _, down := range []bool{false, true} {
		if down {
			if err := roots.SetLinkDown("ens801f0"); err != nil {
				t.Fatal(err)
			}
		}
		var rc recorder
		r.fs = recordingFS{rc: &rc}
		res := r.ProbeAll(ts)
		reads := 0
		for _, op := range rc.ops {
			if strings.Contains(op, "/ens801f0/operstate") {
				reads++
			}
		}
		if reads != 1 {
			t.Errorf("down=%v: ens801f0/operstate read %d times, want once: %q", down, reads, rc.ops)
		}
		want := ""
		if down {
			want = "link down on ens801f0 (PF)"
		}
		checkRound(t, fmt.Sprintf("down=%v", down), ts, res, len(rc.ops), want)
	}
}

// checkRound checks a round's results of ts: each has the reason want
// ("" and healthy, or unhealthy), and their Files add up to the ops the
// round made.
func checkRound(t *testing.T, round string, ts []ProbeTarget, res []ProbeResult, ops int, want string) {
	t.Helper()
	files := 0
	for i := range res {
		files += res[i].Files
		if res[i].Reason != want || res[i].Healthy != (want == "") {
			t.Errorf("%s: %s: %+v, want reason %q", round, ts[i].Address, res[i], want)
		}
	}
	if files != ops {
		t.Errorf("%s: Files add up to %d, %d operations recorded", round, files, ops)
	}
}

// TestProbeWhileRemoving probes a tree while its functions go, as a node
// hot-unplugging a card would: every result is a verdict, never a panic.
func TestProbeWhileRemoving(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	r := testReader(t, roots, Options{PCIIDsPath: samplePCIIDs, Workers: 4})
	var ts []ProbeTarget
	devs := scanOK(t, r)
	for range 10 {
		for i := range devs {
			ts = append(ts, devs[i].ProbeTarget(true))
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, pf := range []string{"0000:af:00.0", probePF} {
			if err := roots.Remove(pf); err != nil {
				t.Error(err)
			}
		}
	}()
	for {
		for _, res := range r.ProbeAll(ts) {
			if !res.Healthy && res.Reason == "" {
				t.Fatalf("unhealthy with no reason: %+v", res)
			}
		}
		select {
		case <-done:
			return
		default:
		}
	}
}

func TestIsVFIODriver(t *testing.T) {
	for driver, want := range map[string]bool{
		"vfio-pci": true, "mlx5_vfio_pci": true, "virtio-vfio-pci": true, "nvgrace_gpu_vfio_pci": true,
		"iavf": false, "": false, "vfio": false, "vfio_pci_core": false, "igb_uio": false, "vfio_pcie": false,
	} {
		if got := IsVFIODriver(driver); got != want {
			t.Errorf("IsVFIODriver(%q) = %v, want %v", driver, got, want)
		}
	}
}

// probeBaseline performs the file operations a probe round performs, with
// os.Readlink, os.Stat, a directory listing and an open, one read and a
// close (what osFS does),
// and parses nothing: it follows a target's fields and stops where a probe
// stops, with the cheapest comparisons that tell (the driver link's last
// element against the target's driver, operstate's bytes against "up\n"
// and "unknown\n"). It is given the same number of goroutines as the
// Reader it is compared with, goes sequential below the same number of
// targets, and reads a PF interface once per round as ProbeAll does.
//
// TestProbeBaselineReadsSameFiles checks that the two touch the same files.
type probeBaseline struct {
	sysfs, dev string
	workers    int
	readlink   func(string) (string, error)
	stat       func(string) error
	read       func(string, []byte) (int, error)
	list       func(string) ([]string, error)
}

func newProbeBaseline(roots sysfsgen.Roots, workers int) *probeBaseline {
	return &probeBaseline{
		sysfs: roots.Sysfs, dev: roots.Dev, workers: workers,
		readlink: os.Readlink,
		stat:     func(p string) error { _, err := os.Stat(p); return err },
		read:     osFS{}.readFile,
		list:     osFS{}.readDirNames,
	}
}

func (bl *probeBaseline) run(ts []ProbeTarget) {
	// A PF interface is read once per round, as ProbeAll does.
	pfOnce := map[string]*sync.Once{}
	for i := range ts {
		if t := &ts[i]; t.Link && t.PFInterface != "" && pfOnce[t.PFInterface] == nil {
			pfOnce[t.PFInterface] = new(sync.Once)
		}
	}
	// So is what keeps an IOMMU group that several targets name closed.
	groups, groupOnce := map[string]int{}, map[string]*sharedBlock{}
	for i := range ts {
		if t := &ts[i]; t.VFIO && t.IOMMUGroup != "" {
			if groups[t.IOMMUGroup]++; groups[t.IOMMUGroup] == 2 {
				groupOnce[t.IOMMUGroup] = &sharedBlock{}
			}
		}
	}
	workers := bl.workers
	if len(ts) < probeParallelMin {
		workers = 1
	}
	inParallel(workers, len(ts), func() func(int) {
		var buf [64]byte
		return func(i int) { bl.target(&ts[i], pfOnce, groupOnce, buf[:]) }
	})
}

// sharedBlock is whether a group several targets name is closed, read
// once a round.
type sharedBlock struct {
	once    sync.Once
	blocked bool
}

// blocked lists group and reads the driver of each member but skip,
// stopping at the first one that keeps the group closed.
func (bl *probeBaseline) blocked(group, skip string) bool {
	members := bl.sysfs + "/kernel/iommu_groups/" + group + "/devices"
	names, err := bl.list(members)
	if err != nil {
		return true
	}
	for _, m := range names {
		if m == skip {
			continue
		}
		if target, err := bl.readlink(members + "/" + m + "/driver"); err == nil {
			if d := target[strings.LastIndexByte(target, '/')+1:]; !IsVFIODriver(d) && d != "pci-stub" && d != "pcieport" {
				return true
			}
		}
	}
	return false
}

func (bl *probeBaseline) target(t *ProbeTarget, pfOnce map[string]*sync.Once, groupOnce map[string]*sharedBlock, buf []byte) {
	dir := bl.sysfs + "/bus/pci/devices/" + t.Address
	if target, err := bl.readlink(dir + "/driver"); err != nil {
		if bl.stat(dir) != nil || t.Driver != "" {
			return
		}
	} else if target[strings.LastIndexByte(target, '/')+1:] != t.Driver {
		return
	}
	if t.VFIO {
		if bl.stat(bl.dev+"/vfio/"+t.IOMMUGroup) != nil && bl.stat(bl.dev+"/vfio/noiommu-"+t.IOMMUGroup) != nil {
			return
		}
		if sb := groupOnce[t.IOMMUGroup]; sb != nil {
			sb.once.Do(func() { sb.blocked = bl.blocked(t.IOMMUGroup, "") })
			if sb.blocked {
				return
			}
		} else if bl.blocked(t.IOMMUGroup, t.Address) {
			return
		}
	}
	if !t.Link {
		return
	}
	switch {
	case t.PFInterface != "":
		pfOnce[t.PFInterface].Do(func() { bl.link(t.PFInterface, buf) })
	case t.Interface != "":
		bl.link(t.Interface, buf)
	}
}

func (bl *probeBaseline) link(ifname string, buf []byte) {
	base := bl.sysfs + "/class/net/" + ifname + "/"
	n, _ := bl.read(base+"operstate", buf)
	if s := string(buf[:n]); s == "up\n" || s == "unknown\n" {
		_, _ = bl.read(base+"carrier", buf)
	}
}

// largeProbeTargets are the targets of a probe round over the whole large
// tree: every function, as a pool would probe it (VFIO for vfio-bound
// ones, the link for network functions).
func largeProbeTargets(tb testing.TB, r *Reader) []ProbeTarget {
	tb.Helper()
	devs, err := r.Scan()
	if err != nil || len(devs) != sysfsgen.LargeFunctions {
		tb.Fatalf("Scan = %d functions, %v; want %d", len(devs), err, sysfsgen.LargeFunctions)
	}
	ts := make([]ProbeTarget, len(devs))
	for i := range devs {
		ts[i] = devs[i].ProbeTarget(strings.HasPrefix(devs[i].Class, "02"))
	}
	return ts
}

// BenchmarkProbeLarge measures one full probe round (ProbeAll) of the large
// tree's 1,032 functions against probeBaseline, both in the same run, the
// way BenchmarkScanLarge does: every round times one baseline pass and one
// ProbeAll, in alternating order, after one untimed pass of each. It
// reports ns/op and baseline-ns/op (mean of each), x-baseline (the median
// over rounds of ProbeAll time over baseline time; the target is at most
// 1.5) and files/op (file operations of a round).
func BenchmarkProbeLarge(b *testing.B) {
	roots := largeTree(b)
	r := testReader(b, roots, Options{PCIIDsPath: samplePCIIDs})
	ts := largeProbeTargets(b, r)
	bl := newProbeBaseline(roots, r.workers)
	files := 0
	for _, res := range r.ProbeAll(ts) {
		if !res.Healthy {
			b.Fatalf("unhealthy on an intact tree: %+v", res)
		}
		files += res.Files
	}
	bl.run(ts)

	b.ResetTimer()
	compareRounds(b, max(b.N, minRounds),
		func() time.Duration { return timeIt(func() { bl.run(ts) }) },
		func() time.Duration { return timeIt(func() { r.ProbeAll(ts) }) })
	b.ReportMetric(float64(files), "files/op")
}

// TestProbeBaselineReadsSameFiles checks the premise of BenchmarkProbeLarge:
// the baseline reads, follows and stats exactly what a probe round does,
// on every scenario intact and on the sriov one with each kind of fault,
// and a probe's Files counts them.
func TestProbeBaselineReadsSameFiles(t *testing.T) {
	type tree struct {
		name     string
		scenario string
		mutate   func(r sysfsgen.Roots) error
	}
	var trees []tree
	for _, s := range sysfsgen.Scenarios() {
		trees = append(trees, tree{name: s, scenario: s})
	}
	trees = append(trees,
		tree{"sriov unbound", sysfsgen.ScenarioSRIOV, func(r sysfsgen.Roots) error { return r.Unbind(probeVFIO) }},
		tree{"sriov rebound", sysfsgen.ScenarioSRIOV, func(r sysfsgen.Roots) error { return r.Bind(probeVFIO, "iavf") }},
		tree{"sriov removed", sysfsgen.ScenarioSRIOV, func(r sysfsgen.Roots) error { return r.Remove(probeIAVF) }},
		tree{"sriov no vfio node", sysfsgen.ScenarioSRIOV, func(r sysfsgen.Roots) error {
			return os.Remove(filepath.Join(r.Dev, "vfio", "102"))
		}},
		tree{"sriov PF link down", sysfsgen.ScenarioSRIOV, func(r sysfsgen.Roots) error { return r.SetLinkDown("ens785f0") }},
		tree{"sriov no carrier", sysfsgen.ScenarioSRIOV, func(r sysfsgen.Roots) error { return r.SetCarrier("ens785f0v1", false) }},
	)
	for _, tc := range trees {
		t.Run(tc.name, func(t *testing.T) {
			var roots sysfsgen.Roots
			if tc.scenario == sysfsgen.ScenarioLarge {
				if testing.Short() {
					t.Skip("large tree")
				}
				roots = largeTree(t)
			} else {
				roots = sysfsgen.TempScenario(t, tc.scenario)
			}
			r := sampleReader(t, roots)
			var ts []ProbeTarget
			for _, target := range probeTargets(scanOK(t, r)) {
				ts = append(ts, target)
			}
			if tc.mutate != nil {
				if err := tc.mutate(roots); err != nil {
					t.Fatal(err)
				}
			}
			var ours, theirs recorder
			r.fs = recordingFS{rc: &ours}
			files := 0
			for _, res := range r.ProbeAll(ts) {
				files += res.Files
			}

			bl := newProbeBaseline(roots, r.workers)
			bl.readlink = func(p string) (string, error) { theirs.add("readlink", p); return os.Readlink(p) }
			bl.stat = func(p string) error { theirs.add("stat", p); _, err := os.Stat(p); return err }
			bl.read = func(p string, buf []byte) (int, error) { theirs.add("read", p); return osFS{}.readFile(p, buf) }
			bl.list = func(p string) ([]string, error) { theirs.add("list", p); return osFS{}.readDirNames(p) }
			bl.run(ts)

			slices.Sort(ours.ops)
			slices.Sort(theirs.ops)
			if len(ours.ops) == 0 {
				t.Fatal("probes recorded nothing")
			}
			if files != len(ours.ops) {
				t.Errorf("Files adds up to %d, %d operations recorded", files, len(ours.ops))
			}
			if !slices.Equal(ours.ops, theirs.ops) {
				t.Errorf("probe and baseline differ:\nonly probe:    %q\nonly baseline: %q",
					minus(ours.ops, theirs.ops), minus(theirs.ops, ours.ops))
			}
		})
	}
}

// ProbeLinks makes the link check alone: a VF unbound while its PF's link
// is up passes (its driver is not looked at), one whose PF's link is down
// fails with the link's reason, and the PF's files are read once for all
// its VFs; a target that asks for no link check passes without a read.
func TestProbeLinksChecksOnlyTheLink(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	const unbound, other = "0000:3b:01.2", "0000:3b:01.3" // vfio VFs of ens785f0
	if err := roots.Unbind(unbound); err != nil {
		t.Fatal(err)
	}
	r := sampleReader(t, roots)
	targets := probeTargets(scanOK(t, r))
	ts := []ProbeTarget{targets[unbound], targets[other], targets[other]}
	ts[0].Link, ts[1].Link, ts[0].Driver = true, true, "vfio-pci"
	ts[2].Link = false
	for i, res := range r.ProbeLinks(ts) {
		if want := (ProbeResult{Healthy: true, Link: true, Files: res.Files}); res != want || (i < 2 && res.Files > 2) || (i == 2 && res.Files != 0) {
			t.Errorf("link up: target %d: %+v", i, res)
		}
	}
	if full := r.Probe(ts[0]); full.Healthy || full.Link {
		t.Errorf("the full probe of the unbound VF: %+v, want a failure that is not the link's", full)
	}
	if err := roots.SetLinkDown("ens785f0"); err != nil {
		t.Fatal(err)
	}
	got := r.ProbeLinks(ts)
	for i := range 2 {
		if want := (ProbeResult{Reason: "link down on ens785f0 (PF)", Link: true, Files: got[i].Files}); got[i] != want {
			t.Errorf("PF link down: target %d: %+v, want %+v", i, got[i], want)
		}
	}
	if files := got[0].Files + got[1].Files; files != 1 {
		t.Errorf("the PF's link files were read %d times for its two VFs, want once (operstate)", files)
	}
	if !got[2].Healthy || got[2].Files != 0 {
		t.Errorf("a target with no link check: %+v", got[2])
	}
}

// isLinkReason says whether a probe's reason is the link check's.
func isLinkReason(reason string) bool {
	for _, p := range []string{"link down on ", "no carrier on ", "no interface ", "probe failed: cannot read net/", "probe failed: net/"} {
		if strings.HasPrefix(reason, p) {
			return true
		}
	}
	return strings.HasSuffix(reason, " is not an interface name")
}
