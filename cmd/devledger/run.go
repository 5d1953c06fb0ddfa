package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/daemon"
	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/config"
)

// daemonFlags are the flags of run.
type daemonFlags struct {
	opts      daemon.Options
	config    configFlags
	upstream  upstreamFlags
	logFormat string
	logLevel  string
}

func (f *daemonFlags) register(fs *flag.FlagSet) {
	o := &f.opts
	f.config.register(fs, "the config `FILE` (the SR-IOV device plugin's config.json schema, JSON or YAML; default: "+strings.Join(defaultConfigPaths, ", then ")+")")
	f.upstream.register(fs)
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount `DIR`")
	fs.StringVar(&o.DevRoot, "dev-root", "/dev", "devfs mount `DIR` (for /dev/vfio checks)")
	fs.StringVar(&o.ProcRoot, "proc-root", "/proc", "procfs mount `DIR` (for the default route)")
	fs.StringVar(&o.PCIIDsPath, "pci-ids", "", "PCI ID database `FILE` (default: the usual system locations)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root `DIR`")
	fs.StringVar(&o.StateDir, "state-dir", defaultStateDir, "`DIR` for the ledger (never the kubelet's device-plugins dir)")
	fs.StringVar(&o.DevinfoDir, "devinfo-dir", "/var/run/k8s.cni.cncf.io/devinfo/dp", "`DIR` for device-info files of netDevice pools (\"-\": none)")
	fs.StringVar(&o.CDISpecDir, "cdi-spec-dir", "/var/run/cdi", "`DIR` for the CDI spec of each pool with cdi.enabled (or every pool, --use-cdi), where container runtimes read them (\"-\": none)")
	fs.StringVar(&o.Registration, "registration", "auto", "`MODE`: auto, legacy (kubelet.sock) or watcher (plugins_registry)")
	fs.DurationVar(&o.ScanInterval, "scan-interval", 30*time.Second, "periodic rescan of sysfs (at least 10ms)")
	fs.DurationVar(&o.ProbeInterval, "probe-interval", config.DefaultProbeInterval, "periodic health probe of the pools that set no health.probeInterval (at least 10ms)")
	fs.BoolVar(&o.WatchConfig, "watch-config", true, "reload the config file when it changes (a ConfigMap update too); off, only SIGHUP reloads it")
	fs.BoolVar(&o.KernelEvents, "kernel-events", true, "react at once to kernel uevents and link changes (netlink); the periodic scan and probe run either way")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics, /healthz and /readyz on `ADDR` (\":9108\"; default off)")
	fs.DurationVar(&o.RetainAge, "retain-age", defaultRetainAge, "drop ledger events older than this, once a snapshot holds them (0: keep them)")
	o.RetainBytes = defaultRetainBytes
	fs.Var((*byteSize)(&o.RetainBytes), "retain-size", "drop the oldest ledger events while the events kept take more than this (`SIZE`: 1Gi, 512Mi, bytes; 0: no bound)")
	fs.DurationVar(&o.ReconcileInterval, "reconcile-interval", 30*time.Second, "periodic PodResources reconciliation (at least 10ms)")
	fs.DurationVar(&o.LeakGrace, "leak-grace", 5*time.Minute, "how long an allocation may stay unclaimed by any container before it is recorded as a leak suspect (more than 0)")
	fs.StringVar(&f.logFormat, "log-format", "", "`FORMAT`: json or console (default: console on a terminal, json otherwise)")
	fs.StringVar(&f.logLevel, "log-level", "info", "`LEVEL`: debug, info, warn, error, or the SR-IOV device plugin's verbosity (a number; 4 and above is debug)")
}

// The ledger's default bounds: a quarter of a year answers "which pod had
// it last Tuesday" and last month's questions, and 1 GiB of events is some
// millions of them (a few hundred bytes each), a small part of a node's
// disk.
const (
	defaultRetainAge   = 90 * 24 * time.Hour
	defaultRetainBytes = 1 << 30
)

// byteSize is a flag of a size in bytes, with an optional binary suffix:
// Ki, Mi, Gi, Ti.
type byteSize int64

