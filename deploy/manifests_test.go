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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

// components are the kustomize components under components/, which a
// kustomization of your own adds to one of kustomizations.
var components = []string{"k8s-1.30", "podmonitor"}

// output is what `kubectl apply -k` applies for a kustomization of your own
// that names dir as its resource and adds components.
type output struct {
	dir        string
	components []string
}

func (o output) name() string { return strings.Join(append([]string{o.dir}, o.components...), "+") }

// minKubernetes is the oldest Kubernetes release the output is for.
func (o output) minKubernetes() string {
	if slices.Contains(o.components, "k8s-1.30") {
		return "1.30"
	}
	return oldestKubernetes
}

// outputs are every kustomization, alone and with every set of
// components.
func outputs() []output {
	var outs []output
	for _, dir := range kustomizations {
		for set := range 1 << len(components) {
			out := output{dir: dir}
			for i, c := range components {
				if set&(1<<i) != 0 {
					out.components = append(out.components, c)
				}
			}
			outs = append(outs, out)
		}
	}
	return outs
}

// rendered is one output built, its objects decoded.
type rendered struct {
	objects     []object
	daemonSet   *appsv1.DaemonSet
	configMaps  map[string]*corev1.ConfigMap
	accounts    map[string]*corev1.ServiceAccount
	namespaces  map[string]*corev1.Namespace
	quotas      map[string]*corev1.ResourceQuota
	podMonitors map[string]*podMonitor
}

