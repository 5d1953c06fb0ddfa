package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	watcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// The kubelet's directories, as pkg/kubelet lays them out under its root.
var (
	devicePluginsDir   = filepath.Join(kubeletRoot, "device-plugins")
	pluginsRegistryDir = filepath.Join(kubeletRoot, "plugins_registry")
)

// pollEvery paces the condition polls of the wait helpers.
const pollEvery = 10 * time.Millisecond

// nodeNUMA is the NUMA layout the kubelet is told about (cadvisor's view of
// the fake node): two nodes, as in the sriov scenario.
var nodeNUMA = []cadvisorapi.Node{{Id: 0}, {Id: 1}}

// kubelet is one life of a kubelet process, as far as devices go: the real
// device manager with its Registration server on kubelet.sock and, with
// watcher set, the real plugin manager watching plugins_registry/. A new
// kubelet on the same node is a kubelet restart.
type kubelet struct {
	m       *devicemanager.ManagerImpl
	pods    *podList
	started time.Time
	stopPM  func()
	stopped bool
	// sources is what the device manager asks for sourcesReady.
	sources *sourcesGate
	// podResources is the PodResources service, when kubeletOptions ask for it.
	podResources *podResourcesServer
	// handler is the device manager's plugin-watcher handler, watched.
	handler *watchedHandler
	// topology is the real topology manager, when kubeletOptions name a
	// policy: admit then goes through its Admit, as the kubelet's pod
	// admission does.
	topology topologymanager.Manager
}

// watchedHandler is the device manager's plugin-watcher handler, noting
// when it deregisters each plugin: the plugin manager deregisters a socket
// that went and registers the one that replaced it in one reconcile pass,
// a millisecond or two apart, too close for a poll of capacity to see.
type watchedHandler struct {
	cache.PluginHandler
	mu           sync.Mutex
	deregistered map[string][]time.Time
}

// DeRegisterPlugin implements cache.PluginHandler.
func (h *watchedHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deregistered[name] = append(h.deregistered[name], time.Now())
}

// deregisteredSince says whether the plugin manager deregistered name
// after since.
func (h *watchedHandler) deregisteredSince(name string, since time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, at := range h.deregistered[name] {
		if at.After(since) {
			return true
		}
	}
	return false
}

// waitDeregistered waits until the plugin manager deregistered the plugin
// of resource after since (watcher mode only).
func (k *kubelet) waitDeregistered(t testing.TB, resource string, since time.Time, timeout time.Duration) {
	t.Helper()
	if k.handler == nil {
		t.Fatal("kubelet: no plugin manager (legacy mode)")
	}
	deadline := time.Now().Add(timeout)
	for !k.handler.deregisteredSince(resource, since) {
		if time.Now().After(deadline) {
			c, a := k.capacity()
			t.Fatalf("kubelet: waited %v for %s to be deregistered; capacity: %v; allocatable: %v", timeout, resource, c, a)
		}
		time.Sleep(pollEvery)
	}
}

// kubeletOptions shape a kubelet life.
type kubeletOptions struct {
	// watcher also runs the plugin manager on plugins_registry/ with the
	// device manager's handler, as every kubelet since 1.12 does.
	watcher bool
	// podResources also serves the kubelet's PodResources service on
	// pod-resources/kubelet.sock (see servePodResources), as every kubelet
	// does: the daemon's reconciler reads it.
	podResources bool
	// booting starts the device manager with its pod sources not ready, as
	// a kubelet is until it has synced its pods from every source (the API
	// server): Allocate and UpdateAllocatedDevices then take the paths of a
	// kubelet start. sourcesReady ends it.
	booting bool
	// topologyPolicy, when set ("single-numa-node", "restricted",
	// "best-effort"), gives the device manager a real topology manager
	// with that policy and the container scope over nodeNUMA, built as the
	// kubelet's container manager builds it, with the device manager as
	// its hint provider. Empty keeps the fake one (policy none).
	topologyPolicy string
	// cpuHints, with topologyPolicy, adds a second hint provider that
	// stands in for the CPU manager's static policy: every container's
	// CPUs fit on these NUMA nodes only (see cpuManagerStandIn).
	cpuHints []int
	// running are pods whose first container the container runtime
	// reports running when this kubelet starts: a kubelet restart on a
	// node whose pods run on. None runs otherwise, as after a node reboot.
	running []*v1.Pod
}

// sourcesGate is the kubelet's config.SourcesReady: not ready until open.
type sourcesGate struct{ ready atomic.Bool }

