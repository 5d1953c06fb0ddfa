package deploy_test

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/deploy"
	"github.com/devledger/devledger/internal/image"
)

// Namespace is where every namespaced object lives.
const namespace = "devledger"

// kustomizations are the dirs `kubectl apply -k` is pointed at.
var kustomizations = []string{"base", "overlays/sriov-nic", "overlays/vfio-gpu", "overlays/per-node"}

// rendered is one kustomization built, its objects decoded.
type rendered struct {
	dir        string
	objects    []object
	daemonSet  *appsv1.DaemonSet
	configMaps map[string]*corev1.ConfigMap
	accounts   map[string]*corev1.ServiceAccount
	namespaces map[string]*corev1.Namespace
}

// render builds dir and decodes what it holds, strictly, into the API
// types; every file it reads is added to used.
func render(t *testing.T, dir string, used map[string]bool) rendered {
	t.Helper()
	objs, err := build(dir, used)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{dir: dir, objects: objs, configMaps: map[string]*corev1.ConfigMap{},
		accounts: map[string]*corev1.ServiceAccount{}, namespaces: map[string]*corev1.Namespace{}}
	seen := map[string]bool{}
	for _, o := range objs {
		if seen[o.id()] {
			t.Errorf("%s: %s twice", dir, o.id())
		}
		seen[o.id()] = true
		// The merged object must still be a valid one, strictly.
		typed, _, err := decodeStrict(o.JSON)
		if err != nil {
			t.Fatalf("%s: %s after patches: %v", dir, o.id(), err)
		}
		switch v := typed.(type) {
		case *appsv1.DaemonSet:
			if r.daemonSet != nil {
				t.Fatalf("%s: two DaemonSets", dir)
			}
			r.daemonSet = v
		case *corev1.ConfigMap:
			r.configMaps[v.Name] = v
		case *corev1.ServiceAccount:
			r.accounts[v.Name] = v
		case *corev1.Namespace:
			r.namespaces[v.Name] = v
		}
	}
	if r.daemonSet == nil {
		t.Fatalf("%s: no DaemonSet", dir)
	}
	return r
}

// TestEveryFileIsUsed: every YAML file under deploy/ is a kustomization or
// something one of them reads, and decodes; nothing lies around unused.
func TestEveryFileIsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range kustomizations {
		render(t, dir, used)
	}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ext := filepath.Ext(p)
		if !d.IsDir() && (ext == ".yaml" || ext == ".yml") && !used[p] {
			t.Errorf("%s is in no kustomization", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStrictDecoding: the decoder the other tests trust refuses unknown
// and duplicated fields and wrong types, and the resolver refuses what it
// cannot resolve.
func TestStrictDecoding(t *testing.T) {
	bad := map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostNetwrok: true\n",
		"duplicate":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"wrong type":    "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nautomountServiceAccountToken: \"no\"\n",
		"unknown kind":  "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
	}
	for name, doc := range bad {
		t.Run(name, func(t *testing.T) {
			if _, _, err := decodeStrict([]byte(doc)); err == nil {
				t.Errorf("accepted:\n%s", doc)
			}
		})
	}

	writeDir := func(t *testing.T, files map[string]string) string {
		t.Helper()
		dir := t.TempDir()
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {a: b}\n"
	badDirs := map[string]map[string]string{
		"missing resource": {"kustomization.yaml": head + "resources: [nope.yaml]\n"},
		"missing patch":    {"kustomization.yaml": head + "resources: [cm.yaml]\npatches: [{path: nope.yaml}]\n", "cm.yaml": cm},
		"patch hits nothing": {"kustomization.yaml": head + "resources: [cm.yaml]\npatches: [{path: p.yaml}]\n", "cm.yaml": cm,
			"p.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: ns}\ndata: {a: c}\n"},
		"field the resolver lacks":  {"kustomization.yaml": head + "resources: [cm.yaml]\nnamePrefix: x-\n", "cm.yaml": cm},
		"dir without kustomization": {"kustomization.yaml": head + "resources: [sub]\n", "sub/cm.yaml": cm},
	}
	for name, files := range badDirs {
		t.Run(name, func(t *testing.T) {
			if _, err := build(writeDir(t, files), map[string]bool{}); err == nil {
				t.Error("built")
			}
		})
	}

	// And the patch semantics the overlays rely on.
	dir := writeDir(t, map[string]string{
		"kustomization.yaml": head + "resources: [cm.yaml]\npatches: [{path: p.yaml}]\n",
		"cm.yaml":            cm,
		"p.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata:\n  $patch: replace\n  z: w\n",
	})
	objs, err := build(dir, map[string]bool{})
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.ConfigMap
	if err := json.Unmarshal(objs[0].JSON, &got); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Data, map[string]string{"z": "w"}) {
		t.Errorf("$patch: replace gave %v", got.Data)
	}
}

// TestNamespaceAndAccount: everything lives in one namespace, created
// here, and the pod runs as an account with no token.
func TestNamespaceAndAccount(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir, map[string]bool{})
			if _, ok := r.namespaces[namespace]; !ok {
				t.Errorf("no Namespace %s", namespace)
			}
			for _, o := range r.objects {
				if o.Kind != "Namespace" && o.Namespace != namespace {
					t.Errorf("%s: namespace %q, want %q", o.id(), o.Namespace, namespace)
				}
			}
			pod := r.daemonSet.Spec.Template.Spec
			sa, ok := r.accounts[pod.ServiceAccountName]
			if !ok {
				t.Fatalf("pod runs as ServiceAccount %q, which is not here", pod.ServiceAccountName)
			}
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				t.Error("ServiceAccount mounts a token")
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("pod mounts a token")
			}
		})
	}
}

