// Package daemon wires devledger's daemon: it opens the ledger, replays it,
// loads the config, records the start, starts the actor tree under the node
// coordinator, serves the admin socket, takes snapshots, and on Stop drains
// the pools, records the stop, snapshots and closes the ledger.
package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/actors/reconciler"
	"github.com/devledger/devledger/actors/reconciler/checkpoint"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/sysfs"
)

// LedgerFileName is the ledger's file name in the state dir.
const LedgerFileName = "ledger.db"

// PIDFileName is the file in the state dir naming the ledger's holder.
const PIDFileName = "devledger.pid"

// OpeningFileName is the mark a start leaves in the state dir while it
// opens and replays the ledger, and keeps when the store refuses to open
// it as damaged. The next start finding it knows that one died there
// (killed for memory, say, by a loop in the file's pages, which bbolt
// follows for ever) or found damage, and has the store walk the pages
// before bbolt reads them (store.Options.CheckPages), so it names the
// damage instead. A replay that fails takes the mark away: it read every
// page it reached, and the next start's replay names the same record.
const OpeningFileName = "ledger.opening"

// ErrBadConfig is wrapped by Start's error when the config file is missing
// or invalid (exit code 2).
var ErrBadConfig = errors.New("bad config")

// ErrLedgerLocked is wrapped by Start's error when the ledger is held.
var ErrLedgerLocked = errors.New("ledger locked")

// Options configure a daemon. Zero values mean the node defaults.
type Options struct {
	ConfigPath    string
	ConfigOptions config.Options // how the config is read, on reloads too
	SysfsRoot     string         // /sys
	DevRoot       string         // /dev
	ProcRoot      string         // /proc
	PCIIDsPath    string
	KubeletDir    string // /var/lib/kubelet
	StateDir      string // /var/lib/devledger
	DevinfoDir    string // /var/run/k8s.cni.cncf.io/devinfo/dp; "-" writes none
	CDISpecDir    string // /var/run/cdi, for CDI-enabled pools; "-" writes none
	// Registration is auto, legacy or watcher; auto picks watcher when
	// the kubelet's plugins_registry dir exists.
	Registration string
	Version      string
	Node         string
	// Pod is the daemon's own pod, when it runs in one: the reconciler
	// takes a kubelet that does not list it as not synced yet
	// (reconciler.Config.Self).
	Pod           reconciler.Pod
	ScanInterval  time.Duration // paces discovery (default 30s)
	ProbeInterval time.Duration // paces health (default 5s)
	// A snapshot is taken once SnapshotEvery events follow the newest
	// (default 10,000), checked every SnapshotCheck (default 30s).
	SnapshotEvery uint64
	SnapshotCheck time.Duration
	// RetainAge and RetainBytes are store.Retention's limits, applied to
	// events a snapshot holds, after each snapshot and at least hourly;
	// RetainAge from an hour after the start on (retainAgeSettle). Zero
	// keeps everything.
	RetainAge   time.Duration
	RetainBytes int64
	// retainChunk is store.Retention.MaxDrop (default retainChunk).
	retainChunk int
	// retainAgeSettle is how long a run waits before RetainAge drops
	// anything (default retainAgeSettle).
	retainAgeSettle time.Duration
	// faultQuiet is store.Options.FaultQuiet (default a minute).
	faultQuiet  time.Duration
	CallTimeout time.Duration
	// ReconcileInterval paces PodResources rounds (default 30s); an
	// allocation no container claims within LeakGrace (default 5m) is
	// recorded as a leak suspect.
	ReconcileInterval time.Duration
	LeakGrace         time.Duration
	// KernelEvents turns each burst of netlink uevents and link changes
	// into one rescan and probe round, so changes are seen at once; the
	// periodic scan and probe see everything anyway.
	KernelEvents bool
	// WatchConfig reloads the config when its directory changes (so a
	// ConfigMap's ..data swap counts); else only SIGHUP or Reload do.
	WatchConfig bool
	MetricsAddr string // serves /metrics, /healthz, /readyz (":9108"); "" none
	Logger      zerolog.Logger
}

func (o *Options) defaults() {
	o.SysfsRoot = cmp.Or(o.SysfsRoot, "/sys")
	o.DevRoot = cmp.Or(o.DevRoot, "/dev")
	o.ProcRoot = cmp.Or(o.ProcRoot, "/proc")
	o.KubeletDir = cmp.Or(o.KubeletDir, "/var/lib/kubelet")
	// Absolute, as the kubelet names sockets: the plugin watcher reports,
	// and a stream tells, the socket it came in on by its absolute path.
	if abs, err := filepath.Abs(o.KubeletDir); err == nil {
		o.KubeletDir = abs
	}
	o.StateDir = cmp.Or(o.StateDir, "/var/lib/devledger")
	o.DevinfoDir = cmp.Or(o.DevinfoDir, allocation.DefaultDeviceInfoDir)
	o.CDISpecDir = cmp.Or(o.CDISpecDir, "/var/run/cdi")
	o.Registration = cmp.Or(o.Registration, "auto")
	o.Version = cmp.Or(o.Version, "dev")
	if o.Node == "" {
		o.Node, _ = os.Hostname()
	}
	o.ScanInterval = cmp.Or(o.ScanInterval, 30*time.Second)
	o.ProbeInterval = cmp.Or(o.ProbeInterval, 5*time.Second)
	o.SnapshotEvery = cmp.Or(o.SnapshotEvery, 10_000)
	o.SnapshotCheck = cmp.Or(o.SnapshotCheck, 30*time.Second)
}

// Daemon is a running devledger daemon.
type Daemon struct {
	opts   Options
	log    zerolog.Logger
	ledger *store.Log
	rec    *ledger.Recorder
	system *actor.ActorSystem
	node   *actor.PID
	// nodeGone closes once the node and its children have stopped.
	nodeGone chan struct{}
	admin    *grpcapi.AdminServer

	metrics     *metrics
	metricsSrv  *http.Server
	metricsAddr string

	stopKernel func() // ends openKernel's watch; a no-op when none runs

	fatal     chan error
	fatalOnce sync.Once
	// background is snapshotLoop's work (the check after start,
	// snapshots, retention): the stop cancels it, then waits for snapDone.
	background context.Context
	stopBack   context.CancelFunc
	snapDone   chan struct{}
	stopOnce   sync.Once
	stopErr    error
}

