package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
)

// TestHTMLGolden pins the page of the sample ledger: it has no clock of
// its own, so the same ledger always makes the same page.
func TestHTMLGolden(t *testing.T) {
	page := htmlPage(t, sampleCopy(t))
	checkGolden(t, "dump_html", page)
}

// htmlPage runs dump --format html on db with args and returns the page.
func htmlPage(t *testing.T, db string, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "html"}, args...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	return out
}

// pageFacts is what a test reads off a page.
type pageFacts struct {
	lanes     []string // the lanes' addresses, in order
	bars      int
	barLabels []string
	notes     []string
	summary   map[string][]string // pool -> its row's cells
}

// checkPage checks that page is well-formed, self-contained HTML and
// returns what it shows. Well-formed: every element that is not void is
// closed, in order, and the document parses; self-contained: it names no
// URL (no http:, https:, src=, href=, url( or @import at all).
func checkPage(t *testing.T, page string) pageFacts {
	t.Helper()
	for _, bad := range []string{"http://", "https://", "src=", "href=", "url(", "@import", "//cdn", "<link", "<img", "<iframe"} {
		if i := strings.Index(strings.ToLower(page), bad); i >= 0 {
			t.Errorf("the page refers to something outside it: %q at %d: %q", bad, i, page[max(i-60, 0):min(i+60, len(page))])
		}
	}
	void := map[string]bool{"meta": true, "input": true, "br": true, "hr": true, "img": true, "link": true, "wbr": true}
	z := html.NewTokenizer(strings.NewReader(page))
	var open []string
	for done := false; !done; {
		switch z.Next() {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatalf("tokenize: %v", z.Err())
			}
			done = true
		case html.StartTagToken:
			name, _ := z.TagName()
			if !void[string(name)] {
				open = append(open, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(open) == 0 || open[len(open)-1] != string(name) {
				t.Fatalf("</%s> closes %v", name, open)
			}
			open = open[:len(open)-1]
		case html.SelfClosingTagToken:
			name, _ := z.TagName()
			if !void[string(name)] {
				t.Errorf("<%s/> is not a void element", name)
			}
		}
	}
	if len(open) > 0 {
		t.Fatalf("elements never closed: %v", open)
	}
	if !strings.HasPrefix(page, "<!DOCTYPE html>") {
		t.Errorf("the page does not start with a doctype")
	}

	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	facts := pageFacts{summary: map[string][]string{}}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			class := attr(n, "class")
			switch {
			case hasClass(class, "lane"):
				lab := firstWithClass(n, "lab")
				if lab == nil || firstWithClass(n, "trk") == nil {
					t.Errorf("a lane without a label or a track")
				} else {
					facts.lanes = append(facts.lanes, strings.Fields(text(lab))[0])
				}
			case hasClass(class, "bar") && n.Parent != nil && hasClass(attr(n.Parent, "class"), "trk"):
				facts.bars++
				facts.barLabels = append(facts.barLabels, text(n))
			case hasClass(class, "note"):
				facts.notes = append(facts.notes, text(n))
			case n.Data == "tr" && n.Parent != nil && n.Parent.Data == "tbody":
				var cells []string
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					cells = append(cells, text(c))
				}
				facts.summary[cells[0]] = cells[1:]
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return facts
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(class, want string) bool { return slices.Contains(strings.Fields(class), want) }

func firstWithClass(n *html.Node, class string) *html.Node {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && hasClass(attr(c, "class"), class) {
			return c
		}
	}
	return nil
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

// TestHTMLSamplePage: the sample's page has a lane per device, a bar per
// allocation labelled with its pod, and the summary of each pool.
func TestHTMLSamplePage(t *testing.T) {
	page := htmlPage(t, sampleCopy(t))
	facts := checkPage(t, page)
	want := []string{"0000:3b:02.3", "0000:3b:02.4", "0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:af:00.0", "0000:d8:00.0", "0000:3b:00.0"}
	if !slices.Equal(facts.lanes, want) {
		t.Errorf("lanes %v, want %v (by pool, then address)", facts.lanes, want)
	}
	wantBars := []string{"cnf-router-0", "#52 unbound", "dpdk-testpmd-7d9f", "dpdk-testpmd-8b21", "trainer-0"}
	if !slices.Equal(facts.barLabels, wantBars) {
		t.Errorf("bars %q, want %q", facts.barLabels, wantBars)
	}
	if len(facts.notes) > 0 {
		t.Errorf("the sample's page samples: %q", facts.notes)
	}
	// devices, busy, allocations, releases, conflicts, leak suspects, unhealthy time
	wantRows := map[string][]string{
		"intel.com/sriov_net":  {"2", "11.1%", "1", "1", "0", "0", "0s (0.0%)"},
		"intel.com/sriov_vfio": {"3", "30.7%", "3", "1", "1", "1", "30s (0.0%)"},
		"nvidia.com/gpu":       {"2", "40.5%", "1", "1", "0", "0", "1h (7.1%)"},
	}
	for pool, row := range wantRows {
		if got := facts.summary[pool]; !slices.Equal(got, row) {
			t.Errorf("summary of %s: %q, want %q", pool, got, row)
		}
	}
	if len(facts.summary) != len(wantRows) {
		t.Errorf("summary rows %v", facts.summary)
	}
	if !strings.Contains(page, `<span class="bar unbound leak" `) || !strings.Contains(page, "leak suspected: no container has claimed it for 5m0s") {
		t.Errorf("the allocation no pod claimed is not drawn as a leak suspect")
	}
	if !strings.Contains(page, `class="ml podres"`) {
		t.Errorf("no marker for the spell without PodResources")
	}
}

// TestHTMLFilters: the filters of dump shape the page.
func TestHTMLFilters(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name      string
		args      []string
		wantLanes []string
		wantBars  []string
		wantPools []string
	}{
		{"pool", []string{"--pool", "nvidia.com/gpu"}, []string{"0000:af:00.0", "0000:d8:00.0"}, []string{"trainer-0"}, []string{"nvidia.com/gpu"}},
		{"device", []string{"--device", "0000:3b:02.1"}, []string{"0000:3b:02.1"}, []string{"dpdk-testpmd-7d9f", "dpdk-testpmd-8b21"}, []string{"intel.com/sriov_vfio"}},
		{"pod", []string{"--pod", "telco/dpdk-testpmd-8b21"}, []string{"0000:3b:02.1"}, []string{"dpdk-testpmd-8b21"}, []string{"intel.com/sriov_vfio"}},
		{"namespace", []string{"--namespace", "telco"}, []string{"0000:3b:02.3", "0000:3b:02.0", "0000:3b:02.1"},
			[]string{"cnf-router-0", "dpdk-testpmd-7d9f", "dpdk-testpmd-8b21"}, []string{"intel.com/sriov_net", "intel.com/sriov_vfio"}},
		// Before 13:00 the second testpmd pod did not exist; the trainer's
		// allocation of 09:20 is still held at 12:00, so it is drawn from
		// the window's start.
		{"since until", []string{"--since", "2026-11-24T12:00:00Z", "--until", "2026-11-24T13:00:00Z"},
			[]string{"0000:3b:02.3", "0000:3b:02.4", "0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:af:00.0", "0000:d8:00.0", "0000:3b:00.0"},
			[]string{"dpdk-testpmd-7d9f", "trainer-0"}, []string{"intel.com/sriov_net", "intel.com/sriov_vfio", "nvidia.com/gpu"}},
		{"pf", []string{"--pf", "0000:3b:00.0"}, []string{"0000:3b:02.3", "0000:3b:02.4", "0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:3b:00.0"},
			[]string{"cnf-router-0", "#52 unbound", "dpdk-testpmd-7d9f", "dpdk-testpmd-8b21"}, []string{"intel.com/sriov_net", "intel.com/sriov_vfio"}},
		{"iface", []string{"--iface", "ens1f0v143"}, []string{"0000:3b:02.3"}, []string{"cnf-router-0"}, []string{"intel.com/sriov_net"}},
		{"nothing", []string{"--until", "2026-11-24T00:00:00Z", "--pod", "trainer-0"}, nil, nil, nil},
		// Discovered at 08:00:02: named by the ledger, after the window.
		{"device after the window", []string{"--until", "2026-11-24T08:00:01Z", "--device", "0000:3b:02.1"}, nil, nil, nil},
		{"after the end", []string{"--since", "2027-01-01T00:00:00Z"}, nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page := htmlPage(t, db, tc.args...)
			facts := checkPage(t, page)
			if !slices.Equal(facts.lanes, tc.wantLanes) {
				t.Errorf("lanes %v, want %v", facts.lanes, tc.wantLanes)
			}
			if !slices.Equal(facts.barLabels, tc.wantBars) {
				t.Errorf("bars %q, want %q", facts.barLabels, tc.wantBars)
			}
			var pools []string
			for p := range facts.summary {
				pools = append(pools, p)
			}
			slices.Sort(pools)
			if !slices.Equal(pools, tc.wantPools) {
				t.Errorf("summary of %v, want %v", pools, tc.wantPools)
			}
			if len(tc.args) > 0 && !strings.Contains(page, "Filters: "+tc.args[0]) {
				t.Errorf("the page does not restate its filters")
			}
		})
	}
}