// hostMount is a host path the daemon needs.
type hostMount struct {
	path     string
	readOnly bool
	typ      corev1.HostPathType
	// flag is the daemon flag that must name where it is mounted ("" for
	// none); suffix is what the flag's value plus suffix must equal.
	flag, suffix string
}

var hostMounts = []hostMount{
	{"/var/lib/kubelet/device-plugins", false, corev1.HostPathDirectory, "--kubelet-dir", "/device-plugins"},
	{"/var/lib/kubelet/plugins_registry", false, corev1.HostPathDirectory, "--kubelet-dir", "/plugins_registry"},
	{"/var/lib/kubelet/pod-resources", false, corev1.HostPathDirectory, "--kubelet-dir", "/pod-resources"},
	{"/sys", true, corev1.HostPathDirectory, "--sysfs-root", ""},
	{"/dev", true, corev1.HostPathDirectory, "--dev-root", ""},
	{"/var/lib/devledger", false, corev1.HostPathDirectoryOrCreate, "--state-dir", ""},
	{"/var/run/k8s.cni.cncf.io/devinfo/dp", false, corev1.HostPathDirectoryOrCreate, "--devinfo-dir", ""},
}

// flagValues reads "--name=value" args; a flag given twice fails.
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "--") {
			t.Errorf("arg %q: want --name=value", a)
			continue
		}
		if _, dup := vals[name]; dup {
			t.Errorf("flag %s given twice", name)
		}
		vals[name] = val
	}
	return vals
}

// TestHardening asserts, for the base and every overlay, what
// docs/operations.md promises about the pod.
func TestHardening(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir, map[string]bool{})
			ds := r.daemonSet
			pod := ds.Spec.Template.Spec

			if pod.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", pod.PriorityClassName)
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 30 {
				t.Errorf("terminationGracePeriodSeconds %v: the SIGTERM drain takes up to 20 s, want 30", g)
			}
			if pod.HostPID || pod.HostIPC {
				t.Error("hostPID or hostIPC")
			}
			if sc := pod.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("pod seccompProfile is not RuntimeDefault")
			}
			us := ds.Spec.UpdateStrategy
			if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil ||
				us.RollingUpdate.MaxUnavailable == nil || us.RollingUpdate.MaxUnavailable.String() != "1" {
				t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", us)
			}
			for _, taint := range []corev1.Taint{
				{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/sriov", Effect: corev1.TaintEffectNoSchedule},
				{Key: "dedicated", Value: "accelerators", Effect: corev1.TaintEffectNoExecute},
			} {
				if !tolerated(pod.Tolerations, taint) {
					t.Errorf("does not tolerate the taint %s", taint.ToString())
				}
			}

			if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
				t.Fatalf("%d containers and %d init containers, want one container", len(pod.Containers), len(pod.InitContainers))
			}
			c := pod.Containers[0]
			if want := image.Repository + ":" + deploy.Version; c.Image != want {
				t.Errorf("image %q, want %q (deploy/VERSION)", c.Image, want)
			}
			if len(c.Command) == 0 || c.Command[0] != image.BinaryPath || !slices.Equal(c.Command[1:], []string{"run"}) {
				t.Errorf("command %q, want [%s run]", c.Command, image.BinaryPath)
			}
			sc := c.SecurityContext
			if sc == nil {
				t.Fatal("no container securityContext")
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Error("privileged")
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Error("allowPrivilegeEscalation is not false")
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Error("readOnlyRootFilesystem is not true")
			}
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("capabilities %+v, want drop [ALL] and nothing added", sc.Capabilities)
			}
			if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("container seccompProfile %s", sc.SeccompProfile.Type)
			}

			checkResources(t, c)
			flags := flagValues(t, c.Args)
			checkMounts(t, pod, c, flags)
			checkProbes(t, c, flags)
		})
	}
}