// Start brings the daemon up: ledger, replay, config, actors, admin socket.
// It returns once the actors are started; pools register as the kubelet
// allows. Errors wrap ErrBadConfig (exit 2) or name the path at fault.
func Start(opts Options) (_ *Daemon, err error) {
	opts.defaults()
	d := &Daemon{opts: opts, log: opts.Logger, fatal: make(chan error, 1), stopKernel: func() {}}
	if err := opts.ConfigOptions.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if err := stateDir(opts.StateDir, opts.KubeletDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(opts.SysfsRoot); err != nil {
		return nil, fmt.Errorf("sysfs root %s: %w", opts.SysfsRoot, err)
	}
	cfg, cfgData, cfgErr := loadConfig(opts.ConfigPath, opts.ConfigOptions)

	bootID := newBootID()
	path := filepath.Join(opts.StateDir, LedgerFileName)
	opening := filepath.Join(opts.StateDir, OpeningFileName)
	// A mark already there is a start's that died opening the ledger, or
	// one's still opening it: that one holds the lock, and its mark stays.
	// A mark holds its start's boot id: a start refused the lock removes
	// the mark only while it is its own.
	_, serr := os.Stat(opening)
	diedOpening := serr == nil
	mark := func() {
		if err := os.WriteFile(opening, []byte(bootID+"\n"), 0o600); err != nil {
			d.log.Warn().Err(err).Str("path", opening).Msg("cannot mark the ledger's opening")
		}
	}
	if !diedOpening {
		mark()
	}
	l, err := store.Open(path, store.Options{Node: opts.Node, BootID: bootID, LockTimeout: time.Second,
		CheckPages: diedOpening, FaultQuiet: opts.faultQuiet, Logger: d.log.With().Str("component", "ledger").Logger()})
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			if b, _ := os.ReadFile(opening); strings.TrimSpace(string(b)) == bootID {
				os.Remove(opening)
			}
			return nil, fmt.Errorf("%w: %s is held by %s", ErrLedgerLocked, path, holder(opts.StateDir, diedOpening))
		}
		// Damage keeps the mark: the next start must walk the pages
		// again, not read them (a loop would hold it until it is killed
		// for memory, and every other start would name nothing).
		if !errors.Is(err, store.ErrCorrupt) {
			os.Remove(opening)
		}
		return nil, fmt.Errorf("open ledger: %w%s", err, salvageHint(err))
	}
	if diedOpening {
		d.log.Warn().Str("path", path).Msg("the last start died opening or replaying the ledger, or found it damaged; its pages were checked before reading it")
		// The mark may be gone since (a start that held the lock then
		// failed removes its own): this replay needs one too.
		mark()
	}
	d.ledger = l
	// protoactor builds its process registry up front (some 30,000 maps, a
	// few milliseconds): that overlaps the replay too. No actor exists yet
	// to do it, so a goroutine builds the system and a channel hands it to
	// Start, or to the failure path below; nothing else touches it.
	system := make(chan *actor.ActorSystem, 1)
	go func() {
		zl := d.log.With().Str("component", "protoactor").Logger()
		system <- actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(quieter{zerolog.NewSlogHandler(zl)})
		}))
	}()
	// Once DaemonStarted is recorded, a failed start must close its run, or
	// the next start takes it for a crash and readers for a live daemon.
	recorded := false
	// settled says the ledger has the last run's end, crashed or not: the
	// pid file that marks when a crashed one was last alive (LastAlive)
	// may go. Until then, a start leaves it as it is: one refused, or
	// killed, before it records anything must not cost the next its mark.
	var settled bool
	var metricsLn net.Listener
	defer func() {
		if err == nil {
			return
		}
		if metricsLn != nil {
			metricsLn.Close()
		}
		if d.system == nil {
			d.system = <-system
		}
		d.system.Shutdown()
		if recorded {
			if _, rerr := d.rec.Record(context.Background(), events.DaemonStopped{Reason: "start failed: " + err.Error(), Clean: true}); rerr != nil {
				d.log.Error().Err(rerr).Msg("cannot record the failed start")
			}
		}
		d.stopKernel()
		// Before the lock goes: the next start may take it at once, and
		// writes its own pid file.
		if settled {
			os.Remove(filepath.Join(opts.StateDir, PIDFileName))
		}
		l.Close()
	}()
	// The kernel's notifications open before the first read of sysfs, so
	// a change between the two asks for a rescan once the actors run. That
	// read overlaps the replay; the scanner takes it as its first scan.
	var kernel <-chan sysfs.KernelEvent
	if opts.KernelEvents {
		kernel = d.openKernel()
	}
	reader := sysfs.New(sysfs.Options{SysfsRoot: opts.SysfsRoot, DevRoot: opts.DevRoot, PCIIDsPath: opts.PCIIDsPath,
		Logger: d.log.With().Str("component", "sysfs").Logger()})
	var firstScan func() ([]sysfs.Device, error)
	if cfgErr == nil { // else the start stops after the replay
		firstScan = reader.ScanAhead()
	}
	// The last run's liveness mark; this run's replaces it once the ledger
	// has its start.
	prevBoot, prevAlive := LastAlive(opts.StateDir)

	began := time.Now()
	st, err := l.Replay(0)
	os.Remove(opening)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w%s", path, err, salvageHint(err))
	}
	d.log.Info().Uint64("seq", st.Seq).Int("devices", len(st.Devices)).Int("pools", len(st.Pools)).
		Int("live_allocations", len(st.Allocations)).Dur("took_ms", time.Since(began)).Msg("ledger replayed")
	var crashed []events.Payload
	if st.Daemon.Running {
		c := Crashed(&st, prevBoot, prevAlive)
		crashed = append(crashed, c)
		d.log.Warn().Str("boot_id", c.BootID).Uint64("last_seq", c.LastSeq).Time("last_alive", c.LastAlive).
			Msg("the previous run did not stop cleanly; compensating")
	}
	d.rec = ledger.NewRecorder(l, bootID, nil)
	d.metrics = newMetrics(d, st, time.Since(began))
	d.rec.Observe(d.metrics.recorded)

	mode, err := resolveMode(opts.Registration, opts.KubeletDir)
	if err != nil {
		return nil, err
	}
	kernelBoot := kernelBootID(opts.ProcRoot)
	started := events.DaemonStarted{Version: opts.Version, Node: opts.Node, PID: os.Getpid(),
		ConfigPath: opts.ConfigPath, SysfsRoot: opts.SysfsRoot, KubeletDir: opts.KubeletDir, Registration: string(mode),
		KernelBootID: kernelBoot}
	start := append(crashed, started)
	if st.Daemon.RebootedBefore(started) {
		was := st.Daemon.KernelBootID
		// No container of the boot before runs now, but the kubelet may
		// start a pod again on the devices it checkpointed, without an
		// Allocate: PodResources, not the start, settles each allocation.
		d.log.Info().Str("kernel_boot_id", kernelBoot).Str("was", was).Int("live_allocations", len(st.Allocations)).
			Msg("the node rebooted since the last run")
	}
	if cfgErr != nil {
		// The run this start opens ends at once: one batch says so.
		rejected := events.ConfigRejected{Path: opts.ConfigPath, SHA256: node.Digest(cfgData),
			Errors: strings.Split(strings.TrimRight(cfgErr.Error(), "\n"), "\n")}
		start = append(start, rejected, events.DaemonStopped{Reason: "config rejected", Clean: true})
		if _, err := d.rec.Record(context.Background(), start...); err != nil {
			d.log.Error().Err(err).Msg("cannot record the rejected config")
		} else {
			settled = true // the last run, and this one, stopped
		}
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, cfgErr)
	}
	for _, w := range cfg.Warnings {
		d.log.Warn().Str("config", opts.ConfigPath).Msg(w)
	}
	applied := node.ConfigApplied(opts.ConfigPath, cfgData, cfg)
	if applied.SHA256 != st.Config.SHA256 || applied.Path != st.Config.Path || !sameSpecs(applied.Pools, st) {
		// Changes to the pools; the first scan records where devices go.
		before := make(map[string]string, len(st.Pools))
		for name, p := range st.Pools {
			before[name] = p.Spec.Definition
		}
		if st.Config.SHA256 != "" {
			applied.Changes = node.ConfigChanges(before, applied.Pools, nil, nil)
		}
		for _, name := range slices.Sorted(maps.Keys(before)) {
			if slices.ContainsFunc(applied.Pools, func(p events.PoolSpec) bool { return p.Resource == name }) {
				continue
			}
			// A pool the config dropped while no daemon ran: its members
			// leave it as at a reload, ahead of the config (where they
			// go, the first scan's records say).
			if ms := st.Pools[name].Members; len(ms) > 0 {
				start = append(start, node.PoolRemoved(name, ms, &st, "pool removed from the config while no daemon ran", nil))
			}
			// It has no pool to remove what a killed run left under its
			// name: the kubelet's plugin watcher would dial it again and
			// again.
			pool.CleanStaleSockets(node.SocketDir(opts.KubeletDir, mode), name, d.log)
		}
		start = append(start, applied)
	}
	// Record the damage the replay went past (a meta page, a snapshot).
	start = append(start, newDamage(st.Ledger, l.Damages(), "at start; the daemon serves the state rebuilt from what could be read")...)
	envs, err := d.rec.Record(context.Background(), start...)
	if err != nil {
		return nil, fmt.Errorf("record start in %s: %w", path, err)
	}
	recorded, settled = true, true
	writePIDFile(opts.StateDir, bootID)
	// A pool last served elsewhere (a run in the other registration mode,
	// or under another kubelet dir) and killed there left its socket where
	// this run does not look: in plugins_registry/ the kubelet's plugin
	// watcher would dial it again and again.
	for _, name := range slices.Sorted(maps.Keys(st.Pools)) {
		if dir := filepath.Dir(st.Pools[name].Registration.Socket); dir != "." && dir != node.SocketDir(opts.KubeletDir, mode) {
			pool.CleanStaleSockets(dir, name, d.log)
		}
	}
	for _, e := range envs {
		st = events.Apply(st, e)
	}
	// Listen before any actor starts: a daemon that cannot serve metrics
	// stops before its pools register.
	if opts.MetricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", opts.MetricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr %s: %w", opts.MetricsAddr, err)
		}
	}
	var pools []string
	for _, r := range cfg.Resources {
		pools = append(pools, r.FullName())
	}
	d.log.Info().Str("boot_id", bootID).Str("version", opts.Version).Str("registration", string(mode)).
		Strs("pools", pools).Uint64("seq", envs[0].Seq).Msg("daemon started")

	env, err := config.NewEnv(opts.ProcRoot, opts.DevRoot)
	if err != nil {
		d.log.Warn().Err(err).Msg("cannot read the default route; no interface is excluded for carrying it")
	}
	devinfo, cdiDir := opts.DevinfoDir, opts.CDISpecDir
	if devinfo == "-" {
		devinfo = ""
	}
	if cdiDir == "-" {
		cdiDir = ""
	}

	d.system = <-system
	giveUp := func(child *actor.PID, reason any) {
		d.die(fmt.Errorf("actor %s kept crashing: %v", child.Id, reason))
	}
	strategy := supervise.DefaultBackoff(d.log.With().Str("component", "supervisor").Logger(), giveUp)
	podres := grpcapi.NewPodResourcesClient(filepath.Join(opts.KubeletDir, "pod-resources", "kubelet.sock"))
	props := node.Props(node.Config{
		Config: cfg, ConfigPath: opts.ConfigPath, ConfigOptions: opts.ConfigOptions, WatchConfig: opts.WatchConfig, ConfigSHA256: node.Digest(cfgData), Env: env, Reader: reader, Recorder: d.rec, Replayed: &st, FirstScan: firstScan,
		KubeletDir: opts.KubeletDir, Mode: mode,
		AllocEnv:   allocation.Env{DevRoot: opts.DevRoot, HasVhostNet: env.HasVhostNet},
		DevinfoDir: devinfo, CDISpecDir: cdiDir, ScanInterval: opts.ScanInterval, ProbeInterval: opts.ProbeInterval,
		CallTimeout: opts.CallTimeout, Supervisor: strategy, Log: d.log,
		PodResources: podres, ObserveAllocate: d.metrics.allocated,
		Reconcile: reconciler.Config{Interval: opts.ReconcileInterval, LeakGrace: opts.LeakGrace, Self: opts.Pod,
			Checkpoint: filepath.Join(node.DevicePluginDir(opts.KubeletDir), checkpoint.FileName)},
	})
	props.Configure(actor.WithGuardian(strategy))
	d.node, err = d.system.Root.SpawnNamed(props, "node")
	if err != nil {
		return nil, fmt.Errorf("spawn node: %w", err)
	}
	d.watchNode()

	d.admin = grpcapi.NewAdminServer(l, d, grpcapi.AdminServerOptions{
		Logger:          d.log,
		SnapshotDamaged: func(err error) bool { return errors.Is(err, store.ErrCorrupt) },
	})
	if err := d.admin.Serve(grpcapi.AdminSocketPath(opts.StateDir)); err != nil {
		d.log.Warn().Err(err).Msg("admin socket not served; dump on this node must wait for the daemon to stop")
	}

	if metricsLn != nil {
		d.serveMetrics(metricsLn)
	}
	if kernel != nil {
		d.watchKernel(kernel)
	}
	d.background, d.stopBack = context.WithCancel(context.Background())
	d.snapDone = make(chan struct{})
	go d.snapshotLoop()
	return d, nil
}