// TestHTMLWindowStartsWithTheState: a window that starts while the trainer
// holds its GPU draws the allocation from the window's start, and counts
// only the allocations made inside it.
func TestHTMLWindowStartsWithTheState(t *testing.T) {
	page := htmlPage(t, sampleCopy(t), "--since", "2026-11-24T12:00:00Z", "--pool", "nvidia.com/gpu")
	facts := checkPage(t, page)
	if got := facts.summary["nvidia.com/gpu"]; len(got) < 4 || got[2] != "0" || got[3] != "1" {
		t.Errorf("gpu row %q: want 0 allocations, 1 release in the window", got)
	}
	if !regexp.MustCompile(`<span class="bar" style="left:0%;width:100%;--h:\d+" title="#22 nvidia.com/gpu`).MatchString(page) {
		t.Errorf("the trainer's allocation is not drawn across the whole window:\n%s", page)
	}
}

// TestHTMLLargeLedger: a ledger of 1,032 devices and 5,000 events makes a
// page of the 500 busiest, that says so, in bounded size.
func TestHTMLLargeLedger(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, syntheticStory(synthOptions{devices: 1032, events: 5000, seed: 1}))
	page := htmlPage(t, db)
	facts := checkPage(t, page)
	if len(facts.lanes) != pageMaxLanes {
		t.Errorf("%d lanes, want %d", len(facts.lanes), pageMaxLanes)
	}
	if !slices.ContainsFunc(facts.notes, func(n string) bool { return strings.Contains(n, "Showing 500 of 1,032 devices, busiest first") }) {
		t.Errorf("the page does not say it samples: %q", facts.notes)
	}
	if len(page) > 2<<20 {
		t.Errorf("the page is %d bytes", len(page))
	}
	t.Logf("1,032 devices, 5,000 events: %d bytes, %d bars", len(page), facts.bars)
}

