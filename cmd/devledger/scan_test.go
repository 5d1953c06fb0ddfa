package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// Test inputs, relative to the package directory. The PCI ID database is
// the repository's sample, never the host's, so goldens are the same on
// every machine.
var (
	scanConfigDir = filepath.Join("..", "..", "testdata", "config", "scan")
	samplePCIIDs  = filepath.Join("..", "..", "testdata", "pci.ids.sample")
)

// scanConfigs names the config each scenario is scanned with.
var scanConfigs = map[string]string{
	sysfsgen.ScenarioSRIOV:    "sriov.yaml",
	sysfsgen.ScenarioMellanox: "mellanox.json",
	sysfsgen.ScenarioGPU:      "gpu.yaml",
	sysfsgen.ScenarioLarge:    "large.json",
	sysfsgen.ScenarioVirtio:   "virtio.json",
	sysfsgen.ScenarioNoIOMMU:  "noiommu.json",
}

// scanNodes builds each scenario once, on first use, in a temp dir of the
// test that made it.
type scanNodes struct {
	owner *testing.T
	roots map[string]sysfsgen.Roots
}

func newScanNodes(t *testing.T) *scanNodes {
	return &scanNodes{owner: t, roots: map[string]sysfsgen.Roots{}}
}

// get returns the built scenario, failing t (the caller, which may be a
// subtest of the owner) if it cannot be built. Subtests must not run in
// parallel.
func (n *scanNodes) get(t *testing.T, scenario string) sysfsgen.Roots {
	t.Helper()
	r, ok := n.roots[scenario]
	if !ok {
		var err error
		if r, err = sysfsgen.BuildScenario(n.owner.TempDir(), scenario); err != nil {
			t.Fatalf("build fake node: %v", err)
		}
		n.roots[scenario] = r
	}
	return r
}

// scanArgs is a scan command line over roots with the scenario's config
// and the sample pci.ids, followed by extra.
func scanArgs(r sysfsgen.Roots, configFile string, extra ...string) []string {
	args := []string{"scan", "--config", filepath.Join(scanConfigDir, configFile),
		"--sysfs-root", r.Sysfs, "--dev-root", r.Dev, "--proc-root", r.Proc, "--pci-ids", samplePCIIDs}
	return append(args, extra...)
}

// scanTranscript runs args and renders the command, its output and exit
// code as one text for a golden file, with the temp dir that holds the
// fake node replaced by $TMP.
func scanTranscript(t *testing.T, tmp string, args []string) (string, int) {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	var b strings.Builder
	fmt.Fprintf(&b, "$ devledger %s\n", strings.Join(args, " "))
	b.WriteString(stdout)
	if stderr != "" {
		b.WriteString("--- stderr\n")
		b.WriteString(stderr)
	}
	fmt.Fprintf(&b, "--- exit %d\n", code)
	out := b.String()
	if tmp != "" {
		out = strings.ReplaceAll(out, tmp, "$TMP")
	}
	return out, code
}

// checkScanGolden compares got with testdata/scan/<name>.golden.
func checkScanGolden(t *testing.T, name, got string) {
	t.Helper()
	checkGolden(t, filepath.Join("scan", name), got)
}

// nodeDir is the temp dir a scenario was built in.
func nodeDir(r sysfsgen.Roots) string { return filepath.Dir(r.Sysfs) }

// TestScan runs scan over every scenario, each built once (the large one
// takes a while): the goldens, then checks of the JSON and of the table's
// width.
func TestScan(t *testing.T) {
	nodes := newScanNodes(t)
	t.Run("golden", func(t *testing.T) { testScanGolden(t, nodes) })
	t.Run("json", func(t *testing.T) { testScanJSONAccountsForEveryDevice(t, nodes) })
	t.Run("width", func(t *testing.T) { testScanTableWidth(t, nodes) })
}

