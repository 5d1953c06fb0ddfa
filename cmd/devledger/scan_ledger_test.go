package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// scan --state-dir shows, beside its own probe, what the running daemon's
// ledger says: here a VF unbound and bound again, which the probe finds
// healthy while the daemon holds it unhealthy for its hold-down (an hour
// here), as the kubelet was told. The ledger is read through the admin
// socket (the daemon holds the file), and only the pooled devices on which
// the two differ are shown, one block each. Then, the daemon stopped, a VF
// removed from sysfs is one the ledger still has pooled: scan --db of the
// file shows it as not found.
func TestScanShowsTheLedgersVerdicts(t *testing.T) {
	t.Parallel()
	const vf, gone = "0000:3b:01.2", "0000:af:01.3" // vfio VFs of sriov_vfio
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"resourceList": [
	  {"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
	   "health": {"holdDown": "1h"}},
	  {"resourceName": "sriov_net", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]}},
	  {"resourceName": "e810_port", "excludeTopology": true, "selectors": {"pciAddresses": ["0000:3b:00.1"]}}
	]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: cfg, mode: "legacy", kubelet: kubelettest.Options{}})
	p, _ := n.startRegistered(t, sriovPools, "--probe-interval", "50ms")
	if err := n.roots.Unbind(vf); err != nil {
		t.Fatal(err)
	}
	var verdict uint64
	n.waitLedger(t, vf+" unhealthy", func(envs []events.Envelope) bool {
		for _, e := range envs {
			if h, ok := e.Payload.(events.DeviceHealthChanged); ok && h.Address == vf && !h.Healthy {
				verdict = e.Seq
			}
		}
		return verdict > 0
	})
	if err := n.roots.Bind(vf, "vfio-pci"); err != nil {
		t.Fatal(err)
	}

	args := []string{"scan", "--config", n.config, "--sysfs-root", n.roots.Sysfs, "--dev-root", n.roots.Dev, "--proc-root", n.roots.Proc}
	live := append(args, "--state-dir", n.stateDir)
	table := cliOK(t, live...)
	want := fmt.Sprintf("\nledger through #%%d: it agrees with this scan on 8 of 9 pooled devices\n\n"+
		"%s  pool %s\n  this scan  healthy\n  ledger     unhealthy: driver unbound (was vfio-pci) (#%d)\n", vf, vfioPool, verdict)
	if i := strings.Index(table, "\nledger through #"); i < 0 || !strings.HasSuffix(table, fmt.Sprintf(want, ledgerSeqIn(t, table[i:]))) {
		t.Errorf("scan --state-dir ends\n%s\nwant it to end\n%s", table[max(0, len(table)-400):], want)
	}
	// Each pool's socket in use, as the kubelet has it registered.
	for _, res := range sriovPools {
		reg, err := n.kubelet.WaitRegistered(e2eCtx(t), res)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(res) + ` +registered \(legacy\) +` + regexp.QuoteMeta(reg.Endpoint) + `$`).MatchString(table) {
			t.Errorf("scan --state-dir has no line saying %s is registered on %s:\n%s", res, reg.Endpoint, table)
		}
	}
	explain := cliOK(t, append(live, "--explain", vf)...)
	if want := fmt.Sprintf("  ledger:      unhealthy: driver unbound (was vfio-pci) (#%d), pool %s\n", verdict, vfioPool); !strings.Contains(explain, want) {
		t.Errorf("scan --explain %s says no %q:\n%s", vf, want, explain)
	}
	rep := scanLedgerJSON(t, cliOK(t, append(live, "--format", "json")...))
	if rep.LedgerSeq == nil || *rep.LedgerSeq < verdict || len(rep.LedgerOnly) != 0 {
		t.Errorf("JSON ledger_seq %v (verdict #%d), ledger_only %+v", rep.LedgerSeq, verdict, rep.LedgerOnly)
	}
	for _, p := range rep.Pools {
		reg, err := n.kubelet.WaitRegistered(e2eCtx(t), p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Registration == nil || !p.Registration.Registered || p.Registration.Socket != reg.Endpoint {
			t.Errorf("JSON pool %s registration %+v, want registered on %s", p.Name, p.Registration, reg.Endpoint)
		}
	}
	for _, d := range rep.Devices {
		if d.Ledger == nil {
			t.Fatalf("%s has no ledger entry in the JSON", d.Address)
		}
		if d.Address == vf {
			want := scanLedger{Known: true, Present: true, Pool: vfioPool, Health: scanUnhealthy, HealthReason: "driver unbound (was vfio-pci)", HealthSeq: verdict}
			if d.Health != scanHealthy || *d.Ledger != want {
				t.Errorf("%s: health %q, ledger %+v; want healthy now and %+v", vf, d.Health, *d.Ledger, want)
			}
		}
	}

	// Without --config, the config the daemon applied, named on stderr;
	// read with another resource prefix than the daemon's, a warning.
	noConfig := append([]string{"scan"}, args[3:]...)
	code, out, stderr := cli(t, append(noConfig, "--state-dir", n.stateDir)...)
	if code != exitOK || !strings.HasPrefix(stderr, "the config in force: "+n.config+" (sha256 ") || strings.Contains(stderr, "changed since") || strings.Contains(stderr, "other pools") {
		t.Errorf("scan --state-dir without --config: exit %d, stderr %q; want the config in force named, and no warning of it", code, stderr)
	}
	if before := func(s string) string { return s[:strings.Index(s+"\nledger through", "\nledger through")] }; before(out) != before(table) {
		t.Errorf("scan --state-dir without --config shows\n%s\nwant what --config %s shows\n%s", out, n.config, table)
	}
	// JSON names the file too, and whether it is the config in force.
	type named struct {
		Config        string `json:"config"`
		ConfigInForce bool   `json:"config_in_force"`
	}
	for _, tc := range []struct {
		args    []string
		inForce bool
	}{{append(noConfig, "--state-dir", n.stateDir), true}, {append(args, "--state-dir", n.stateDir), false}} {
		var got named
		if err := json.Unmarshal([]byte(cliOK(t, append(tc.args, "--format", "json")...)), &got); err != nil || got.Config != n.config || got.ConfigInForce != tc.inForce {
			t.Errorf("%v --format json names config %q, in force %v (%v); want %q, %v", tc.args, got.Config, got.ConfigInForce, err, n.config, tc.inForce)
		}
	}
	_, _, stderr = cli(t, append(noConfig, "--state-dir", n.stateDir, "--resource-prefix", "example.com")...)
	if want := "the daemon applied other pools from this file (this scan reads example.com/sriov_vfio, example.com/sriov_net, example.com/e810_port where the daemon applied intel.com/e810_port, intel.com/sriov_net, intel.com/sriov_vfio)"; !strings.Contains(stderr, want) {
		t.Errorf("scan --state-dir --resource-prefix example.com warns\n%s\nwant %q", stderr, want)
	}
	_, _, stderr = cli(t, append(noConfig, "--state-dir", n.stateDir, "--use-cdi")...)
	if want := "(" + vfioPool + " (here → applied: "; !strings.Contains(stderr, want) {
		t.Errorf("scan --state-dir --use-cdi warns\n%s\nwant %q", stderr, want)
	}

	// Stopped; a VF goes from sysfs without the daemon seeing it.
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("daemon exit %d", code)
	}
	if err := n.roots.Remove(gone); err != nil {
		t.Fatal(err)
	}
	file := append(args, "--db", n.ledgerPath())
	table = cliOK(t, file...)
	if want := fmt.Sprintf("\n%s  pool - in this scan, %s in the ledger\n  this scan  not found in sysfs\n  ledger     healthy (#", gone, vfioPool); !strings.Contains(table, want) {
		t.Errorf("scan --db shows no block for the removed VF %s like\n%s\n---\n%s", gone, want, table)
	}
	rep = scanLedgerJSON(t, cliOK(t, append(file, "--format", "json")...))
	if len(rep.LedgerOnly) != 1 || rep.LedgerOnly[0].Address != gone || rep.LedgerOnly[0].Ledger.Pool != vfioPool {
		t.Errorf("JSON ledger_only %+v, want %s in %s", rep.LedgerOnly, gone, vfioPool)
	}

	if code, _, stderr := cli(t, append(file, "--state-dir", n.stateDir)...); code != exitUsage || !strings.Contains(stderr, "--state-dir and --db") {
		t.Errorf("--state-dir with --db: exit %d, %q; want a usage error", code, stderr)
	}

	// The config in force changed since, or gone (a ledger copied off the
	// node): scanned as it is now with a warning, or a usage error.
	noConfigDB := append(noConfig, "--db", n.ledgerPath())
	if err := os.WriteFile(n.config, []byte(`{"resourceList": [{"resourceName": "sriov_vfio", "selectors": {"drivers": ["vfio-pci"]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its pools differ from those applied because the file changed, not
	// for the daemon's flags: the warning says only the first.
	if code, _, stderr := cli(t, noConfigDB...); code != exitOK || !strings.Contains(stderr, "warning: "+n.config+" changed since the daemon applied it") || strings.Contains(stderr, "other pools") {
		t.Errorf("scan --db of a config changed since: exit %d, stderr %q; want a warning that it changed, and none of other pools", code, stderr)
	}
	if err := os.Remove(n.config); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, noConfigDB...); code != exitUsage || !strings.Contains(stderr, "the config in force, "+n.config+" (sha256 ") || !strings.Contains(stderr, "is not here: name a copy of it with --config") {
		t.Errorf("scan --db of a config gone: exit %d, stderr %q; want a usage error naming it", code, stderr)
	}
}

// ledgerSeqIn reads N from "\nledger through #N:".
func ledgerSeqIn(t *testing.T, s string) uint64 {
	t.Helper()
	var seq uint64
	if _, err := fmt.Sscanf(s, "\nledger through #%d:", &seq); err != nil {
		t.Fatalf("no ledger line in %q: %v", s[:min(len(s), 80)], err)
	}
	return seq
}

type scanLedgerReport struct {
	LedgerSeq *uint64 `json:"ledger_seq"`
	Devices   []struct {
		Address string      `json:"address"`
		Health  string      `json:"health"`
		Ledger  *scanLedger `json:"ledger"`
	} `json:"devices"`
	LedgerOnly []scanLedgerOnly `json:"ledger_only"`
	Pools      []struct {
		Name         string               `json:"name"`
		Registration *events.Registration `json:"registration"`
	} `json:"pools"`
}

func scanLedgerJSON(t *testing.T, out string) scanLedgerReport {
	t.Helper()
	var rep scanLedgerReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("scan JSON: %v", err)
	}
	return rep
}

// TestScanAgainstAWrittenLedger reads a ledger written event by event,
// in which the daemon left what a running node leaves: a device it saw
// go that scan finds again, devices absent from sysfs (one pooled, one
// pooled and then removed, one never pooled), a pool whose registration
// the kubelet refused, and one it never served. Only what the ledger
// still offers counts as the ledger's, and the differing devices are
// shown in address order.
func TestScanAgainstAWrittenLedger(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	args := scanArgs(r, scanConfigs[sysfsgen.ScenarioSRIOV])
	var now scanReport
	if err := json.Unmarshal([]byte(cliOK(t, append(args, "--format", "json")...)), &now); err != nil {
		t.Fatal(err)
	}
	const (
		back      = "0000:3b:01.2" // removed in the ledger, in sysfs again
		offered   = "0000:01:00.0" // pooled in the ledger, not in sysfs
		withdrawn = "0000:99:00.0" // pooled, then removed
		unpooled  = "0000:98:00.0" // present, in no pool
		refused   = "intel.com/intel_sriov_netdevice"
		unserved  = "intel.com/intel_sriov_dpdk_extra"
		pfPool    = "intel.com/intel_pf"
		sock      = "/var/lib/kubelet/device-plugins/devledger-netdevice.sock"
	)
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(p events.Payload) {
		envs = append(envs, events.New(p, t0.Add(time.Duration(len(envs))*time.Second), "b"))
	}
	var specs []events.PoolSpec
	for _, p := range now.Pools {
		specs = append(specs, events.PoolSpec{Resource: p.Name, DeviceType: p.DeviceType})
	}
	add(events.ConfigApplied{Path: "config.yaml", Pools: specs})
	join := func(pool, addr string) {
		add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: addr}})
		add(events.PoolMembershipChanged{Pool: pool, Added: []string{addr}, Reason: "config applied"})
	}
	for _, p := range now.Pools {
		for _, addr := range p.Members {
			join(p.Name, addr)
		}
	}
	add(events.DeviceRemoved{Address: back, Reason: "gone from sysfs"})
	join(pfPool, offered)
	join(pfPool, withdrawn)
	add(events.DeviceRemoved{Address: withdrawn})
	add(events.DeviceDiscovered{Device: events.DeviceFacts{Address: unpooled}})
	add(events.PluginServing{Pool: refused, Socket: sock, Mode: "legacy"})
	add(events.RegistrationFailed{Pool: refused, Socket: sock, Mode: "legacy", Error: "kubelet refused", Attempt: 1})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, envs)

	table := cliOK(t, append(args, "--db", db)...)
	var pooled int
	for _, p := range now.Pools {
		pooled += p.Count
	}
	want := fmt.Sprintf("ledger through #%d: it agrees with this scan on %d of %d pooled devices\n\n"+
		"%s  pool - in this scan, %s in the ledger\n  this scan  not found in sysfs\n  ledger     healthy (#",
		len(envs), pooled-1, pooled+1, offered, pfPool)
	if !strings.Contains(table, want) {
		t.Errorf("scan --db has no\n%s\n---\n%s", want, table)
	}
	want = fmt.Sprintf("\n%s  pool intel.com/intel_sriov_dpdk in this scan, - in the ledger\n  this scan  healthy\n  ledger     removed\n", back)
	if !strings.Contains(table, want) {
		t.Errorf("scan --db has no block\n%s\n---\n%s", want, table)
	}
	explain := cliOK(t, append(args, "--db", db, "--explain", back)...)
	if want := "  ledger:      removed, pool -\n"; !strings.Contains(explain, want) {
		t.Errorf("scan --explain %s says no %q:\n%s", back, want, explain)
	}
	for _, line := range []string{
		`^  ` + regexp.QuoteMeta(refused) + ` +not registered \(1 failure: kubelet refused\) +` + regexp.QuoteMeta(sock) + `$`,
		`^  ` + regexp.QuoteMeta(unserved) + ` +not serving +-$`,
	} {
		if !regexp.MustCompile("(?m)" + line).MatchString(table) {
			t.Errorf("scan --db has no line matching %s:\n%s", line, table)
		}
	}

	rep := scanLedgerJSON(t, cliOK(t, append(args, "--db", db, "--format", "json")...))
	if len(rep.LedgerOnly) != 1 || rep.LedgerOnly[0].Address != offered {
		t.Errorf("JSON ledger_only %+v, want %s alone", rep.LedgerOnly, offered)
	}
	for _, p := range rep.Pools {
		if p.Name == unserved && p.Registration != nil {
			t.Errorf("JSON pool %s: registration %+v, want none", p.Name, *p.Registration)
		}
	}
}

// scan without --config reads the file the ledger last recorded applied
// only where that path names the same file for scan as it did for the
// daemon. A path relative to the directory the daemon ran in (run
// --config config.json) would read whichever file of that name scan's
// directory holds, and warn that the node's config changed; a stream
// (run --config /dev/stdin) would be read from scan's own standard
// input, or wait on it. Both are a usage error that says to name the
// file with --config.
func TestScanRefusesAConfigInForceItCannotReadAgain(t *testing.T) {
	t.Parallel()
	cfg := []byte(`{"resourceList": [{"resourceName": "sriov_vfio", "selectors": {"drivers": ["vfio-pci"]}}]}`)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"relative", "config.json", "is named relative to the directory the daemon ran in: name it with --config"},
		{"stdin", "/dev/stdin", "is no file scan can read again: name a copy of it with --config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "ledger.db")
			writeLedger(t, db, []events.Envelope{events.New(node.ConfigApplied(tc.path, cfg, mustParse(t, cfg)), time.Now(), "boot")})
			// Scan's directory holds another config.json; its standard
			// input, another config.
			other := []byte(`{"resourceList": [{"resourceName": "other", "selectors": {"drivers": ["iavf"]}}]}`)
			if err := os.WriteFile(filepath.Join(dir, "config.json"), other, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := binaryCmd(t, "scan", "--db", db, "--sysfs-root", filepath.Join(dir, "sys"))
			cmd.Dir, cmd.Stdin = dir, bytes.NewReader(other)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(stderr.String(), "the config in force, "+tc.path+" (sha256 ") || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("scan --db of a ledger whose config in force is %s: %v, stderr %q; want a usage error: %q", tc.path, err, stderr.String(), tc.want)
			}
		})
	}
}

// mustParse is the config data holds.
func mustParse(t *testing.T, data []byte) *config.Config {
	t.Helper()
	cfg, err := config.Parse("config.json", data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