// TestHTMLFewThousandEvents: 5,000 events on 64 devices draw every device,
// every allocation, nothing merged.
func TestHTMLFewThousandEvents(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	envs := syntheticStory(synthOptions{devices: 64, events: 5000, seed: 2})
	writeLedger(t, db, envs)
	page := htmlPage(t, db)
	facts := checkPage(t, page)
	if len(facts.lanes) != 64 {
		t.Errorf("%d lanes, want 64", len(facts.lanes))
	}
	allocations := 0
	for _, e := range envs {
		if e.Type == events.TypeDevicesAllocated {
			allocations++
		}
	}
	if facts.bars != allocations {
		t.Errorf("%d bars for %d allocations", facts.bars, allocations)
	}
	if len(facts.notes) > 0 {
		t.Errorf("notes %q", facts.notes)
	}
	t.Logf("64 devices, %d events, %d allocations: %d bytes", len(envs), allocations, len(page))
}

// TestHTMLBarsPerLaneBounded: a device allocated a thousand times keeps at
// most laneMaxBars bars, covering the same time, and the page says so.
func TestHTMLBarsPerLaneBounded(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, syntheticStory(synthOptions{devices: 2, events: 4000, seed: 3}))
	page := htmlPage(t, db)
	facts := checkPage(t, page)
	if len(facts.lanes) != 2 {
		t.Fatalf("lanes %v", facts.lanes)
	}
	if facts.bars > 2*laneMaxBars+2*laneMaxOpen {
		t.Errorf("%d bars on 2 lanes", facts.bars)
	}
	if !slices.ContainsFunc(facts.notes, func(n string) bool { return strings.Contains(n, "merged into striped bars") }) {
		t.Errorf("the page does not say it merged bars: %q", facts.notes)
	}
	if !strings.Contains(page, "allocations, merged to fit the page") {
		t.Errorf("no merged bar says what it stands for")
	}
}

