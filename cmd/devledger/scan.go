package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// scanTableWidth is the width scan's tables are laid out for. Only free
// text (names, the reason a device joined no pool) is cut to fit it; an
// address or a pool name never is.
const scanTableWidth = 100

// Caps on columns whose values are unbounded in principle; the kernel
// bounds interface names to 15 bytes.
const (
	driverWidth = 12
	ifaceWidth  = 16
	healthWidth = 40 // "unhealthy: driver is iavf (was vfio-pci)"; JSON and --explain say it all
	minFreeText = 24 // free text is never cut shorter, even past the width
)

// defaultProcRoot is where the default route is read on a node.
const defaultProcRoot = "/proc"

// runScan is `devledger scan`: discovery and pool selection as a dry run.
// It reads the devices under a sysfs root, matches them against a config
// with the daemon's rules and prints where each one would go, or with
// --explain why one device went where it did. It changes nothing.
func runScan(args []string, stdout, stderr io.Writer) error {
	flags := newFlagSet("scan", "[--config FILE] [--resource-prefix PREFIX] [--use-cdi] [--sysfs-root DIR] [--dev-root DIR] [--proc-root DIR] [--pci-ids FILE] [--state-dir DIR | --db FILE] [--format table|json] [--explain ADDR]", stdout)
	var cf configFlags
	cf.register(flags, "the pool config `FILE` (the SR-IOV device plugin's schema, JSON or YAML); default: the file the ledger of --state-dir or --db last applied")
	sysfsRoot := flags.String("sysfs-root", sysfs.DefaultSysfsRoot, "read PCI devices from the sysfs mounted at `DIR`")
	devRoot := flags.String("dev-root", sysfs.DefaultDevRoot, "look for vfio/<group> and vhost-net under `DIR`")
	procRoot := flags.String("proc-root", defaultProcRoot, "read the default route from net/route under `DIR`")
	pciIDs := flags.String("pci-ids", "", "take vendor and device names from this pci.ids `FILE` (default: the usual locations)")
	format := flags.String("format", "table", "output `FORMAT`: table or json")
	explain := flags.String("explain", "", "say, for every pool, why the device at `ADDR` (0000:3b:02.1 or 3b:02.1) joined it or not")
	var lf ledgerFlags
	flags.StringVar(&lf.stateDir, "state-dir", "", "also show the daemon's verdicts, from the ledger in `DIR` (through its admin socket while it runs)")
	flags.StringVar(&lf.db, "db", "", "also show the verdicts in this ledger `FILE` (a copy taken off a node)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	configPath, err := cf.resolve(nil)
	if err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usageErrf("--format %q: want table or json", *format)
	}
	if err := lf.oneLedger(flags); err != nil {
		return err
	}
	ledgerNamed := lf.stateDir != "" || lf.db != ""
	if configPath == "" && !ledgerNamed {
		return usageErrf("--config is required: the pool config to match devices against (or --state-dir, for the config the daemon applied)")
	}
	if err := refuseEmpty(flags, map[string]string{"explain": "scan lists every device"}); err != nil {
		return err
	}
	explainAddr := ""
	if *explain != "" {
		a, err := sysfs.NormalizeAddress(*explain)
		if err != nil {
			return usageErrf("--explain: %v", err)
		}
		explainAddr = a
	}

	// A ledger read through a damaged page is shown, then named.
	var st events.State
	var damage error
	if ledgerNamed {
		if st, err = readLedgerState(&lf); errors.Is(err, errReadDamaged) {
			damage = err
		} else if err != nil {
			return err
		}
	}
	var warn warningList
	// unchanged: the config in force, as the daemon applied it.
	unchanged, inForce := false, configPath == ""
	if inForce {
		if configPath, unchanged, err = configInForce(st.Config, lf.path(), stderr, &warn); err != nil {
			return err
		}
	}
	cfg, err := config.Load(configPath, cf.opts)
	if err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			// Each on its own line exactly as the config package words it,
			// so an operator can jump to the file and field.
			fmt.Fprintln(stderr, list.Error())
			return usageErrf("invalid config %s (%d %s above)", configPath, len(list), plural(len(list), "error", "errors"))
		}
		return usageErr(err)
	}
	for _, w := range cfg.Warnings {
		warn.add(w)
	}
	if unchanged {
		if w := poolsUnlikeApplied(cfg, &st); w != "" {
			warn.add(w)
		}
	}
	warn.flush(stderr)

	sink := &logWarnings{list: &warn}
	reader := sysfs.New(sysfs.Options{
		SysfsRoot:  *sysfsRoot,
		DevRoot:    *devRoot,
		PCIIDsPath: *pciIDs,
		Logger:     zerolog.New(sink).Level(zerolog.WarnLevel),
	})
	devs, err := reader.Scan()
	if err != nil {
		if errors.Is(err, sysfs.ErrNoSysfsRoot) {
			return usageErr(err)
		}
		return fmt.Errorf("scan PCI devices: %w", err)
	}
	env, err := config.NewEnv(*procRoot, *devRoot)
	if err != nil {
		err = fmt.Errorf("%w (the default route decides which interface is never pooled; see --proc-root)", err)
		if errors.Is(err, fs.ErrNotExist) {
			return usageErr(err)
		}
		return err
	}
	sel := cfg.Select(devs, env)
	for _, w := range sharedGroups(devs, sel) {
		warn.add(w)
	}
	warn.flush(stderr)

	rep := newScanReport(devs, sel, warn.all)
	rep.Config, rep.ConfigInForce = configPath, inForce
	rep.probeHealth(reader, devs, sel)
	if ledgerNamed {
		rep.noteLedger(&st)
	}
	out := io.WriteCloser(nopCloser{stdout})
	if *format != "json" {
		out = newEscaper(stdout)
	}
	w := bufio.NewWriter(out)
	if explainAddr != "" {
		i := slices.IndexFunc(rep.Devices, func(d scanDevice) bool { return d.Address == explainAddr })
		if i < 0 {
			return usageErrf("%w %s under %s", sysfs.ErrNoDevice, explainAddr, reader.SysfsRoot())
		}
		ex := newExplanation(rep.Devices[i], &devs[i], &sel.Devices[i], sel, rep.Warnings)
		if *format == "json" {
			err = writeJSON(w, ex)
		} else {
			ex.writeText(w)
		}
	} else if *format == "json" {
		err = writeJSON(w, rep)
	} else {
		rep.writeTable(w, reader.SysfsRoot())
		rep.writeLedger(w)
	}
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return damage
}