func testScanGolden(t *testing.T, nodes *scanNodes) {
	cases := []struct {
		name     string
		scenario string
		config   string // default: the scenario's
		extra    []string
		excerpt  func(string) string
	}{
		{name: "sriov", scenario: sysfsgen.ScenarioSRIOV},
		{name: "mellanox", scenario: sysfsgen.ScenarioMellanox},
		{name: "gpu", scenario: sysfsgen.ScenarioGPU},
		{name: "virtio", scenario: sysfsgen.ScenarioVirtio},
		{name: "large", scenario: sysfsgen.ScenarioLarge, excerpt: largeExcerpt},
		// --explain: a VF that no pool takes (short address form), a VF
		// that one pool took and a later one would have, a PF with VFs and
		// auxiliary devices, a GPU on the wrong driver.
		{name: "sriov_explain_rejected_vf", scenario: sysfsgen.ScenarioSRIOV, extra: []string{"--explain", "3b:01.3"}},
		{name: "sriov_explain_pooled_vf", scenario: sysfsgen.ScenarioSRIOV, extra: []string{"--explain", "0000:af:01.2"}},
		{name: "mellanox_explain_pf", scenario: sysfsgen.ScenarioMellanox, extra: []string{"--explain", "5e:00.0"}},
		{name: "gpu_explain_nvidia", scenario: sysfsgen.ScenarioGPU, extra: []string{"--explain", "0000:18:00.0"}},
		{name: "virtio_json", scenario: sysfsgen.ScenarioVirtio, extra: []string{"--format", "json"}},
		{name: "virtio_explain_json", scenario: sysfsgen.ScenarioVirtio, extra: []string{"--format", "json", "--explain", "00:05.0"}},
		{name: "noiommu", scenario: sysfsgen.ScenarioNoIOMMU},
		{name: "noiommu_explain", scenario: sysfsgen.ScenarioNoIOMMU, extra: []string{"--explain", "00:06.0"}},
		// The SR-IOV plugin's DDP sample: config warnings, once each.
		{name: "sriov_ddp_warnings", scenario: sysfsgen.ScenarioSRIOV,
			config: filepath.Join("..", "sriov-ddp-x700.json")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := nodes.get(t, tc.scenario)
			cfg := cmp.Or(tc.config, scanConfigs[tc.scenario])
			got, code := scanTranscript(t, nodeDir(r), scanArgs(r, cfg, tc.extra...))
			if code != exitOK {
				t.Errorf("exit %d, want 0:\n%s", code, got)
			}
			if tc.excerpt != nil {
				got = tc.excerpt(got)
			}
			checkScanGolden(t, tc.name, got)
		})
	}
}

// largeExcerpt keeps, of the large node's 1,032 device rows, the PFs and
// GPUs, the first VFs of the first PF, the last VF of the last PF and the
// VFs either side of the 0-63 range of 0000:ca:00.0; the rest of the
// output is kept whole. Skipped rows become one line saying how many.
func largeExcerpt(out string) string {
	keep := regexp.MustCompile(`^(ADDRESS|0000:..:00\.0|0000:17:01\.[01]|0000:ca:08\.7|0000:ca:09\.0|0000:e3:10\.6) `)
	lines := strings.SplitAfter(out, "\n")
	var b strings.Builder
	b.WriteString(lines[0]) // the command
	skipped := 0
	i := 1
	for ; i < len(lines) && lines[i] != "\n"; i++ {
		if keep.MatchString(lines[i]) {
			if skipped > 0 {
				fmt.Fprintf(&b, "[... %d rows ...]\n", skipped)
				skipped = 0
			}
			b.WriteString(lines[i])
			continue
		}
		skipped++
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "[... %d rows ...]\n", skipped)
	}
	b.WriteString(strings.Join(lines[i:], ""))
	return b.String()
}

