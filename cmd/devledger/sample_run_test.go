package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	goldenfile "github.com/devledger/devledger/internal/golden"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// sampleLedgerPath is the bundled sample ledger, which the README's quick
// start reads: what the real daemon recorded in TestSampleRun, a scripted
// day on the "sriov" node, every event of it the daemon's own.
var sampleLedgerPath = filepath.Join("..", "..", "testdata", "ledger", "sample.db")

// sampleRunConfig is the config the run starts with: a vfio-pci pool whose
// VFs follow their PF's link, and a netdevice pool that checks its VFs'
// links (their PF's too), both with a hold-down short enough for recoveries to fit in
// the run. No pool sets a probe interval, and the daemon runs with
// --probe-interval 1h: a device is probed when a scan sees it, or the link
// it follows, change (and when a hold-down ends), not on a clock of its
// own, so a change in sysfs is seen by a scan, then by its probe. (That probe can still see a change
// its scan just missed: the steps that unplug or rebind a device unbind it
// first, so that such a probe changes no verdict.)
const sampleRunConfig = `{
  "resourceList": [
    {"resourceName": "sriov_vfio", "allocatePolicy": "packed",
     "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]},
     "health": {"link": true, "holdDown": "300ms"}},
    {"resourceName": "sriov_net",
     "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["iavf"]},
     "health": {"link": true, "holdDown": "300ms"}}
  ]
}
`

// The reloads: a pool of the second E810 port added; a file the parser
// refuses; the netdevice pool told to leave topology out.
var (
	sampleRunConfigPort = strings.Replace(sampleRunConfig, "\n  ]", `,
    {"resourceName": "e810_port", "excludeTopology": true, "selectors": {"pciAddresses": ["0000:3b:00.1"]}}
  ]`, 1)
	sampleRunConfigBad  = `{"resourceList": [{"resourceName": "sriov net", "selectors": {"pfNames": ["ens785f0#5-2"]}}]}`
	sampleRunConfigTopo = strings.Replace(sampleRunConfigPort, `{"resourceName": "sriov_net",`, `{"resourceName": "sriov_net", "excludeTopology": true,`, 1)
)

// eventCounts counts events by type.
type eventCounts map[events.Type]int

// sampleRun is the scripted run: the node, its config file, and the steps
// so far.
type sampleRun struct {
	n     *e2eNode
	cfg   string
	steps []sampleStep
}

// sampleStep is one thing that happens to the node and the events the
// daemon must record for it, by type: exactly those, in any order (pools,
// the registrar, the reconciler and the health checker record
// concurrently).
type sampleStep struct {
	name string
	from uint64 // the ledger's last sequence when the step began
	want eventCounts
}

// step begins a step: the events after the ledger's last one are its own.
func (r *sampleRun) step(t *testing.T, name string, want eventCounts) {
	t.Helper()
	from := uint64(0)
	if len(r.steps) > 0 {
		from = lastSeq(r.n.ledgerEvents(t))
	}
	r.steps = append(r.steps, sampleStep{name: name, from: from, want: want})
}

// await waits until the current step has recorded at least the events it
// wants; check, at the end, holds it to exactly those.
func (r *sampleRun) await(t *testing.T) {
	t.Helper()
	s := r.steps[len(r.steps)-1]
	r.n.waitLedger(t, "step "+s.name, func(envs []events.Envelope) bool {
		got := countNormalized(since(envs, s.from))
		for typ, n := range s.want {
			if got[typ] < n {
				return false
			}
		}
		return true
	})
}

// check says where the events of a step are not the ones it wants.
func (r *sampleRun) check(t *testing.T, envs []events.Envelope) {
	t.Helper()
	for i, s := range r.steps {
		part := r.part(envs, i)
		if got := countNormalized(part); !sameCounts(got, s.want) {
			t.Errorf("step %q recorded %v, want %v:\n%s", s.name, got, s.want, describeEnvs(part))
		}
	}
}

// part is the events of step i.
func (r *sampleRun) part(envs []events.Envelope, i int) []events.Envelope {
	out := since(envs, r.steps[i].from)
	if i+1 < len(r.steps) {
		out = out[:len(out)-len(since(out, r.steps[i+1].from))]
	}
	return out
}

// writeConfig replaces the config file by rename, as an editor or a
// ConfigMap update does, so that the daemon never reads half a file.
func (r *sampleRun) writeConfig(t *testing.T, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(r.cfg), ".config.json.new")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.cfg); err != nil {
		t.Fatal(err)
	}
}

