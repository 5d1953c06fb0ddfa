// Package node is the root of devledger's actor tree: the node coordinator.
// It owns the configuration in force and the last scan, decides which device
// belongs to which pool (package config's selection), spawns one allocator
// per pool, and routes between its children: scans to pools, health verdicts
// to the pool of the device, served sockets to the registrar, kubelet and
// socket events to the registrar and the pools. Children are supervised with
// a doubling backoff that gives up loudly.
package node

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/health"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/actors/reconciler"
	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/actors/scanner"
	"github.com/devledger/devledger/actors/sockets"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/sysfs"
)

// Config is what the node coordinator needs.
type Config struct {
	Config   *config.Config
	Env      config.Env
	Reader   *sysfs.Reader
	Recorder *ledger.Recorder
	// Replayed is the ledger's state at start; a restarted node replays.
	Replayed *events.State
	// KubeletDir is the kubelet's root dir (/var/lib/kubelet).
	KubeletDir string
	Mode       grpcapi.RegistrationMode
	// AllocEnv is where device nodes are checked for Allocate answers.
	AllocEnv   allocation.Env
	DevinfoDir string
	// ScanInterval and ProbeInterval pace the scanner and the health
	// checker; zero means their defaults.
	ScanInterval  time.Duration
	ProbeInterval time.Duration
	CallTimeout   time.Duration
	// PodResources is the kubelet's PodResources service; Reconcile
	// configures the reconciler that reads it (its Recorder, Lister, Pools
	// and Replayed are filled in by the node).
	ObserveAllocate func(pool string, took time.Duration, err error)
	PodResources    reconciler.Lister
	Reconcile       reconciler.Config
	// Supervisor supervises the node's children.
	Supervisor actor.SupervisorStrategy
	Log        zerolog.Logger
}

// DevicePluginDir is the kubelet's legacy registration directory.
func DevicePluginDir(kubeletDir string) string {
	return filepath.Join(kubeletDir, "device-plugins")
}

// PluginsRegistryDir is the kubelet's plugin-watcher directory.
func PluginsRegistryDir(kubeletDir string) string {
	return filepath.Join(kubeletDir, "plugins_registry")
}

// KubeletSocket is the kubelet's registration socket.
func KubeletSocket(kubeletDir string) string {
	return filepath.Join(DevicePluginDir(kubeletDir), "kubelet.sock")
}

// SocketPath is where a pool serves: <prefix>_<name>.sock in the directory
// of the registration mode.
func SocketPath(kubeletDir string, mode grpcapi.RegistrationMode, resource string) string {
	dir := DevicePluginDir(kubeletDir)
	if mode == grpcapi.ModeWatcher {
		dir = PluginsRegistryDir(kubeletDir)
	}
	return filepath.Join(dir, strings.ReplaceAll(resource, "/", "_")+".sock")
}

// Props returns the props of the node coordinator.
func Props(cfg Config) *actor.Props {
	first := true
	opts := []actor.PropsOption{}
	if cfg.Supervisor != nil {
		opts = append(opts, actor.WithSupervisor(cfg.Supervisor))
	}
	return actor.PropsFromProducer(func() actor.Actor {
		n := &coordinator{cfg: cfg}
		if first {
			n.replayed = cfg.Replayed
			first = false
		}
		return n
	}, opts...)
}

type coordinator struct {
	cfg      Config
	replayed *events.State

	scanner, registrar, health, sockets, reconciler *actor.PID

	devices []sysfs.Device
	pools   map[string]*actor.PID
	members map[string][]allocation.Member
	// owner maps a pooled device to its pool.
	owner map[string]string
	// joinDriver is the driver a device had when it joined its pool.
	joinDriver map[string]string
	// socketOf maps a socket path to its pool.
	socketOf map[string]string
	// healthy is the last verdict per device.
	healthy map[string]bool
}