// stateDir makes dir, root's alone, when it is missing. One that exists
// (it may be shared, /var/lib say) is refused if others may write to it
// (they could replace the ledger), or if it is one of the kubelet's socket
// dirs under kubeletDir, by any path (see kubelets).
func stateDir(dir, kubeletDir string) error {
	if err := notKubelets(dir, kubeletDir, filepath.Abs); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state dir %s: not a directory", dir)
	}
	// The same dir by another path: a symlink, or a bind mount (a
	// hostPath of the kubelet's dir mounted at the state dir's path).
	for _, k := range kubelets(kubeletDir) {
		if kfi, err := os.Stat(k); err == nil && os.SameFile(fi, kfi) {
			return kubeletsDir(dir, "", k)
		}
	}
	// Below the registry through a symlink.
	if err := notKubelets(dir, kubeletDir, filepath.EvalSymlinks); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("state dir %s: mode %v lets others write to it; use a directory only root can write to (chmod go-w)", dir, fi.Mode().Perm())
	}
	return nil
}

// kubelets are the kubelet's socket dirs under kubeletDir (none for ""),
// which no state dir may be: the kubelet removes the sockets in
// device-plugins/ at each start, the admin socket with them (older
// kubelets remove every file there but their checkpoint, the ledger too),
// and its plugin watcher takes every socket in plugins_registry/, and in
// the dirs below it, for a plugin's. The last is the registry.
func kubelets(kubeletDir string) []string {
	if kubeletDir == "" {
		return nil
	}
	return []string{node.DevicePluginDir(kubeletDir), node.PluginsRegistryDir(kubeletDir)}
}