// AddSource implements config.SourcesReady.
func (*sourcesGate) AddSource(string) {}

// AllReady implements config.SourcesReady.
func (g *sourcesGate) AllReady() bool { return g.ready.Load() }

// sourcesReady says the kubelet has seen all its pod sources.
func (k *kubelet) sourcesReady() { k.sources.ready.Store(true) }

// resetKubeletRoot empties the tmpfs kubelet root, so that a test starts on a
// node where no kubelet has run (no checkpoint, no sockets).
func resetKubeletRoot(t testing.TB) {
	t.Helper()
	entries, err := os.ReadDir(kubeletRoot)
	if err != nil {
		t.Fatalf("read %s: %v", kubeletRoot, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(kubeletRoot, e.Name())); err != nil {
			t.Fatalf("empty %s: %v", kubeletRoot, err)
		}
	}
}

// logKubeletTo points the kubelet code's klog output at a file of the test's
// and, if the test fails, prints its tail.
func logKubeletTo(t testing.TB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	kubeletLogs.set(f)
	t.Cleanup(func() {
		kubeletLogs.set(io.Discard)
		f.Close()
		if t.Failed() || os.Getenv(logsEnv) != "" {
			logTail(t, "kubelet (klog)", path)
		}
	})
}

// startKubelet constructs a device manager as the kubelet's container
// manager does (NewManagerImpl with the node's NUMA nodes and a topology
// manager: the fake one, policy none, unless opts name a policy) and
// starts it: it reads its checkpoint, empties device-plugins/ of sockets
// and serves kubelet.sock. The pods are the node's: they outlive a kubelet
// restart.
func startKubelet(t testing.TB, pods *podList, opts kubeletOptions) *kubelet {
	t.Helper()
	logger := klog.Background()
	var tm topologymanager.Manager = topologymanager.NewFakeManager(logger)
	if opts.topologyPolicy != "" {
		// As pkg/kubelet/cm/container_manager_linux.go: cadvisor's NUMA
		// nodes, the configured policy and scope, no policy options.
		mgr, err := topologymanager.NewManager(logger, nodeNUMA, opts.topologyPolicy, topologymanager.ContainerTopologyScope, nil)
		if err != nil {
			t.Fatalf("kubelet: topologymanager.NewManager(%s): %v", opts.topologyPolicy, err)
		}
		tm = mgr
	}
	m, err := devicemanager.NewManagerImpl(logger, nodeNUMA, tm)
	if err != nil {
		t.Fatalf("kubelet: NewManagerImpl: %v", err)
	}
	k := &kubelet{m: m, pods: pods, started: time.Now(), sources: &sourcesGate{}}
	if opts.topologyPolicy != "" {
		tm.AddHintProvider(logger, m)
		if opts.cpuHints != nil {
			tm.AddHintProvider(logger, cpuManagerStandIn(opts.cpuHints))
		}
		k.topology = tm
	}
	// Unless booting, the kubelet has seen all its pod sources; the pods
	// are those the test admitted. The containers the runtime runs are
	// opts.running's, mapped as the kubelet's container manager maps what
	// the runtime lists (buildContainerMapAndRunningSetFromRuntime).
	k.sources.ready.Store(!opts.booting)
	containers, runningIDs := containermap.NewContainerMap(), sets.New[string]()
	for _, pod := range opts.running {
		name := pod.Spec.Containers[0].Name
		id := string(pod.UID) + "-" + name
		containers.Add(string(pod.UID), name, id)
		runningIDs.Insert(id)
	}
	if err := m.Start(logger, pods.active, k.sources, containers, runningIDs); err != nil {
		t.Fatalf("kubelet: start the device manager: %v", err)
	}
	if opts.podResources {
		k.podResources = servePodResources(t, m, pods)
	}
	if opts.watcher {
		pm := pluginmanager.NewPluginManager(pluginsRegistryDir, &record.FakeRecorder{})
		k.handler = &watchedHandler{PluginHandler: m.GetWatcherHandler(), deregistered: map[string][]time.Time{}}
		pm.AddHandler(watcherapi.DevicePlugin, k.handler)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
		stopCh := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			pm.Run(ctx, k.sources, stopCh)
		}()
		k.stopPM = func() {
			close(stopCh)
			cancel()
			<-done
		}
	}
	t.Cleanup(k.stop)
	return k
}

