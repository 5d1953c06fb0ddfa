package health

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/wake"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/sysfs"
)

// The actor under test runs under a recording parent (actortest).
type family = actortest.Family

func spawnFamily(t *testing.T, props *actor.Props) *family { return actortest.Spawn(t, props) }

func next[T any](t *testing.T, f *family) T { return actortest.Next[T](t, f) }

// fakeProber answers probes from a script: every address is healthy until
// the test says otherwise. It remembers which addresses each round probed,
// fully (rounds) or for their link alone (linkRounds).
type fakeProber struct {
	mu         sync.Mutex
	failing    map[string]string // address → reason
	linkDown   map[string]string // address → reason its link check fails
	unreadable bool              // every probe is inconclusive
	rounds     [][]string
	linkRounds [][]string
}

func (p *fakeProber) ProbeAll(ts []sysfs.ProbeTarget) []sysfs.ProbeResult {
	return p.answer(ts, &p.rounds, func(addr string) sysfs.ProbeResult {
		if p.unreadable {
			return outOfFiles
		}
		if why, bad := p.failing[addr]; bad {
			return sysfs.ProbeResult{Reason: why}
		}
		if why, down := p.linkDown[addr]; down {
			return sysfs.ProbeResult{Reason: why, Link: true}
		}
		return sysfs.ProbeResult{Healthy: true}
	})
}

func (p *fakeProber) ProbeLinks(ts []sysfs.ProbeTarget) []sysfs.ProbeResult {
	return p.answer(ts, &p.linkRounds, func(addr string) sysfs.ProbeResult {
		if p.unreadable {
			return outOfFiles
		}
		why, down := p.linkDown[addr]
		return sysfs.ProbeResult{Healthy: !down, Reason: why, Link: true}
	})
}

// answer notes a round of ts in rounds and answers each target by its
// address, under the lock.
func (p *fakeProber) answer(ts []sysfs.ProbeTarget, rounds *[][]string, result func(addr string) sysfs.ProbeResult) []sysfs.ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]sysfs.ProbeResult, len(ts))
	round := make([]string, len(ts))
	for i, t := range ts {
		round[i], out[i] = t.Address, result(t.Address)
	}
	*rounds = append(*rounds, round)
	return out
}

// setLink sets addr's link down (with a reason) or up ("").
func (p *fakeProber) setLink(addr, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.linkDown == nil {
		p.linkDown = map[string]string{}
	}
	if reason == "" {
		delete(p.linkDown, addr)
	} else {
		p.linkDown[addr] = reason
	}
}

func (p *fakeProber) fail(addr, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing == nil {
		p.failing = map[string]string{}
	}
	p.failing[addr] = reason
}

// outOfFiles is what a probe answers when the process has no file
// descriptor left.
var outOfFiles = sysfs.ProbeResult{Reason: "probe failed: cannot read driver: too many open files", Inconclusive: true}

func (p *fakeProber) setUnreadable(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unreadable = on
}

func (p *fakeProber) pass(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.failing, addr)
}

// linkCount is how many link-only rounds were probed.
func (p *fakeProber) linkCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.linkRounds)
}

// roundsSince and linkRoundsSince are the addresses probed, fully or for
// their link alone, in the rounds after the first n.
func (p *fakeProber) roundsSince(n int) []string     { return p.since(&p.rounds, n) }
func (p *fakeProber) linkRoundsSince(n int) []string { return p.since(&p.linkRounds, n) }

func (p *fakeProber) since(rounds *[][]string, n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Concat((*rounds)[n:]...)
}

// count is how many rounds were probed.
func (p *fakeProber) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.rounds)
}

func (p *fakeProber) lastRound() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.rounds) == 0 {
		return nil
	}
	return p.rounds[len(p.rounds)-1]
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const (
	devA = "0000:3b:01.0"
	devB = "0000:3b:01.1"
)

type checkerUnderTest struct {
	*family
	prober *fakeProber
	clock  *fakeClock
	log    *store.Log
}

// newChecker starts a health checker with a fake prober and clock, its own
// ledger (cfg.Recorder's when set), and no periodic rounds (the test asks
// for every round) unless cfg says otherwise.
func newChecker(t *testing.T, cfg Config) *checkerUnderTest {
	t.Helper()
	if cfg.Recorder == nil {
		cfg.Recorder = ledger.NewRecorder(openLog(t), "boot-1", nil)
	}
	c := &checkerUnderTest{prober: &fakeProber{}, clock: &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}, log: cfg.Recorder.Log()}
	cfg.Prober = c.prober
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour
	}
	if cfg.Known == nil {
		cfg.Known = map[string]events.Device{}
	}
	if cfg.Now == nil {
		cfg.Now = c.clock.Now
	}
	c.family = spawnFamily(t, Props(cfg))
	return c
}