// testScanJSONAccountsForEveryDevice checks, on every scenario, that the
// JSON lists every PCI function the node has, that each pool's count is
// its members and that each device is in the pool it names, or in none
// with a reason.
func testScanJSONAccountsForEveryDevice(t *testing.T, nodes *scanNodes) {
	for _, name := range sysfsgen.Scenarios() {
		t.Run(name, func(t *testing.T) {
			r := nodes.get(t, name)
			code, stdout, stderr := runCLI(t, scanArgs(r, scanConfigs[name], "--format", "json")...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var rep scanReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("output is not JSON: %v", err)
			}
			n, err := sysfsgen.Scenario(name)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(rep.Devices), sysfsgen.FunctionCount(n); got != want {
				t.Errorf("%d devices, want %d", got, want)
			}
			members := map[string]string{}
			for _, p := range rep.Pools {
				if p.Count != len(p.Members) {
					t.Errorf("pool %s: count %d, %d members", p.Name, p.Count, len(p.Members))
				}
				for _, m := range p.Members {
					members[m] = p.Name
				}
			}
			for _, d := range rep.Devices {
				switch {
				case d.Pool != members[d.Address]:
					t.Errorf("%s: pool %q, but the pools list it in %q", d.Address, d.Pool, members[d.Address])
				case d.Pool == "" && d.Reason == "":
					t.Errorf("%s: in no pool and no reason given", d.Address)
				case d.Pool != "" && d.Selector == "":
					t.Errorf("%s: in %s and no selector named", d.Address, d.Pool)
				case d.Pool != "" && d.Health != scanHealthy:
					t.Errorf("%s: %s (%s) on an intact node", d.Address, d.Health, d.HealthReason)
				case d.Pool == "" && (d.Health != "" || d.HealthReason != ""):
					t.Errorf("%s: in no pool, yet health %q (%s)", d.Address, d.Health, d.HealthReason)
				}
			}
		})
	}
}

// testScanTableWidth checks that only identifiers (addresses, pool names)
// ever push a table line past scanTableWidth: names and reasons are cut.
// The device table's header ends in POOL and is as wide as the columns
// before it, which hold identifiers.
func testScanTableWidth(t *testing.T, nodes *scanNodes) {
	for _, name := range sysfsgen.Scenarios() {
		t.Run(name, func(t *testing.T) {
			r := nodes.get(t, name)
			code, stdout, stderr := runCLI(t, scanArgs(r, scanConfigs[name])...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			cfg, err := config.Load(filepath.Join(scanConfigDir, scanConfigs[name]), config.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(stdout, "\n") {
				if utf8.RuneCountInString(line) <= scanTableWidth ||
					strings.HasPrefix(line, "ADDRESS ") && strings.HasSuffix(line, "  POOL") {
					continue
				}
				if !slices.ContainsFunc(cfg.Resources, func(res config.Resource) bool {
					return strings.HasSuffix(line, "  "+res.FullName())
				}) {
					t.Errorf("line of %d columns, and not for a long pool name:\n%s", utf8.RuneCountInString(line), line)
				}
			}
		})
	}
}

// docs/operations.md checks a changed config against a node by handing
// it to the pod's scan on standard input, as --config /dev/stdin: the
// image has no shell and no tar. The file has no extension there, so its
// form is read from its first byte; YAML and JSON scan as from their
// files.
func TestScanConfigFromStdin(t *testing.T) {
	if _, err := os.Stat("/dev/stdin"); err != nil {
		t.Skipf("no /dev/stdin here: %v", err)
	}
	r, err := sysfsgen.BuildScenario(t.TempDir(), sysfsgen.ScenarioSRIOV)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{
		filepath.Join(scanConfigDir, "sriov.yaml"),
		filepath.Join("..", "..", "testdata", "config", "sriov-operator-node.json"),
	} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			roots := []string{"--sysfs-root", r.Sysfs, "--dev-root", r.Dev, "--proc-root", r.Proc, "--pci-ids", samplePCIIDs}
			code, want, stderr := runCLI(t, append([]string{"scan", "--config", file}, roots...)...)
			if code != 0 {
				t.Fatalf("scan --config %s: exit %d\n%s", file, code, stderr)
			}
			in, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			cmd := binaryCmd(t, append([]string{"scan", "--config", "/dev/stdin"}, roots...)...)
			cmd.Stdin = in
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("scan --config /dev/stdin < %s: %v\n%s", file, err, errOut.String())
			}
			if out.String() != want {
				t.Errorf("scan --config /dev/stdin < %s says\n%s\nwhere scan --config %s says\n%s", file, out.String(), file, want)
			}
		})
	}
}