// serving are the types of a pool's serving and registering. How many a
// kubelet restart brings depends on a race the kubelet's own start makes:
// it sweeps device-plugins/ while a pool that saw its socket go serves
// anew, and a Register sent before the new kubelet was seen is made again
// on a new socket. A step holds at least the number it wants of them, and
// the shape of the sample leaves them out.
var serving = []events.Type{events.TypePluginServing, events.TypeSocketLost, events.TypePluginRegistered}

// sameCounts says whether got has exactly the events want names, and at
// least as many serving ones.
func sameCounts(got, want eventCounts) bool {
	for typ := range got {
		if _, ok := want[typ]; !ok {
			return false
		}
	}
	for typ, n := range want {
		if g := got[typ]; g != n && !(slices.Contains(serving, typ) && g > n) {
			return false
		}
	}
	return true
}

// normalizedTypes are the types the comparisons see of an event: its own,
// and for a DevicesAllocated that supersedes live allocations, a release of
// each first. A device the kubelet gives out again right after its pod
// ended is released either by the next PodResources round (a
// DevicesReleased, then the DevicesAllocated) or, when the Allocate comes
// first, in the new allocation's event; which comes first is a race
// between the reconciler's period and the Allocate, so both count alike.
func normalizedTypes(e events.Envelope) []events.Type {
	var out []events.Type
	if a, ok := e.Payload.(events.DevicesAllocated); ok {
		for range a.Supersedes {
			out = append(out, events.TypeDevicesReleased)
		}
	}
	return append(out, e.Type)
}

func countNormalized(envs []events.Envelope) eventCounts {
	out := eventCounts{}
	for _, e := range envs {
		for _, typ := range normalizedTypes(e) {
			out[typ]++
		}
	}
	return out
}

// shapeKeys is what sampleShape compares of an event: each of its
// normalized types, with its pool where it has one.
func shapeKeys(e events.Envelope) []string {
	var out []string
	for _, typ := range normalizedTypes(e) {
		if slices.Contains(serving, typ) {
			continue
		}
		k := string(typ)
		if p := e.Pool(); p != "" {
			k += " " + p
		}
		out = append(out, k)
	}
	return out
}

// sampleShape is a ledger cut into the steps of run: the shape keys of each
// step's events, sorted. What differs between two runs of the script is
// left out: times, boot ids, pids, socket and temp dir names, and the order
// of one step's events. The steps are cut at the same places in the
// keys as in run's own ledger, runEnvs.
func sampleShape(envs []events.Envelope, run *sampleRun, runEnvs []events.Envelope) [][]string {
	var all []string
	for _, e := range envs {
		all = append(all, shapeKeys(e)...)
	}
	out := make([][]string, len(run.steps))
	at := 0
	for i := range run.steps {
		n := 0
		for _, e := range run.part(runEnvs, i) {
			n += len(shapeKeys(e))
		}
		end := min(at+n, len(all))
		if i == len(run.steps)-1 {
			end = len(all)
		}
		out[i] = slices.Sorted(slices.Values(all[at:end]))
		at = end
	}
	return out
}