func openLog(t *testing.T) *store.Log {
	t.Helper()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Silent checks that the parent heard nothing more once the checker is at
// rest: what it handled, and the appends those started, landed and told.
// The family's own Silent does not wait for an append in flight, so a
// verdict recorded a round early would pass for the next round's.
func (c *checkerUnderTest) Silent(t *testing.T) {
	t.Helper()
	quiet := &ledger.Quiet{Done: make(chan struct{})}
	c.Sys.Root.Send(c.Child, quiet)
	select {
	case <-quiet.Done:
	case <-time.After(5 * time.Second):
		t.Fatal("the checker never came to rest: an append still in flight")
	}
	c.family.Silent(t)
}

func (c *checkerUnderTest) watch(targets ...Target) {
	c.Sys.Root.Send(c.Child, &Watch{Targets: targets})
}

// round asks for a probe round of every target after moving the clock.
func (c *checkerUnderTest) round(after time.Duration) {
	c.clock.advance(after)
	c.Sys.Root.Send(c.Child, &Probe{Reason: "test"})
}

// recorded returns the health changes in the ledger.
func (c *checkerUnderTest) recorded(t *testing.T) []events.DeviceHealthChanged {
	t.Helper()
	var out []events.DeviceHealthChanged
	if err := c.log.Read(1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DeviceHealthChanged); ok {
			out = append(out, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *checkerUnderTest) verdicts(t *testing.T) map[string]Verdict {
	t.Helper()
	r, err := c.Sys.Root.RequestFuture(c.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return r.(*Verdicts).Devices
}

func target(addr string, debounce, holdDown time.Duration) Target {
	return Target{Probe: sysfs.ProbeTarget{Address: addr, Driver: "vfio-pci"}, Debounce: debounce, HoldDown: holdDown}
}

// step is one probe round of a scenario: the clock moves by after, devA's
// probe fails (with a reason) or passes, and the parent hears a verdict or
// nothing.
type step struct {
	after   time.Duration
	failing string // "": devA passes
	want    *Verdict
}

func TestVerdicts(t *testing.T) {
	unhealthy := func(reason string) *Verdict { return &Verdict{Address: devA, Healthy: false, Reason: reason} }
	healthy := func(reason string) *Verdict { return &Verdict{Address: devA, Healthy: true, Reason: reason} }
	tests := []struct {
		name               string
		debounce, holdDown time.Duration
		steps              []step
	}{
		{"a failure counts at once without a debounce, a recovery too without a hold-down", 0, 0, []step{
			{time.Second, "", nil},
			{time.Second, "driver unbound (was vfio-pci)", unhealthy("driver unbound (was vfio-pci)")},
			{time.Second, "driver unbound (was vfio-pci)", nil},
			{time.Second, "", healthy("probes pass")},
			{time.Second, "", nil},
		}},
		{"a failure counts once it lasted the debounce", 30 * time.Second, 0, []step{
			{0, "/dev/vfio/60 missing", nil},
			{29 * time.Second, "/dev/vfio/60 missing", nil},
			{time.Second, "/dev/vfio/60 missing", unhealthy("/dev/vfio/60 missing")},
		}},
		{"the verdict gives the reason of the last failing probe", 10 * time.Second, 0, []step{
			{0, "link down on ens785f0 (PF)", nil},
			{10 * time.Second, "no carrier on ens785f0v0", unhealthy("no carrier on ens785f0v0")},
		}},
		{"flapping inside the debounce records nothing", 30 * time.Second, 0, []step{
			{0, "gone from sysfs", nil},
			{20 * time.Second, "", nil},
			{5 * time.Second, "gone from sysfs", nil},
			{20 * time.Second, "", nil},
			{20 * time.Second, "gone from sysfs", nil},
			{29 * time.Second, "gone from sysfs", nil},
			{time.Second, "gone from sysfs", unhealthy("gone from sysfs")},
		}},
		{"a recovery counts once it lasted the hold-down", 0, time.Minute, []step{
			{0, "driver unbound (was vfio-pci)", unhealthy("driver unbound (was vfio-pci)")},
			{time.Second, "", nil},
			{59 * time.Second, "", nil},
			{time.Second, "", healthy("probes passed for 1m0s")},
		}},
		{"a failure inside the hold-down starts it over", 0, time.Minute, []step{
			{0, "driver unbound (was vfio-pci)", unhealthy("driver unbound (was vfio-pci)")},
			{time.Second, "", nil},
			{50 * time.Second, "driver unbound (was vfio-pci)", nil},
			{time.Second, "", nil},
			{59 * time.Second, "", nil},
			{time.Second, "", healthy("probes passed for 1m0s")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(t, Config{})
			c.watch(target(devA, tc.debounce, tc.holdDown), target(devB, tc.debounce, tc.holdDown))
			var want []events.DeviceHealthChanged
			for i, s := range tc.steps {
				if s.failing != "" {
					c.prober.fail(devA, s.failing)
				} else {
					c.prober.pass(devA)
				}
				c.round(s.after)
				if s.want == nil {
					c.Silent(t)
					continue
				}
				if got := nextVerdict(t, c.family); *got != *s.want {
					t.Fatalf("step %d: verdict %+v, want %+v", i, *got, *s.want)
				}
				want = append(want, events.DeviceHealthChanged{Address: s.want.Address, Healthy: s.want.Healthy, Reason: s.want.Reason})
				c.Silent(t)
				if v := c.verdicts(t)[devA]; v != *s.want {
					t.Errorf("step %d: Query says %+v, want %+v", i, v, *s.want)
				}
			}
			if got := c.recorded(t); !slices.Equal(got, want) {
				t.Errorf("ledger holds %+v, want %+v", got, want)
			}
		})
	}
}

func TestProbeOnlyTheNamedDevices(t *testing.T) {
	c := newChecker(t, Config{})
	c.watch(target(devA, 0, 0), target(devB, 0, 0))
	c.Silent(t)
	if got := c.prober.lastRound(); !slices.Equal(got, []string{devA, devB}) {
		t.Errorf("Watch probed %v, want both targets", got)
	}
	c.prober.fail(devA, "gone from sysfs")
	c.prober.fail(devB, "gone from sysfs")
	c.Sys.Root.Send(c.Child, &Probe{Reason: "uevent", Addresses: []string{devB, "0000:99:00.0"}})
	if v := nextVerdict(t, c.family); v.Address != devB || v.Healthy {
		t.Errorf("verdict %+v, want devB unhealthy", *v)
	}
	c.Silent(t)
	if got := c.prober.lastRound(); !slices.Equal(got, []string{devB}) {
		t.Errorf("Probe{%s} probed %v", devB, got)
	}
	if v := c.verdicts(t)[devA]; !v.Healthy {
		t.Errorf("devA, not probed, became %+v", v)
	}
}

// A Watch probes at once only the targets that are new or changed, or
// whose device the scan saw change: the node sends one after every scan,
// and a device whose probe interval is longer than the scan's is probed at
// its own interval, not at each scan that found nothing new of it.
func TestAWatchProbesOnlyWhatChanged(t *testing.T) {
	c := newChecker(t, Config{})
	a, b := target(devA, 0, 0), target(devB, 0, 0)
	c.watch(a, b)
	c.Silent(t)
	n := c.prober.count()
	c.watch(a, b) // a scan that changed nothing
	c.Silent(t)
	if got := c.prober.roundsSince(n); len(got) > 0 {
		t.Errorf("a Watch of the same targets probed %v", got)
	}
	b.Probe.Driver = "iavf"
	c.watch(a, b, target("0000:3b:02.3", 0, 0)) // devB rebound, a device added
	c.Silent(t)
	if got := c.prober.roundsSince(n); !slices.Equal(got, []string{devB, "0000:3b:02.3"}) {
		t.Errorf("a Watch that changed devB and added a device probed %v", got)
	}
	n = c.prober.count()
	c.Sys.Root.Send(c.Child, &Watch{Targets: []Target{a, b}, Seen: Seen{Addresses: []string{devA}}}) // a scan saw devA change
	c.Silent(t)
	if got := c.prober.roundsSince(n); !slices.Equal(got, []string{devA}) {
		t.Errorf("a Watch after a scan that saw devA change probed %v", got)
	}
}

// The parent's Known is the newest verdict it heard, so after each verdict
// the next Watch brings the checker's own back: that is no news of the
// device, and does not probe it before its interval.
func TestAWatchBringingTheCheckersOwnVerdictProbesNothing(t *testing.T) {
	c := newChecker(t, Config{})
	tg := target(devA, 0, time.Hour)
	c.watch(tg)
	c.Silent(t)
	c.prober.fail(devA, "gone from sysfs")
	c.round(time.Second)
	v := next[*Changed](t, c.family).Verdicts[0]
	c.Silent(t)
	n := c.prober.count()
	tg.Known = events.Verdict{Healthy: v.Healthy, Reason: v.Reason, Seq: v.Seq}
	c.watch(tg) // the next scan, which saw nothing change in devA
	c.Silent(t)
	if got := c.prober.roundsSince(n); len(got) > 0 {
		t.Errorf("a Watch that brought back the checker's own verdict probed %v", got)
	}
}

// A kernel event names interfaces too: those whose link a target's check
// reads, a function's own or, for a VF, its PF's, which takes every VF of
// that PF (a VF's own interface is not checked, and takes none). A device
// named more than once is probed once, and a round keeps the targets'
// order. A device named by an interface alone (a link notification) has
// only its link checked; one named by its address too is probed fully.
func TestProbeTheDevicesOfNamedInterfaces(t *testing.T) {
	const devC, devD = "0000:3b:01.2", "0000:3b:01.3"
	c := newChecker(t, Config{})
	withIf := func(addr, own, pf string) Target {
		tg := target(addr, 0, 0)
		tg.Probe.Link, tg.Probe.Interface, tg.Probe.PFInterface = true, own, pf
		return tg
	}
	c.watch(withIf(devA, "", "ens1f0"), withIf(devB, "eno1", ""), withIf(devC, "", "ens2f0"), withIf(devD, "ens1f0v3", "ens1f0"))
	c.Silent(t)
	for _, tc := range []struct {
		addrs, ifaces   []string
		full, linksOnly []string
	}{
		{ifaces: []string{"ens1f0"}, linksOnly: []string{devA, devD}},
		{ifaces: []string{"eno1"}, linksOnly: []string{devB}},
		{ifaces: []string{"ens1f0v3"}},
		{addrs: []string{devD, devC}, ifaces: []string{"ens2f0", "eno1"}, full: []string{devC, devD}, linksOnly: []string{devB}},
		{ifaces: []string{"ens9f0"}},
	} {
		full, links := c.prober.count(), c.prober.linkCount()
		c.Sys.Root.Send(c.Child, &Probe{Reason: "uevent", Addresses: tc.addrs, Interfaces: tc.ifaces})
		c.Silent(t)
		if got := c.prober.roundsSince(full); !slices.Equal(got, tc.full) {
			t.Errorf("Probe{%v %v} probed %v fully, want %v", tc.addrs, tc.ifaces, got, tc.full)
		}
		if got := c.prober.linkRoundsSince(links); !slices.Equal(got, tc.linksOnly) {
			t.Errorf("Probe{%v %v} probed the links of %v, want %v", tc.addrs, tc.ifaces, got, tc.linksOnly)
		}
	}
}

// A link notification checks the link alone, and keeps what the last full
// probe said of the rest: a device whose driver went stays unhealthy for
// that reason when its link comes back; a healthy one fails when its link
// goes, and recovers when it returns, all without a full probe.
func TestLinkNotificationChecksTheLinkAlone(t *testing.T) {
	c := newChecker(t, Config{})
	withPF := func(addr string) Target {
		tg := target(addr, 0, 0)
		tg.Probe.Link, tg.Probe.PFInterface = true, "ens1f0"
		return tg
	}
	c.prober.fail(devB, "driver unbound (was vfio-pci)")
	c.watch(withPF(devA), withPF(devB))
	if v := nextVerdict(t, c.family); v.Address != devB || v.Healthy {
		t.Fatalf("verdict %+v, want devB unhealthy", *v)
	}
	c.Silent(t)
	full := c.prober.count()
	linkProbe := func() { c.Sys.Root.Send(c.Child, &Probe{Reason: "link", Interfaces: []string{"ens1f0"}}) }

	c.prober.setLink(devA, "link down on ens1f0 (PF)")
	c.prober.setLink(devB, "link down on ens1f0 (PF)")
	linkProbe()
	if v := nextVerdict(t, c.family); v.Address != devA || v.Healthy || v.Reason != "link down on ens1f0 (PF)" {
		t.Errorf("link down: verdict %+v, want devA unhealthy, link down", *v)
	}
	c.Silent(t)
	c.prober.setLink(devA, "")
	c.prober.setLink(devB, "")
	c.prober.pass(devB) // the driver is back, but no uevent said so
	linkProbe()
	if v := nextVerdict(t, c.family); v.Address != devA || !v.Healthy {
		t.Errorf("link up: verdict %+v, want devA healthy", *v)
	}
	c.Silent(t)
	if got := c.verdicts(t)[devB]; got.Healthy || got.Reason != "driver unbound (was vfio-pci)" {
		t.Errorf("devB after its link came back: %+v, want still unhealthy, unbound (its last full probe)", got)
	}
	if n := c.prober.count() - full; n != 0 {
		t.Errorf("link notifications ran %d full probe rounds, want none", n)
	}
	// The next full probe (a uevent naming it, or the periodic round)
	// finds the driver back.
	c.Sys.Root.Send(c.Child, &Probe{Reason: "uevent", Addresses: []string{devB}})
	if v := nextVerdict(t, c.family); v.Address != devB || !v.Healthy {
		t.Errorf("full probe: verdict %+v, want devB healthy", *v)
	}
}

// A link that goes down and up again within one batch of kernel events
// (a flapping port) is up by the probe the batch asks for: the drop the
// kernel reported fails the link check first. A healthy device turns
// unhealthy (no debounce), once; a drop inside its hold-down starts the
// hold-down over; a device whose debounce outlasts the drop records
// nothing; a device whose link check reads another interface, or whose
// link is not checked, is not touched; and a drop the probe still sees
// is judged by the probe's own reason.
func TestAShortLinkDropTheKernelReportedCounts(t *testing.T) {
	const devC, devD = "0000:3b:01.2", "0000:3b:01.3"
	c := newChecker(t, Config{})
	withPF := func(addr, pf string, debounce time.Duration) Target {
		tg := target(addr, debounce, time.Hour)
		tg.Probe.Link, tg.Probe.PFInterface = true, pf
		return tg
	}
	unchecked := withPF(devD, "ens1f0", 0)
	unchecked.Probe.Link, unchecked.Probe.VF = false, true
	c.watch(withPF(devA, "ens1f0", 0), withPF(devB, "ens1f0", time.Second), withPF(devC, "ens2f0", 0), unchecked)
	c.Silent(t)
	flap := func(after time.Duration) {
		c.clock.advance(after)
		c.Sys.Root.Send(c.Child, &Probe{Reason: "link", Interfaces: []string{"ens1f0"}, Down: []string{"ens1f0"}})
	}
	const brief = "link down on ens1f0 (PF), briefly: the kernel reported it, the probe after it found the link up"
	flap(time.Second)
	if v := nextVerdict(t, c.family); v.Address != devA || v.Healthy || v.Reason != brief {
		t.Fatalf("a drop: verdict %+v, want devA unhealthy, %q", *v, brief)
	}
	c.Silent(t) // devB's debounce outlasts the drop; devC reads another link

	flap(30 * time.Minute) // inside the hour's hold-down: it starts over
	c.Silent(t)
	c.round(31 * time.Minute) // the first hold-down would have ended
	c.Silent(t)
	c.round(30 * time.Minute) // an hour after the second drop
	if v := nextVerdict(t, c.family); v.Address != devA || !v.Healthy {
		t.Fatalf("after the hold-down: verdict %+v, want devA healthy", *v)
	}
	c.Silent(t)

	// A batch naming devD by its address: its probe passes and its link
	// is not its to answer for. devA's link is still down.
	const down = "link down on ens1f0 (PF)"
	c.prober.setLink(devA, down)
	c.clock.advance(time.Second)
	c.Sys.Root.Send(c.Child, &Probe{Reason: "link", Addresses: []string{devD}, Interfaces: []string{"ens1f0"}, Down: []string{"ens1f0"}})
	if v := nextVerdict(t, c.family); v.Address != devA || v.Healthy || v.Reason != down {
		t.Fatalf("a drop the probe sees: verdict %+v, want devA unhealthy, %q", *v, down)
	}
	c.Silent(t)
	got := c.recorded(t)
	if len(got) != 3 {
		t.Errorf("recorded %+v, want devA down, up and down again", got)
	}
}

func TestVerdictsStartFromTheLedger(t *testing.T) {
	const devC = "0000:3b:01.2"
	unbound := "driver unbound (was vfio-pci)"
	known := map[string]events.Device{
		devA: {Facts: events.DeviceFacts{Address: devA}, Present: true, Healthy: false, HealthReason: unbound},
		devB: {Facts: events.DeviceFacts{Address: devB}, Present: true, Healthy: false, HealthReason: unbound},
		devC: {Facts: events.DeviceFacts{Address: devC}, Present: false, Healthy: false, HealthReason: "removed"},
	}
	c := newChecker(t, Config{Known: known})
	c.prober.fail(devA, unbound) // still failing: nothing new
	// devB recovered; devC, removed in the ledger and back, starts healthy.
	c.watch(target(devA, 0, 0), target(devB, 0, 0), target(devC, 0, 0))
	if v := nextVerdict(t, c.family); *v != (Verdict{Address: devB, Healthy: true, Reason: "probes pass"}) {
		t.Errorf("verdict %+v, want devB healthy again", *v)
	}
	c.Silent(t)
	if got := c.recorded(t); len(got) != 1 || got[0].Address != devB {
		t.Errorf("recorded %+v, want only devB's recovery", got)
	}
	want := map[string]Verdict{
		devA: {Address: devA, Healthy: false, Reason: unbound},
		devB: {Address: devB, Healthy: true, Reason: "probes pass"},
		devC: {Address: devC, Healthy: true},
	}
	if got := c.verdicts(t); !maps.Equal(got, want) {
		t.Errorf("Query = %+v, want %+v", got, want)
	}
}

// logLines is a log sink that hands each line to the test.
type logLines chan []byte

func (l logLines) Write(p []byte) (int, error) {
	l <- bytes.Clone(p)
	return len(p), nil
}

// count drains the lines logged so far and counts those with message msg.
func (l logLines) count(msg string) int { return l.countAt("", msg) }

// countAt is count of the lines at level ("": at any).
func (l logLines) countAt(level, msg string) int {
	n := 0
	for _, line := range l.drain() {
		n += countLine(line, level, msg)
	}
	return n
}

// drain returns the lines logged so far.
func (l logLines) drain() [][]byte {
	var out [][]byte
	for {
		select {
		case line := <-l:
			out = append(out, line)
		default:
			return out
		}
	}
}

// countLine is 1 when line has message msg at level ("": at any), else 0.
func countLine(line []byte, level, msg string) int {
	if bytes.Contains(line, []byte(`"message":"`+msg+`"`)) && (level == "" || bytes.Contains(line, []byte(`"level":"`+level+`"`))) {
		return 1
	}
	return 0
}

func TestFailedAppendDecidesNothingAndRetries(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "closed.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	logs := make(logLines, 64)
	c := newChecker(t, Config{Recorder: ledger.NewRecorder(l, "boot-1", nil), Log: zerolog.New(logs)})
	c.watch(target(devA, 0, 0))
	c.Silent(t)
	const cannot = "cannot record health changes; will retry"
	c.prober.fail(devA, "gone from sysfs")
	for round := 1; round <= 2; round++ {
		c.round(time.Second)
		c.Silent(t)
		if n := logs.count(cannot); n != 1 {
			t.Fatalf("round %d: %d lines %q, want 1", round, n, cannot)
		}
		if v := c.verdicts(t)[devA]; !v.Healthy {
			t.Errorf("round %d: an unrecorded verdict took effect: %+v", round, v)
		}
	}
}

func TestRoundAtTheEndOfTheDebounce(t *testing.T) {
	c := newChecker(t, Config{Now: time.Now})
	c.prober.fail(devA, "gone from sysfs")
	start := time.Now()
	c.watch(target(devA, 50*time.Millisecond, 0))
	c.Silent(t)
	// No Probe: the checker's own round, when the debounce ends, decides.
	if v := nextVerdict(t, c.family); v.Address != devA || v.Healthy {
		t.Errorf("verdict %+v, want devA unhealthy", *v)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("verdict after %v, before the debounce ended", took)
	}
}

// nextVerdict is the one verdict of the next Changed the parent gets,
// without its sequence number, which it checks is set.
func nextVerdict(t *testing.T, f *family) *Verdict {
	t.Helper()
	ch := next[*Changed](t, f)
	if len(ch.Verdicts) != 1 {
		t.Fatalf("Changed with %d verdicts, want 1: %+v", len(ch.Verdicts), ch.Verdicts)
	}
	v := &ch.Verdicts[0]
	if v.Seq == 0 {
		t.Fatalf("verdict %+v has no sequence number", *v)
	}
	v.Seq = 0
	return v
}

// A target may bring a newer verdict than the checker's own: the device
// went and came back, and its discovery made it healthy in the ledger.
// The checker starts over from it, with no hold-down to sit out and
// nothing to record; an older one changes nothing.
func TestNewerLedgerVerdictStartsADeviceOver(t *testing.T) {
	c := newChecker(t, Config{})
	tg := target(devA, 0, time.Hour)
	c.watch(tg)
	c.Silent(t)
	c.prober.fail(devA, "gone from sysfs")
	c.round(time.Second)
	nextVerdict(t, c.family)
	failedAt := c.log.LastSeq()

	// Still failing, and the target knows only an older verdict.
	tg.Known = events.Verdict{Healthy: true, Seq: failedAt - 1}
	c.watch(tg)
	c.Silent(t)
	if v := c.verdicts(t)[devA]; v.Healthy {
		t.Fatalf("an older ledger verdict overrode the checker's: %+v", v)
	}

	// Back in sysfs, discovered again at a later sequence number.
	c.prober.pass(devA)
	tg.Known = events.Verdict{Healthy: true, Seq: failedAt + 5}
	c.watch(tg)
	c.Silent(t)
	if v := c.verdicts(t)[devA]; !v.Healthy {
		t.Errorf("after its rediscovery the device is %+v, want healthy at once", v)
	}
	if got := c.recorded(t); len(got) != 1 {
		t.Errorf("recorded %+v, want only the failure", got)
	}
}

// A device that left every pool and comes back starts its hold-down
// again: a passing probe from before it left counts for nothing.
func TestADeviceBackInAPoolStartsItsHoldDownOver(t *testing.T) {
	c := newChecker(t, Config{})
	tg := target(devA, 0, 5*time.Minute)
	c.watch(tg)
	c.Silent(t)
	c.prober.fail(devA, "driver unbound (was vfio-pci)")
	c.round(time.Second)
	nextVerdict(t, c.family)
	c.prober.pass(devA)
	c.round(time.Second) // its hold-down starts
	c.Silent(t)

	c.watch() // it leaves every pool
	c.Silent(t)
	c.clock.advance(time.Hour)
	c.watch(tg) // and comes back, probed at once
	c.round(time.Second)
	c.NothingFor(t, 300*time.Millisecond) // a verdict lands in far less
	c.round(5 * time.Minute)
	if got := nextVerdict(t, c.family); !got.Healthy || got.Reason != "probes passed for 5m0s" {
		t.Errorf("verdict %+v, want healthy after its hold-down", *got)
	}
}

// Each target is probed at its own pool's interval: a pool probed often
// does not pace the others.
func TestEachTargetAtItsOwnInterval(t *testing.T) {
	c := newChecker(t, Config{Now: time.Now})
	fast, slow := target(devA, 0, 0), target(devB, 0, 0)
	fast.Interval = 20 * time.Millisecond
	c.watch(fast, slow) // slow: the checker's interval, an hour
	// Wait for five periodic rounds, however long the machine takes.
	deadline := time.Now().Add(10 * time.Second)
	for c.prober.count() < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rounds in 10s with a 20ms interval", c.prober.count())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.prober.mu.Lock()
	rounds := slices.Clone(c.prober.rounds)
	c.prober.mu.Unlock()
	if !slices.Equal(rounds[0], []string{devA, devB}) {
		t.Errorf("the Watch probed %v, want both targets", rounds[0])
	}
	for i, r := range rounds[1:] {
		if !slices.Equal(r, []string{devA}) {
			t.Errorf("periodic round %d probed %v, want only %s (20ms), not %s (1h)", i+1, r, devA, devB)
		}
	}
}

// A device a kernel event probed a little early stays in the periodic round
// of its interval: the round takes those due within a quarter of their
// interval, rather than probing them a few moments later in a round of
// their own. The timer is real (the interval short); the clock the rounds
// are judged by is the test's.
func TestADeviceProbedEarlyStaysInItsIntervalsRound(t *testing.T) {
	const interval = 400 * time.Millisecond
	c := newChecker(t, Config{})
	a, b := target(devA, 0, 0), target(devB, 0, 0)
	a.Interval, b.Interval = interval, interval
	c.watch(a, b)
	c.Silent(t)
	c.clock.advance(interval / 8)
	c.Sys.Root.Send(c.Child, &Probe{Reason: "uevent", Addresses: []string{devA}})
	c.Silent(t)
	c.clock.advance(interval - interval/8) // devB is due, devA an eighth later
	deadline := time.Now().Add(10 * time.Second)
	for c.prober.count() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no periodic round in 10s with a %v interval: rounds %v", interval, c.prober.roundsSince(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.prober.mu.Lock()
	rounds := slices.Clone(c.prober.rounds)
	c.prober.mu.Unlock()
	if !slices.Equal(rounds[1], []string{devA}) {
		t.Fatalf("the uevent probed %v, want %s", rounds[1], devA)
	}
	if !slices.Equal(rounds[2], []string{devA, devB}) {
		t.Errorf("the periodic round probed %v, want %s and %s together", rounds[2], devA, devB)
	}
}

// Link notifications, however many, never put off a device's full probe at
// its interval: what only the full probe sees (a /dev/vfio node gone, whose
// uevent asks for nothing) is seen in time.
func TestLinkNotificationsDoNotPutOffTheFullProbe(t *testing.T) {
	c := newChecker(t, Config{Now: time.Now})
	tg := target(devA, 0, 0)
	tg.Probe.Link, tg.Probe.PFInterface, tg.Interval = true, "ens1f0", 100*time.Millisecond
	c.watch(tg)
	c.Silent(t)
	c.prober.fail(devA, "/dev/vfio/102 missing")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.Sys.Root.Send(c.Child, &Probe{Reason: "link", Interfaces: []string{"ens1f0"}})
		if _, ok := c.Heard(); ok {
			break // the verdict: a full probe ran
		}
		if time.Now().After(deadline) {
			t.Fatalf("no full probe in 10s of link notifications every 20ms (interval 100ms): %d full rounds, %d link rounds",
				c.prober.count(), c.prober.linkCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := c.verdicts(t)[devA]; got.Healthy || got.Reason != "/dev/vfio/102 missing" {
		t.Errorf("devA: %+v, want unhealthy, /dev/vfio/102 missing", got)
	}
}

// A device in its hold-down is probed fully even on a link notification: it
// does not turn healthy on the link's word alone.
func TestHoldDownIsNotEndedByALinkCheck(t *testing.T) {
	c := newChecker(t, Config{})
	tg := target(devA, 0, time.Hour)
	tg.Probe.Link, tg.Probe.PFInterface = true, "ens1f0"
	c.watch(tg)
	c.Silent(t)
	c.prober.fail(devA, "driver unbound (was vfio-pci)")
	c.round(time.Second)
	if v := nextVerdict(t, c.family); v.Healthy {
		t.Fatalf("verdict %+v, want unhealthy", *v)
	}
	c.prober.pass(devA)
	c.round(time.Second) // passes: the hold-down starts
	c.Silent(t)
	full, links := c.prober.count(), c.prober.linkCount()
	c.Sys.Root.Send(c.Child, &Probe{Reason: "link", Interfaces: []string{"ens1f0"}})
	c.Silent(t)
	if f, l := c.prober.count()-full, c.prober.linkCount()-links; f != 1 || l != 0 {
		t.Errorf("a link notification in the hold-down ran %d full and %d link rounds, want 1 full", f, l)
	}
}

// A round's verdicts are applied once they are durable, and the mailbox
// does not wait for the fsync meanwhile: a Query is answered from the
// verdicts in the ledger, and the next round waits for the verdicts before
// it (it judges against them), then runs.
func TestARoundWaitsForTheVerdictsBeforeIt(t *testing.T) {
	var once sync.Once
	held, open := make(chan struct{}), make(chan struct{})
	rec := ledger.NewRecorder(openLog(t), "boot-1", nil)
	rec.Observe(func(envs []events.Envelope) {
		if envs[0].Type == events.TypeDeviceHealthChanged {
			once.Do(func() { close(held) })
			<-open
		}
	})
	var opened sync.Once
	release := func() { opened.Do(func() { close(open) }) }
	t.Cleanup(release) // a failing test must not leave the writer held
	c := newChecker(t, Config{Recorder: rec})
	c.watch(target(devA, 0, 0))
	c.Silent(t)
	c.prober.fail(devA, "gone from sysfs")
	c.round(0)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the verdict never reached the ledger")
	}
	probes := c.prober.count()
	c.round(0)
	r, err := c.Sys.Root.RequestFuture(c.Child, &Query{}, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("a Query while a verdict is being recorded: %v", err)
	}
	if v := r.(*Verdicts).Devices[devA]; !v.Healthy {
		t.Errorf("devA is %+v before its verdict is durable, want healthy", v)
	}
	if n := c.prober.count(); n != probes {
		t.Errorf("%d probe rounds while the verdict before was being recorded, want none", n-probes)
	}
	release()
	if v := nextVerdict(t, c.family); v.Address != devA || v.Healthy {
		t.Errorf("verdict %+v, want devA unhealthy", *v)
	}
	c.Silent(t)
	if n := c.prober.count(); n != probes+1 {
		t.Errorf("%d probe rounds after the verdict landed, want the one held", n-probes)
	}
	if n := len(c.recorded(t)); n != 1 {
		t.Errorf("%d health changes recorded, want 1", n)
	}
}

// A checker that crashes probes the targets of the last Watch again at
// once, and judges them against the verdicts in the ledger, not against
// the older word of that Watch.
func TestARestartedCheckerKeepsItsTargets(t *testing.T) {
	c := newChecker(t, Config{})
	// The parent's word on them is older than the verdicts that follow.
	a, b := target(devA, 0, 0), target(devB, 0, 0)
	a.Known, b.Known = events.Verdict{Healthy: true, Seq: 1}, events.Verdict{Healthy: true, Seq: 1}
	c.watch(a, b)
	c.Silent(t)
	c.prober.fail(devA, "gone from sysfs")
	c.round(0)
	if v := nextVerdict(t, c.family); v.Address != devA || v.Healthy {
		t.Fatalf("verdict %+v, want devA unhealthy", *v)
	}
	probes := c.prober.count()
	c.prober.fail(devB, "gone from sysfs")
	c.Sys.Root.Send(c.Child, &Crash{Reason: "test"})
	if v := nextVerdict(t, c.family); v.Address != devB || v.Healthy {
		t.Errorf("verdict %+v after the restart, want devB unhealthy (devA's stands in the ledger)", *v)
	}
	c.Silent(t)
	if got := c.prober.roundsSince(probes); !slices.Equal(got, []string{devA, devB}) {
		t.Errorf("the restarted checker probed %v, want both targets", got)
	}
	if n := len(c.recorded(t)); n != 2 {
		t.Errorf("%d health changes recorded, want 2", n)
	}
}

// A tick of a timer stopped or replaced since, or of an earlier
// incarnation, starts no round: each would start a timer chain of its
// own, and the checker would probe twice as often for good.
func TestAStaleTickStartsNoRound(t *testing.T) {
	c := newChecker(t, Config{})
	c.watch(target(devA, 0, 0))
	c.Silent(t)
	probes := c.prober.count()
	c.clock.advance(2 * time.Hour) // devA is due
	c.Sys.Root.Send(c.Child, &wake.Tick{})
	c.Silent(t)
	if n := c.prober.count(); n != probes {
		t.Errorf("%d probe rounds after a stale tick, want none", n-probes)
	}
}

// A probe this process cannot make (out of file descriptors) says nothing
// of the device: no verdict changes, whichever way the device stood, and
// the log says so once, then once when probes can be made again.
func TestAnInconclusiveProbeKeepsTheVerdict(t *testing.T) {
	logs := make(logLines, 64)
	c := newChecker(t, Config{Log: zerolog.New(logs)})
	c.watch(target(devA, 0, 0), target(devB, 0, 0))
	c.Silent(t)
	c.prober.fail(devB, "driver unbound (was vfio-pci)")
	c.round(time.Second)
	nextVerdict(t, c.family)
	c.prober.pass(devB)

	c.prober.setUnreadable(true)
	for range 3 {
		c.round(time.Second)
		c.Silent(t)
	}
	c.NothingFor(t, 100*time.Millisecond) // a verdict is told once recorded
	got := c.verdicts(t)
	if !got[devA].Healthy || got[devB].Healthy {
		t.Errorf("verdicts while no probe could be made: %+v, want devA healthy and devB unhealthy as before", got)
	}
	if rec := c.recorded(t); len(rec) != 1 {
		t.Errorf("recorded %+v, want only devB's failure", rec)
	}
	const cannot, again = "cannot probe devices: their health stays as recorded until a probe can be made", "devices can be probed again"
	if n := logs.countAt("error", cannot); n != 1 {
		t.Errorf("%d error lines %q over three rounds, want 1", n, cannot)
	}

	c.prober.setUnreadable(false)
	c.round(time.Second)
	if v := nextVerdict(t, c.family); v.Address != devB || !v.Healthy {
		t.Errorf("once probes can be made: %+v, want devB healthy", v)
	}
	c.Silent(t)
	if n := logs.countAt("info", again); n != 1 {
		t.Errorf("%d info lines %q, want 1", n, again)
	}
}

// A round that probes some devices conclusively says nothing of those it
// did not probe: while full probes cannot be made, a link notification
// (its link check answered from the last full probe, or read) or a uevent
// of another device does not end the outage in the log, and the next
// round does not log it at error again.
func TestAnInconclusiveOutageIsLoggedOnceAcrossLinkRounds(t *testing.T) {
	logs := make(logLines, 64)
	c := newChecker(t, Config{Log: zerolog.New(logs)})
	onPF := func(addr, pf string) Target {
		tg := target(addr, 0, 0)
		tg.Probe.Link, tg.Probe.PFInterface = true, pf
		return tg
	}
	c.prober.fail(devB, "driver unbound (was vfio-pci)")
	c.watch(onPF(devA, "ens1f0"), onPF(devB, "ens1f1"))
	if v := nextVerdict(t, c.family); v.Address != devB || v.Healthy {
		t.Fatalf("verdict %+v, want devB unhealthy", *v)
	}
	c.Silent(t)

	c.prober.setUnreadable(true)
	c.round(time.Second)
	c.Silent(t)
	// devB's link check alone, completed by its last full probe.
	c.Sys.Root.Send(c.Child, &Probe{Reason: "link", Interfaces: []string{"ens1f1"}})
	c.Silent(t)
	c.round(time.Second)
	c.Silent(t)
	const cannot, again = "cannot probe devices: their health stays as recorded until a probe can be made", "devices can be probed again"
	var infos, errs int
	for _, line := range logs.drain() {
		infos += countLine(line, "info", again)
		errs += countLine(line, "error", cannot)
	}
	if infos != 0 {
		t.Errorf("%d info lines %q while no full probe could be made, want none", infos, again)
	}
	if errs != 1 {
		t.Errorf("%d error lines %q in one outage, want 1", errs, cannot)
	}

	// Probes can be made again, but the first round names devB alone:
	// devA has not been probed since.
	c.prober.setUnreadable(false)
	c.Sys.Root.Send(c.Child, &Probe{Reason: "uevent", Addresses: []string{devB}})
	c.Silent(t)
	if n := logs.countAt("info", again); n != 0 {
		t.Errorf("%d info lines %q with devA not probed since, want none", n, again)
	}
	c.round(time.Second)
	c.Silent(t)
	if n := logs.countAt("info", again); n != 1 {
		t.Errorf("%d info lines %q once every device was probed, want 1", n, again)
	}
}

// A probe that says nothing of the device (out of file descriptors)
// once its debounce or hold-down is over decides nothing either: the
// verdict waits for a probe that can be made, and takes its reason, not
// the failed probe's.
func TestAnInconclusiveProbeAtTheEndOfAHoldDownOrDebounceDecidesNothing(t *testing.T) {
	for _, tc := range []struct {
		name               string
		debounce, holdDown time.Duration
		failFirst          bool
		want               Verdict
	}{
		{"debounce", 30 * time.Second, 0, false, Verdict{Address: devA, Reason: "gone from sysfs"}},
		{"hold-down", 0, time.Minute, true, Verdict{Address: devA, Healthy: true, Reason: "probes passed for 1m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(t, Config{}) // interval: an hour
			c.startSpell(t, tc.debounce, tc.holdDown, tc.failFirst, time.Second)
			c.prober.setUnreadable(true)
			c.round(tc.debounce + tc.holdDown) // past its end
			c.Silent(t)
			if rec := c.recorded(t); len(rec) > 0 && rec[len(rec)-1].Healthy == tc.want.Healthy {
				t.Errorf("recorded %+v after a probe that could not be made", rec)
			}
			c.prober.setUnreadable(false)
			c.round(time.Second)
			if v := nextVerdict(t, c.family); *v != tc.want {
				t.Errorf("verdict %+v, want %+v", *v, tc.want)
			}
		})
	}
}

// A probe that cannot be made inside a debounce or hold-down does not put
// off its end to the device's next interval: the round at its end still
// comes, and a device that kept failing is unhealthy then, not an interval
// later. The debounce is short, as the round at its end runs on a real
// timer; the clock the verdict is judged by is the test's.
func TestAnInconclusiveProbeDoesNotPutOffAHoldDownOrDebounce(t *testing.T) {
	for _, tc := range []struct {
		name               string
		debounce, holdDown time.Duration
		failFirst          bool
		want               Verdict
	}{
		{"debounce", 100 * time.Millisecond, 0, false, Verdict{Address: devA, Reason: "gone from sysfs"}},
		{"hold-down", 0, 100 * time.Millisecond, true, Verdict{Address: devA, Healthy: true, Reason: "probes passed for 100ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(t, Config{}) // interval: an hour
			c.startSpell(t, tc.debounce, tc.holdDown, tc.failFirst, time.Millisecond)
			c.prober.setUnreadable(true)
			c.round(time.Millisecond) // a uevent, say, while out of files
			c.Silent(t)
			c.prober.setUnreadable(false)
			c.clock.advance(tc.debounce + tc.holdDown)
			// No Probe: the checker's own round, when it ends, decides.
			if v := nextVerdict(t, c.family); *v != tc.want {
				t.Errorf("verdict %+v, want %+v", *v, tc.want)
			}
		})
	}
}

// startSpell watches devA with debounce and holdDown and starts one of
// them with a probe after after: a debounce (the device healthy, then
// failing) or, with failFirst, a hold-down (unhealthy, then passing).
func (c *checkerUnderTest) startSpell(t *testing.T, debounce, holdDown time.Duration, failFirst bool, after time.Duration) {
	t.Helper()
	if failFirst {
		c.prober.fail(devA, "gone from sysfs")
		c.watch(target(devA, debounce, holdDown))
		if v := nextVerdict(t, c.family); v.Healthy {
			t.Fatalf("verdict %+v, want unhealthy", *v)
		}
		c.prober.pass(devA)
	} else {
		c.watch(target(devA, debounce, holdDown))
		c.Silent(t)
		c.prober.fail(devA, "gone from sysfs")
	}
	c.round(after)
	c.Silent(t)
}
