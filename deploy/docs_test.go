package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// operationsDoc is docs/operations.md, which says what the manifests do.
func operationsDoc(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// codeBlocks returns the bodies of the doc's fenced blocks of lang.
func codeBlocks(doc, lang string) []string {
	var blocks []string
	rest := doc
	for {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			return blocks
		}
		body, tail, _ := strings.Cut(after, "```")
		blocks = append(blocks, body)
		rest = tail
	}
}

// metricRow is a row of the doc's metric table: "| `name` | type | `a`,
// `b` | meaning |".
var metricRow = regexp.MustCompile("(?m)^\\| `(devledger_[a-z_]+)` \\| (counter|gauge|histogram) \\|([^|]*)\\|")

// TestDocAlerts: the doc's example PrometheusRule decodes strictly, uses
// only metrics the doc's table lists, templates only labels its series
// carry, and selects the job and node labels the PodMonitor gives.
func TestDocAlerts(t *testing.T) {
	doc := operationsDoc(t)
	metrics := map[string][]string{} // name: its labels
	for _, m := range metricRow.FindAllStringSubmatch(doc, -1) {
		var labels []string
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		if _, dup := metrics[m[1]]; dup {
			t.Errorf("metric %s listed twice", m[1])
		}
		metrics[m[1]] = labels
		if m[2] == "histogram" { // its series, as an expr names them
			metrics[m[1]+"_count"] = labels
			metrics[m[1]+"_sum"] = labels
			metrics[m[1]+"_bucket"] = append(slices.Clone(labels), "le")
		}
	}
	if rows := strings.Count(doc, "\n| `devledger_"); len(metricRow.FindAllString(doc, -1)) != rows || rows < 10 {
		t.Fatalf("read %d of the %d rows of the doc's metric table", len(metricRow.FindAllString(doc, -1)), rows)
	}

	var rules []prometheusRule
	for _, b := range codeBlocks(doc, "yaml") {
		if !strings.Contains(b, "kind: PrometheusRule") {
			continue
		}
		var pr prometheusRule
		if err := yaml.UnmarshalStrict([]byte(b), &pr); err != nil {
			t.Fatal(err)
		}
		if _, _, err := apiDecoder.Decode([]byte(b), nil, &prometheusRule{}); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, pr)
	}
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRule examples, want 1", len(rules))
	}

	// What the PodMonitor adds to every series it scrapes.
	r := render(t, output{dir: "base", components: []string{"podmonitor"}}, map[string]bool{})
	var job string
	targetLabels := []string{"job", "instance", "namespace", "pod", "container", "endpoint"}
	for _, pm := range r.podMonitors {
		job = pm.Namespace + "/" + pm.Name // the Operator's job label when jobLabel is unset
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			for _, rl := range ep.Relabelings {
				targetLabels = append(targetLabels, rl.TargetLabel)
			}
		}
	}

	metricName := regexp.MustCompile(`\b(devledger_[a-z_]+|up)\b`)
	labelRef := regexp.MustCompile(`\$labels\.([a-zA-Z_]+)`)
	names := map[string]bool{}
	for _, g := range rules[0].Spec.Groups {
		for _, rl := range g.Rules {
			t.Run(rl.Alert, func(t *testing.T) {
				if rl.Alert == "" || names[rl.Alert] {
					t.Fatalf("alert name %q empty or used twice", rl.Alert)
				}
				names[rl.Alert] = true
				expr := rl.Expr.String()
				have := slices.Clone(targetLabels)
				used := metricName.FindAllString(expr, -1)
				if len(used) == 0 {
					t.Errorf("expr %q uses no metric", expr)
				}
				for _, m := range used {
					if m == "up" {
						if !strings.Contains(expr, `job="`+job+`"`) {
							t.Errorf("expr %q: up of a job other than the PodMonitor's %s", expr, job)
						}
						continue
					}
					labels, ok := metrics[m]
					if !ok {
						t.Errorf("expr %q: %s is not in the metric table", expr, m)
					}
					have = append(have, labels...)
				}
				for _, text := range []string{rl.Annotations["summary"], rl.Annotations["description"]} {
					for _, ref := range labelRef.FindAllStringSubmatch(text, -1) {
						if !slices.Contains(have, ref[1]) {
							t.Errorf("annotation uses $labels.%s, which the series of %q lack", ref[1], expr)
						}
					}
				}
				if rl.Labels["severity"] == "" || rl.Annotations["summary"] == "" {
					t.Error("no severity label or summary annotation")
				}
			})
		}
	}
}

