package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
)

// scan --state-dir shows, beside its own probe, what the running daemon's
// ledger says: here a VF unbound and bound again, which the probe finds
// healthy while the daemon holds it unhealthy for its hold-down (10s), as
// the kubelet was told. The ledger is read through the admin socket (the
// daemon holds the file), and only the devices on which the two differ are
// listed.
func TestScanShowsTheLedgersVerdicts(t *testing.T) {
	t.Parallel()
	n := sriovNode(t, "legacy", kubelettest.Options{})
	n.startRegistered(t, sriovPools, "--probe-interval", "50ms")
	const vf = "0000:3b:01.2" // a vfio VF of sriov_vfio
	if err := n.roots.Unbind(vf); err != nil {
		t.Fatal(err)
	}
	envs := n.waitLedger(t, vf+" unhealthy", func(envs []events.Envelope) bool {
		for _, e := range envs {
			if h, ok := e.Payload.(events.DeviceHealthChanged); ok && h.Address == vf && !h.Healthy {
				return true
			}
		}
		return false
	})
	var verdict uint64
	for _, e := range envs {
		if h, ok := e.Payload.(events.DeviceHealthChanged); ok && h.Address == vf && !h.Healthy {
			verdict = e.Seq
		}
	}
	if err := n.roots.Bind(vf, "vfio-pci"); err != nil {
		t.Fatal(err)
	}

	args := []string{"scan", "--config", n.config, "--sysfs-root", n.roots.Sysfs, "--dev-root", n.roots.Dev,
		"--proc-root", n.roots.Proc, "--state-dir", n.stateDir}
	table := cliOK(t, args...)
	if !strings.Contains(table, "ledger through #") || !strings.Contains(table, "THIS SCAN") {
		t.Fatalf("scan --state-dir printed no ledger section:\n%s", table)
	}
	var row string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, vf) && strings.Contains(line, "unhealthy") {
			row = line
		}
	}
	if want := fmt.Sprintf("%s  healthy    unhealthy: driver unbound (was vfio-pci) (#%d)", vf, verdict); strings.TrimSpace(row) != want {
		t.Errorf("%s's ledger row is %q; want %q (this scan healthy, the ledger unhealthy, the same pool):\n%s", vf, row, want, table)
	}

	explain := cliOK(t, append(args, "--explain", vf)...)
	if want := fmt.Sprintf("  ledger:      unhealthy: driver unbound (was vfio-pci) (#%d), pool %s\n", verdict, vfioPool); !strings.Contains(explain, want) {
		t.Errorf("scan --explain %s says no %q:\n%s", vf, want, explain)
	}

	var rep struct {
		LedgerSeq uint64 `json:"ledger_seq"`
		Devices   []struct {
			Address string      `json:"address"`
			Health  string      `json:"health"`
			Ledger  *scanLedger `json:"ledger"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, append(args, "--format", "json")...)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.LedgerSeq < verdict {
		t.Errorf("ledger_seq %d, before the verdict #%d", rep.LedgerSeq, verdict)
	}
	seen := 0
	for _, d := range rep.Devices {
		if d.Ledger == nil {
			t.Fatalf("%s has no ledger entry in the JSON", d.Address)
		}
		if d.Address != vf {
			continue
		}
		seen++
		want := scanLedger{Known: true, Present: true, Pool: vfioPool, Health: scanUnhealthy, HealthReason: "driver unbound (was vfio-pci)", HealthSeq: verdict}
		if d.Health != scanHealthy || *d.Ledger != want {
			t.Errorf("%s: health %q, ledger %+v; want healthy now and %+v", vf, d.Health, *d.Ledger, want)
		}
	}
	if seen != 1 {
		t.Errorf("%s listed %d times", vf, seen)
	}
}