// sharedGroups warns of each IOMMU group that holds more than one pooled
// vfio-bound device (functions of a card behind a port without ACS, or a
// GPU pooled with its audio function): vfio lets one user at a time open
// a group, so each device is offered, but of two pods given devices of
// one group the second fails to start.
func sharedGroups(devs []sysfs.Device, sel *config.Selection) []string {
	byGroup := map[string][]string{}
	for i := range devs {
		d, pool := &devs[i], sel.Devices[i].Pool
		if pool != "" && d.IOMMUGroup != "" && sysfs.IsVFIODriver(d.Driver) {
			byGroup[d.IOMMUGroup] = append(byGroup[d.IOMMUGroup], d.Address+" ("+pool+")")
		}
	}
	var out []string
	for _, g := range slices.SortedFunc(maps.Keys(byGroup), byNumber) {
		m := byGroup[g]
		if len(m) < 2 {
			continue
		}
		list := strings.Join(m[:min(len(m), 3)], ", ")
		if len(m) > 3 {
			list += fmt.Sprintf(" and %d more", len(m)-3)
		}
		out = append(out, fmt.Sprintf("IOMMU group %s holds %d pooled vfio devices, %s: "+
			"vfio lets one pod at a time open the group, and a second pod given one of them fails to start", g, len(m), list))
	}
	return out
}

// byNumber orders decimal strings by their value.
func byNumber(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// warningList keeps warnings in the order they were found, each once,
// and prints those not yet printed.
type warningList struct {
	mu      sync.Mutex
	all     []string
	printed int
}

func (l *warningList) add(w string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.all, w) {
		l.all = append(l.all, w)
	}
}

func (l *warningList) flush(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := newEscaper(w)
	for _, s := range l.all[l.printed:] {
		fmt.Fprintln(e, "warning: "+s)
	}
	e.Close()
	l.printed = len(l.all)
}

// logWarnings receives what the sysfs reader logs (a missing PCI ID
// database, a malformed attribute) and turns each record into one
// warning line: "0000:3b:00.0: numa_node: ...". The reader already logs
// each finding once.
type logWarnings struct{ list *warningList }

func (s *logWarnings) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		s.list.add(strings.TrimSpace(string(p)))
		return len(p), nil
	}
	text, _ := rec[zerolog.MessageFieldName].(string)
	if e, ok := rec[zerolog.ErrorFieldName].(string); ok && e != "" {
		text += ": " + e
	}
	if bdf, ok := rec["bdf"].(string); ok && bdf != "" {
		text = bdf + ": " + text
	}
	s.list.add(text)
	return len(p), nil
}

// scanReport is what scan prints: its JSON form is part of devledger's
// interface, so field names only ever get added.
type scanReport struct {
	Devices  []scanDevice `json:"devices"`
	Pools    []scanPool   `json:"pools"`
	Warnings []string     `json:"warnings"`
	// Config is the config file the pools were matched against;
	// ConfigInForce, that it is the one the ledger read recorded applied
	// (scan given no --config).
	Config        string `json:"config"`
	ConfigInForce bool   `json:"config_in_force,omitempty"`
	// LedgerSeq is the last event of the ledger read (--state-dir, --db),
	// nil when none was; LedgerOnly are the devices that ledger has in a
	// pool that this scan did not find.
	LedgerSeq  *uint64          `json:"ledger_seq,omitempty"`
	LedgerOnly []scanLedgerOnly `json:"ledger_only,omitempty"`
	// LedgerDamage is the damage the daemon found in its ledger and
	// recorded, which no operator acknowledged yet.
	LedgerDamage []string `json:"ledger_damage,omitempty"`
}

// scanLedgerOnly is a device the ledger has pooled and this scan did not
// find in sysfs: the daemon still offers it until it sees it gone.
type scanLedgerOnly struct {
	Address string     `json:"address"`
	Ledger  scanLedger `json:"ledger"`
}