// Receive implements actor.Actor.
func (n *coordinator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		n.start(ctx)
	case *scanner.Scanned:
		n.scanned(ctx, m)
	case *pool.Serving:
		ctx.Send(n.registrar, &registrar.Desire{Pool: m.Pool, Socket: m.Socket})
	case *pool.KubeletReported:
		ctx.Send(n.registrar, &registrar.KubeletReported{Pool: m.Pool, Socket: m.Socket,
			InfoRequested: m.InfoRequested, Registered: m.Registered, Reason: m.Reason})
	case *pool.NeedMembers:
		if pid := n.pools[m.Pool]; pid != nil {
			ctx.Send(pid, &pool.SetMembers{Members: slices.Clone(n.members[m.Pool]), Reason: "pool restarted"})
		}
	case *sockets.Ready:
		// Said once, here, in both modes: the pools serve meanwhile, and
		// register (or are found by the plugin watcher) when it appears.
		if !m.KubeletPresent {
			sock := KubeletSocket(n.cfg.KubeletDir)
			n.cfg.Log.Warn().Str("socket", sock).Msg("waiting for kubelet at " + sock)
		}
	case *sockets.KubeletAppeared:
		ctx.Send(n.registrar, &registrar.KubeletAppeared{Socket: m.Socket})
	case *sockets.SocketRemoved:
		if name, ok := n.socketOf[m.Path]; ok {
			ctx.Send(n.registrar, &registrar.Undesire{Pool: name, Socket: m.Path, Lost: true})
			if pid := n.pools[name]; pid != nil {
				ctx.Send(pid, &pool.Reserve{Lost: m.Path})
			}
		}
	case *pool.AllocationRecorded:
		ctx.Send(n.reconciler, &reconciler.Allocated{Seq: m.Seq, Pool: m.Pool, DeviceIDs: m.DeviceIDs, At: m.At})
	case *reconciler.Released:
		if pid := n.pools[m.Pool]; pid != nil {
			ctx.Send(pid, &pool.Released{AllocationSeq: m.AllocationSeq})
		}
	case *registrar.SocketMissing:
		if pid := n.pools[m.Pool]; pid != nil {
			ctx.Send(pid, &pool.Reserve{Lost: m.Socket})
		}
	case *health.Verdict:
		n.healthy[m.Address] = m.Healthy
		if name, ok := n.owner[m.Address]; ok {
			ctx.Send(n.pools[name], &pool.SetHealth{Address: m.Address, Healthy: m.Healthy, Reason: m.Reason})
		}
	case *Rescan:
		ctx.Send(n.scanner, &scanner.Rescan{Reason: m.Reason})
	case *ProbeHealth:
		ctx.Send(n.health, &health.Probe{})
	case *Children:
		pools := make(map[string]*actor.PID, len(n.pools))
		for k, v := range n.pools {
			pools[k] = v
		}
		ctx.Respond(&ChildPIDs{Scanner: n.scanner, Registrar: n.registrar, Health: n.health, Sockets: n.sockets,
			Reconciler: n.reconciler, Pools: pools})
	}
}