// configRow is a row of the doc's table of config paths by overlay:
// "| `deploy/base`, `deploy/overlays/vfio-gpu` | `/etc/devledger/config.yaml` |".
var configRow = regexp.MustCompile("(?m)^\\| ((?:`deploy/[a-z0-9/-]+`(?:, )?)+) \\| `(/etc/devledger/[^`]+)`")

// TestDocConfigPaths: the config path the doc gives for each
// kustomization, for commands run in its pods, is the one its --config
// names (on a node called NODE).
func TestDocConfigPaths(t *testing.T) {
	rows := configRow.FindAllStringSubmatch(operationsDoc(t), -1)
	seen := map[string]bool{}
	for _, row := range rows {
		for _, d := range regexp.MustCompile("`deploy/([^`]+)`").FindAllStringSubmatch(row[1], -1) {
			dir := d[1]
			seen[dir] = true
			c := render(t, output{dir: dir}, map[string]bool{}).daemonSet.Spec.Template.Spec.Containers[0]
			env := containerEnv(t, c, "NODE")
			var got string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(expandVars(a, env), "--config="); ok {
					got = v
				}
			}
			if got != row[2] {
				t.Errorf("the doc gives %s for deploy/%s, whose --config is %s", row[2], dir, got)
			}
		}
	}
	for _, dir := range kustomizations {
		if !seen[dir] {
			t.Errorf("the doc gives no config path for deploy/%s", dir)
		}
	}
}

// flagRow is a row of the doc's table of run's flags: "| `--name ARG` |
// default | DaemonSet | what |".
var flagRow = regexp.MustCompile("(?m)^\\| `--([a-z-]+)[^`]*` \\| ([^|]*) \\| ([^|]*) \\|")

// TestDocRunFlagsDaemonSet: the DaemonSet column of the doc's table of
// run's flags gives each flag the base sets, with the value it sets, and
// no other: an operator reads there what the pods run with.
func TestDocRunFlagsDaemonSet(t *testing.T) {
	_, section, ok := strings.Cut(operationsDoc(t), "\n### The daemon's flags\n")
	if !ok {
		t.Fatal(`the doc has no "### The daemon's flags"`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	documented := map[string]string{} // flag: the value the doc gives the DaemonSet
	for _, row := range flagRow.FindAllStringSubmatch(section, -1) {
		name, def, ds := row[1], strings.TrimSpace(row[2]), strings.TrimSpace(row[3])
		if ds == "the same" {
			ds = def
		}
		if ds != "" {
			documented[name] = strings.Trim(ds, "`")
		}
	}
	if len(documented) == 0 {
		t.Fatal("read no DaemonSet values from the doc's table of run's flags")
	}

	c := render(t, output{dir: "base"}, map[string]bool{}).daemonSet.Spec.Template.Spec.Containers[0]
	set := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("base arg %q is not --flag=value", a)
		}
		set[name] = value
	}
	for name, value := range set {
		if got, ok := documented[name]; !ok {
			t.Errorf("the base sets --%s=%s; the doc's DaemonSet column leaves it empty", name, value)
		} else if got != value {
			t.Errorf("the base sets --%s=%s; the doc's DaemonSet column says %s", name, value, got)
		}
	}
	for name, value := range documented {
		if _, ok := set[name]; !ok {
			t.Errorf("the doc's DaemonSet column gives --%s %s; the base does not set it", name, value)
		}
	}
}

// TestTaskFuzzRunsEveryFuzzTarget: `task fuzz` names every Fuzz function
// in the module, with its package: a target left out of it is run only on
// its seed corpus, by go test.
func TestTaskFuzzRunsEveryFuzzTarget(t *testing.T) {
	task, err := os.ReadFile(filepath.Join("..", "Taskfile.yml"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{} // "./pkg FuzzX"
	for _, m := range regexp.MustCompile(`-fuzz '\^(Fuzz\w+)\$' .* (\./\S+)`).FindAllStringSubmatch(string(task), -1) {
		named[m[2]+" "+m[1]] = true
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	found := 0
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "e2e" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found++
			pkg := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, ".."+string(filepath.Separator))))
			if !named[pkg+" "+m[1]] {
				t.Errorf("%s: %s is not in task fuzz (want -fuzz '^%s$' ... %s)", path, m[1], m[1], pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no Fuzz function found under the module")
	}
}