func TestScanBadInput(t *testing.T) {
	nodes := newScanNodes(t)
	cases := []struct {
		name string
		// node gives the roots and the dir to show as $TMP; nil means the
		// sriov scenario.
		node func(t *testing.T) (sysfsgen.Roots, string)
		// config is the file under testdata/config/scan, "sriov.yaml" when
		// empty; args replaces the whole command line when not nil.
		config   string
		extra    []string
		args     func(r sysfsgen.Roots) []string
		wantCode int
	}{
		{name: "config_errors", config: "bad.yaml", wantCode: exitUsage},
		{name: "missing_sysfs_root", node: func(t *testing.T) (sysfsgen.Roots, string) {
			tmp := t.TempDir()
			return emptyNode(t, tmp), tmp
		}, wantCode: exitUsage},
		{name: "empty_sysfs_root", node: func(t *testing.T) (sysfsgen.Roots, string) {
			tmp := t.TempDir()
			r := emptyNode(t, tmp)
			if err := os.MkdirAll(filepath.Join(r.Sysfs, "bus", "pci", "devices"), 0o755); err != nil {
				t.Fatal(err)
			}
			return r, tmp
		}, wantCode: exitOK},
		{name: "sysfs_root_without_pci_bus", node: func(t *testing.T) (sysfsgen.Roots, string) {
			tmp := t.TempDir()
			r := emptyNode(t, tmp)
			r.Sysfs = tmp
			return r, tmp
		}, wantCode: exitOK},
		{name: "explain_absent_address", extra: []string{"--explain", "3b:09.0"}, wantCode: exitUsage},
		{name: "explain_malformed_address", extra: []string{"--explain", "3b:02"}, wantCode: exitUsage},
		{name: "missing_config_flag", args: func(r sysfsgen.Roots) []string {
			return []string{"scan", "--sysfs-root", r.Sysfs}
		}, wantCode: exitUsage},
		{name: "config_file_absent", config: "absent.json", wantCode: exitUsage},
		{name: "unknown_format", extra: []string{"--format", "yaml"}, wantCode: exitUsage},
		{name: "missing_proc_root", node: func(t *testing.T) (sysfsgen.Roots, string) {
			r := nodes.get(t, sysfsgen.ScenarioSRIOV)
			r.Proc = filepath.Join(nodeDir(r), "no-proc")
			return r, nodeDir(r)
		}, wantCode: exitUsage},
		{name: "extra_argument", extra: []string{"0000:3b:01.3"}, wantCode: exitUsage},
		// No names rather than the host's: a --pci-ids that is not there
		// leaves names empty with one warning, and the scan goes on.
		{name: "pci_ids_absent", node: func(t *testing.T) (sysfsgen.Roots, string) {
			r := nodes.get(t, sysfsgen.ScenarioGPU)
			return r, nodeDir(r)
		}, args: func(r sysfsgen.Roots) []string {
			args := scanArgs(r, "gpu.yaml")
			args[len(args)-1] = filepath.Join(nodeDir(r), "no-pci.ids")
			return args
		}, wantCode: exitOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r sysfsgen.Roots
			var tmp string
			if tc.node != nil {
				r, tmp = tc.node(t)
			} else {
				r = nodes.get(t, sysfsgen.ScenarioSRIOV)
				tmp = nodeDir(r)
			}
			cfg := cmp.Or(tc.config, "sriov.yaml")
			args := scanArgs(r, cfg, tc.extra...)
			if tc.args != nil {
				args = tc.args(r)
			}
			got, code := scanTranscript(t, tmp, args)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d:\n%s", code, tc.wantCode, got)
			}
			checkScanGolden(t, "bad_"+tc.name, got)
		})
	}
}