func (n *coordinator) start(ctx actor.Context) {
	st := n.replayed
	if st == nil {
		s, err := n.cfg.Recorder.Replay()
		if err != nil {
			panic(fmt.Errorf("node: replay: %w", err))
		}
		st = &s
	}
	// Each child that folds gets its own copy: actors share no maps.
	n.replayed = st
	n.pools = map[string]*actor.PID{}
	n.members = map[string][]allocation.Member{}
	n.owner = map[string]string{}
	n.joinDriver = map[string]string{}
	n.socketOf = map[string]string{}
	n.healthy = map[string]bool{}
	for addr, d := range st.Devices {
		n.healthy[addr] = d.Healthy
	}
	log := n.cfg.Log
	kubeletSock := KubeletSocket(n.cfg.KubeletDir)
	n.registrar = ctx.Spawn(registrar.Props(registrar.Config{
		Recorder: n.cfg.Recorder, Mode: n.cfg.Mode, KubeletSocket: kubeletSock,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		Log:     log.With().Str("actor", "registrar").Logger(),
	}))
	dirs := []string{DevicePluginDir(n.cfg.KubeletDir)}
	if n.cfg.Mode == grpcapi.ModeWatcher {
		dirs = append(dirs, PluginsRegistryDir(n.cfg.KubeletDir))
	}
	n.sockets = ctx.Spawn(sockets.Props(sockets.Config{Dirs: dirs, KubeletSocket: kubeletSock,
		Log: log.With().Str("actor", "sockets").Logger()}))
	n.health = ctx.Spawn(health.Props(health.Config{Reader: n.cfg.Reader, Recorder: n.cfg.Recorder,
		Interval: n.cfg.ProbeInterval, Known: st.Clone().Devices, Log: log.With().Str("actor", "health").Logger()}))
	rc := n.cfg.Reconcile
	rc.Recorder, rc.Lister, rc.Replayed = n.cfg.Recorder, n.cfg.PodResources, st
	rc.Pools = nil
	for i := range n.cfg.Config.Resources {
		rc.Pools = append(rc.Pools, n.cfg.Config.Resources[i].FullName())
	}
	rc.Log = log.With().Str("actor", "reconciler").Logger()
	n.reconciler = ctx.Spawn(reconciler.Props(rc))
	n.scanner = ctx.Spawn(scanner.Props(scanner.Config{Reader: n.cfg.Reader, Recorder: n.cfg.Recorder,
		Known: st.Clone().Devices, Interval: n.cfg.ScanInterval, Log: log.With().Str("actor", "scanner").Logger()}))
}

// scanned places the scanned devices into pools, spawns the pools that do
// not run yet, gives the running ones their members, and tells the health
// checker what to probe.
func (n *coordinator) scanned(ctx actor.Context, m *scanner.Scanned) {
	n.devices = m.Devices
	sel := n.cfg.Config.Select(m.Devices, n.cfg.Env)
	byAddr := make(map[string]sysfs.Device, len(m.Devices))
	for _, d := range m.Devices {
		byAddr[d.Address] = d
	}
	owner := map[string]string{}
	var targets []health.Target
	for _, pm := range sel.Pools {
		ms := make([]allocation.Member, 0, len(pm.Members))
		for _, addr := range pm.Members {
			d, ok := byAddr[addr]
			if !ok {
				continue // an auxiliary device: its parent carries it
			}
			healthy, known := n.healthy[addr]
			if !known {
				healthy = true
			}
			ms = append(ms, allocation.Member{Device: d, Healthy: healthy})
			owner[addr] = pm.Name
			if prev, ok := n.owner[addr]; !ok || prev != pm.Name {
				n.joinDriver[addr] = d.Driver
			}
			targets = append(targets, health.Target{Address: addr, Driver: n.joinDriver[addr], VFIO: d.VFIODevice || d.Driver == "vfio-pci"})
		}
		n.members[pm.Name] = ms
		if pid, ok := n.pools[pm.Name]; ok {
			if m.Changed {
				ctx.Send(pid, &pool.SetMembers{Members: slices.Clone(ms), Reason: "scan: " + m.Reason})
			}
			continue
		}
		socket := SocketPath(n.cfg.KubeletDir, n.cfg.Mode, pm.Name)
		n.socketOf[socket] = pm.Name
		pid, err := ctx.SpawnNamed(pool.Props(pool.Config{
			Resource: pm.Resource, Members: slices.Clone(ms), Recorder: n.cfg.Recorder, Replayed: n.replayed,
			Socket: socket, Mode: n.cfg.Mode, Env: n.cfg.AllocEnv, DevinfoDir: n.cfg.DevinfoDir,
			CallTimeout: n.cfg.CallTimeout, ObserveAllocate: n.cfg.ObserveAllocate, Log: n.cfg.Log.With().Str("actor", "pool").Logger(),
		}), "pool-"+strings.ReplaceAll(pm.Name, "/", "_"))
		if err != nil {
			panic(fmt.Errorf("node: spawn pool %s: %w", pm.Name, err))
		}
		n.pools[pm.Name] = pid
	}
	for addr := range n.joinDriver {
		if _, ok := owner[addr]; !ok {
			delete(n.joinDriver, addr)
		}
	}
	n.owner = owner
	ctx.Send(n.health, &health.Watch{Targets: targets})
}