// tolerated reports whether some toleration tolerates taint.
func tolerated(tols []corev1.Toleration, taint corev1.Taint) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(klog.Background(), &taint, false) {
			return true
		}
	}
	return false
}

func checkResources(t *testing.T, c corev1.Container) {
	t.Helper()
	req, lim := c.Resources.Requests, c.Resources.Limits
	memReq, memLim := req[corev1.ResourceMemory], lim[corev1.ResourceMemory]
	if memReq.IsZero() || memLim.IsZero() || req.Cpu().IsZero() {
		t.Fatalf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if memLim.Cmp(memReq) < 0 {
		t.Errorf("memory limit %s under the request %s", memLim.String(), memReq.String())
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		soft, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
		if err != nil {
			t.Errorf("GOMEMLIMIT %q: %v", e.Value, err)
		} else if soft.Cmp(memLim) >= 0 {
			t.Errorf("GOMEMLIMIT %s is not under the memory limit %s", e.Value, memLim.String())
		}
	}
}

func checkMounts(t *testing.T, pod corev1.PodSpec, c corev1.Container, flags map[string]string) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string][]corev1.VolumeMount{} // by volume name
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount of %s: no such volume", m.Name)
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("mount of %s uses a subPath", m.Name)
		}
		mounts[m.Name] = append(mounts[m.Name], m)
	}
	wanted := map[string]bool{}
	for _, want := range hostMounts {
		wanted[want.path] = true
		var vol *corev1.Volume
		for _, v := range pod.Volumes {
			if v.HostPath != nil && v.HostPath.Path == want.path {
				vol = &v
				break
			}
		}
		if vol == nil {
			t.Errorf("no hostPath volume for %s", want.path)
			continue
		}
		if vol.HostPath.Type == nil || *vol.HostPath.Type != want.typ {
			t.Errorf("hostPath %s: type %v, want %s", want.path, vol.HostPath.Type, want.typ)
		}
		ms := mounts[vol.Name]
		if len(ms) != 1 {
			t.Errorf("hostPath %s is mounted %d times, want once", want.path, len(ms))
			continue
		}
		m := ms[0]
		if m.ReadOnly != want.readOnly {
			t.Errorf("hostPath %s: readOnly %v, want %v", want.path, m.ReadOnly, want.readOnly)
		}
		if want.readOnly && (m.RecursiveReadOnly == nil || *m.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled) {
			t.Errorf("hostPath %s: read-only, but its sub-mounts are not", want.path)
		}
		if want.flag != "" {
			if got, ok := flags[want.flag]; !ok {
				t.Errorf("no %s flag", want.flag)
			} else if got+want.suffix != m.MountPath {
				t.Errorf("%s=%s, but %s is mounted at %s", want.flag, got, want.path, m.MountPath)
			}
		}
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && !wanted[v.HostPath.Path] {
			t.Errorf("hostPath %s is not one the daemon needs", v.HostPath.Path)
		}
	}
	// The config: a ConfigMap mounted whole, read-only, as a directory.
	n := 0
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		n++
		if v.ConfigMap.Name != "devledger-config" {
			t.Errorf("ConfigMap volume %s mounts %s, want devledger-config (the name the daemon's error gives)", v.Name, v.ConfigMap.Name)
		}
		if len(v.ConfigMap.Items) > 0 {
			t.Errorf("ConfigMap volume %s picks items: mount it whole", v.Name)
		}
		ms := mounts[v.Name]
		if len(ms) != 1 || !ms[0].ReadOnly {
			t.Errorf("ConfigMap volume %s: want one read-only mount, have %+v", v.Name, ms)
		}
	}
	if n != 1 {
		t.Errorf("%d ConfigMap volumes, want 1", n)
	}
}

func checkProbes(t *testing.T, c corev1.Container, flags map[string]string) {
	t.Helper()
	addr, ok := flags["--metrics-addr"]
	if !ok {
		t.Fatal("no --metrics-addr: the probes have nothing to ask")
	}
	_, port, _ := strings.Cut(addr, ":")
	probes := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startup", c.StartupProbe, "/healthz"},
		{"liveness", c.LivenessProbe, "/healthz"},
		{"readiness", c.ReadinessProbe, "/readyz"},
	}
	for _, p := range probes {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			t.Errorf("%s probe asks %s, want %s", p.name, g.Path, p.path)
		}
		got := g.Port.String()
		for _, cp := range c.Ports {
			if cp.Name != "" && cp.Name == got {
				got = strconv.Itoa(int(cp.ContainerPort))
			}
		}
		if got != port {
			t.Errorf("%s probe port %s, but --metrics-addr=%s", p.name, g.Port.String(), addr)
		}
	}
}