// scanDevice is one PCI function and where it went. Unknown values follow
// the kernel's own conventions: -1 for a NUMA node, SR-IOV counts and a VF
// index that do not apply, "" for strings.
type scanDevice struct {
	Address    string   `json:"address"`
	Vendor     string   `json:"vendor"`
	Device     string   `json:"device"`
	VendorName string   `json:"vendor_name"`
	DeviceName string   `json:"device_name"`
	Class      string   `json:"class"`
	ClassName  string   `json:"class_name"`
	Driver     string   `json:"driver"`
	NUMANode   int      `json:"numa_node"`
	IOMMUGroup string   `json:"iommu_group"`
	VFIO       bool     `json:"vfio"`
	NoIOMMU    bool     `json:"vfio_noiommu,omitempty"`
	TotalVFs   int      `json:"sriov_totalvfs"`
	NumVFs     int      `json:"sriov_numvfs"`
	PF         string   `json:"pf"`
	VFIndex    int      `json:"vf_index"`
	Interfaces []string `json:"interfaces"`
	// Pool is the full name of the pool the device joined, "" for none;
	// Selector is then the selector object that took it, and Reason says
	// otherwise why it joined none.
	Pool     string `json:"pool"`
	Selector string `json:"selector"`
	Reason   string `json:"reason"`
	// Health is the health checker's verdict on a pooled device now,
	// "healthy" or "unhealthy" with HealthReason saying why; both are ""
	// for a device in no pool.
	Health       string `json:"health"`
	HealthReason string `json:"health_reason"`
	// Ledger is what the daemon's ledger says of the device, when one was
	// read: what the kubelet was last told, hold-down and all.
	Ledger   *scanLedger `json:"ledger,omitempty"`
	Aux      []scanAux   `json:"aux_devices"`
	Warnings []string    `json:"warnings"`
	// Incomplete says a read of the function (or of its PF) failed with
	// an error other than not-found: the fields may lack what the kernel
	// holds (its warning names the file).
	Incomplete bool `json:"incomplete,omitempty"`
}

// scanLedger is a device as the ledger knows it.
type scanLedger struct {
	// Known is false when the ledger has never seen the device; Present
	// false once it recorded its removal.
	Known   bool   `json:"known"`
	Present bool   `json:"present"`
	Pool    string `json:"pool"`
	// Health is "healthy" or "unhealthy", HealthReason why, and HealthSeq
	// the event that said so.
	Health       string `json:"health"`
	HealthReason string `json:"health_reason"`
	HealthSeq    uint64 `json:"health_seq"`
}

// Verdicts of scanDevice.Health.
const (
	scanHealthy   = "healthy"
	scanUnhealthy = "unhealthy"
)

// noAuxPools is the reason an auxiliary device is in no pool when the
// config has no auxNetDevice pool, the config package's wording; such
// devices are left out of the table.
const noAuxPools = "no auxNetDevice pools configured"

// scanAux is an auxiliary device of a function and where it went.
type scanAux struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Pool     string `json:"pool"`
	Selector string `json:"selector"`
	Reason   string `json:"reason"`
}

// scanPool is one pool and the devices it took.
type scanPool struct {
	Name       string   `json:"name"`
	DeviceType string   `json:"device_type"`
	Count      int      `json:"count"`
	Members    []string `json:"members"`
	// Registration is what the ledger read (--state-dir, --db) says of
	// the pool's socket and its registration; nil when none was read or
	// the ledger has no such pool.
	Registration *events.Registration `json:"registration,omitempty"`
}

func newScanReport(devs []sysfs.Device, sel *config.Selection, warnings []string) *scanReport {
	rep := &scanReport{
		Devices:  make([]scanDevice, len(devs)),
		Pools:    make([]scanPool, len(sel.Pools)),
		Warnings: append([]string{}, warnings...),
	}
	for i := range devs {
		rep.Devices[i] = newScanDevice(&devs[i], &sel.Devices[i])
	}
	for i, p := range sel.Pools {
		rep.Pools[i] = scanPool{
			Name:       p.Name,
			DeviceType: string(p.Resource.DeviceType),
			Count:      len(p.Members),
			Members:    append([]string{}, p.Members...),
		}
	}
	return rep
}

// probeHealth probes every pooled device as the daemon's health checker
// would right after it joined its pool: on the driver it has now, its
// VFIO node when it is VFIO-bound, and its link when the pool's
// health.link asks for it.
func (rep *scanReport) probeHealth(reader *sysfs.Reader, devs []sysfs.Device, sel *config.Selection) {
	pools := make(map[string]*config.Resource, len(sel.Pools))
	for _, p := range sel.Pools {
		pools[p.Name] = p.Resource
	}
	var targets []sysfs.ProbeTarget
	var pooled []int
	for i := range rep.Devices {
		res := pools[rep.Devices[i].Pool]
		if res == nil {
			continue
		}
		targets = append(targets, devs[i].ProbeTarget(res.Health.Link))
		pooled = append(pooled, i)
	}
	for j, r := range reader.ProbeAll(targets) {
		d := &rep.Devices[pooled[j]]
		d.Health, d.HealthReason = scanHealthy, ""
		if !r.Healthy {
			d.Health, d.HealthReason = scanUnhealthy, r.Reason
		}
	}
}

