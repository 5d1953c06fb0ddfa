package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/image"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// The SR-IOV device plugin's DaemonSet args, given to run as they are: the
// config comes from --config-file, every pool that names no prefix gets
// --resource-prefix's, --log-level=10 is debug, --use-cdi answers every
// pool's Allocate with CDI names whose specs are written, and --log-dir is
// warned about, not refused.
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
	resp, err := n.kubelet.Allocate(ctx, "openshift.io/sriov_vfio", []string{"0000:3b:01.2"})
	if err != nil {
		t.Fatal(err)
	}
	if names := resp.ContainerResponses[0].CdiDevices; len(names) != 1 || names[0].Name != "openshift.io/net-pci=0000:3b:01.2" {
		t.Errorf("--use-cdi: Allocate answered CDI names %v", names)
	}
	if specs, _ := filepath.Glob(filepath.Join(n.cdiDir(), "devledger_openshift.io_*.json")); len(specs) != 3 {
		t.Errorf("--use-cdi: CDI specs %v, want one per pool", specs)
	}
	log := p.stderr.String()
	for _, want := range []string{`"flag":"--log-dir"`, `"level":"debug"`} {
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

// The image's entrypoint followed by the args of a DaemonSet written for
// the SR-IOV device plugin: the config is found where that DaemonSet puts
// it. The plugin's own DaemonSet passes no config flag and mounts the
// ConfigMap at /etc/pcidp; the sriov-network-operator's passes
// --config-file. An entrypoint that names a config itself takes the
// first for devledger's own place, and refuses the second as two files.
func TestImageEntrypointTakesUpstreamArgs(t *testing.T) {
	entry := image.Entrypoint()
	if len(entry) < 2 || entry[0] != image.BinaryPath || entry[1] != "run" {
		t.Fatalf("image entrypoint %q, want %s run ...", entry, image.BinaryPath)
	}
	dir := t.TempDir()
	own, upstream := filepath.Join(dir, "devledger.json"), filepath.Join(dir, "pcidp.json")
	if err := os.WriteFile(upstream, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the plugin's DaemonSet", []string{"--log-dir=sriovdp", "--log-level=10"}, upstream},
		{"the operator's DaemonSet", []string{"--log-level=10", "--resource-prefix=openshift.io", "--config-file=/etc/pcidp/worker-1"}, "/etc/pcidp/worker-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("run", "", io.Discard)
			var f daemonFlags
			f.register(fs)
			if err := parseFlags(fs, append(slices.Clone(entry[2:]), tc.args...)); err != nil {
				t.Fatal(err)
			}
			got, err := f.config.resolve([]string{own, upstream})
			if got != tc.want || err != nil {
				t.Errorf("%q then %q: config %q, %v; want %s", entry, tc.args, got, err, tc.want)
			}
		})
	}
}

// Every flag run takes is in docs/operations.md's table of them, where an
// operator who meets it in a manifest or in run -h looks it up.
func TestRunFlagsDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### The daemon's flags\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### The daemon's flags"`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f daemonFlags
	f.register(fs)
	// A row of its own, with its default: a mention in another row's
	// text, or a row of a longer flag it begins, is not one.
	fs.VisitAll(func(fl *flag.Flag) {
		row := regexp.MustCompile("(?m)^\\| `--" + regexp.QuoteMeta(fl.Name) + "[ `]")
		if !row.MatchString(section) {
			t.Errorf("--%s (%s) has no row in docs/operations.md's table of run's flags", fl.Name, fl.Usage)
		}
	})
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
// migration can be checked against the config a node runs with today:
// docs/migrating.md's checks, on the sriov node, with the upstream
// DaemonSet's sample config and with configs as the sriov-network-operator
// renders them for a node (prefix openshift.io, VF ranges of PFs, its
// IsRdma, NeedVhostNet and SelectorObj keys), on the mellanox node for
// RDMA, vfio-pci and both vDPA types.
func TestScanUpstreamFlags(t *testing.T) {
	nodes := map[string]sysfsgen.Roots{}
	for _, name := range []string{sysfsgen.ScenarioSRIOV, sysfsgen.ScenarioMellanox} {
		r, err := sysfsgen.BuildScenario(t.TempDir(), name)
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = r
	}
	cases := []struct {
		config string
		node   string
		prefix []string
		want   map[string][]string
	}{
		{config: "sriov-deployment-configmap.json", node: sysfsgen.ScenarioSRIOV, want: map[string][]string{
			"intel.com/intel_sriov_netdevice": {"0000:3b:01.0", "0000:3b:01.1", "0000:af:01.0"},
			"intel.com/intel_sriov_dpdk":      nil, // its pfNames are not on this node
			"intel.com/mlnx_sriov_rdma":       nil,
			"intel.com/brcm_sriov_bnxt":       nil,
		}},
		{config: "sriov-operator-node.json", node: sysfsgen.ScenarioSRIOV, prefix: []string{"--resource-prefix", "openshift.io"}, want: map[string][]string{
			"openshift.io/intel_vf_net":  {"0000:3b:01.0", "0000:3b:01.1"},
			"openshift.io/intel_vf_dpdk": {"0000:3b:01.2", "0000:3b:01.3", "0000:af:01.1", "0000:af:01.2", "0000:af:01.3"},
		}},
		{config: "sriov-operator-mellanox.json", node: sysfsgen.ScenarioMellanox, prefix: []string{"--resource-prefix", "openshift.io"}, want: map[string][]string{
			"openshift.io/mlx_rdma":        {"0000:5e:00.2", "0000:5e:00.3"},
			"openshift.io/mlx_dpdk":        {"0000:5e:00.4"},
			"openshift.io/mlx_vhost_vdpa":  {"0000:5e:00.5"},
			"openshift.io/mlx_virtio_vdpa": {"0000:5e:00.6"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.config, func(t *testing.T) {
			args := scanArgs(nodes[tc.node], filepath.Join("..", tc.config), append(tc.prefix, "--format", "json")...)
			args[slices.Index(args, "--config")] = "--config-file"
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var out struct {
				Pools []struct {
					Name    string   `json:"name"`
					Members []string `json:"members"`
				} `json:"pools"`
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, p := range out.Pools {
				got[p.Name] = p.Members
			}
			if len(got) != len(tc.want) {
				t.Errorf("pools %v, want %v", got, tc.want)
			}
			for name, members := range tc.want {
				if m, ok := got[name]; !ok || !slices.Equal(m, members) {
					t.Errorf("%s: %v (there: %v), want %v", name, m, ok, members)
				}
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "1Ki": 1024, "512Mi": 512 << 20, "1Gi": 1 << 30, "2Ti": 2 << 40} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
		if in != "4096" && in != "0" && b.String() != in {
			t.Errorf("String of %q = %q", in, b.String())
		}
	}
	for _, bad := range []string{"", "-1", "1G", "1.5Gi", "99999999999Ti"} {
		var b byteSize
		if err := b.Set(bad); err == nil {
			t.Errorf("Set(%q) took it: %d", bad, b)
		}
	}
}