// expandVars does the kubelet's $(VAR) expansion: $(NAME) is replaced
// when vars has NAME, "$$" is a literal "$", anything else stays.
func expandVars(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				if v, ok := vars[s[i+2:i+end]]; ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerEnv is the container's environment on node as the kubelet
// builds it: in order, each value expanded with the ones before it.
func containerEnv(t *testing.T, c corev1.Container, node string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = expandVars(e.Value, vars)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			vars[e.Name] = node
		default:
			t.Errorf("env %s: the test knows values and spec.nodeName only", e.Name)
		}
	}
	return vars
}

// nodesOf returns the node names the DaemonSet is pinned to by hostname
// affinity, or one made-up name when it is not pinned.
func nodesOf(pod corev1.PodSpec) []string {
	if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var names []string
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn {
					names = append(names, e.Values...)
				}
			}
		}
		if len(names) > 0 {
			return names
		}
	}
	return []string{"any-node"}
}

// TestConfigs: on every node the DaemonSet runs on, --config names a file
// of the mounted ConfigMap, and that file is a valid config with no
// warnings; every key of the ConfigMap is some node's config.
func TestConfigs(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir, map[string]bool{})
			pod := r.daemonSet.Spec.Template.Spec
			c := pod.Containers[0]
			var mountDir string
			for _, m := range c.VolumeMounts {
				for _, v := range pod.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						mountDir = m.MountPath
					}
				}
			}
			cm, ok := r.configMaps["devledger-config"]
			if !ok {
				t.Fatal("no ConfigMap devledger-config")
			}
			unused := map[string]bool{}
			for k := range cm.Data {
				unused[k] = true
			}
			for _, node := range nodesOf(pod) {
				env := containerEnv(t, c, node)
				var cfgPath string
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(expandVars(a, env), "--config="); ok {
						cfgPath = v
					}
				}
				key, ok := strings.CutPrefix(cfgPath, mountDir+"/")
				if !ok || strings.Contains(key, "/") || strings.Contains(key, "$(") {
					t.Errorf("node %s: --config=%s is not a file of the ConfigMap mounted at %s", node, cfgPath, mountDir)
					continue
				}
				data, ok := cm.Data[key]
				if !ok {
					t.Errorf("node %s: --config=%s, but the ConfigMap has no key %s", node, cfgPath, key)
					continue
				}
				delete(unused, key)
				cfg, err := config.Parse(path.Join(mountDir, key), []byte(data))
				if err != nil {
					t.Errorf("node %s: %v", node, err)
					continue
				}
				if len(cfg.Warnings) > 0 {
					t.Errorf("node %s: warnings:\n%s", node, strings.Join(cfg.Warnings, "\n"))
				}
				if len(cfg.Resources) == 0 {
					t.Errorf("node %s: no pools", node)
				}
			}
			if len(unused) > 0 {
				t.Errorf("ConfigMap keys no node reads: %v", slices.Sorted(maps.Keys(unused)))
			}
		})
	}
}

// TestVersion: deploy/VERSION is the release everywhere it is written in
// the manifests.
func TestVersion(t *testing.T) {
	if deploy.Version == "" || strings.ContainsAny(deploy.Version, " \t\n:") {
		t.Fatalf("deploy/VERSION %q", deploy.Version)
	}
	k, err := readKustomization("base")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, im := range k.Images {
		if im.Name == image.Repository {
			found = true
			if im.NewTag != deploy.Version {
				t.Errorf("base images newTag %q, deploy/VERSION %q", im.NewTag, deploy.Version)
			}
		}
	}
	if !found {
		t.Errorf("base kustomization sets no tag for %s", image.Repository)
	}
	// The DaemonSet applied without kustomize gets the same image.
	data, err := os.ReadFile("base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatal(err)
	}
	if got, want := ds.Spec.Template.Spec.Containers[0].Image, image.Repository+":"+deploy.Version; got != want {
		t.Errorf("base/daemonset.yaml image %q, want %q", got, want)
	}
}

// TestOverlaysPickNodes: each overlay runs only where its hardware is,
// by nodeSelector or node affinity beyond the base's OS label.
func TestOverlaysPickNodes(t *testing.T) {
	for _, dir := range kustomizations[1:] {
		t.Run(dir, func(t *testing.T) {
			pod := render(t, dir, map[string]bool{}).daemonSet.Spec.Template.Spec
			extra := len(pod.NodeSelector) > 1
			if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				extra = true
			}
			if !extra {
				t.Error("runs on every Linux node")
			}
		})
	}
}

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"A": "x", "NODE_NAME": "n1"}
	for in, want := range map[string]string{
		"/etc/devledger/$(NODE_NAME).yaml": "/etc/devledger/n1.yaml",
		"$(A)$(A)":                         "xx",
		"$$(A)":                            "$(A)",
		"$(B)":                             "$(B)",
		"$(A":                              "$(A",
		"a$":                               "a$",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}