// TestHTMLBadFlags: a page of some event types, or of the first N events,
// would draw a wrong picture; a page of a device or a pool the ledger
// never names, an empty one.
func TestHTMLBadFlags(t *testing.T) {
	db := sampleCopy(t)
	for _, args := range [][]string{
		{"--limit", "3"},
		{"--type", "DevicesAllocated"},
		// A name the ledger never names, as the table says.
		{"--device", "0000:99:00.1"},
		{"--pool", "intel.com/nope"},
	} {
		code, out, errOut := runCLI(t, append([]string{"dump", "--db", db, "--format", "html"}, args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, args[0]) {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q: want exit %d naming %s", args, code, len(out), errOut, exitUsage, args[0])
		}
	}
}

func TestSpanListMergesClosestNeighbours(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	l := spanList{max: 3}
	l.add(span{from: at(0), to: at(10), label: "a"})
	l.add(span{from: at(100), to: at(110), label: "b"})
	l.add(span{from: at(12), to: at(14), label: "a"})
	l.add(span{from: at(200), to: at(201), label: "c"})
	if len(l.spans) != 3 || l.merged != 1 {
		t.Fatalf("%d spans, %d merges", len(l.spans), l.merged)
	}
	m := l.spans[0]
	if !m.from.Equal(at(0)) || !m.to.Equal(at(14)) || m.n != 2 || m.total != 12*time.Minute || m.label != "a" {
		t.Errorf("merged %+v: want 0..14, 2 spans, 12m in all, label a", m)
	}
	if l.spans[1].label != "b" || l.spans[2].label != "c" {
		t.Errorf("the far spans were merged: %+v", l.spans)
	}
}

// TestHTMLThroughAdminSocket: on a live node the page is read through the
// daemon's admin socket, and is the page the file makes.
func TestHTMLThroughAdminSocket(t *testing.T) {
	// A short dir: a unix socket's path is at most about 100 bytes.
	dir, err := os.MkdirTemp("", "dlhtml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db := filepath.Join(dir, ledgerFileName)
	writeSampleLedger(t, db)
	offline := htmlPage(t, db)
	offlinePod := htmlPage(t, db, "--namespace", "telco")

	serveLedger(t, dir, db)

	for _, tc := range []struct {
		args []string
		want string
	}{{nil, offline}, {[]string{"--namespace", "telco"}, offlinePod}} {
		code, live, errOut := runCLI(t, append([]string{"dump", "--state-dir", dir, "--format", "html"}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if live != tc.want {
			t.Errorf("%v: the page read through the admin socket differs from the file's", tc.args)
		}
	}
	// And the two passes of --pod through the socket.
	_, liveStory, _ := runCLI(t, "dump", "--state-dir", dir, "--namespace", "telco")
	if !strings.Contains(liveStory, "#49 released after 1h20m") {
		t.Errorf("dump --namespace through the admin socket:\n%s", liveStory)
	}
}

// serveLedger stands in for a daemon running on the ledger db: the file
// open for writing (it holds the lock), served on the admin socket in dir.
func serveLedger(t *testing.T, dir, db string) {
	t.Helper()
	l, err := store.Open(db, store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	admin := grpcapi.NewAdminServer(l, fakeAdminStatus{}, grpcapi.AdminServerOptions{
		SnapshotDamaged: func(err error) bool { return errors.Is(err, store.ErrCorrupt) },
	})
	if err := admin.Serve(grpcapi.AdminSocketPath(dir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Stop(context.Background()) })
}

type fakeAdminStatus struct{}

func (fakeAdminStatus) Status(context.Context) (grpcapi.AdminStatus, error) {
	return grpcapi.AdminStatus{Version: "test"}, nil
}

// minuteStory is a ledger written an event a minute from t0, on one boot.
type minuteStory struct {
	t0   time.Time
	envs []events.Envelope
}

// add appends p and returns its sequence.
func (s *minuteStory) add(p events.Payload) uint64 {
	s.envs = append(s.envs, events.New(p, s.t0.Add(time.Duration(len(s.envs))*time.Minute), "boot-1"))
	return uint64(len(s.envs))
}

// write writes the story into a new ledger and returns its path.
func (s *minuteStory) write(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, s.envs)
	return db
}

// storyVF is the facts of a VF of the PF 0000:3b:00.0.
func storyVF(addr string) events.DeviceFacts {
	return events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1889", Class: "020000", Driver: "vfio-pci", PF: "0000:3b:00.0", VFIndex: 1, NUMANode: -1}
}

// barTitles returns the hover titles of the page's allocation bars.
func barTitles(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<span class="bar[^"]*" style="[^"]*" title="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// TestHTMLSupersededAllocationEnds: an allocation the kubelet superseded
// ends on the page where it ended in the ledger, also when the filters
// leave out the allocation that superseded it: another pod's (--pod), or
// one of only some of its devices (--device of another: the whole
// allocation is freed). Drawn on, it would claim the device was held when
// it went unhealthy.
func TestHTMLSupersededAllocationEnds(t *testing.T) {
	const vfio, dev1, dev2 = "intel.com/sriov_vfio", "0000:3b:02.1", "0000:3b:02.2"
	s := &minuteStory{t0: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
	s.add(events.DaemonStarted{Version: "v1", PID: 1})
	s.add(events.DeviceDiscovered{Device: storyVF(dev1)})
	s.add(events.DeviceDiscovered{Device: storyVF(dev2)})
	s.add(events.PoolMembershipChanged{Pool: vfio, Added: []string{dev1, dev2}, Reason: "daemon start"})
	a := s.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev1, dev2}}) // 09:04
	s.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev1, dev2}, Namespace: "telco", Pod: "pod-a", Container: "main"})
	b := s.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev2}, Supersedes: []uint64{a}}) // 09:06
	s.add(events.AllocationBound{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev2}, Namespace: "telco", Pod: "pod-b", Container: "main"})
	s.add(events.DeviceHealthChanged{Address: dev1, Reason: "driver unbound"})
	s.add(events.DeviceHealthChanged{Address: dev2, Reason: "driver unbound"}) // 09:09, pod-b holds it
	db := s.write(t)

	podA := fmt.Sprintf("#%d intel.com/sriov_vfio\ntelco/pod-a/main\n09:04:00 → 09:06:00 (2m)", a)
	podB := fmt.Sprintf("#%d intel.com/sriov_vfio\ntelco/pod-b/main\n09:06:00 → still at 09:09:00 (3m)", b)
	for _, tc := range []struct {
		name string
		args []string
		want []string
		// busy is the pool's busy time, of its devices' time in it
		// (from 09:03 to 09:09); releases counts pod-a's allocation
		// where it is drawn ending.
		busy, releases string
	}{
		{"all", nil, []string{podA, podA, podB}, "58.3%", "1"},
		{"pod", []string{"--pod", "telco/pod-a"}, []string{podA, podA}, "33.3%", "1"},
		{"the other pod", []string{"--pod", "telco/pod-b"}, []string{podB}, "50.0%", "0"},
		{"device of the other", []string{"--device", dev1}, []string{podA}, "33.3%", "1"},
		{"device of both", []string{"--device", dev2}, []string{podA, podB}, "83.3%", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := htmlPage(t, db, tc.args...)
			facts := checkPage(t, page)
			if got := barTitles(page); !slices.Equal(got, tc.want) {
				t.Errorf("bars %q, want %q", got, tc.want)
			}
			if got := facts.summary[vfio]; len(got) < 4 || got[1] != tc.busy || got[3] != tc.releases {
				t.Errorf("summary %q, want busy %s, releases %s", got, tc.busy, tc.releases)
			}
		})
	}
}