// notKubelets refuses dir if it is one of the kubelet's socket dirs, or
// below the registry, with every path made comparable by resolve.
func notKubelets(dir, kubeletDir string, resolve func(string) (string, error)) error {
	ks := kubelets(kubeletDir)
	abs := func(path string) (string, bool) {
		r, err := resolve(path)
		if err == nil {
			r, err = filepath.Abs(r)
		}
		return r, err == nil
	}
	d, ok := abs(dir)
	for i, k := range ks {
		rk, kok := abs(k)
		switch {
		case !ok || !kok:
		case d == rk:
			return kubeletsDir(dir, "", k)
		case i == len(ks)-1 && strings.HasPrefix(d, rk+string(filepath.Separator)):
			return kubeletsDir(dir, "below ", k)
		}
	}
	return nil
}

func kubeletsDir(dir, where, k string) error {
	return fmt.Errorf("state dir %s: is %sthe kubelet's %s dir, which the kubelet empties or reads as its own; use a dir of devledger's own, such as /var/lib/devledger", dir, where, filepath.Base(k))
}

// openKernel opens the kernel's notifications; nil when it cannot.
func (d *Daemon) openKernel() <-chan sysfs.KernelEvent {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sysfs.WatchKernel(ctx, sysfs.WatchOptions{Logger: d.log.With().Str("component", "kernel").Logger()})
	if err != nil {
		cancel()
		d.log.Warn().Err(err).Msg("no kernel events; changes are seen by the periodic scan and probe")
		return nil
	}
	d.stopKernel = cancel
	return ch
}

// watchKernel turns kernel events into rescans and probe rounds: one per
// burst (sysfs.Coalesce), however many thousand events the burst holds.
func (d *Daemon) watchKernel(ch <-chan sysfs.KernelEvent) {
	done, cancel := make(chan struct{}), d.stopKernel
	d.stopKernel = func() { cancel(); <-done }
	go func() {
		defer close(done)
		for batch := range sysfs.Coalesce(ch, 0, 0) {
			p := planKernelBatch(batch)
			if p.rescan != "" {
				d.Send(&node.Rescan{Reason: p.rescan, Removed: p.removed})
			}
			if p.probe != nil {
				d.Send(p.probe)
			}
			d.log.Debug().Int("device_events", p.devices).Int("link_events", p.links).Bool("overflow", p.overflow).Msg("kernel events")
		}
	}()
}

// kernelPlan is what one burst of kernel events asks for.
type kernelPlan struct {
	rescan         string            // the reason for a rescan, "" for none
	removed        []string          // the PCI functions the kernel removed
	probe          *node.ProbeHealth // nil for none
	devices, links int               // events about PCI functions, links
	overflow       bool              // events were lost
}

// planKernelBatch turns a burst of kernel events into at most one rescan
// and one probe round. A uevent of a PCI function asks for a rescan and a
// probe of it and its interface; a link change, a probe of its interface
// (and its VFs). Other uevents (a pod's veth) ask for nothing, so pod
// churn does not rescan the node. An overflow rescans and probes all.
func planKernelBatch(batch []sysfs.KernelEvent) kernelPlan {
	var p kernelPlan
	var addrs, ifaces, down, moved []string
	for _, e := range batch {
		if e.Interface != "" && (e.Kind == sysfs.KindLink && e.Action == "remove" ||
			e.Kind == sysfs.KindUevent && e.Subsystem == "net" && (e.Action == "add" || e.Action == "remove" || e.Action == "move")) {
			moved = append(moved, e.Interface)
		}
		switch {
		case e.Kind == sysfs.KindOverflow:
			p.overflow = true
		case e.Kind == sysfs.KindLink:
			p.links++
			if e.Interface != "" {
				ifaces = append(ifaces, e.Interface)
				if e.Action == "down" {
					down = append(down, e.Interface)
				}
			}
		case e.PCIAddress != "":
			p.devices++
			addrs = append(addrs, e.PCIAddress)
			if e.Subsystem == "pci" && e.Action == "remove" {
				p.removed = append(p.removed, e.PCIAddress)
			}
			if e.Interface != "" {
				ifaces = append(ifaces, e.Interface)
			}
		}
	}
	switch {
	case p.overflow:
		p.rescan = fmt.Sprintf("kernel: events lost, %d device events", p.devices)
		p.probe = &node.ProbeHealth{}
	case p.devices > 0:
		p.rescan = fmt.Sprintf("kernel: %d device events", p.devices)
	}
	// An interface that came or left in the batch was not dropped: the
	// kernel closes one it moves between namespaces (the host-device CNI
	// handing a function to a pod, or taking it back), reporting it down
	// on the way, and the probe finds it gone, or up as the CNI left it.
	down = slices.DeleteFunc(down, func(i string) bool { return slices.Contains(moved, i) })
	if p.removed != nil {
		p.removed = slices.Compact(slices.Sorted(slices.Values(p.removed)))
	}
	if !p.overflow && (len(addrs) > 0 || len(ifaces) > 0) {
		p.probe = &node.ProbeHealth{Addresses: slices.Compact(slices.Sorted(slices.Values(addrs))), Interfaces: slices.Compact(slices.Sorted(slices.Values(ifaces))),
			Down: slices.Compact(slices.Sorted(slices.Values(down)))}
	}
	return p
}