func (b *byteSize) String() string {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if *b != 0 && int64(*b)%u.n == 0 {
			return strconv.FormatInt(int64(*b)/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	for suffix, n := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSuffix(s, suffix), n
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/mult {
		return fmt.Errorf("want a size such as 1Gi, 512Mi or a number of bytes")
	}
	*b = byteSize(v * mult)
	return nil
}

// minInterval is the shortest pace run takes for its periodic work: a
// scan, a probe or a PodResources round more often than that (1ns, a
// unit mistyped) runs back to back and takes a core for nothing, and
// zero or less would silently mean a default, or no periodic scan. It is
// the floor of a pool's health.probeInterval too.
const minInterval = config.MinProbeInterval

// check refuses, before anything is opened or created, a flag value the
// daemon would refuse only after it opened (or made) its ledger, or take
// to mean something else.
func (f *daemonFlags) check() error {
	switch f.opts.Registration {
	case "auto", "legacy", "watcher":
	default:
		return usageErrf("--registration %q: want auto, legacy or watcher", f.opts.Registration)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--scan-interval", f.opts.ScanInterval},
		{"--probe-interval", f.opts.ProbeInterval},
		{"--reconcile-interval", f.opts.ReconcileInterval},
	} {
		if d.v < minInterval {
			return usageErrf("%s %s: want at least %s", d.flag, d.v, minInterval)
		}
	}
	// A sysfs root that names no directory (a typo, a mount missing from
	// the manifest) is a flag mistake, as scan says of it; the daemon
	// would make its state dir first, or take a file and scan nothing.
	// A path through a file is no directory either (ENOTDIR). One it
	// may not read is the start's to name, with the others.
	st, err := os.Stat(f.opts.SysfsRoot)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return usageErrf("--sysfs-root %s: no such directory", f.opts.SysfsRoot)
	case err == nil && !st.IsDir():
		return usageErrf("--sysfs-root %s: not a directory", f.opts.SysfsRoot)
	}
	// A grace of 0 or less would silently mean the default, and a
	// negative age no bound: say so instead.
	if f.opts.LeakGrace <= 0 {
		return usageErrf("--leak-grace %s: must be positive", f.opts.LeakGrace)
	}
	if f.opts.RetainAge < 0 {
		return usageErrf("--retain-age %s: must not be negative", f.opts.RetainAge)
	}
	// A malformed address (9108 for :9108) is a flag mistake; a port
	// another process holds is found only by listening, at start.
	if a := f.opts.MetricsAddr; a != "" {
		_, port, err := net.SplitHostPort(a)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return usageErrf("--metrics-addr %q: want HOST:PORT or :PORT (:9108): %v", a, err)
		}
	}
	return nil
}

// logger builds the zerolog logger the flags ask for, writing to w.
func (f *daemonFlags) logger(w io.Writer) (zerolog.Logger, error) {
	level, err := logLevel(f.logLevel)
	if err != nil {
		return zerolog.Logger{}, usageErrf("--log-level %q: %v", f.logLevel, err)
	}
	file, isFile := w.(*os.File)
	terminal := isFile && isatty.IsTerminal(file.Fd())
	format := f.logFormat
	if format == "" {
		format = "json"
		if terminal {
			format = "console"
		}
	}
	// Milliseconds in every timestamp, and durations in milliseconds
	// (their fields say so: took_ms).
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.DurationFieldUnit = time.Millisecond
	switch format {
	case "json":
	case "console":
		// Colour for a terminal only, never into a file or a pipe.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !terminal}
	default:
		return zerolog.Logger{}, usageErrf("--log-format %q: want json or console", format)
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// loggedError is an error the daemon's logger said already, as its last
// line: main exits with its code and prints nothing more, so that a JSON
// log stays JSON to the end.
type loggedError struct{ err error }

func (e loggedError) Error() string { return e.err.Error() }
func (e loggedError) Unwrap() error { return e.err }

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[--config FILE] [flags]", stdout)
	var f daemonFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := daemonHere(); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	// A container started from the image with nothing mounted has no
	// config: say where it was expected and what to mount, rather than a
	// bare "no such file".
	path, err := f.config.resolve(defaultConfigPaths)
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return usageErrf("no config at %s: mount the devledger-config ConfigMap there (see deploy/base)", path)
	}
	f.opts.ConfigPath, f.opts.ConfigOptions = path, f.config.opts
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	f.upstream.warn(log)
	// Checked before the ledger is opened or an actor starts: a daemon
	// without the access it needs stops at once and says what it needs,
	// rather than after seconds of an actor crashing and restarting.
	if err := checkAccess(f.opts); err != nil {
		log.Error().Err(err).Msg("devledger run cannot start")
		return loggedError{err}
	}
	f.opts.Logger = log
	f.opts.Version = version
	// The DaemonSet names the node (the downward API's spec.nodeName); a
	// host's name need not be its node's.
	f.opts.Node = os.Getenv("NODE_NAME")
	// And the daemon's own pod (metadata.namespace, metadata.name): a
	// kubelet that lists it has synced its pods from the API server.
	f.opts.Pod.Namespace, f.opts.Pod.Name = os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")

	ctx, stop := signalContext()
	defer stop()
	err = daemon.Run(ctx, f.opts)
	if err == nil {
		return nil
	}
	log.Error().Err(err).Msg("devledger run stopped")
	err = loggedError{err}
	if errors.Is(err, daemon.ErrBadConfig) {
		return usageErr(err)
	}
	return err
}