// TestHTMLReboundAllocationIsEachPodsInItsTurn: an allocation bound to
// pod-a, then to pod-b, is drawn as pod-a's until the second binding and
// pod-b's after it, under --pod of either, as their stories tell it
// (TestAnAllocationBoundAgainIsEachPodsInItsTurn); a binding again to
// the same pod cuts nothing. Labelled with the last pod throughout, the
// bar said pod-b held the device when it went unhealthy in pod-a's hands.
func TestHTMLReboundAllocationIsEachPodsInItsTurn(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	s := &minuteStory{t0: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
	s.add(events.DaemonStarted{Version: "v1", PID: 1})
	s.add(events.DeviceDiscovered{Device: storyVF(dev)})
	s.add(events.PoolMembershipChanged{Pool: vfio, Added: []string{dev}, Reason: "daemon start"})
	a := s.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}}) // 09:03
	s.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-a", Container: "main"})
	s.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-a", Container: "main"})
	s.add(events.DeviceHealthChanged{Address: dev, Reason: "while pod-a held it"})
	s.add(events.DeviceHealthChanged{Address: dev, Healthy: true, Reason: "probes passed"})
	s.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-b", Container: "main"}) // 09:08
	s.add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 6 * time.Minute})
	db := s.write(t)

	want := []string{
		fmt.Sprintf("#%d intel.com/sriov_vfio\ntelco/pod-a/main\n09:03:00 → 09:08:00 (5m)", a),
		fmt.Sprintf("#%d intel.com/sriov_vfio\ntelco/pod-b/main\n09:08:00 → 09:09:00 (1m)", a),
	}
	for _, args := range [][]string{nil, {"--pod", "telco/pod-a"}, {"--pod", "telco/pod-b"}} {
		page := htmlPage(t, db, args...)
		facts := checkPage(t, page)
		if got := barTitles(page); !slices.Equal(got, want) {
			t.Errorf("%v: bars %q, want %q", args, got, want)
		}
		// One allocation, held from 09:03 to 09:09 of the device's 09:02 on.
		if got := facts.summary[vfio]; len(got) < 3 || got[1] != "85.7%" || got[2] != "1" {
			t.Errorf("%v: summary %q, want busy 85.7%%, 1 allocation", args, got)
		}
	}
}