// stop ends this kubelet life: the plugin manager stops, the device manager
// disconnects every plugin and stops serving kubelet.sock. Safe to call
// twice.
func (k *kubelet) stop() {
	if k.stopped {
		return
	}
	k.stopped = true
	if k.stopPM != nil {
		k.stopPM()
	}
	if k.podResources != nil {
		k.podResources.stop()
	}
	_ = k.m.Stop(klog.Background())
}

// kill ends this kubelet life as a kubelet process ends when it is killed
// or restarted: the kubelet never calls its device manager's Stop, so its
// sockets (kubelet.sock, and pod-resources/kubelet.sock if served) stay
// where they are, refusing connections, and no file event tells a plugin;
// the plugins' streams end as the process's connections close. The next
// kubelet's start replaces them. stop unlinks them, so each is bind-mounted
// on itself meanwhile: a mount point cannot be unlinked.
func (k *kubelet) kill(t testing.TB) {
	t.Helper()
	socks := []string{filepath.Join(devicePluginsDir, "kubelet.sock")}
	if k.podResources != nil {
		socks = append(socks, podResourcesSocket)
	}
	for _, sock := range socks {
		if err := syscall.Mount(sock, sock, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("kubelet: keep %s through the kill: %v", sock, err)
		}
		defer func() {
			// Detached, not unmounted: a daemon dialling the socket
			// holds the mount for the length of its connect, and a plain
			// unmount then fails (EBUSY), leaving a socket that no later
			// kubelet can replace.
			if err := syscall.Unmount(sock, syscall.MNT_DETACH); err != nil {
				t.Errorf("kubelet: unmount %s: %v", sock, err)
			}
		}()
	}
	k.stop()
}

// restart is a kubelet restart: this life stops and a new device manager
// starts on the same node, with the same pods.
func (k *kubelet) restart(t testing.TB, opts kubeletOptions) *kubelet {
	t.Helper()
	k.stop()
	return startKubelet(t, k.pods, opts)
}

// counts is capacity or allocatable by resource name.
type counts map[string]int64

func (c counts) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", n, c[n])
	}
	return b.String()
}

// capacity is what the kubelet would put in the node status: GetCapacity's
// capacity and allocatable.
func (k *kubelet) capacity() (capacity, allocatable counts) {
	c, a, _ := k.m.GetCapacity(klog.Background())
	capacity, allocatable = counts{}, counts{}
	for n, q := range c {
		capacity[string(n)] = q.Value()
	}
	for n, q := range a {
		allocatable[string(n)] = q.Value()
	}
	return capacity, allocatable
}

// waitCapacity polls GetCapacity until ok accepts it, and returns how long
// that took from since. It fails the test after timeout.
func (k *kubelet) waitCapacity(t testing.TB, what string, since time.Time, timeout time.Duration, ok func(capacity, allocatable counts) bool) time.Duration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, a := k.capacity()
		if ok(c, a) {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet: waited %v for %s; capacity: %v; allocatable: %v", timeout, what, c, a)
		}
		time.Sleep(pollEvery)
	}
}

// waitAllocatable waits until capacity and allocatable are both want.
func (k *kubelet) waitAllocatable(t testing.TB, since time.Time, want counts) time.Duration {
	t.Helper()
	return k.waitCapacity(t, "capacity = allocatable = "+want.String(), since, 30*time.Second, func(c, a counts) bool {
		return equalCounts(c, want) && equalCounts(a, want)
	})
}

func equalCounts(a, b counts) bool {
	if len(a) != len(b) {
		return false
	}
	for n, v := range a {
		if w, ok := b[n]; !ok || w != v {
			return false
		}
	}
	return true
}

// devices is the kubelet's view of the healthy devices of a resource, with
// the topology each plugin reported.
func (k *kubelet) devices(resource string) map[string]*pluginapi.Device {
	return k.m.GetAllocatableDevices(klog.Background())[resource]
}

// admission is what the kubelet got for one container: the device IDs it
// allocated and the options it hands the container runtime.
type admission struct {
	took    time.Duration
	devices map[string][]string // by resource, sorted
	opts    *devicemanager.DeviceRunContainerOptions
}