// Fatal delivers an error when the daemon cannot go on (an actor kept
// crashing); the caller should Stop and exit 1.
func (d *Daemon) Fatal() <-chan error { return d.fatal }

func (d *Daemon) die(err error) {
	d.fatalOnce.Do(func() {
		d.log.Error().Err(err).Msg("daemon failing")
		d.fatal <- err
	})
}

// Children returns the PIDs of the actors, for queries.
func (d *Daemon) Children(ctx context.Context) (*node.ChildPIDs, error) {
	res, err := d.Ask(ctx, d.node, &node.Children{})
	if err != nil {
		return nil, fmt.Errorf("ask node: %w", err)
	}
	return res.(*node.ChildPIDs), nil
}

// Reload reads the config file again (SIGHUP): a valid new config is
// applied, an invalid one recorded as rejected while the old one stays.
func (d *Daemon) Reload(ctx context.Context, reason string) (*node.ReloadResult, error) {
	res, err := d.Ask(ctx, d.node, &node.ReloadConfig{Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	return res.(*node.ReloadResult), nil
}

// Send delivers msg (node.Rescan, node.ProbeHealth) to the node coordinator.
func (d *Daemon) Send(msg any) { d.system.Root.Send(d.node, msg) }

// Ask sends a request to an actor and waits for the reply within ctx:
// until its deadline, or until it is cancelled.
func (d *Daemon) Ask(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	f := d.system.Root.RequestFuture(pid, msg, timeoutOf(ctx))
	if ctx.Done() == nil {
		return f.Result()
	}
	type answer struct {
		res any
		err error
	}
	// A future's wait takes no context: it waits here, and ends by the
	// future's own timeout if ctx ends first. Plumbing between a caller
	// and a mailbox; it holds no actor state.
	ch := make(chan answer, 1)
	go func() {
		res, err := f.Result()
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Status implements grpcapi.StatusSource: every configured pool and whether
// the kubelet acknowledged it.
func (d *Daemon) Status(ctx context.Context) (grpcapi.AdminStatus, error) {
	st := grpcapi.AdminStatus{Version: d.opts.Version, BootID: d.rec.BootID()}
	kids, err := d.Children(ctx)
	if err != nil {
		return st, err
	}
	res, err := d.Ask(ctx, kids.Registrar, &registrar.Query{})
	if err != nil {
		return st, fmt.Errorf("ask registrar: %w", err)
	}
	reg := res.(*registrar.Status)
	// The pools of the config in force now, not at start.
	for _, name := range kids.Configured {
		if _, serving := kids.Pools[name]; !serving && kids.Placed {
			// No devices, not advertised empty: not served (the SR-IOV plugin's rule).
			st.Pools = append(st.Pools, grpcapi.AdminPoolStatus{Resource: name, NoDevices: true, Reason: "no devices: not served until one joins"})
			continue
		}
		ps := reg.Pools[name]
		st.Pools = append(st.Pools, grpcapi.AdminPoolStatus{Resource: name, Socket: ps.Socket, Registered: ps.Registered, Reason: ps.LastError})
	}
	return st, nil
}

// Ready reports whether the daemon is ready, as /readyz says.
func (d *Daemon) Ready(ctx context.Context) bool { return d.notReady(ctx) == nil }

// notReady says why the daemon is not ready, nil when it is: nothing can
// be recorded (Allocate fails) or some records are refused (Allocate may
// fail), damage waits for an operator, the actors
// do not answer, or a pool served is not registered.
func (d *Daemon) notReady(ctx context.Context) error {
	if err := d.ledger.AppendFault(); err != nil {
		return fmt.Errorf("the ledger cannot record: %w", err)
	}
	if err := d.ledger.Unsteady(); err != nil {
		return fmt.Errorf("the ledger refuses some writes and takes others (a nearly full disk?), and may refuse an Allocate: the last refused: %w", err)
	}
	if dm := d.metrics.damage().Damage; len(dm) > 0 {
		return fmt.Errorf("the ledger is damaged (%d not acknowledged; see devledger ledger acknowledge): %s", len(dm), dm[len(dm)-1])
	}
	st, err := d.Status(ctx)
	if err != nil {
		return fmt.Errorf("actors do not answer: %w", err)
	}
	return unregistered(st.Pools)
}

// readyzNamesShown is how many pools not registered /readyz names; the
// count says how many there are, devledger_pool_registered each.
const readyzNamesShown = 8

// unregistered says which of pools, served, the kubelet has not
// registered, nil when none: the count of them and the first
// readyzNamesShown by name, so that a kubelet that refuses some of many
// pools shows more than one at a time, and one that refuses all of 256
// does not fill the answer.
func unregistered(pools []grpcapi.AdminPoolStatus) error {
	var waiting []string
	served := 0
	for _, p := range pools {
		if !p.NoDevices {
			served++
			if !p.Registered {
				waiting = append(waiting, p.Resource)
			}
		}
	}
	switch len(waiting) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("pool %s is not registered with the kubelet", waiting[0])
	}
	names := strings.Join(waiting[:min(len(waiting), readyzNamesShown)], ", ")
	if more := len(waiting) - readyzNamesShown; more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Errorf("%d of %d pools served are not registered with the kubelet: %s", len(waiting), served, names)
}

// answers says whether every actor answers (/healthz): the node names its
// children, and each answers a Touch from its mailbox. A pool waiting for
// the disk still answers: liveness asks whether mailboxes turn, and
// /readyz says when the ledger cannot record.
func (d *Daemon) answers(ctx context.Context) error {
	kids, err := d.Children(ctx)
	if err != nil {
		return fmt.Errorf("actors do not answer: %w", err)
	}
	pids := map[string]*actor.PID{"scanner": kids.Scanner, "registrar": kids.Registrar,
		"health checker": kids.Health, "socket watcher": kids.Sockets, "reconciler": kids.Reconciler,
		"config watcher": kids.ConfigWatch}
	for name, pid := range kids.Pools {
		pids["pool "+name] = pid
	}
	asked := map[string]*actor.Future{}
	for name, pid := range pids {
		if pid != nil {
			asked[name] = d.system.Root.RequestFuture(pid, &actor.Touch{}, timeoutOf(ctx))
		}
	}
	var silent []string
	for name, f := range asked {
		if _, err := f.Result(); errors.Is(err, actor.ErrDeadLetter) {
			silent = append(silent, name+" (stopped)")
		} else if err != nil {
			silent = append(silent, name+" (no answer in time)")
		}
	}
	if len(silent) > 0 {
		slices.Sort(silent)
		return fmt.Errorf("actors do not answer: %s", strings.Join(silent, ", "))
	}
	return nil
}

func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if t := time.Until(dl); t > 0 {
			return t
		}
		return time.Millisecond
	}
	return 5 * time.Second
}

// stopActors stops the node, and with it every actor, and waits until it
// has stopped or ctx ends (no deadline: a minute). The pools finish the
// calls under way first, each within the call timeout.
func (d *Daemon) stopActors(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	d.system.Root.Poison(d.node)
	select {
	case <-d.nodeGone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop the actors: %w", ctx.Err())
	}
}

// watchNode closes d.nodeGone once the node has stopped, its children
// with it. It returns once the watch is asked, ahead of any stop: one
// asked of a node already stopping is answered at once, before its pools
// have drained.
func (d *Daemon) watchNode() {
	d.nodeGone = make(chan struct{})
	watching := make(chan struct{})
	d.system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started:
			c.Watch(d.node)
			close(watching)
		case *actor.Terminated:
			close(d.nodeGone)
			c.Stop(c.Self())
		}
	}))
	<-watching
}