// render builds out and decodes what it holds, strictly, into its types;
// every file it reads is added to used.
func render(t *testing.T, out output, used map[string]bool) rendered {
	t.Helper()
	var dirs []string
	for _, c := range out.components {
		dirs = append(dirs, filepath.Join("components", c))
	}
	objs, err := buildWith(out.dir, dirs, used)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{objects: objs, configMaps: map[string]*corev1.ConfigMap{},
		accounts: map[string]*corev1.ServiceAccount{}, namespaces: map[string]*corev1.Namespace{},
		quotas: map[string]*corev1.ResourceQuota{}, podMonitors: map[string]*podMonitor{}}
	dir := out.name()
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
		case *corev1.ResourceQuota:
			r.quotas[v.Name] = v
		case *podMonitor:
			r.podMonitors[v.Name] = v
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
	for _, out := range outputs() {
		render(t, out, used)
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
		// encoding/json would take it; the API server does not.
		"miscased field":   "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      HostNetwork: true\n",
		"PodMonitor field": "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x}\nspec:\n  podMetricEndpoints: [{port: metrics}]\n",
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
	const componentHead = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {a: b}\n"
	badDirs := map[string]map[string]string{
		"missing resource": {"kustomization.yaml": head + "resources: [nope.yaml]\n"},
		"missing patch":    {"kustomization.yaml": head + "resources: [cm.yaml]\npatches: [{path: nope.yaml}]\n", "cm.yaml": cm},
		"patch hits nothing": {"kustomization.yaml": head + "resources: [cm.yaml]\npatches: [{path: p.yaml}]\n", "cm.yaml": cm,
			"p.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: ns}\ndata: {a: c}\n"},
		"field the resolver lacks":  {"kustomization.yaml": head + "resources: [cm.yaml]\nnamePrefix: x-\n", "cm.yaml": cm},
		"dir without kustomization": {"kustomization.yaml": head + "resources: [sub]\n", "sub/cm.yaml": cm},
		"component as a resource": {"kustomization.yaml": head + "resources: [c]\n",
			"c/kustomization.yaml": componentHead + "resources: [cm.yaml]\n", "c/cm.yaml": cm},
		"kustomization as a component": {"kustomization.yaml": head + "resources: [cm.yaml]\ncomponents: [k]\n", "cm.yaml": cm,
			"k/kustomization.yaml": head + "resources: [other.yaml]\n",
			"k/other.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: ns}\n"},
		"component patch hits nothing": {"kustomization.yaml": head + "resources: [cm.yaml]\ncomponents: [c]\n", "cm.yaml": cm,
			"c/kustomization.yaml": componentHead + "patches: [{path: p.yaml}]\n",
			"c/p.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: ns}\ndata: {a: c}\n"},
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

	// A component patches what the kustomization gathered from its
	// resources, and adds its own resources.
	dir = writeDir(t, map[string]string{
		"kustomization.yaml":   head + "resources: [cm.yaml]\ncomponents: [c]\n",
		"cm.yaml":              cm,
		"c/kustomization.yaml": componentHead + "resources: [extra.yaml]\npatches: [{path: p.yaml}]\n",
		"c/extra.yaml":         "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: s, namespace: ns}\n",
		"c/p.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {e: f}\n",
	})
	if objs, err = build(dir, map[string]bool{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, o := range objs {
		ids = append(ids, o.id())
	}
	if !slices.Equal(ids, []string{"ConfigMap/ns/c", "ServiceAccount/ns/s"}) {
		t.Fatalf("component gave %v", ids)
	}
	var patched corev1.ConfigMap
	if err := json.Unmarshal(objs[0].JSON, &patched); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(patched.Data, map[string]string{"a": "b", "e": "f"}) {
		t.Errorf("component patch gave %v", patched.Data)
	}

	// A list merged by key comes out as kustomize orders it: what the
	// patch names first, in its order, then the rest.
	const ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d, namespace: ns}\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          env:\n"
	dir = writeDir(t, map[string]string{
		"kustomization.yaml": head + "resources: [ds.yaml]\npatches: [{path: p.yaml}]\n",
		"ds.yaml":            ds + "            - {name: A, value: a}\n            - {name: B, value: b}\n            - {name: C, value: c}\n",
		"p.yaml":             ds + "            - {name: C, value: x}\n            - {name: A, value: a}\n",
	})
	if objs, err = build(dir, map[string]bool{}); err != nil {
		t.Fatal(err)
	}
	var d appsv1.DaemonSet
	if err := json.Unmarshal(objs[0].JSON, &d); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if !slices.Equal(env, []string{"C=x", "A=a", "B=b"}) {
		t.Errorf("patched env %v, want [C=x A=a B=b]", env)
	}
}

// TestNamespaceAndAccount: everything lives in one namespace, created
// here, and the pod runs as an account with no token.
func TestNamespaceAndAccount(t *testing.T) {
	for _, out := range outputs() {
		t.Run(out.name(), func(t *testing.T) {
			r := render(t, out, map[string]bool{})
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
	{"/var/run/cdi", false, corev1.HostPathDirectoryOrCreate, "--cdi-spec-dir", ""},
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
	for _, out := range outputs() {
		t.Run(out.name(), func(t *testing.T) {
			r := render(t, out, map[string]bool{})
			ds := r.daemonSet
			pod := ds.Spec.Template.Spec

			if pod.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", pod.PriorityClassName)
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 30 {
				t.Errorf("terminationGracePeriodSeconds %v: the SIGTERM stop takes up to 22 s, want 30", g)
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
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("terminationMessagePolicy %q: a pod that exits on a bad config would not say why in its status", c.TerminationMessagePolicy)
			}
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
			checkMounts(t, pod, c, flags, out.minKubernetes() != oldestKubernetes)
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

// checkMounts checks the pod's volumes and mounts; recursive says whether
// the output is for a release that has recursiveReadOnly (1.30).
func checkMounts(t *testing.T, pod corev1.PodSpec, c corev1.Container, flags map[string]string, recursive bool) {
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
		switch rro := m.RecursiveReadOnly; {
		case want.readOnly && recursive && (rro == nil || *rro == corev1.RecursiveReadOnlyDisabled):
			t.Errorf("hostPath %s: read-only, but its sub-mounts are not", want.path)
		case !recursive && rro != nil:
			t.Errorf("hostPath %s: recursiveReadOnly, which Kubernetes before 1.30 refuses", want.path)
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
		// The daemon answers a probe within probeWait (the actors' answer
		// it waits for); a shorter timeout fails a slow but right answer.
		if timeout := max(p.probe.TimeoutSeconds, 1); time.Duration(timeout)*time.Second <= probeWait {
			t.Errorf("%s probe times out after %ds, within the %s the daemon may take to answer", p.name, timeout, probeWait)
		}
	}
}

// probeWait is how long the daemon's /healthz and /readyz may take
// (actors/daemon/metrics.go).
const probeWait = 2 * time.Second

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
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[e.Name] = "NAMESPACE"
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = "POD"
		default:
			t.Errorf("env %s: the test knows values, spec.nodeName, metadata.namespace and metadata.name only", e.Name)
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
	for _, out := range outputs() {
		t.Run(out.name(), func(t *testing.T) {
			r := render(t, out, map[string]bool{})
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
	k, err := readKustomization("base", kindKustomization)
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
	for _, out := range outputs() {
		if out.dir == "base" {
			continue
		}
		t.Run(out.name(), func(t *testing.T) {
			pod := render(t, out, map[string]bool{}).daemonSet.Spec.Template.Spec
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

// selectsPriorityClass reports whether a quota's scope selector takes in
// pods of priority class pc: every requirement must hold, and any scope
// other than PriorityClass (BestEffort, Terminating, ...) is one the
// DaemonSet's pods are not counted by for sure, so it does not.
func selectsPriorityClass(q *corev1.ResourceQuota, pc string) bool {
	if len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector == nil || len(q.Spec.ScopeSelector.MatchExpressions) == 0 {
		return false
	}
	for _, req := range q.Spec.ScopeSelector.MatchExpressions {
		if req.ScopeName != corev1.ResourceQuotaScopePriorityClass {
			return false
		}
		in := slices.Contains(req.Values, pc)
		switch req.Operator {
		case corev1.ScopeSelectorOpIn:
			if !in {
				return false
			}
		case corev1.ScopeSelectorOpNotIn:
			if in {
				return false
			}
		case corev1.ScopeSelectorOpExists:
		default:
			return false
		}
	}
	return true
}

// TestPriorityClassAdmitted: the pods' priority class is admitted where
// the API server limits the system classes to namespaces with a quota for
// them (GKE): a ResourceQuota in the pods' namespace selects the class,
// counts only pods, and has room for one per node.
func TestPriorityClassAdmitted(t *testing.T) {
	for _, out := range outputs() {
		t.Run(out.name(), func(t *testing.T) {
			r := render(t, out, map[string]bool{})
			pc := r.daemonSet.Spec.Template.Spec.PriorityClassName
			if pc == "" {
				t.Fatal("no priorityClassName")
			}
			var found []string
			for name, q := range r.quotas {
				if q.Namespace != r.daemonSet.Namespace || !selectsPriorityClass(q, pc) {
					continue
				}
				found = append(found, name)
				for res := range q.Spec.Hard {
					if res != corev1.ResourcePods {
						// cpu or memory here would refuse pods without
						// that limit, and the DaemonSet has no CPU limit.
						t.Errorf("ResourceQuota %s limits %s: count pods only", name, res)
					}
				}
				pods := q.Spec.Hard[corev1.ResourcePods]
				if pods.Value() < 5000 {
					t.Errorf("ResourceQuota %s allows %s pods: fewer than the nodes of a large cluster", name, pods.String())
				}
			}
			if len(found) != 1 {
				t.Errorf("%d ResourceQuotas in %s select priority class %s (%v), want 1", len(found), r.daemonSet.Namespace, pc, found)
			}
		})
	}
}

// TestScrapeTargets: the prometheus.io annotations and the PodMonitor
// point at the port and path the daemon serves metrics on.
func TestScrapeTargets(t *testing.T) {
	for _, out := range outputs() {
		t.Run(out.name(), func(t *testing.T) {
			r := render(t, out, map[string]bool{})
			tmpl := r.daemonSet.Spec.Template
			c := tmpl.Spec.Containers[0]
			addr, ok := flagValues(t, c.Args)["--metrics-addr"]
			if !ok {
				t.Fatal("no --metrics-addr")
			}
			_, port, _ := strings.Cut(addr, ":")
			ann := tmpl.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("pod annotations %v, want prometheus.io/scrape true, port %s, path /metrics", ann, port)
			}

			wantMonitor := slices.Contains(out.components, "podmonitor")
			if got := len(r.podMonitors); got != map[bool]int{false: 0, true: 1}[wantMonitor] {
				t.Fatalf("%d PodMonitors", got)
			}
			for name, pm := range r.podMonitors {
				if pm.Namespace != r.daemonSet.Namespace {
					t.Errorf("PodMonitor %s in %s, the pods in %s", name, pm.Namespace, r.daemonSet.Namespace)
				}
				if ns := pm.Spec.NamespaceSelector; ns.Any || (len(ns.MatchNames) > 0 && !slices.Contains(ns.MatchNames, r.daemonSet.Namespace)) {
					t.Errorf("PodMonitor %s: namespaceSelector %+v, want the pods' namespace only", name, ns)
				}
				sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Empty() || !sel.Matches(labels.Set(tmpl.Labels)) {
					t.Errorf("PodMonitor %s: selector %s does not select the pods (%v)", name, sel, tmpl.Labels)
				}
				if len(pm.Spec.PodMetricsEndpoints) != 1 {
					t.Fatalf("PodMonitor %s: %d endpoints, want 1", name, len(pm.Spec.PodMetricsEndpoints))
				}
				ep := pm.Spec.PodMetricsEndpoints[0]
				var named *corev1.ContainerPort
				for i, cp := range c.Ports {
					if cp.Name == ep.Port {
						named = &c.Ports[i]
					}
				}
				if named == nil || strconv.Itoa(int(named.ContainerPort)) != port {
					t.Errorf("PodMonitor %s scrapes port %q, which is not the container port of --metrics-addr=%s", name, ep.Port, addr)
				}
				if ep.Path != "" && ep.Path != "/metrics" {
					t.Errorf("PodMonitor %s scrapes %s, want /metrics", name, ep.Path)
				}
			}
		})
	}
}