// health is the HEALTH cell: "healthy", "unhealthy: <reason>" cut to
// healthWidth, or "-" for a device in no pool.
func (d *scanDevice) health() string {
	switch d.Health {
	case "":
		return "-"
	case scanUnhealthy:
		return truncate(scanUnhealthy+": "+d.HealthReason, healthWidth)
	}
	return d.Health
}

func newScanDevice(d *sysfs.Device, pl *config.Placement) scanDevice {
	sd := scanDevice{
		Address:    d.Address,
		Vendor:     d.Vendor,
		Device:     d.Device,
		VendorName: d.VendorName,
		DeviceName: d.DeviceName,
		Class:      d.Class,
		ClassName:  d.ClassName,
		Driver:     d.Driver,
		NUMANode:   d.NUMANode,
		IOMMUGroup: d.IOMMUGroup,
		VFIO:       d.VFIODevice,
		NoIOMMU:    d.VFIONoIOMMU,
		TotalVFs:   d.TotalVFs,
		NumVFs:     d.NumVFs,
		PF:         d.PF,
		VFIndex:    d.VFIndex,
		Interfaces: []string{},
		Incomplete: d.Incomplete,
		Pool:       pl.Pool,
		Selector:   pl.Selector,
		Reason:     pl.Reason,
		Aux:        []scanAux{},
		Warnings:   append([]string{}, d.Warnings...),
	}
	for _, ifc := range d.Interfaces {
		sd.Interfaces = append(sd.Interfaces, ifc.Name)
	}
	for _, a := range d.AuxDevices {
		sa := scanAux{Name: a.Name, Type: a.Type, Reason: noAuxPools}
		for _, ap := range pl.Aux {
			if ap.Name == a.Name {
				sa.Pool, sa.Selector, sa.Reason = ap.Pool, ap.Selector, ap.Reason
			}
		}
		sd.Aux = append(sd.Aux, sa)
	}
	return sd
}

// Cells of the device table.

func (d *scanDevice) id() string {
	return orUnknown(d.Vendor) + ":" + orUnknown(d.Device)
}

func orUnknown(id string) string {
	if id == "" {
		return "????"
	}
	return id
}

func (d *scanDevice) name() string {
	return strings.TrimSpace(d.VendorName + " " + d.DeviceName)
}

func (d *scanDevice) numa() string {
	if d.NUMANode < 0 {
		return "-"
	}
	return strconv.Itoa(d.NUMANode)
}

func (d *scanDevice) iommu() string {
	switch {
	case d.IOMMUGroup == "":
		return "-"
	case d.NoIOMMU:
		return d.IOMMUGroup + " noiommu"
	case d.VFIO:
		return d.IOMMUGroup + " vfio"
	}
	return d.IOMMUGroup
}