// stopRecordBudget is the time a stop's last writes (DaemonStopped, the
// snapshot) get even past its deadline: they tell the next start whether
// the stop was clean.
const stopRecordBudget = 2 * time.Second

// stopRecordDeadline is when a stop's last writes, begun at now, give up:
// at the stop's own deadline, or stopRecordBudget after now if that is
// later (none, or one already past). A slow disk on a loaded node may need
// more than the budget for the snapshot, and the stop has the time.
func stopRecordDeadline(ctx context.Context, now time.Time) time.Time {
	budget := now.Add(stopRecordBudget)
	if dl, ok := ctx.Deadline(); ok && dl.After(budget) {
		return dl
	}
	return budget
}

// Stop drains the daemon: pools stop taking requests and finish those in
// flight, sockets are removed; then DaemonStopped is recorded, a snapshot
// taken and the ledger closed. reason goes into DaemonStopped.
func (d *Daemon) Stop(ctx context.Context, reason string) error {
	return d.stop(ctx, reason, false)
}

// stop is Stop, run once by whichever caller comes first (Run on a fatal
// error or a signal, a test's cleanup); failed says the daemon's own
// failure stops it. A Once, not a message: the callers are outside the
// actor system, and the actors are what it stops.
func (d *Daemon) stop(ctx context.Context, reason string, failed bool) error {
	d.stopOnce.Do(func() { d.stopErr = d.drain(ctx, reason, failed) })
	return d.stopErr
}

func (d *Daemon) drain(ctx context.Context, reason string, failed bool) error {
	// A check or retention pass of a big ledger may take seconds: it
	// stops at once and starts again with the next run, rather than spend
	// the stop's time before SIGKILL.
	d.stopBack()
	<-d.snapDone
	d.stopKernel()
	clean := true
	if err := d.stopActors(ctx); err != nil {
		clean = false
		d.log.Warn().Err(err).Msg("actors did not stop in time")
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), stopRecordDeadline(ctx, time.Now()))
	defer cancel()
	var errs []error
	stopped := false
	if envs, err := d.rec.Record(rctx, events.DaemonStopped{Reason: reason, Clean: clean}); err != nil {
		errs = append(errs, fmt.Errorf("record stop: %w", err))
	} else {
		stopped = true
		// A stop on failure logs an error, however clean.
		ev := d.log.Info()
		if failed {
			ev = d.log.Error()
		}
		ev.Str("reason", reason).Bool("clean", clean).Uint64("seq", envs[0].Seq).Msg("daemon stopped")
	}
	if err := d.snapshot(rctx, "daemon stop"); err != nil {
		errs = append(errs, err)
	}
	if d.metricsSrv != nil {
		d.metricsSrv.Shutdown(ctx)
	}
	if err := d.admin.Stop(ctx); err != nil {
		d.log.Warn().Err(err).Msg("admin socket stop")
	}
	d.system.Shutdown()
	if stopped {
		// Else the ledger has this run running, and the next start takes
		// when it was last alive from the file. Before the lock goes: the
		// next start may take it at once, and writes its own.
		os.Remove(filepath.Join(d.opts.StateDir, PIDFileName))
	}
	if err := d.ledger.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close ledger: %w", err))
	}
	return errors.Join(errs...)
}