// neededDir is a directory the daemon must be able to use, and how.
type neededDir struct {
	path string
	// role names it for the operator: the flag that sets it, or what it
	// is to the kubelet.
	role string
	// read and write are the access the daemon needs; a dir that is
	// missing is created, which takes write access to its parent.
	read, write bool
}

// neededDirs are the directories the daemon with these options reads and
// writes: the sysfs root, the state dir, the kubelet's socket dirs (it
// watches them, and serves and removes its sockets there), the
// device-info dir, and the CDI spec dir when a pool answers with CDI names
// (--use-cdi, or cdi.enabled in the config at start).
func neededDirs(o daemon.Options) []neededDir {
	dirs := []neededDir{
		{path: o.SysfsRoot, role: "--sysfs-root", read: true},
		{path: o.StateDir, role: "--state-dir", read: true, write: true},
	}
	if o.KubeletDir != "" {
		dirs = append(dirs, neededDir{path: node.DevicePluginDir(o.KubeletDir), role: "the kubelet's device-plugins dir", read: true, write: true})
		registry := node.PluginsRegistryDir(o.KubeletDir)
		fi, err := os.Stat(registry)
		// auto picks the watcher when the dir is there (daemon.Run
		// decides it alike).
		if o.Registration == "watcher" || o.Registration == "auto" && err == nil && fi.IsDir() {
			dirs = append(dirs, neededDir{path: registry, role: "the kubelet's plugins_registry dir", read: true, write: true})
		}
	}
	if o.DevinfoDir != "-" {
		dirs = append(dirs, neededDir{path: o.DevinfoDir, role: "--devinfo-dir", write: true})
	}
	if o.CDISpecDir != "-" && o.CDISpecDir != "" && (o.ConfigOptions.UseCDI || configUsesCDI(o)) {
		dirs = append(dirs, neededDir{path: o.CDISpecDir, role: "--cdi-spec-dir", write: true})
	}
	return dirs
}

// configUsesCDI says whether a pool of the config the daemon starts with
// sets cdi.enabled. A config that does not load is the daemon's to report.
func configUsesCDI(o daemon.Options) bool {
	cfg, err := config.Load(o.ConfigPath, o.ConfigOptions)
	return err == nil && slices.ContainsFunc(cfg.Resources, func(r config.Resource) bool { return r.CDI.Enabled })
}

// accessible says whether this process may use path with mode
// (accessRead, accessWrite, accessSearch), as the kernel would decide it
// for its effective user: root and CAP_DAC_OVERRIDE pass whatever the
// modes, a read-only mount fails writes. Tests replace it to play a user
// that modes apply to.
var accessible = access

// checkAccess checks, before the daemon starts, that it may read and write
// each directory it needs. The error names every path it may not use and
// the access it needs there. A path that is missing (and need not be
// created) or is not a directory is left to the daemon, which says so.
func checkAccess(o daemon.Options) error {
	var denied []accessDenied
	for _, d := range neededDirs(o) {
		if d.path == "" {
			continue
		}
		if a, ok := d.check(); !ok {
			denied = append(denied, a)
		}
	}
	switch len(denied) {
	case 0:
		return nil
	case 1:
		a := denied[0]
		return fmt.Errorf("%s; devledger must run as root or with %s access to %s", a.problem, a.need, a.path)
	}
	problems := make([]string, len(denied))
	for i, a := range denied {
		problems[i] = a.problem
	}
	return fmt.Errorf("%s; devledger must run as root or with that access to each", strings.Join(problems, "; "))
}

// accessDenied is one directory the daemon may not use as it must.
type accessDenied struct {
	problem string // "cannot write DIR (role): reason"
	need    string // "write", "read" or "read and write"
	path    string // the dir that needs it: the parent of one to create
}