// sriov is the function's place in SR-IOV: "PF 4/256 VFs", "VF 3 of
// 0000:3b:00.0", or "-".
func (d *scanDevice) sriov() string {
	switch {
	case d.PF != "" && d.VFIndex >= 0:
		return fmt.Sprintf("VF %d of %s", d.VFIndex, d.PF)
	case d.PF != "":
		return "VF ? of " + d.PF
	case d.TotalVFs > 0:
		return fmt.Sprintf("PF %d/%d VFs", max(d.NumVFs, 0), d.TotalVFs)
	case d.NumVFs > 0:
		return fmt.Sprintf("PF %d VFs", d.NumVFs)
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// whyNot is a reason for the table: the config package's device-wide rules
// start with "not pooled: ", which the table's heading already says.
func whyNot(reason string) string {
	return strings.TrimPrefix(reason, "not pooled: ")
}

// writeTable prints the devices, the auxiliary devices when a pool takes
// them, why those in no pool are in none, the pools with their sizes,
// then the names of the PCI IDs seen. Reasons are kept out of the device
// table so that it stays narrow; --explain gives the whole story.
// Errors are left to the caller's Flush.
func (rep *scanReport) writeTable(w io.Writer, root string) {
	devices := textTable{header: []string{"ADDRESS", "ID", "DRIVER", "NUMA", "IOMMU", "SR-IOV", "IFACE", "HEALTH", "POOL"}}
	for i := range rep.Devices {
		d := &rep.Devices[i]
		devices.add(d.Address, d.id(), truncate(orDash(d.Driver), driverWidth), d.numa(), d.iommu(),
			d.sriov(), truncate(orDash(strings.Join(d.Interfaces, ",")), ifaceWidth), d.health(), orDash(d.Pool))
	}
	devices.write(w)
	if len(rep.Devices) == 0 {
		fmt.Fprintf(w, "(no PCI devices under %s)\n", root)
	}

	// Why each function, then each auxiliary device, joined no pool.
	why := textTable{header: []string{"NOT POOLED", "REASON"}}
	var reasons []string
	for i := range rep.Devices {
		if d := &rep.Devices[i]; d.Pool == "" {
			why.add(d.Address, "")
			reasons = append(reasons, whyNot(d.Reason))
		}
	}
	aux := textTable{header: []string{"AUX DEVICE", "TYPE", "FUNCTION", "POOL"}}
	for i := range rep.Devices {
		d := &rep.Devices[i]
		for _, a := range d.Aux {
			if a.Pool == "" && a.Reason == noAuxPools {
				continue
			}
			aux.add(a.Name, a.Type, d.Address, orDash(a.Pool))
			if a.Pool == "" {
				why.add(a.Name, "")
				reasons = append(reasons, whyNot(a.Reason))
			}
		}
	}
	if len(aux.rows) > 0 {
		io.WriteString(w, "\n")
		aux.write(w)
	}
	if len(reasons) > 0 {
		why.fillLast(func(row, width int) string { return truncate(reasons[row], max(width, minFreeText)) })
		io.WriteString(w, "\n")
		why.write(w)
	}

	pools := textTable{header: []string{"POOL", "TYPE", "DEVICES"}}
	for _, p := range rep.Pools {
		pools.add(p.Name, p.DeviceType, strconv.Itoa(p.Count))
	}
	io.WriteString(w, "\n")
	pools.write(w)
	if len(rep.Pools) == 0 {
		io.WriteString(w, "(no pools configured)\n")
	}

	// Names are listed once per ID rather than on every row: they are long
	// and the same on hundreds of VFs.
	names := textTable{header: []string{"ID", "NAME"}}
	seen := map[string]bool{}
	var ids []string
	byID := map[string]string{}
	for i := range rep.Devices {
		d := &rep.Devices[i]
		id := d.id()
		if seen[id] || d.name() == "" {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		byID[id] = d.name()
	}
	slices.Sort(ids)
	for _, id := range ids {
		names.add(id, "")
	}
	if len(ids) > 0 {
		names.fillLast(func(row, width int) string { return truncate(byID[ids[row]], max(width, minFreeText)) })
		io.WriteString(w, "\n")
		names.write(w)
	}
}

// textTable lays out rows in columns two spaces apart, the last column
// unpadded. Widths count runes.
type textTable struct {
	header []string
	rows   [][]string
}

func (t *textTable) add(cells ...string) { t.rows = append(t.rows, cells) }

// widths are the widths of every column but the last.
func (t *textTable) widths() []int {
	ws := make([]int, len(t.header)-1)
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i := range ws {
			ws[i] = max(ws[i], utf8.RuneCountInString(r[i]))
		}
	}
	return ws
}

// fillLast sets the last cell of every row to cell(row, width), width being
// what is left of scanTableWidth once the other columns are laid out.
func (t *textTable) fillLast(cell func(row, width int) string) {
	used := 0
	for _, w := range t.widths() {
		used += w + 2
	}
	for i, r := range t.rows {
		r[len(r)-1] = cell(i, scanTableWidth-used)
	}
}

func (t *textTable) write(w io.Writer) {
	ws := t.widths()
	var b strings.Builder
	for _, r := range append([][]string{t.header}, t.rows...) {
		b.Reset()
		for i, c := range r {
			b.WriteString(c)
			if i < len(ws) {
				b.WriteString(strings.Repeat(" ", ws[i]-utf8.RuneCountInString(c)+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

// explanation is --explain's answer: one device, and every pool's verdict
// on it with the rule that decided and each selector field's check.
type explanation struct {
	Device   scanDevice       `json:"device"`
	Verdicts []explainVerdict `json:"verdicts"`
	Aux      []explainAux     `json:"aux_devices"`
	Warnings []string         `json:"warnings"`

	// For the text form.
	subclass string
	pfIface  string
}

type explainVerdict struct {
	Pool       string            `json:"pool"`
	Path       string            `json:"path"`
	DeviceType string            `json:"device_type"`
	Accepted   bool              `json:"accepted"`
	Joined     bool              `json:"joined"`
	Rule       string            `json:"rule"`
	Selectors  []explainSelector `json:"selectors"`
}

type explainSelector struct {
	Path    string         `json:"path"`
	Matched bool           `json:"matched"`
	Checks  []explainCheck `json:"checks"`
}

type explainCheck struct {
	Field  string `json:"field"`
	Passed bool   `json:"passed"`
	Reason string `json:"reason"`
}

type explainAux struct {
	scanAux
	Verdicts []explainVerdict `json:"verdicts"`
}

func newExplanation(sd scanDevice, d *sysfs.Device, pl *config.Placement, sel *config.Selection, warnings []string) *explanation {
	ex := &explanation{
		Device:   sd,
		Verdicts: verdicts(pl.Verdicts, sel, false),
		Aux:      []explainAux{},
		Warnings: warnings,
		subclass: d.SubclassName,
		pfIface:  d.PFInterface,
	}
	for _, ap := range pl.Aux {
		ex.Aux = append(ex.Aux, explainAux{
			scanAux:  scanAux{Name: ap.Name, Type: ap.Type, Pool: ap.Pool, Selector: ap.Selector, Reason: ap.Reason},
			Verdicts: verdicts(ap.Verdicts, sel, true),
		})
	}
	return ex
}

// verdicts pairs pool verdicts with their pools. An auxiliary device's
// verdicts are those of the auxNetDevice pools only, in config order.
func verdicts(vs []config.PoolVerdict, sel *config.Selection, aux bool) []explainVerdict {
	var pools []config.PoolMembers
	for _, p := range sel.Pools {
		if !aux || p.Resource.DeviceType == config.AuxNetDevice {
			pools = append(pools, p)
		}
	}
	out := make([]explainVerdict, len(vs))
	for i, v := range vs {
		ev := explainVerdict{Pool: v.Pool, Accepted: v.Accepted, Joined: v.Joined, Rule: v.Rule, Selectors: []explainSelector{}}
		if i < len(pools) && pools[i].Name == v.Pool {
			ev.Path = pools[i].Resource.Path
			ev.DeviceType = string(pools[i].Resource.DeviceType)
		}
		for _, s := range v.Selectors {
			es := explainSelector{Path: s.Path, Matched: s.Matched, Checks: []explainCheck{}}
			for _, c := range s.Checks {
				es.Checks = append(es.Checks, explainCheck{Field: c.Field, Passed: c.Passed, Reason: c.Reason})
			}
			ev.Selectors = append(ev.Selectors, es)
		}
		out[i] = ev
	}
	return out
}

func (ex *explanation) writeText(w io.Writer) {
	d := &ex.Device
	head := d.Address + "  " + d.id()
	if n := d.name(); n != "" {
		head += "  " + n
	}
	fmt.Fprintln(w, head)
	class := orDash(d.Class)
	if names := strings.Join(nonEmpty(d.ClassName, ex.subclass), ", "); names != "" {
		class += " (" + names + ")"
	}
	iommu := "none"
	if d.IOMMUGroup != "" {
		iommu = d.IOMMUGroup
		switch {
		case d.NoIOMMU:
			iommu += ", /dev/vfio/noiommu-" + d.IOMMUGroup + " present (vfio's no-IOMMU mode)"
		case d.VFIO:
			iommu += ", /dev/vfio/" + d.IOMMUGroup + " present"
		default:
			iommu += ", no /dev/vfio/" + d.IOMMUGroup
		}
	}
	sriov := d.sriov()
	if d.PF != "" && ex.pfIface != "" {
		sriov += " (" + ex.pfIface + ")"
	}
	numa := d.numa()
	if numa == "-" {
		numa = "none"
	}
	fields := [][2]string{
		{"class", class},
		{"driver", orDash(d.Driver)},
		{"numa node", numa},
		{"iommu group", iommu},
		{"sr-iov", sriov},
		{"interfaces", orDash(strings.Join(d.Interfaces, ", "))},
	}
	if d.Pool != "" {
		fields = append(fields, [2]string{"pool", d.Pool + " (" + d.Selector + ")"})
		h := d.Health
		if d.HealthReason != "" {
			h += ": " + d.HealthReason
		}
		fields = append(fields, [2]string{"health", h})
	} else {
		fields = append(fields, [2]string{"pool", "none: " + whyNot(d.Reason)})
	}
	if d.Ledger != nil {
		fields = append(fields, [2]string{"ledger", d.Ledger.verdict() + ", pool " + orDash(d.Ledger.pool())})
	}
	for _, f := range fields {
		fmt.Fprintf(w, "  %-12s %s\n", f[0]+":", f[1])
	}
	for _, s := range d.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", s)
	}
	for _, v := range ex.Verdicts {
		io.WriteString(w, "\n")
		v.writeText(w, "")
	}
	for _, a := range ex.Aux {
		io.WriteString(w, "\n")
		if a.Pool != "" {
			fmt.Fprintf(w, "aux device %s (%s): pool %s (%s)\n", a.Name, a.Type, a.Pool, a.Selector)
		} else {
			fmt.Fprintf(w, "aux device %s (%s): no pool: %s\n", a.Name, a.Type, a.Reason)
		}
		for _, v := range a.Verdicts {
			v.writeText(w, "  ")
		}
	}
}

// writeText prints one pool's verdict: the pool, the rule that decided,
// then every selector object and each field's check, failures marked.
func (v *explainVerdict) writeText(w io.Writer, indent string) {
	where := strings.Join(nonEmpty(v.Path, v.DeviceType), ", ")
	fmt.Fprintf(w, "%spool %s (%s)\n", indent, v.Pool, where)
	var verdict string
	switch {
	case v.Joined:
		verdict = v.Rule
	case v.Accepted:
		verdict = "accepted, but " + v.Rule
	case v.DeviceType == string(config.AuxNetDevice) && len(v.Selectors) == 0:
		verdict = v.Rule
	default:
		verdict = "rejected: " + v.Rule
	}
	fmt.Fprintf(w, "%s  %s\n", indent, verdict)
	for _, s := range v.Selectors {
		path := strings.TrimPrefix(s.Path, v.Path+".")
		state := "no match"
		if s.Matched {
			state = "matched"
		}
		fmt.Fprintf(w, "%s  %s: %s\n", indent, path, state)
		if len(s.Checks) == 0 {
			fmt.Fprintf(w, "%s      (sets no field: accepts any device the pool's type takes)\n", indent)
		}
		for _, c := range s.Checks {
			mark := "ok"
			if !c.Passed {
				mark = "NO"
			}
			fmt.Fprintf(w, "%s    %s  %s\n", indent, mark, c.Reason)
		}
	}
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	return nil
}

// readLedgerState folds the ledger lf names (the file from its newest
// snapshot, or, when the daemon holds it, the events its admin socket
// serves). A read through a damaged page returns the state and an error
// that wraps errReadDamaged.
func readLedgerState(lf *ledgerFlags) (events.State, error) {
	src, err := openSource(lf)
	if err != nil {
		return events.State{}, err
	}
	var st events.State
	var damage error
	if f, ok := src.(fileSource); ok {
		st, err = f.l.Replay(0)
		damage = readDamaged(f.l)
	} else {
		st, err = foldSource(src, 0, time.Time{})
	}
	if cerr := src.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return events.State{}, fmt.Errorf("read the ledger %s: %w", lf.path(), err)
	}
	return st, damage
}

// configInForce is the config file the ledger (at where) last recorded
// applied, for a scan that names none: inside the daemon's pod, the file
// its --config names, whichever overlay set it. It names the file on
// stderr; one that changed since is scanned as it is now, with a warning.
// unchanged says it has not. The ledger keeps the path as the daemon was
// given it: one relative to the directory the daemon ran in, or a stream
// (run --config /dev/stdin), names no file scan can read, and is a usage
// error.
func configInForce(c events.ConfigState, where string, stderr io.Writer, warn *warningList) (path string, unchanged bool, err error) {
	if c.Path == "" {
		return "", false, usageErrf("the ledger %s records no config applied: name one with --config", where)
	}
	named := fmt.Sprintf("%s (sha256 %s, applied %s)", c.Path, shortSHA(c.SHA256), c.AppliedAt.UTC().Format(time.RFC3339))
	if !filepath.IsAbs(c.Path) {
		return "", false, usageErrf("the config in force, %s, is named relative to the directory the daemon ran in: name it with --config", named)
	}
	fi, err := os.Stat(c.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, usageErrf("the config in force, %s, is not here: name a copy of it with --config", named)
	case err != nil:
		return "", false, fmt.Errorf("read the config in force: %w", err)
	case !fi.Mode().IsRegular():
		return "", false, usageErrf("the config in force, %s, is no file scan can read again: name a copy of it with --config", named)
	}
	data, err := os.ReadFile(c.Path)
	if err != nil {
		return "", false, fmt.Errorf("read the config in force: %w", err)
	}
	fmt.Fprintf(stderr, "the config in force: %s\n", named)
	now := node.Digest(data)
	if now != c.SHA256 {
		warn.add(fmt.Sprintf("%s changed since the daemon applied it (sha256 %s then, %s now): this scan reads it as it is now", c.Path, shortSHA(c.SHA256), shortSHA(now)))
	}
	return c.Path, now == c.SHA256, nil
}

// poolsUnlikeApplied says how the pools cfg read from the file in force
// differ from those the daemon applied from it (st's), or "" when they do
// not: the daemon's --resource-prefix or --use-cdi, which this scan was
// not given.
func poolsUnlikeApplied(cfg *config.Config, st *events.State) string {
	var readOnly, changed []string
	read := map[string]bool{}
	for i := range cfg.Resources {
		r := &cfg.Resources[i]
		read[r.FullName()] = true
		p, ok := st.Pools[r.FullName()]
		switch {
		case !ok:
			readOnly = append(readOnly, r.FullName())
		case !config.SameDefinition(p.Spec.Definition, r.Definition()):
			changed = append(changed, fmt.Sprintf("%s (here → applied: %s)", r.FullName(), strings.Join(config.DefinitionChanges(r.Definition(), p.Spec.Definition), ", ")))
		}
	}
	var appliedOnly []string
	for _, name := range slices.Sorted(maps.Keys(st.Pools)) {
		if !read[name] {
			appliedOnly = append(appliedOnly, name)
		}
	}
	var differ []string
	if len(readOnly)+len(appliedOnly) > 0 {
		differ = append(differ, fmt.Sprintf("this scan reads %s where the daemon applied %s", orDash(strings.Join(readOnly, ", ")), orDash(strings.Join(appliedOnly, ", "))))
	}
	differ = append(differ, changed...)
	if len(differ) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: the daemon applied other pools from this file (%s): give scan the --resource-prefix and --use-cdi the daemon runs with", st.Config.Path, strings.Join(differ, "; "))
}

// noteLedger notes what the ledger's state st says of every device found,
// and of the pooled ones not found.
func (rep *scanReport) noteLedger(st *events.State) {
	seq := st.Seq
	rep.LedgerSeq = &seq
	rep.LedgerDamage = st.Ledger.Damage
	for i := range rep.Pools {
		if p, ok := st.Pools[rep.Pools[i].Name]; ok && p.Registration.Socket != "" {
			reg := p.Registration
			rep.Pools[i].Registration = &reg
		}
	}
	found := make(map[string]bool, len(rep.Devices))
	for i := range rep.Devices {
		d := &rep.Devices[i]
		found[d.Address] = true
		ld, known := st.Devices[d.Address]
		l := newScanLedger(ld, known)
		d.Ledger = &l
	}
	for _, addr := range slices.Sorted(maps.Keys(st.Devices)) {
		if ld := st.Devices[addr]; !found[addr] && ld.Present && ld.Pool != "" {
			rep.LedgerOnly = append(rep.LedgerOnly, scanLedgerOnly{Address: addr, Ledger: newScanLedger(ld, true)})
		}
	}
}

// newScanLedger is ld as scan shows it; known is false when the ledger
// has never seen the device.
func newScanLedger(ld events.Device, known bool) scanLedger {
	if !known {
		return scanLedger{}
	}
	l := scanLedger{Known: true, Present: ld.Present, Pool: ld.Pool, Health: scanUnhealthy, HealthReason: ld.HealthReason, HealthSeq: ld.HealthSeq}
	if ld.Healthy {
		l.Health = scanHealthy
	}
	return l
}

// verdict is the ledger's health verdict on a device, or why it has none.
func (l *scanLedger) verdict() string {
	switch {
	case !l.Known:
		return "never seen"
	case !l.Present:
		return "removed"
	case l.Pool == "":
		return "not pooled"
	}
	s := l.Health
	if l.Health == scanUnhealthy && l.HealthReason != "" {
		s += ": " + l.HealthReason
	}
	if l.HealthSeq > 0 {
		s += fmt.Sprintf(" (#%d)", l.HealthSeq)
	}
	return s
}

// pool is the ledger's pool of the device, "" for none.
func (l *scanLedger) pool() string {
	if !l.Known || !l.Present {
		return ""
	}
	return l.Pool
}

// verdictNow is this scan's verdict on d, as verdict phrases the ledger's.
func (d *scanDevice) verdictNow() string {
	if d.Pool == "" {
		return "not pooled"
	}
	s := d.Health
	if d.HealthReason != "" {
		s += ": " + d.HealthReason
	}
	return s
}

// ledgerPooled says whether d is pooled by this scan or the ledger, and
// ledgerAgrees whether both place it in the same pool with the same health.
func (d *scanDevice) ledgerPooled() bool { return d.Pool != "" || d.Ledger.pool() != "" }
func (d *scanDevice) ledgerAgrees() bool {
	l := d.Ledger
	return l.pool() == d.Pool && (d.Pool == "" || l.Health == d.Health)
}

// writeLedger says how far the ledger read agrees with this scan on the
// pooled devices, and shows each on which they differ (the daemon's verdict
// under a hold-down or debounce, a device it has not placed again yet, one
// gone from sysfs that it still offers), one block per device, nothing cut.
func (rep *scanReport) writeLedger(w io.Writer) {
	if rep.LedgerSeq == nil {
		return
	}
	type block struct{ addr, poolNow, poolThen, now, then string }
	var differ []block
	pooled, agree := 0, 0
	for i := range rep.Devices {
		d := &rep.Devices[i]
		if !d.ledgerPooled() {
			continue
		}
		pooled++
		if d.ledgerAgrees() {
			agree++
			continue
		}
		differ = append(differ, block{d.Address, d.Pool, d.Ledger.pool(), d.verdictNow(), d.Ledger.verdict()})
	}
	for _, o := range rep.LedgerOnly {
		pooled++
		differ = append(differ, block{o.Address, "", o.Ledger.Pool, "not found in sysfs", o.Ledger.verdict()})
	}
	slices.SortFunc(differ, func(a, b block) int { return strings.Compare(a.addr, b.addr) })
	if n := len(rep.LedgerDamage); n > 0 {
		fmt.Fprintf(w, "\nledger through #%d: %d %s found by the daemon, not acknowledged (the daemon is not ready until devledger ledger acknowledge):\n",
			*rep.LedgerSeq, n, plural(n, "damage", "damages"))
		for _, p := range rep.LedgerDamage {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	fmt.Fprintf(w, "\nledger through #%d: the socket each pool serves on, as the kubelet knows it\n", *rep.LedgerSeq)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range rep.Pools {
		reg := p.Registration
		switch {
		case reg == nil:
			fmt.Fprintf(tw, "  %s\tnot serving\t-\n", p.Name)
		case reg.Registered:
			fmt.Fprintf(tw, "  %s\tregistered (%s)\t%s\n", p.Name, reg.Mode, reg.Socket)
		case !reg.Serving:
			fmt.Fprintf(tw, "  %s\tnot serving\t%s\n", p.Name, reg.Socket)
		case reg.LastError != "":
			fmt.Fprintf(tw, "  %s\tnot registered (%d %s: %s)\t%s\n", p.Name, reg.Failures, plural(reg.Failures, "failure", "failures"), reg.LastError, reg.Socket)
		default:
			fmt.Fprintf(tw, "  %s\tnot registered yet\t%s\n", p.Name, reg.Socket)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nledger through #%d: it agrees with this scan on %d of %d pooled devices\n", *rep.LedgerSeq, agree, pooled)
	for _, b := range differ {
		head := b.addr + "  pool " + orDash(b.poolNow)
		if b.poolThen != b.poolNow {
			head = b.addr + "  pool " + orDash(b.poolNow) + " in this scan, " + orDash(b.poolThen) + " in the ledger"
		}
		fmt.Fprintf(w, "\n%s\n  this scan  %s\n  ledger     %s\n", head, b.now, b.then)
	}
}