// readLedgerFile reads every event of the ledger file at path.
func readLedgerFile(t *testing.T, path string) []events.Envelope {
	t.Helper()
	l, err := store.Open(path, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("%v (go test ./cmd/devledger -run TestSampleRun -update writes it)", err)
	}
	defer l.Close()
	var envs []events.Envelope
	if err := l.Read(0, func(e events.Envelope) error {
		envs = append(envs, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return envs
}

// TestSampleRun drives the real daemon through a day on the "sriov" node:
// pods come and go, a device is given out again as soon as its pod ended,
// a held VF's driver is unbound and bound again, a PF's link flaps, the
// kubelet is down for three seconds, the config is reloaded (well, badly,
// well), a held VF is unplugged and another rebound to vfio-pci (each
// unbound first), the daemon is killed and, while it is down, a VF changes
// driver; then it stops.
// Each step must record exactly the events its table says.
//
// With -update the ledger becomes testdata/ledger/sample.db (the README's
// quick start then needs its device addresses and times checked); without,
// the bundled file must have this run's shape (sampleShape).
func TestSampleRun(t *testing.T) {
	t.Parallel()
	// Everything under one short root, the daemon given paths relative to
	// it (but its kubelet dir, see below): the ledger names no temporary
	// directory.
	root := kubelettest.ShortTempDir(t)
	cfgPath := filepath.Join(root, "config.json")
	if err := os.WriteFile(cfgPath, []byte(sampleRunConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	n := newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: cfgPath, mode: "legacy", root: root})
	if goldenfile.Updating() {
		// The daemon makes its kubelet dir absolute: for the bundled
		// ledger it sees the stand-in's where a node's is.
		if os.Geteuid() != 0 {
			t.Fatal("-update runs the daemon in a mount namespace of its own: run it as root")
		}
		n.kubeletView = "/var/lib/kubelet"
	}
	r := &sampleRun{n: n, cfg: cfgPath}
	// A scan every 200ms, each followed by a probe of the devices it saw
	// change; a PodResources round every 100ms.
	flags := []string{"--scan-interval", "200ms", "--reconcile-interval", "100ms"}
	twoPools := []string{vfioPool, netPool}
	ctx := e2eCtx(t)
	allocate := func(pool string, ids ...string) {
		t.Helper()
		if _, err := n.kubelet.Allocate(ctx, pool, ids); err != nil {
			t.Fatalf("Allocate %s %v: %v", pool, ids, err)
		}
	}
	pods := func(ps ...*podresourcesapi.PodResources) { n.kubelet.SetPods(ps) }
	var (
		dpdkA    = kubelettest.PodHolding("telco", "dpdk-a", "testpmd", vfioPool, "0000:3b:01.2")
		dpdkB    = kubelettest.PodHolding("telco", "dpdk-b", "testpmd", vfioPool, "0000:af:01.3")
		router   = kubelettest.PodHolding("telco", "cnf-router-0", "router", netPool, "0000:3b:01.0")
		trainer0 = kubelettest.PodHolding("ml", "trainer-0", "main", vfioPool, "0000:af:01.1")
		trainer1 = kubelettest.PodHolding("ml", "trainer-1", "main", vfioPool, "0000:af:01.1")
	)

	// Twelve PCI functions; 0000:af:01.0's own interface is down, as a
	// free VF's is on the host, which its pool's link check passes over:
	// its PF is up.
	r.step(t, "start", eventCounts{events.TypeDaemonStarted: 1, events.TypeConfigApplied: 1, events.TypeDeviceDiscovered: 12,
		events.TypePoolMembershipChanged: 2, events.TypePluginServing: 2, events.TypePluginRegistered: 2})
	p, _ := n.startRegistered(t, twoPools, flags...)
	r.await(t)

	r.step(t, "four pods get a VF each", eventCounts{events.TypeDevicesAllocated: 4, events.TypeAllocationBound: 4})
	allocate(vfioPool, "0000:3b:01.2")
	allocate(netPool, "0000:3b:01.0")
	allocate(vfioPool, "0000:af:01.1")
	allocate(vfioPool, "0000:af:01.3")
	pods(dpdkA, router, trainer0, dpdkB)
	r.await(t)

	r.step(t, "dpdk-a ends", eventCounts{events.TypeDevicesReleased: 1})
	pods(router, trainer0, dpdkB)
	r.await(t)

	// A release, not a conflict: the kubelet reports trainer-0 gone
	// before it gives the VF out again.
	r.step(t, "trainer-0 ends, its VF goes to trainer-1 at once",
		eventCounts{events.TypeDevicesReleased: 1, events.TypeDevicesAllocated: 1, events.TypeAllocationBound: 1})
	pods(router, dpdkB)
	allocate(vfioPool, "0000:af:01.1")
	pods(router, dpdkB, trainer1)
	r.await(t)

	r.step(t, "the held VF 0000:af:01.1 unbound from vfio-pci", eventCounts{events.TypeDeviceChanged: 1, events.TypeDeviceHealthChanged: 1})
	if err := n.roots.Unbind("0000:af:01.1"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	r.step(t, "and bound again", eventCounts{events.TypeDeviceChanged: 1, events.TypeDeviceHealthChanged: 1})
	if err := n.roots.Bind("0000:af:01.1", "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	// Its four VFs follow the PF's link: two vfio-pci, two iavf.
	r.step(t, "ens785f0's link down", eventCounts{events.TypeDeviceHealthChanged: 4})
	if err := n.roots.SetLinkDown("ens785f0"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	r.step(t, "and up", eventCounts{events.TypeDeviceHealthChanged: 4})
	if err := n.roots.SetLinkUp("ens785f0"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	// PodResources goes with it. The stand-in stops as a killed kubelet
	// goes: its ListAndWatch streams end and kubelet.sock stays behind,
	// refusing connections.
	r.step(t, "the kubelet stops", eventCounts{events.TypeKubeletStopped: 1, events.TypeAttributionChanged: 1})
	if err := n.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	r.await(t)

	// The new kubelet empties device-plugins/: every pool serves on a new
	// socket and registers again.
	r.step(t, "the kubelet is back", eventCounts{events.TypeKubeletRestarted: 1, events.TypeSocketLost: 2,
		events.TypePluginServing: 2, events.TypePluginRegistered: 2, events.TypeAttributionChanged: 1})
	time.Sleep(time.Until(stopped.Add(3 * time.Second))) // the outage the ledger tells
	if err := n.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	r.step(t, "config: a pool for the second E810 port",
		eventCounts{events.TypeConfigApplied: 1, events.TypePoolMembershipChanged: 1, events.TypePluginServing: 1, events.TypePluginRegistered: 1})
	r.writeConfig(t, sampleRunConfigPort)
	r.await(t)

	r.step(t, "config: refused", eventCounts{events.TypeConfigRejected: 1})
	r.writeConfig(t, sampleRunConfigBad)
	r.await(t)

	r.step(t, "config: sriov_net without topology", eventCounts{events.TypeConfigApplied: 1})
	r.writeConfig(t, sampleRunConfigTopo)
	r.await(t)

	// Unbound first, so that its health is already down when it goes: a
	// probe that finds it gone before the scan does then changes nothing.
	r.step(t, "0000:af:01.3, which dpdk-b holds, unbound from vfio-pci", eventCounts{events.TypeDeviceChanged: 1, events.TypeDeviceHealthChanged: 1})
	if err := n.roots.Unbind("0000:af:01.3"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	r.step(t, "and unplugged", eventCounts{events.TypeDeviceRemoved: 1, events.TypePoolMembershipChanged: 1})
	if err := n.roots.Remove("0000:af:01.3"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	r.step(t, "dpdk-b ends", eventCounts{events.TypeDevicesReleased: 1})
	pods(router, trainer1)
	r.await(t)

	// The same for a rebind: unbound first, so that a probe that finds it
	// bound to vfio-pci before the scan does changes nothing.
	r.step(t, "0000:3b:01.0, which cnf-router-0 holds, unbound from iavf", eventCounts{events.TypeDeviceChanged: 1, events.TypeDeviceHealthChanged: 1})
	if err := n.roots.Unbind("0000:3b:01.0"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	// From sriov_net to sriov_vfio, listed there as held until released;
	// healthy again after the hold-down.
	r.step(t, "and bound to vfio-pci", eventCounts{events.TypeDeviceChanged: 1, events.TypePoolMembershipChanged: 2, events.TypeDeviceHealthChanged: 1})
	if err := n.roots.Bind("0000:3b:01.0", "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	r.await(t)

	r.step(t, "cnf-router-0 ends", eventCounts{events.TypeDevicesReleased: 1})
	pods(trainer1)
	r.await(t)

	// While the daemon is down an operator moves a free VF from vfio-pci
	// to iavf; the next start finds it moved, and every pool serves and
	// registers again.
	r.step(t, "SIGKILL, a VF rebound to iavf, restart", eventCounts{events.TypeDaemonCrashed: 1, events.TypeDaemonStarted: 1,
		events.TypeDeviceChanged: 1, events.TypePoolMembershipChanged: 2, events.TypePluginServing: 3, events.TypePluginRegistered: 3})
	p.kill(t)
	if err := n.roots.Bind("0000:3b:01.3", "iavf"); err != nil {
		t.Fatal(err)
	}
	if err := n.roots.AddInterface("0000:3b:01.3", sysfsgen.Interface{Name: "ens785f0v3"}); err != nil {
		t.Fatal(err)
	}
	p, _ = n.startRegistered(t, []string{vfioPool, netPool, portPool}, flags...)
	r.await(t)

	r.step(t, "SIGTERM", eventCounts{events.TypeDaemonStopped: 1, events.TypeSnapshotTaken: 1})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.stderr.String())
	}

	envs := n.ledgerEvents(t)
	r.check(t, envs)
	if t.Failed() {
		return
	}
	if goldenfile.Updating() {
		data, err := os.ReadFile(n.ledgerPath())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sampleLedgerPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := sampleShape(envs, r, envs)
	got := sampleShape(readLedgerFile(t, sampleLedgerPath), r, envs)
	for i, s := range r.steps {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("testdata/ledger/sample.db, step %q: %q, this run: %q", s.name, got[i], want[i])
		}
	}
	if t.Failed() {
		t.Errorf("testdata/ledger/sample.db is not what this script records: go test ./cmd/devledger -run TestSampleRun -update writes it again (then check the README's quick start)")
	}
}