// TestHTMLUntilBeforeTheFirstEvent: a page that ends before the ledger's
// first event says so, instead of drawing a window from year 1.
func TestHTMLUntilBeforeTheFirstEvent(t *testing.T) {
	page := htmlPage(t, sampleCopy(t), "--until", "2026-11-24T07:00:00Z")
	checkPage(t, page)
	const want = "No events at or before --until 2026-11-24T07:00:00Z: the ledger's first event, #1, is at 2026-11-24T08:00:00Z."
	if !strings.Contains(page, want) || strings.Contains(page, "0001-01-01") || strings.Contains(page, `class="tl"`) {
		i := strings.Index(page, "<header>")
		t.Errorf("the page's header, want %q and no timeline:\n%s", want, page[i:min(i+400, len(page))])
	}
}

// TestHTMLLegendNamesEveryMarker: each kind of marker a page draws across
// the lanes (daemon, kubelet, config, pod attribution, the ledger's own)
// has its entry in the legend, so that a grey line is not left unread.
func TestHTMLLegendNamesEveryMarker(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	s := &minuteStory{t0: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
	s.add(events.DaemonStarted{Version: "v1", PID: 1})
	s.add(events.DeviceDiscovered{Device: storyVF(dev)})
	s.add(events.PoolMembershipChanged{Pool: vfio, Added: []string{dev}, Reason: "daemon start"})
	s.add(events.ConfigApplied{Path: "config.json", SHA256: "ab"})
	s.add(events.KubeletRestarted{Socket: "kubelet.sock"})
	s.add(events.AttributionChanged{Available: false, Reason: "PodResources unavailable"})
	s.add(events.EventsDropped{FromSeq: 1, ToSeq: 1, Count: 1, Reason: "retain-age"})
	s.add(events.EventLost{Reason: "checksum mismatch"})
	page := htmlPage(t, s.write(t))
	checkPage(t, page)
	drawn := map[string]bool{}
	for _, m := range regexp.MustCompile(`<span class="ml ([a-z]+)"`).FindAllStringSubmatch(page, -1) {
		drawn[m[1]] = true
	}
	if len(drawn) < 5 {
		t.Fatalf("the page draws markers of %v, want the five kinds this ledger has", slices.Sorted(maps.Keys(drawn)))
	}
	for class := range drawn {
		if !strings.Contains(page, `<i class="sw ml `+class+`"></i>`) {
			t.Errorf("the page draws %q markers; its legend has no entry for them", class)
		}
	}
}

// TestHTMLSalvagedLedgerWithItsStartLost: a salvage that lost the start
// of a ledger puts an EventLost with no time in place of each event lost,
// after the snapshot it kept or with none. The page draws them where the
// history they stand before starts, and the allocation held across them
// from when it was made: from year 1, the window squeezed every lane into
// its right edge.
func TestHTMLSalvagedLedgerWithItsStartLost(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(p events.Payload) uint64 {
		envs = append(envs, events.New(p, t0.Add(time.Duration(len(envs))*time.Minute), "boot-1"))
		return uint64(len(envs))
	}
	lost := func() uint64 {
		envs = append(envs, events.New(events.EventLost{Reason: "no record of it in the damaged ledger"}, time.Time{}, "salvage"))
		return uint64(len(envs))
	}
	story := func() {
		add(events.DaemonStarted{Version: "v1", PID: 1})
		add(events.DeviceDiscovered{Device: storyVF(dev)})
		add(events.PoolMembershipChanged{Pool: vfio, Added: []string{dev}, Reason: "daemon start"})
	}

	// No snapshot: the ledger's first events are lost.
	lost()
	lost()
	story()
	a := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}}) // 09:05
	add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-a", Container: "main"})
	add(events.DevicesReleased{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 2 * time.Minute}) // 09:07
	noSnapshot := filepath.Join(t.TempDir(), ledgerFileName)
	writeLedger(t, noSnapshot, envs)

	// A snapshot before the events lost: the allocation was made before it.
	envs = nil
	story()
	b := add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{dev}}) // 09:03
	add(events.AllocationBound{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev}, Namespace: "telco", Pod: "pod-b", Container: "main"})
	first := lost()
	lost()
	add(events.DevicesReleased{AllocationSeq: b, Pool: vfio, DeviceIDs: []string{dev}, HeldFor: 4 * time.Minute}) // 09:07
	withSnapshot := retainedCopy(t, envs, first)

	for _, tc := range []struct {
		name, db, meta, bar string
	}{
		{"no snapshot", noSnapshot, "2026-11-24 09:02:00 → 2026-11-24 09:07:00 UTC (5m) · 8 events (#1–#8)",
			fmt.Sprintf("#%d intel.com/sriov_vfio\ntelco/pod-a/main\n09:05:00 → 09:07:00 (2m)", a)},
		{"after a snapshot", withSnapshot, "2026-11-24 09:07:00 → 2026-11-24 09:30:00 UTC (23m) · 3 events (#6–#8)",
			fmt.Sprintf("#%d intel.com/sriov_vfio\ntelco/pod-b/main\n09:03:00 → 09:07:00 (4m)", b)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Before the snapshot's and the retention's own events: the
			// snapshot's carries the clock of the machine the test runs on.
			page := htmlPage(t, tc.db, "--until", "2026-11-24T09:30:00Z")
			checkPage(t, page)
			if strings.Contains(page, "0001-") {
				t.Errorf("the page draws year 1")
			}
			if !strings.Contains(page, `<p class="meta">`+tc.meta) {
				i := strings.Index(page, "<header>")
				t.Errorf("header, want %q:\n%s", tc.meta, page[i:min(i+400, len(page))])
			}
			if got := barTitles(page); !slices.Equal(got, []string{tc.bar}) {
				t.Errorf("bars %q, want %q", got, tc.bar)
			}
			if n := strings.Count(page, `<span class="ml ledger" style="left:0%" title="`+tc.meta[11:19]+` an event lost: no record of it in the damaged ledger"></span>`); n != 2 {
				t.Errorf("%d markers of the events lost at the window's start, want 2", n)
			}
		})
	}
}