// admit runs a pod's containers through the device manager as the kubelet's
// admission and container start do: the pod becomes active, Allocate for
// each container, then GetDeviceRunContainerOptions as kuberuntime does
// when it builds the container config. It returns the first container's
// result. With the fake topology manager Allocate is called directly (no
// hints); with a real one the topology manager's Admit gathers the device
// manager's hints, merges them by its policy and calls Allocate, and a pod
// it refuses comes back as a *rejection.
func (k *kubelet) admit(t testing.TB, pod *v1.Pod) (admission, error) {
	t.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background())
	k.pods.add(pod)
	c := &pod.Spec.Containers[0]
	start := time.Now()
	if k.topology != nil {
		res := k.topology.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: k.otherPods(pod), Operation: lifecycle.AddOperation})
		if !res.Admit {
			k.pods.remove(pod)
			return admission{}, &rejection{Reason: res.Reason, Message: res.Message}
		}
	} else if err := k.m.Allocate(ctx, pod, c, lifecycle.AddOperation); err != nil {
		k.pods.remove(pod)
		return admission{}, err
	}
	took := time.Since(start)
	opts, err := k.m.GetDeviceRunContainerOptions(ctx, pod, c)
	if err != nil {
		return admission{}, fmt.Errorf("GetDeviceRunContainerOptions: %w", err)
	}
	return admission{took: took, devices: k.allocated(pod), opts: opts}, nil
}

// rejection is a pod the kubelet's admission refused: the Reason and
// Message it records in the pod's status ("TopologyAffinityError" for the
// topology manager's refusal).
type rejection struct{ Reason, Message string }

func (r *rejection) Error() string { return r.Reason + ": " + r.Message }

// otherPods are the active pods but pod, as the kubelet's admission passes
// them.
func (k *kubelet) otherPods(pod *v1.Pod) []*v1.Pod {
	return slices.DeleteFunc(k.pods.active(), func(q *v1.Pod) bool { return q == pod })
}

// affinity is the NUMA affinity the topology manager settled on for a
// pod's first container (nil bits when it has no preference or runs no
// real policy).
func (k *kubelet) affinity(pod *v1.Pod) []int {
	if k.topology == nil {
		return nil
	}
	h := k.topology.GetAffinity(klog.Background(), string(pod.UID), pod.Spec.Containers[0].Name)
	if h.NUMANodeAffinity == nil {
		return nil
	}
	return h.NUMANodeAffinity.GetBits()
}

// allocated is what the device manager holds for a pod's first container, by
// resource.
func (k *kubelet) allocated(pod *v1.Pod) map[string][]string {
	out := map[string][]string{}
	for res, devs := range k.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name) {
		ids := make([]string, 0, len(devs))
		for id := range devs {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		out[res] = ids
	}
	return out
}

// hints are the device manager's topology hints for a pod's first
// container, as the topology manager would collect them.
func (k *kubelet) hints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	return k.m.GetTopologyHints(klog.Background(), pod, &pod.Spec.Containers[0], lifecycle.AddOperation)
}

// podList is the kubelet's active pods, the node's truth across kubelet
// lives.
type podList struct {
	mu   sync.Mutex
	pods []*v1.Pod
	n    int
}

func (p *podList) active() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pods)
}

func (p *podList) add(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.pods, pod) {
		p.pods = append(p.pods, pod)
	}
}

func (p *podList) remove(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = slices.DeleteFunc(p.pods, func(q *v1.Pod) bool { return q == pod })
}

// newPod is a pod with one container asking for n of resource, requests
// equal to limits as the API server enforces for extended resources.
func (p *podList) newPod(resourceName string, n int64) *v1.Pod {
	p.mu.Lock()
	p.n++
	i := p.n
	p.mu.Unlock()
	q := resource.NewQuantity(n, resource.DecimalSI)
	rl := v1.ResourceList{v1.ResourceName(resourceName): *q}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("e2e-%d", i),
			Namespace: "default",
			UID:       types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "app",
			Resources: v1.ResourceRequirements{Limits: rl, Requests: rl.DeepCopy()},
		}}},
	}
}

// socketsIn lists the unix sockets in dir, by base name, kubelet.sock left
// out: the plugins' sockets.
func socketsIn(t testing.TB, dir string) []string {
	t.Helper()
	return namesIn(t, dir, func(e os.DirEntry) bool { return e.Type()&os.ModeSocket != 0 && e.Name() != "kubelet.sock" })
}

// privateDirsIn lists the private directories devledger makes its sockets
// in (.devledger-*) that dir holds.
func privateDirsIn(t testing.TB, dir string) []string {
	t.Helper()
	return namesIn(t, dir, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".devledger-") })
}

// namesIn lists the base names of the entries of dir that keep keeps.
func namesIn(t testing.TB, dir string, keep func(os.DirEntry) bool) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		if keep(e) {
			out = append(out, e.Name())
		}
	}
	return out
}