// emptyNode returns roots under tmp with a route table and nothing else.
func emptyNode(t *testing.T, tmp string) sysfsgen.Roots {
	t.Helper()
	r := sysfsgen.Roots{Sysfs: filepath.Join(tmp, "sys"), Dev: filepath.Join(tmp, "dev"), Proc: filepath.Join(tmp, "proc")}
	if err := r.SetDefaultRoute(""); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestScanConfigErrorsOnePerLine checks the config errors' lines against
// config.ErrorList itself, so scan never rewords them.
func TestScanConfigErrorsOnePerLine(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	path := filepath.Join(scanConfigDir, "bad.yaml")
	_, err := config.Load(path, config.Options{})
	var list config.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Load(%s) = %v, want an ErrorList", path, err)
	}
	code, _, stderr := runCLI(t, scanArgs(r, "bad.yaml")...)
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(list)+1 {
		t.Fatalf("%d lines, want %d errors and a summary:\n%s", len(lines), len(list), stderr)
	}
	for i, e := range list {
		if lines[i] != e.Error() {
			t.Errorf("line %d = %q, want %q", i+1, lines[i], e.Error())
		}
	}
	if want := `bad.yaml: resourceList[1].selectors.pfNames[0]: "eth0#5-2": range end before start`; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

// TestScanWarningsOnce checks that each warning is printed once, prefixed,
// and that the JSON lists the same ones.
func TestScanWarningsOnce(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	args := scanArgs(r, filepath.Join("..", "sriov-ddp-x700.json"), "--format", "json")
	args[len(args)-3] = filepath.Join(t.TempDir(), "no-pci.ids") // --pci-ids
	code, stdout, stderr := runCLI(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep scanReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var printed []string
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		w, ok := strings.CutPrefix(line, "warning: ")
		if !ok {
			t.Errorf("stderr line without the warning prefix: %q", line)
		}
		if slices.Contains(printed, w) {
			t.Errorf("warning printed twice: %q", w)
		}
		printed = append(printed, w)
	}
	if len(printed) != 3 {
		t.Errorf("%d warnings, want 2 for ddpProfiles and 1 for pci.ids:\n%s", len(printed), stderr)
	}
	if !slices.Equal(printed, rep.Warnings) {
		t.Errorf("JSON warnings %q, stderr %q", rep.Warnings, printed)
	}
}

// Pooled vfio devices in one IOMMU group (a GPU pooled with its audio
// functions) each look healthy, but only one pod at a time can open
// their group: scan warns, naming the first three and counting the rest,
// on stderr and in the JSON; a vfio function of the group that no pool
// takes is not counted. A group whose other function is on a kernel
// driver, pooled or not, holds one pooled vfio device, warns of nothing,
// and its GPU is unhealthy, the probe naming the function that keeps the
// group closed.
func TestScanWarnsOfSharedIOMMUGroups(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioGPU)
	for _, f := range []sysfsgen.Function{
		{Address: "0000:9a:00.1", Driver: "vfio-pci", IOMMUGroup: "52"},
		{Address: "0000:9a:00.2", Driver: "vfio-pci", IOMMUGroup: "52"},
		{Address: "0000:9a:00.3", Driver: "vfio-pci", IOMMUGroup: "52"},
		{Address: "0000:9a:00.4", Driver: "vfio-pci", IOMMUGroup: "52", Device: "22a4"}, // in no pool
		{Address: "0000:ab:00.1", Driver: "snd_hda_intel", IOMMUGroup: "53"},
	} {
		f.Vendor, f.Device, f.Class, f.NUMANode = "10de", cmp.Or(f.Device, "22a3"), "040300", 1
		if err := r.Add(f); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"resourceList": [
  {"resourceName": "gpu", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI", "selectors": {"devices": ["2330"], "drivers": ["vfio-pci"]}},
  {"resourceName": "audio", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI", "selectors": {"devices": ["22a3"], "drivers": ["vfio-pci"]}},
  {"resourceName": "host_audio", "resourcePrefix": "nvidia.com", "deviceType": "genericPCI", "selectors": {"devices": ["22a3"], "drivers": ["snd_hda_intel"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "scan", "--config", cfg, "--sysfs-root", r.Sysfs, "--dev-root", r.Dev,
		"--proc-root", r.Proc, "--pci-ids", samplePCIIDs, "--format", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	const want = "IOMMU group 52 holds 4 pooled vfio devices, 0000:9a:00.0 (nvidia.com/gpu), 0000:9a:00.1 (nvidia.com/audio), " +
		"0000:9a:00.2 (nvidia.com/audio) and 1 more: " +
		"vfio lets one pod at a time open the group, and a second pod given one of them fails to start"
	if stderr != "warning: "+want+"\n" {
		t.Errorf("stderr %q, want the warning %q alone", stderr, want)
	}
	var rep scanReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Warnings, []string{want}) {
		t.Errorf("JSON warnings %q", rep.Warnings)
	}
	health := map[string][2]string{}
	for _, d := range rep.Devices {
		health[d.Address] = [2]string{d.Health, d.HealthReason}
	}
	for addr, w := range map[string][2]string{
		"0000:9a:00.0": {scanHealthy, ""},
		"0000:9a:00.1": {scanHealthy, ""},
		"0000:ab:00.0": {scanUnhealthy, "IOMMU group 53 cannot be opened: 0000:ab:00.1 in it is bound to snd_hda_intel"},
	} {
		if health[addr] != w {
			t.Errorf("%s: health %q, want %q", addr, health[addr], w)
		}
	}
}

// A function whose read failed (here numa_node is a directory: EISDIR)
// is marked incomplete in the JSON, and only that one; the warning names
// the function and the file, on stderr and in the function's warnings.
func TestScanMarksAnIncompleteRead(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	const addr = "0000:02:00.0"
	numa := filepath.Join(r.Sysfs, "bus", "pci", "devices", addr, "numa_node")
	if err := os.Remove(numa); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(numa, 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, scanArgs(r, scanConfigs[sysfsgen.ScenarioSRIOV], "--format", "json")...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep scanReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var marked []string
	for _, d := range rep.Devices {
		if d.Incomplete {
			marked = append(marked, d.Address)
		}
	}
	if !slices.Equal(marked, []string{addr}) {
		t.Errorf("devices marked incomplete: %v, want %s alone", marked, addr)
	}
	if want := "warning: " + addr + ": numa_node: "; !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr %q, want one line starting %q", stderr, want)
	}
	for _, d := range rep.Devices {
		if d.Address == addr && (len(d.Warnings) != 1 || !strings.HasPrefix(d.Warnings[0], "numa_node: ")) {
			t.Errorf("%s: JSON warnings %q, want one on numa_node", addr, d.Warnings)
		}
	}
}

// TestScanHealth breaks the sriov node the ways the health checker looks
// for and checks what scan says of each pooled device: the PF of a pool
// that asks for link health loses its link, a VFIO node goes, and a VF
// whose own link is down sits in a pool that does not ask.
func TestScanHealth(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	if err := r.SetLinkDown("ens785f0"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(r.Dev, "vfio", "111")); err != nil {
		t.Fatal(err)
	}
	args := func(extra ...string) []string {
		return append([]string{"scan", "--config", filepath.Join("testdata", "scan", "health.yaml"),
			"--sysfs-root", r.Sysfs, "--dev-root", r.Dev, "--proc-root", r.Proc, "--pci-ids", samplePCIIDs}, extra...)
	}
	for _, tc := range []struct {
		golden string
		extra  []string
	}{
		{golden: "health"},
		{golden: "health_explain_link_down", extra: []string{"--explain", "3b:01.2"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got, code := scanTranscript(t, nodeDir(r), args(tc.extra...))
			if code != exitOK {
				t.Errorf("exit %d, want 0:\n%s", code, got)
			}
			checkScanGolden(t, tc.golden, got)
		})
	}

	code, stdout, stderr := runCLI(t, args("--format", "json")...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep scanReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"0000:3b:01.2": {scanUnhealthy, "link down on ens785f0 (PF)"},
		"0000:3b:01.3": {scanUnhealthy, "link down on ens785f0 (PF)"},
		"0000:af:01.1": {scanUnhealthy, "/dev/vfio/111 missing"},
		"0000:af:01.2": {scanHealthy, ""},
		"0000:af:01.0": {scanHealthy, ""}, // link down, not asked
		"0000:3b:01.0": {scanHealthy, ""},
		"0000:3b:00.0": {"", ""}, // in no pool
	}
	for _, d := range rep.Devices {
		w, ok := want[d.Address]
		if !ok {
			continue
		}
		delete(want, d.Address)
		if d.Health != w[0] || d.HealthReason != w[1] {
			t.Errorf("%s (pool %q): health %q, reason %q; want %q, %q", d.Address, d.Pool, d.Health, d.HealthReason, w[0], w[1])
		}
	}
	for addr := range want {
		t.Errorf("%s missing from the JSON", addr)
	}
}