func (d *Daemon) snapshotLoop() {
	defer close(d.snapDone)
	t := time.NewTicker(d.opts.SnapshotCheck)
	defer t.Stop()
	alive := time.NewTicker(aliveEvery)
	defer alive.Stop()
	var retained time.Time
	started := time.Now()
	checked := false
	// refusals counts the due snapshots that failed in a row, and skip
	// the checks to let pass before the next try: a nearly full disk
	// takes events and refuses snapshots, the largest writes, and each
	// try folds the ledger.
	refusals, skip := 0, 0
	for {
		select {
		case <-d.background.Done():
			return
		case <-alive.C:
			markAlive(d.opts.StateDir)
		case <-t.C:
			// At the first tick: the walk reads the whole file, and the
			// start comes first.
			if !checked {
				d.checkLedger()
				checked = true
			}
			d.ledger.NoteQuiet() // a disk's faults, over with no append to say so
			last, _ := d.ledger.LatestSnapshotSeq(0)
			took := false
			// While appends fail, a snapshot each tick retries the disk:
			// on a quiet node nothing else would, and /readyz stays false.
			if d.ledger.AppendFault() != nil {
				if err := d.snapshot(d.background, "retrying the ledger after a failed append"); err == nil {
					took = true // the store says the ledger records again
				}
			} else if d.ledger.LastSeq()-last >= d.opts.SnapshotEvery {
				if skip > 0 {
					skip--
				} else if err := d.snapshot(d.background, fmt.Sprintf("%d events since the last", d.ledger.LastSeq()-last)); err != nil {
					if !errors.Is(err, context.Canceled) { // by the stop, which takes one
						refusals++
						skip = snapshotSkip(refusals)
						level := zerolog.DebugLevel // its first failure said so
						if refusals == 1 {
							level = zerolog.ErrorLevel
						}
						d.log.WithLevel(level).Err(err).Int("failures", refusals).Dur("retry_in_ms", time.Duration(skip+1)*d.opts.SnapshotCheck).
							Msg("snapshot failed")
					}
				} else {
					took = true
				}
			}
			if took {
				refusals, skip = 0, 0
			}
			// Retention: after a snapshot (which makes events
			// droppable), else hourly.
			if took || time.Since(retained) >= time.Hour {
				d.retain(time.Since(started) >= cmp.Or(d.opts.retainAgeSettle, retainAgeSettle))
				retained = time.Now()
			}
		}
	}
}

// checkLedger checks, once after start, what the start did not read: the
// page graph, every record and snapshot. New damage is recorded, making
// /readyz false until acknowledged.
func (d *Daemon) checkLedger() {
	began := time.Now()
	d.log.Debug().Msg("checking the ledger")
	var err error
	for range 3 { // a check that began as the ledger moved on starts again
		if err = d.ledger.CheckPages(d.background); err == nil || errors.Is(err, store.ErrCorrupt) || errors.Is(err, context.Canceled) {
			break
		}
	}
	var problems []error
	if err == nil {
		// Up to 32 problems not recorded yet: damage recorded (and perhaps
		// acknowledged) must not hide damage past it.
		known := d.metrics.damage()
		_, problems, err = d.ledger.CheckAll(d.background, 32, func(p error) bool { return known.Known(p.Error()) })
	} else if errors.Is(err, store.ErrCorrupt) {
		problems, err = []error{err}, nil
	}
	for _, p := range problems {
		d.log.Error().Err(p).Msg("ledger damaged")
	}
	if found := newDamage(d.metrics.damage(), problems, "found by the check after start; the daemon serves the state it rebuilt at start"); len(found) > 0 {
		if _, rerr := d.rec.Record(context.Background(), found...); rerr != nil {
			d.log.Error().Err(rerr).Msg("cannot record the damage found")
		}
	}
	switch {
	case len(problems) > 0:
	case errors.Is(err, context.Canceled):
		d.log.Info().Msg("ledger check cut short by the stop; the next start checks it")
	case err != nil:
		d.log.Warn().Err(err).Msg("ledger not checked")
	default:
		d.log.Info().Dur("took_ms", time.Since(began)).Msg("ledger checked")
	}
}

// salvageHint says what to do about a ledger too damaged to start on.
func salvageHint(err error) string {
	if !errors.Is(err, store.ErrCorrupt) {
		return ""
	}
	return "; the state cannot be rebuilt from it: salvage it (devledger ledger salvage) and put the copy in place, as docs/operations.md says under \"A damaged ledger\""
}

// newDamage are the events of the damage found that known (recorded
// already) lacks.
func newDamage(known events.LedgerState, found []error, served string) []events.Payload {
	var out []events.Payload
	for _, err := range found {
		ld := events.LedgerDamaged{Problem: err.Error(), Served: served}
		if ce := (*store.CorruptError)(nil); errors.As(err, &ce) {
			ld.Seq = ce.Seq
		}
		if !known.Known(ld.Problem) {
			known = events.ApplyLedger(known, ld)
			out = append(out, ld)
		}
	}
	return out
}

// AcknowledgeDamage records that an operator took note of the recorded
// damage (`devledger ledger acknowledge`), making the daemon ready again,
// and returns the problems acknowledged; with none it records nothing.
func (d *Daemon) AcknowledgeDamage(ctx context.Context, note string) ([]string, error) {
	dm := d.metrics.damage().Damage
	if len(dm) == 0 {
		return nil, nil
	}
	if _, err := d.rec.Record(ctx, events.DamageAcknowledged{Problems: dm, Note: note}); err != nil {
		return nil, err
	}
	d.log.Info().Strs("problems", dm).Str("note", note).Msg("ledger damage acknowledged")
	return dm, nil
}

// retain drops what the retention options say, by age only if byAge;
// the store logs it.
func (d *Daemon) retain(byAge bool) {
	r := store.Retention{MaxAge: d.opts.RetainAge, MaxBytes: d.opts.RetainBytes, MaxDrop: cmp.Or(d.opts.retainChunk, retainChunk)}
	if !byAge {
		r.MaxAge = 0
	}
	if r.MaxAge <= 0 && r.MaxBytes <= 0 {
		return
	}
	for {
		_, dropped, err := d.ledger.Retain(d.background, r)
		if err != nil && !errors.Is(err, context.Canceled) { // by the stop
			d.log.Error().Err(err).Msg("ledger retention failed")
		}
		if !dropped {
			return
		}
		// The store records its EventsDropped itself, past the Recorder.
		d.metrics.storeRecorded(events.TypeEventsDropped)
	}
}

// snapshotSkipMax bounds the checks between tries of a snapshot that
// keeps failing: 32, 16 minutes at the default check.
const snapshotSkipMax = 32

// snapshotSkip is how many checks to let pass after the due snapshot
// failed refusals times in a row: 0, 1, 3, 7, … up to snapshotSkipMax-1,
// however long the disk refuses.
func snapshotSkip(refusals int) int {
	n := 1
	for i := 1; i < refusals && n < snapshotSkipMax; i++ {
		n *= 2 // not 1<<(refusals-1): past 63 refusals that overflows
	}
	return min(n, snapshotSkipMax) - 1
}

// retainAgeSettle is how long a run counts on this process's clock
// before the age bound drops anything: a node that boots with its clock
// ahead, which NTP steps back minutes later, reads every event before the
// boot as old until then, and the cut would take them all up to the last
// run's stop snapshot. The size bound does not read the clock, and does
// not wait.
const retainAgeSettle = time.Hour

// retainChunk is about the most events one retention transaction drops
// (store.Retention.MaxDrop): every Allocate waits for it, and dropping a
// million events in one took 1.3 to 1.7 s on a test machine.
const retainChunk = 50_000