// TestHTMLAxisTicksBounded: the axis labels a handful of times however
// long the window, also one of decades (a node's clock that started at
// 1970 and synced later): a label a year would cover the axis.
func TestHTMLAxisTicksBounded(t *testing.T) {
	end := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for _, start := range []time.Time{
		end.Add(-time.Hour),
		end.Add(-30 * 24 * time.Hour),
		end.AddDate(-5, 0, 0),
		time.Unix(0, 0).UTC(),
	} {
		if ticks := axisTicks(start, end); len(ticks) < 2 || len(ticks) > 9 {
			t.Errorf("%s to %s: %d labels", start.Format(time.DateOnly), end.Format(time.DateOnly), len(ticks))
		}
	}
}

// TestHTMLAxisStepCenturies: a window of centuries, up to the whole span
// the ledger's times can take (1678 to 2262), is labelled a handful of
// times too. Its length saturates a time.Duration at 292 years, and a
// step worked out from the saturated length must not overflow: a
// negative step would send the axis back in time for ever.
func TestHTMLAxisStepCenturies(t *testing.T) {
	end := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for _, w := range []struct{ start, end time.Time }{
		{end.AddDate(-285, 0, 0), end},
		{end.AddDate(-300, 0, 0), end},
		{time.Unix(0, math.MinInt64).UTC(), time.Unix(0, math.MaxInt64).UTC()},
	} {
		name := w.start.Format(time.DateOnly) + " to " + w.end.Format(time.DateOnly)
		step := axisStep(w.start, w.end)
		if step <= 0 {
			t.Errorf("%s: step %s", name, step)
			continue // axisTicks would never end
		}
		if ticks := axisTicks(w.start, w.end); len(ticks) < 2 || len(ticks) > 9 {
			t.Errorf("%s: %d labels", name, len(ticks))
		}
	}
}

