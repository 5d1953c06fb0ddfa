package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// The SR-IOV device plugin's DaemonSet args, given to run as they are: the
// config comes from --config-file, every pool that names no prefix gets
// --resource-prefix's, --log-level=10 is debug, and --use-cdi and
// --log-dir are warned about, not refused.
func TestE2EUpstreamArgs(t *testing.T) {
	n := newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: "testdata/e2e/sriov.json", mode: "legacy"})
	args := n.runArgs()
	i := slices.Index(args, "--config")
	args[i] = "--config-file"
	args = append(args, "--resource-prefix=openshift.io", "--use-cdi", "--log-level=10", "--log-dir=sriovdp")
	p := startProc(t, args...)
	ctx := e2eCtx(t)
	for _, res := range []string{"openshift.io/sriov_vfio", "openshift.io/sriov_net", "openshift.io/e810_port"} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatalf("%v\n%s", err, p.stderr.String())
		}
	}
	envs := n.waitLedger(t, "the config applied", func(envs []events.Envelope) bool {
		return slices.ContainsFunc(envs, func(e events.Envelope) bool { return e.Type == events.TypeConfigApplied })
	})
	for _, e := range envs {
		if a, ok := e.Payload.(events.ConfigApplied); ok && a.Path != n.config {
			t.Errorf("ConfigApplied names %s, want the --config-file %s", a.Path, n.config)
		}
	}
	log := p.stderr.String()
	for _, want := range []string{`"flag":"--use-cdi"`, `"flag":"--log-dir"`, `"level":"debug"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log has no %s", want)
		}
	}
}

func TestConfigFlagsResolve(t *testing.T) {
	dir := t.TempDir()
	own, upstream := filepath.Join(dir, "devledger.json"), filepath.Join(dir, "pcidp.json")
	defaults := []string{own, upstream}
	resolve := func(c configFlags) (string, error) { return c.resolve(defaults) }

	if _, err := resolve(configFlags{}); err == nil || !strings.Contains(err.Error(), own+" or "+upstream) {
		t.Errorf("no file anywhere: %v, want an error naming both places", err)
	}
	if err := os.WriteFile(upstream, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := resolve(configFlags{}); got != upstream || err != nil {
		t.Errorf("only the upstream file: %q, %v; want %s", got, err, upstream)
	}
	if err := os.WriteFile(own, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := resolve(configFlags{}); got != own || err != nil {
		t.Errorf("both files: %q, %v; want devledger's own %s", got, err, own)
	}
	if got, err := resolve(configFlags{upstreamPath: "/x.json"}); got != "/x.json" || err != nil {
		t.Errorf("--config-file: %q, %v", got, err)
	}
	if got, err := resolve(configFlags{path: "/x.json", upstreamPath: "/x.json"}); got != "/x.json" || err != nil {
		t.Errorf("both flags naming one file: %q, %v", got, err)
	}
	if _, err := resolve(configFlags{path: "/x.json", upstreamPath: "/y.json"}); err == nil {
		t.Error("--config and --config-file naming different files were taken")
	}
	c := configFlags{path: "/x.json"}
	c.opts.ResourcePrefix = "Not_A_Prefix"
	if _, err := resolve(c); err == nil || !strings.Contains(err.Error(), "--resource-prefix") {
		t.Errorf("a bad --resource-prefix: %v", err)
	}
}

func TestLogLevel(t *testing.T) {
	for in, want := range map[string]zerolog.Level{"debug": zerolog.DebugLevel, "warn": zerolog.WarnLevel, "0": zerolog.InfoLevel, "3": zerolog.InfoLevel, "4": zerolog.DebugLevel, "10": zerolog.DebugLevel} {
		if got, err := logLevel(in); got != want || err != nil {
			t.Errorf("logLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "trace", "loud"} {
		if _, err := logLevel(bad); err == nil {
			t.Errorf("logLevel(%q) was taken", bad)
		}
	}
}

// scan takes the SR-IOV device plugin's config flags too, so that a
// migration can be checked against the config it runs with today.
func TestScanUpstreamFlags(t *testing.T) {
	r, err := sysfsgen.BuildScenario(t.TempDir(), sysfsgen.ScenarioSRIOV)
	if err != nil {
		t.Fatal(err)
	}
	args := scanArgs(r, scanConfigs[sysfsgen.ScenarioSRIOV], "--resource-prefix", "openshift.io", "--format", "json")
	args[slices.Index(args, "--config")] = "--config-file"
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `"openshift.io/`) || strings.Contains(stdout, `"intel.com/`) {
		t.Errorf("pools not all under openshift.io:\n%s", stdout)
	}
}