// snapshot folds the ledger and saves the state.
func (d *Daemon) snapshot(ctx context.Context, reason string) error {
	s, err := d.ledger.Replay(0)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if _, err := d.ledger.SaveSnapshot(ctx, s, reason); err != nil { // the store logs it
		return fmt.Errorf("snapshot: %w", err)
	}
	d.metrics.storeRecorded(events.TypeSnapshotTaken)
	return nil
}

// Run starts the daemon and runs it until ctx ends (SIGTERM) or it fails.
func Run(ctx context.Context, opts Options) error {
	// Before Start: a SIGHUP's default action would kill a starting
	// daemon; it reloads once the daemon runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d, err := Start(opts)
	if err != nil {
		return err
	}
	return d.serve(ctx, hup)
}

// serve runs the started daemon until ctx ends or it fails, reloading
// the config at each signal on hup.
func (d *Daemon) serve(ctx context.Context, hup <-chan os.Signal) error {
	for {
		select {
		case <-hup:
			// Within ctx: a reload waiting on a slow disk must not hold
			// back a SIGTERM, whose stop needs all the time it has. The
			// node reads the config before it stops, or not at all.
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := d.Reload(rctx, "SIGHUP")
			switch {
			case err != nil && ctx.Err() != nil:
				// Cut short by the stop, which says why.
			case err != nil:
				d.log.Error().Err(err).Msg("reload on SIGHUP")
			case res.Unchanged:
				// Nothing changes, so nothing else says the signal came.
				d.log.Info().Str("config", d.opts.ConfigPath).Msg("SIGHUP: config unchanged")
			}
			cancel()
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			return d.Stop(sctx, "signal: "+context.Cause(ctx).Error())
		case ferr := <-d.Fatal():
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			return errors.Join(ferr, d.stop(sctx, "fatal: "+ferr.Error(), true))
		}
	}
}

func resolveMode(flag, kubeletDir string) (grpcapi.RegistrationMode, error) {
	switch flag {
	case "legacy":
		return grpcapi.ModeLegacy, nil
	case "watcher":
		return grpcapi.ModeWatcher, nil
	case "auto":
		if fi, err := os.Stat(node.PluginsRegistryDir(kubeletDir)); err == nil && fi.IsDir() {
			return grpcapi.ModeWatcher, nil
		}
		return grpcapi.ModeLegacy, nil
	}
	return "", fmt.Errorf("%w: --registration %q: want auto, legacy or watcher", ErrBadConfig, flag)
}

func loadConfig(path string, opts config.Options) (*config.Config, []byte, error) {
	if path == "" {
		return nil, nil, errors.New("no config file given (--config)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg, err := config.ParseWith(path, data, opts)
	return cfg, data, err
}

func sameSpecs(specs []events.PoolSpec, st events.State) bool {
	if len(specs) != len(st.Pools) {
		return false
	}
	for _, s := range specs {
		// An older build may have written the same entry in other text.
		p, ok := st.Pools[s.Resource]
		if !ok || !config.SameDefinition(p.Spec.Definition, s.Definition) {
			return false
		}
		if p.Spec.Definition = s.Definition; p.Spec != s {
			return false
		}
	}
	return true
}

func newBootID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writePIDFile says who holds the ledger, for another daemon's error.
func writePIDFile(stateDir, bootID string) {
	line := fmt.Sprintf("pid %d, boot %s, started %s\n", os.Getpid(), bootID, time.Now().UTC().Format(time.RFC3339))
	replacePIDFile(stateDir, []byte(line))
}

// replacePIDFile puts data in place as the pid file, whole or not at all;
// it reports whether it did.
func replacePIDFile(stateDir string, data []byte) bool {
	tmp := filepath.Join(stateDir, PIDFileName+".tmp")
	return os.WriteFile(tmp, data, 0o600) == nil && os.Rename(tmp, filepath.Join(stateDir, PIDFileName)) == nil
}

// aliveEvery is how often a running daemon touches its pid file, which
// tells the next start when a crashed run was last alive.
const aliveEvery = 5 * time.Second

// LastAlive is the boot id in stateDir's pid file and when it was last
// touched; zero when there is none.
func LastAlive(stateDir string) (bootID string, at time.Time) {
	path := filepath.Join(stateDir, PIDFileName)
	fi, err := os.Stat(path)
	if err != nil {
		return "", time.Time{}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", time.Time{}
	}
	// "pid N, boot ID, started T"
	for _, f := range strings.Split(strings.TrimSpace(string(b)), ", ") {
		if id, ok := strings.CutPrefix(f, "boot "); ok {
			return id, fi.ModTime()
		}
	}
	return "", time.Time{}
}

// Crashed is what a start records of the run st has running, which
// recorded no stop: its own last event (whatever another writer appended
// since), and when it was last alive, the later of that event's time and
// the pid file's mark (LastAlive) when the mark is that run's.
func Crashed(st *events.State, markBoot string, markAt time.Time) events.DaemonCrashed {
	c := events.DaemonCrashed{BootID: st.Daemon.BootID, LastSeq: st.Seq, LastAlive: st.Time}
	if st.Daemon.LastSeq > 0 {
		c.LastSeq, c.LastAlive = st.Daemon.LastSeq, st.Daemon.LastAt
	}
	if markBoot == st.Daemon.BootID && markAt.After(c.LastAlive) {
		c.LastAlive = markAt
	}
	return c
}

// kernelBootID is the kernel's boot id under procRoot, "" when it cannot
// be read.
func kernelBootID(procRoot string) string {
	b, err := os.ReadFile(filepath.Join(procRoot, "sys", "kernel", "random", "boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// markAlive touches the pid file (see aliveEvery).
func markAlive(stateDir string) {
	now := time.Now()
	_ = os.Chtimes(filepath.Join(stateDir, PIDFileName), now, now)
}

func holder(stateDir string, opening bool) string {
	b, err := os.ReadFile(filepath.Join(stateDir, PIDFileName))
	pid := strings.TrimSpace(string(b))
	named := err == nil && pid != ""
	switch {
	case opening:
		why := OpeningFileName + " is there"
		if named {
			// The pid file is written once a start is recorded: until
			// then it names the run before.
			why += "; " + PIDFileName + " names the run before it: " + pid
		}
		return "another process, likely a start still opening or replaying it (" + why + "), or a tool reading it after a start died there or found it damaged"
	case !named:
		return "another process (no " + PIDFileName + " says which)"
	}
	return "devledger " + pid
}