// TestHTMLBusyCountsInThePoolTheDeviceIsIn: a device a config moved to
// another pool while a pod held it is busy in the pool it is in, the one
// whose time the busy share is of; counted in the pool it was allocated
// from, it made the pool it left look busy with another pool's device and
// the pool it joined look idle while its only device was held.
func TestHTMLBusyCountsInThePoolTheDeviceIsIn(t *testing.T) {
	const vfio, net, idle, moved = "intel.com/sriov_vfio", "intel.com/sriov_net", "0000:3b:02.1", "0000:3b:02.2"
	s := &minuteStory{t0: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
	s.add(events.DaemonStarted{Version: "v1", PID: 1})
	s.add(events.DeviceDiscovered{Device: storyVF(idle)})
	s.add(events.DeviceDiscovered{Device: storyVF(moved)})
	s.add(events.PoolMembershipChanged{Pool: vfio, Added: []string{idle, moved}, Reason: "daemon start"})
	a := s.add(events.DevicesAllocated{Pool: vfio, DeviceIDs: []string{moved}})
	s.add(events.AllocationBound{AllocationSeq: a, Pool: vfio, DeviceIDs: []string{moved}, Namespace: "telco", Pod: "cnf-0", Container: "main"})
	s.add(events.PoolMembershipChanged{Pool: vfio, Removed: []string{moved}, Reason: "config applied"})
	s.add(events.PoolMembershipChanged{Pool: net, Added: []string{moved}, Reason: "config applied"}) // 09:07
	for range 4 {
		s.add(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"})
	}
	db := s.write(t)

	facts := checkPage(t, htmlPage(t, db, "--since", "2026-11-24T09:07:00Z"))
	for pool, want := range map[string]string{vfio: "0.0%", net: "100.0%"} {
		if got := facts.summary[pool]; len(got) < 2 || got[1] != want {
			t.Errorf("summary of %s %q, want busy %s", pool, got, want)
		}
	}
}