// check says whether the daemon may use the dir, and if not, why.
func (d neededDir) check() (accessDenied, bool) {
	need := "read"
	switch {
	case d.read && d.write:
		need = "read and write"
	case d.write:
		need = "write"
	}
	fi, err := os.Stat(d.path)
	if errors.Is(err, os.ErrNotExist) {
		if !d.write {
			return accessDenied{}, true
		}
		parent, ok := existingParent(d.path)
		if !ok {
			return accessDenied{}, true
		}
		// The daemon creates it, and whatever is missing above it.
		if err := accessible(parent, accessWrite|accessSearch); err != nil {
			return accessDenied{fmt.Sprintf("cannot create %s (%s) in %s: %v", d.path, d.role, parent, err), "write", parent}, false
		}
		return accessDenied{}, true
	}
	if err != nil {
		return accessDenied{fmt.Sprintf("cannot reach %s (%s): %v", d.path, d.role, errnoOf(err)), need, d.path}, false
	}
	if !fi.IsDir() {
		return accessDenied{}, true
	}
	var readErr, writeErr error
	if d.read {
		readErr = accessible(d.path, accessRead|accessSearch)
	}
	if d.write {
		writeErr = accessible(d.path, accessWrite|accessSearch)
	}
	verb, reason := "", readErr
	switch {
	case readErr != nil && writeErr != nil:
		verb = "read or write"
	case readErr != nil:
		verb = "read"
	case writeErr != nil:
		verb, reason = "write", writeErr
	default:
		return accessDenied{}, true
	}
	return accessDenied{fmt.Sprintf("cannot %s %s (%s): %v", verb, d.path, d.role, reason), need, d.path}, false
}

// existingParent is the nearest directory above path that exists; false
// when none does or the nearest thing there is not a directory (the
// daemon's MkdirAll says what is wrong then).
func existingParent(path string) (string, bool) {
	for parent := filepath.Dir(path); ; {
		fi, err := os.Stat(parent)
		switch {
		case err == nil:
			return parent, fi.IsDir()
		case !errors.Is(err, os.ErrNotExist):
			// Not searchable: the access check of the parent says so.
			return parent, true
		}
		up := filepath.Dir(parent)
		if up == parent {
			return "", false
		}
		parent = up
	}
}

// daemonHere refuses the daemon (run, and the demo that starts it) on an
// operator's Mac or Windows machine, saying what runs there instead: it
// serves a Linux node's devices, from its sysfs, over unix sockets (a
// Mac's temp dir and a pool's socket name alone exceed the 104 bytes it
// allows a socket's path). It refuses a 32-bit build too (armhf, 386):
// protoactor-go's process registry picks a PID's bucket with
// int(hash) % n, negative for half the hashes where int is 32 bits, so
// the daemon would panic as its first actors spawn. And a big-endian one
// (s390x): bbolt writes its pages in the machine's byte order, the
// ledger's checks read them little-endian, and would find its own file
// damaged.
func daemonHere() error {
	little := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	return daemonOn(runtime.GOOS, runtime.GOARCH, strconv.IntSize, little)
}

// daemonOn is daemonHere on the system goos names, on goarch, whose int
// has intSize bits, little-endian or not.
func daemonOn(goos, goarch string, intSize int, littleEndian bool) error {
	if goos == "linux" {
		if intSize < 64 || !littleEndian {
			return fmt.Errorf("the daemon needs a 64-bit little-endian build (amd64, arm64, ppc64le, riscv64), "+
				"not linux/%s: the actor library it is built on panics where int has 32 bits, and the ledger's "+
				"checks read bbolt's pages little-endian; dump, replay and ledger read a copy of a node's "+
				"ledger on an operator's machine, given with --db FILE", goarch)
		}
		return nil
	}
	name := map[string]string{"darwin": "macOS", "windows": "Windows"}[goos]
	if name == "" {
		name = goos
	}
	return fmt.Errorf("the daemon runs on a Linux node, not on %s: here, dump, replay and ledger "+
		"(backup, compact, salvage, acknowledge) read a copy of a node's ledger, given with --db FILE", name)
}

// errnoOf is the system's reason in a path error, whose text would name
// the path a second time.
func errnoOf(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// signalContext ends on SIGTERM, SIGINT or a signal of also, with the
// signal as its cause.
func signalContext(also ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, append([]os.Signal{syscall.SIGTERM, syscall.SIGINT}, also...)...)
	go func() {
		if sig, ok := <-ch; ok {
			cancel(fmt.Errorf("%s", strings.ToUpper(unixSignalName(sig))))
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}

func unixSignalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}
