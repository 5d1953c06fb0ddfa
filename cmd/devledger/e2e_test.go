package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// End-to-end tests: the real devledger binary, built once (see
// e2e_helpers_test.go), against fake sysfs trees and the kubelet stand-in,
// in both registration modes. Refresh the Allocate goldens with
// go test ./cmd/devledger -run TestE2E -update.

var modes = []string{"legacy", "watcher"}

// The pools of testdata/e2e/sriov.json on the "sriov" scenario.
const (
	vfioPool = "intel.com/sriov_vfio"
	netPool  = "intel.com/sriov_net"
	portPool = "intel.com/e810_port"
)

var sriovPools = []string{vfioPool, netPool, portPool}

// inBothModes runs test in parallel subtests, one per registration mode.
func inBothModes(t *testing.T, test func(t *testing.T, mode string)) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			test(t, mode)
		})
	}
}

func sriovNode(t *testing.T, mode string, kopts kubelettest.Options) *e2eNode {
	t.Helper()
	return newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: "testdata/e2e/sriov.json", mode: mode, kubelet: kopts})
}

// allocation is one Allocate whose answer a golden file pins.
type allocation struct {
	golden string
	pool   string
	ids    []string
	// devinfo: the answer comes with a device-info file per device.
	devinfo bool
}

// scenarioCase is a node and what the kubelet must see of it.
type scenarioCase struct {
	name     string
	scenario string
	config   string
	// devices per pool, as ListAndWatch lists them.
	devices map[string][]deviceView
	allocs  []allocation
	// preferred: from all of pool's devices, size of them with mustInclude.
	preferred *preferredCase
}

type preferredCase struct {
	pool        string
	mustInclude string
	size        int
	// sameNUMA: every device offered shares the must-include's NUMA node.
	numa int64
}

func healthy(id string, numa ...int64) deviceView {
	v := deviceView{ID: id, Health: pluginapi.Healthy}
	if numa != nil {
		v.NUMA = numa
	}
	return v
}

var scenarioCases = []scenarioCase{
	{
		name: "sriov", scenario: sysfsgen.ScenarioSRIOV, config: "testdata/e2e/sriov.json",
		devices: map[string][]deviceView{
			vfioPool: {healthy("0000:3b:01.2", 0), healthy("0000:3b:01.3", 0), healthy("0000:af:01.1", 1), healthy("0000:af:01.2", 1), healthy("0000:af:01.3", 1)},
			netPool:  {healthy("0000:3b:01.0", 0), healthy("0000:3b:01.1", 0), healthy("0000:af:01.0", 1)},
			// excludeTopology: no NUMA node, although sysfs knows it.
			portPool: {healthy("0000:3b:00.1")},
		},
		allocs: []allocation{
			{golden: "allocate_vfio", pool: vfioPool, ids: []string{"0000:3b:01.3", "0000:af:01.1"}},
			{golden: "allocate_netdevice", pool: netPool, ids: []string{"0000:3b:01.0"}, devinfo: true},
		},
		preferred: &preferredCase{pool: vfioPool, mustInclude: "0000:af:01.2", size: 2, numa: 1},
	},
	{
		name: "gpu", scenario: sysfsgen.ScenarioGPU, config: "../../testdata/config/scan/gpu.yaml",
		devices: map[string][]deviceView{
			"nvidia.com/h100_vfio": {healthy("0000:9a:00.0", 1), healthy("0000:ab:00.0", 1)},
		},
		allocs: []allocation{
			{golden: "allocate_gpu", pool: "nvidia.com/h100_vfio", ids: []string{"0000:ab:00.0"}},
		},
	},
}

// TestE2EServesTheKubelet: registration (mode chosen by --registration
// auto), the device lists with their NUMA topology, GetPreferredAllocation,
// Allocate answers pinned by golden files and recorded in the ledger, file
// modes.
func TestE2EServesTheKubelet(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarioCases {
		for _, mode := range modes {
			t.Run(sc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				n := newE2ENode(t, nodeSpec{scenario: sc.scenario, config: sc.config, mode: mode})
				n.registration = "auto" // must pick mode: the stand-in makes plugins_registry/ in watcher mode only
				pools := slices.Sorted(maps.Keys(sc.devices))
				n.startRegistered(t, pools)
				ctx := e2eCtx(t)

				for _, res := range pools {
					reg, err := n.kubelet.WaitRegistered(ctx, res)
					if err != nil {
						t.Fatal(err)
					}
					if string(reg.Mode) != mode || reg.Endpoint != n.socketPath(t, res) {
						t.Errorf("%s registered in %s mode at %s, want %s mode at %s", res, reg.Mode, reg.Endpoint, mode, n.socketPath(t, res))
					}
					if !reg.Options.GetGetPreferredAllocationAvailable() {
						t.Errorf("%s: options %v do not offer GetPreferredAllocation", res, reg.Options)
					}
					checkMode(t, n.socketPath(t, res), 0o600)
					want := sc.devices[res]
					devs, err := n.kubelet.WaitDevices(ctx, res, func(ds []*pluginapi.Device) bool { return len(ds) == len(want) })
					if err != nil {
						t.Fatal(err)
					}
					if got := viewDevices(devs); !reflect.DeepEqual(got, want) {
						t.Errorf("%s lists\n%+v\nwant\n%+v", res, got, want)
					}
				}
				checkMode(t, n.stateDir, 0o700|os.ModeDir)
				checkMode(t, grpcapi.AdminSocketPath(n.stateDir), 0o600)
				checkMode(t, n.ledgerPath(), 0o600)

				if pc := sc.preferred; pc != nil {
					var all []string
					for _, d := range sc.devices[pc.pool] {
						all = append(all, d.ID)
					}
					resp, err := n.kubelet.GetPreferredAllocation(ctx, pc.pool, all, []string{pc.mustInclude}, pc.size)
					if err != nil {
						t.Fatal(err)
					}
					got := resp.ContainerResponses[0].DeviceIDs
					if len(got) != pc.size || !slices.Contains(got, pc.mustInclude) {
						t.Errorf("preferred %v: want %d devices including %s", got, pc.size, pc.mustInclude)
					}
					for _, id := range got {
						for _, d := range sc.devices[pc.pool] {
							if d.ID == id && !slices.Equal(d.NUMA, []int64{pc.numa}) {
								t.Errorf("preferred %v: %s is not on NUMA node %d with %s", got, id, pc.numa, pc.mustInclude)
							}
						}
					}
				}

				before := lastSeq(n.ledgerEvents(t))
				for _, a := range sc.allocs {
					resp, err := n.kubelet.Allocate(ctx, a.pool, a.ids)
					if err != nil {
						t.Fatalf("Allocate %s %v: %v", a.pool, a.ids, err)
					}
					golden := map[string]any{"request": a.ids, "response": resp.ContainerResponses}
					if a.devinfo {
						files := map[string]json.RawMessage{}
						for _, id := range a.ids {
							name := fmt.Sprintf("%s-%s-device.json", strings.ReplaceAll(a.pool, "/", "-"), id)
							b, err := os.ReadFile(filepath.Join(n.devinfo, name))
							if err != nil {
								t.Fatalf("device-info file: %v", err)
							}
							files[name] = b
						}
						golden["devinfo"] = files
					}
					checkGoldenE2E(t, a.golden, jsonIndent(t, golden))

					// The answer the kubelet got is the one the ledger holds.
					envs := n.ledgerEvents(t)
					var rec *events.DevicesAllocated
					for _, e := range since(envs, before) {
						if da, ok := e.Payload.(events.DevicesAllocated); ok && slices.Equal(da.DeviceIDs, a.ids) {
							rec = &da
						}
					}
					if rec == nil {
						t.Fatalf("no DevicesAllocated of %v in the ledger:\n%s", a.ids, describeEnvs(envs))
					}
					if !reflect.DeepEqual(rec.Response.Envs, resp.ContainerResponses[0].Envs) || rec.Pool != a.pool {
						t.Errorf("ledger holds %+v for %s, the kubelet got %v", rec.Response.Envs, rec.Pool, resp.ContainerResponses[0].Envs)
					}
				}
			})
		}
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if got := fi.Mode() & (os.ModePerm | os.ModeDir); got != want {
		t.Errorf("%s has mode %v, want %v", filepath.Base(path), got, want)
	}
}

// TestE2EKubeletRestart: a kubelet restart empties device-plugins/ and
// makes a new kubelet.sock; every pool is registered again, its devices
// listed again, and the ledger tells the story.
func TestE2EKubeletRestart(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode string) {
		n := sriovNode(t, mode, kubelettest.Options{})
		_, mark := n.startRegistered(t, sriovPools)
		ctx := e2eCtx(t)

		if err := n.kubelet.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := n.kubelet.RegisteredAfter(ctx, sriovPools, n.kubelet.BootedAt()); err != nil {
			t.Fatal(err)
		}
		for _, res := range sriovPools {
			if _, err := n.kubelet.WaitDevices(ctx, res, func(ds []*pluginapi.Device) bool { return len(ds) > 0 }); err != nil {
				t.Fatal(err)
			}
		}
		n.waitLedger(t, "the restart recorded", func(envs []events.Envelope) bool {
			after := since(envs, mark)
			if len(poolsWith(after, events.TypeKubeletRestarted)) == 0 || !hasAll(after, events.TypePluginRegistered, sriovPools) {
				return false
			}
			if mode == "watcher" {
				// plugins_registry/ is not emptied: the sockets stay,
				// the new kubelet's watcher finds them.
				return true
			}
			return hasAll(after, events.TypeSocketLost, sriovPools) && hasAll(after, events.TypePluginServing, sriovPools)
		})
	})
}

// TestE2ESocketDeleted: our socket removed by hand is re-created (0600)
// and registered again.
func TestE2ESocketDeleted(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode string) {
		n := sriovNode(t, mode, kubelettest.Options{})
		_, mark := n.startRegistered(t, sriovPools)
		ctx := e2eCtx(t)

		at := time.Now()
		if err := os.Remove(n.socketPath(t, netPool)); err != nil {
			t.Fatal(err)
		}
		// The pool serves on a new socket, which is registered (legacy)
		// or found by the plugin watcher, which also deregisters the
		// removed one.
		regs, err := n.kubelet.RegisteredAfter(ctx, []string{netPool}, at)
		if err != nil {
			t.Fatal(err)
		}
		n.waitLedger(t, "the socket re-created", func(envs []events.Envelope) bool {
			return hasAll(since(envs, mark), events.TypePluginServing, []string{netPool})
		})
		if sock := n.socketPath(t, netPool); regs[0].Endpoint != sock {
			t.Errorf("the kubelet registered %s, want the new socket %s", regs[0].Endpoint, sock)
		}
		checkMode(t, n.socketPath(t, netPool), 0o600)
		if _, err := n.kubelet.Allocate(ctx, netPool, []string{"0000:3b:01.1"}); err != nil {
			t.Fatalf("Allocate through the re-created socket: %v", err)
		}
		n.waitLedger(t, "SocketLost, PluginServing, PluginRegistered", func(envs []events.Envelope) bool {
			after := since(envs, mark)
			return hasAll(after, events.TypeSocketLost, []string{netPool}) &&
				hasAll(after, events.TypePluginServing, []string{netPool}) &&
				hasAll(after, events.TypePluginRegistered, []string{netPool})
		})
		// The pool serves on a new socket, which nothing holds: no
		// Register is refused.
		if rej := n.kubelet.Rejections(); len(rej) > 0 {
			t.Errorf("the kubelet refused %d registrations, first: %s", len(rej), rej[0].Reason)
		}
	})
}

// TestE2ESIGKILLThenRestart: a daemon killed at a random moment loses
// nothing: the state replayed after the next start's compensation is the
// state at the kill, except for what a new run changes by definition, and
// every pool is registered again.
func TestE2ESIGKILLThenRestart(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode string) {
		n := sriovNode(t, mode, kubelettest.Options{})
		p, _ := n.startRegistered(t, sriovPools)
		ctx := e2eCtx(t)
		for _, a := range []struct {
			pool string
			ids  []string
		}{{vfioPool, []string{"0000:3b:01.2", "0000:af:01.3"}}, {netPool, []string{"0000:af:01.0"}}, {portPool, []string{"0000:3b:00.1"}}} {
			if _, err := n.kubelet.Allocate(ctx, a.pool, a.ids); err != nil {
				t.Fatal(err)
			}
		}

		// replay needs the file lock, so "before" is read once the
		// process is gone; SIGKILL writes nothing, so it is the state
		// the daemon had.
		p.kill(t)
		killed := time.Now()
		before := replayJSON(t, n)
		if len(before.Allocations) != 3 {
			t.Fatalf("%d live allocations before the restart, want 3", len(before.Allocations))
		}
		// It recorded no stop: the ledger has it running, and replay,
		// which no daemon holds the file from, says it is not, and since
		// when, as the next start will record it: the later of its last
		// event and its pid file's mark (here made older than the event),
		// in JSON as in the table, with no pool served or registered; of
		// a copy, it cannot tell.
		if d := before.Daemon; d.Running || d.Crashes != 1 || d.StoppedAt.Before(d.LastAt) || d.StoppedAt.After(killed) {
			t.Errorf("replay --format json of a killed daemon's state dir: %+v, want it not running, crashed once, last alive after its last event, before the kill", d)
		}
		for name, p := range before.Pools {
			if p.Registration.Serving || p.Registration.Registered {
				t.Errorf("replay --format json of a killed daemon's state dir: pool %s %+v, want it neither served nor registered", name, p.Registration)
			}
		}
		old := before.Daemon.LastAt.Add(-time.Hour)
		if err := os.Chtimes(filepath.Join(n.stateDir, "devledger.pid"), old, old); err != nil {
			t.Fatal(err)
		}
		want := "and ended with no stop recorded (crashed or killed), last alive " + before.Daemon.LastAt.UTC().Format(time.RFC3339)
		if out := cliOK(t, "replay", "--state-dir", n.stateDir); !strings.Contains(out, want) {
			t.Errorf("replay of a killed daemon's state dir, want %q:\n%s", want, out)
		}
		// So do a point after it was last alive and the end of --diff.
		later := time.Now().UTC().Format(time.RFC3339Nano)
		if out := cliOK(t, "replay", "--state-dir", n.stateDir, "--until-time", later); !strings.Contains(out, want) || strings.Contains(out, "registered (") {
			t.Errorf("replay --until-time after a killed daemon was last alive, want %q and no pool registered:\n%s", want, out)
		}
		var diff struct {
			Daemon struct {
				Then bool `json:"running_then"`
				Now  bool `json:"running_now"`
			} `json:"daemon"`
		}
		if out := cliOK(t, "replay", "--state-dir", n.stateDir, "--diff", "#1..", "--format", "json"); json.Unmarshal([]byte(out), &diff) != nil || !diff.Daemon.Then || diff.Daemon.Now {
			t.Errorf("replay --diff #1.. of a killed daemon's state dir, want it running then, not now:\n%s", out)
		}
		copied := filepath.Join(t.TempDir(), "copy.db")
		if data, err := os.ReadFile(n.ledgerPath()); err != nil {
			t.Fatal(err)
		} else if err := os.WriteFile(copied, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if out := cliOK(t, "replay", "--db", copied); !strings.Contains(out, "in this copy (a run killed before it recorded its stop reads the same)") {
			t.Errorf("replay of a copy of a killed daemon's ledger:\n%s", out)
		}

		p2 := n.start(t)
		if _, err := n.kubelet.RegisteredAfter(ctx, sriovPools, killed); err != nil {
			t.Fatalf("%v\n%s", err, p2.stderr.String())
		}
		n.waitLedger(t, "the restart's compensation", func(envs []events.Envelope) bool {
			after := since(envs, bootStart(envs))
			return hasAll(after, events.TypePluginServing, sriovPools) && hasAll(after, events.TypePluginRegistered, sriovPools)
		})
		// The same again: the ledger as the compensated run left it.
		p2.kill(t)
		after := replayJSON(t, n)

		// Killed again: the first crash recorded, the second told.
		if after.Daemon.Starts != before.Daemon.Starts+1 || after.Daemon.BootID == before.Daemon.BootID || after.Daemon.Running ||
			after.Daemon.Crashes != before.Daemon.Crashes+1 {
			t.Errorf("daemon after the restart: %+v; before: %+v", after.Daemon, before.Daemon)
		}
		// When did it crash? The restart recorded it: after its last
		// event, before the kill.
		var crash *events.DaemonCrashed
		for _, e := range n.ledgerEvents(t) {
			if c, ok := e.Payload.(events.DaemonCrashed); ok {
				crash = &c
			}
		}
		if crash == nil || crash.BootID != before.Daemon.BootID || crash.LastSeq != before.Seq ||
			crash.LastAlive.Before(before.Time) || crash.LastAlive.After(killed) {
			t.Errorf("DaemonCrashed %+v; the run killed was boot %s at #%d, last event at %s, killed at %s",
				crash, before.Daemon.BootID, before.Seq, before.Time, killed)
		}
		normalizeRun(&before)
		normalizeRun(&after)
		if !reflect.DeepEqual(before, after) {
			b, _ := json.MarshalIndent(before, "", "  ")
			a, _ := json.MarshalIndent(after, "", "  ")
			t.Errorf("state after the restart differs from the state at the kill:\n--- before:\n%s\n--- after:\n%s", b, a)
		}
	})
}

// replayJSON runs devledger replay --format json on the node's (unlocked)
// ledger.
func replayJSON(t *testing.T, n *e2eNode) events.State {
	t.Helper()
	out := cliOK(t, "replay", "--state-dir", n.stateDir, "--format", "json")
	var s events.State
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("replay output: %v\n%s", err, out)
	}
	return s
}

// normalizeRun blanks what differs between two runs of the daemon by
// definition:
//   - seq and time: the new run appended its own events (DaemonStarted,
//     PluginServing, PluginRegistered);
//   - daemon: a new boot id, start time and start count (checked apart);
//   - each pool's registered_at: the new run registered it again.
//
// Everything else (config, devices, pools and their members, socket, mode
// and registration, allocations and holders, kubelet restarts) must be
// equal.
func normalizeRun(s *events.State) {
	s.Seq, s.Time = 0, time.Time{}
	s.Daemon = events.DaemonState{}
	for name, p := range s.Pools {
		// Each run serves under socket names of its own: the directory
		// and the pool's part of the name stay.
		p.Registration.RegisteredAt = time.Time{}
		if dir, file := filepath.Split(p.Registration.Socket); pool.IsSocketName(name, file) {
			p.Registration.Socket = dir + pool.SocketBase(name) + ".*.sock"
		}
		s.Pools[name] = p
	}
}

// TestE2ESIGTERM: an orderly stop removes every socket we made, records
// DaemonStopped and a snapshot; dump reads the live ledger through the
// admin socket and prints what it prints offline afterwards.
func TestE2ESIGTERM(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode string) {
		n := sriovNode(t, mode, kubelettest.Options{})
		p, _ := n.startRegistered(t, sriovPools)
		ctx := e2eCtx(t)
		if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{"0000:3b:01.3"}); err != nil {
			t.Fatal(err)
		}
		liveTable := cliOK(t, "dump", "--state-dir", n.stateDir)
		liveJSONL := cliOK(t, "dump", "--state-dir", n.stateDir, "--format", "jsonl")
		// replay works on a live node too, folding what the admin socket
		// serves; --verify needs the file and says so.
		liveState := cliOK(t, "replay", "--state-dir", n.stateDir)
		if !strings.Contains(liveState, "0000:3b:01.3") || !strings.Contains(liveState, "LIVE ALLOCATIONS (1)") {
			t.Errorf("replay on the live node:\n%s", liveState)
		}
		if code, _, stderr := cli(t, "replay", "--state-dir", n.stateDir, "--verify"); code != exitUsage || !strings.Contains(stderr, "--verify") {
			t.Errorf("replay --verify on a live node: exit %d, %q", code, stderr)
		}

		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != exitOK {
			t.Fatalf("SIGTERM: exit %d\n%s", code, p.stderr.String())
		}
		for _, dir := range []string{n.kubelet.DevicePluginDir(), n.kubelet.PluginsRegistryDir()} {
			for _, s := range sockets(t, dir) {
				if s != kubelettest.KubeletSocketName {
					t.Errorf("%s left behind in %s", s, filepath.Base(dir))
				}
			}
		}
		if s := sockets(t, n.stateDir); len(s) > 0 {
			t.Errorf("%v left behind in the state dir", s)
		}
		if _, err := os.Stat(filepath.Join(n.stateDir, "devledger.pid")); !os.IsNotExist(err) {
			t.Errorf("pid file left behind: %v", err)
		}

		envs := n.ledgerEvents(t)
		if k := len(envs); k < 2 || envs[k-2].Type != events.TypeDaemonStopped || envs[k-1].Type != events.TypeSnapshotTaken {
			t.Fatalf("the ledger does not end with DaemonStopped, SnapshotTaken:\n%s", describeEnvs(envs))
		}
		if ds := envs[len(envs)-2].Payload.(events.DaemonStopped); !ds.Clean || !strings.Contains(ds.Reason, "SIGTERM") {
			t.Errorf("DaemonStopped %+v: want clean, for SIGTERM", ds)
		}
		st := replayJSON(t, n)
		if st.Daemon.Running || len(st.Allocations) != 1 {
			t.Errorf("replayed after stop: running %v, %d live allocations; want stopped, 1", st.Daemon.Running, len(st.Allocations))
		}
		// replay names when it stopped: the DaemonStopped's time, not the
		// start's.
		if !st.Daemon.StoppedAt.Equal(envs[len(envs)-2].Time) {
			t.Errorf("replayed stop time %s, DaemonStopped at %s", st.Daemon.StoppedAt, envs[len(envs)-2].Time)
		}
		stoppedAt := envs[len(envs)-2].Time.UTC().Format(time.RFC3339)
		if text := cliOK(t, "replay", "--state-dir", n.stateDir); !strings.Contains(text, "stopped since "+stoppedAt) {
			t.Errorf("replay after the stop at %s says:\n%s", stoppedAt, text)
		}

		// Offline, dump prints what it printed live, and then what the
		// stop appended.
		offTable := cliOK(t, "dump", "--state-dir", n.stateDir)
		offJSONL := cliOK(t, "dump", "--state-dir", n.stateDir, "--format", "jsonl")
		if !strings.HasPrefix(offJSONL, liveJSONL) {
			t.Errorf("dump --format jsonl: live output is not the start of the offline one\n--- live:\n%s--- offline:\n%s", liveJSONL, offJSONL)
		}
		if !strings.HasPrefix(offTable, liveTable) {
			t.Errorf("dump: live output is not the start of the offline one\n--- live:\n%s--- offline:\n%s", liveTable, offTable)
		}
	})
}

// countEvents counts the ledger's events with the binary, through the admin
// socket of the running daemon.
func countEvents(t *testing.T, n *e2eNode) int {
	t.Helper()
	return strings.Count(cliOK(t, "dump", "--state-dir", n.stateDir, "--format", "jsonl"), "\n")
}

// TestE2EAllocateBadInput: the kubelet asking for what the pool does not
// have gets InvalidArgument naming the culprit, and nothing is recorded.
func TestE2EAllocateBadInput(t *testing.T) {
	t.Parallel()
	n := sriovNode(t, "legacy", kubelettest.Options{})
	n.startRegistered(t, sriovPools)
	ctx := e2eCtx(t)
	cases := []struct {
		name       string
		containers [][]string
		mention    string
	}{
		{"unknown device", [][]string{{"0000:3b:01.2", "0000:99:00.0"}}, "0000:99:00.0"},
		{"device of another pool", [][]string{{"0000:3b:01.0"}}, "0000:3b:01.0"},
		{"not a PCI address", [][]string{{"gpu-0"}}, "gpu-0"},
		{"zero containers", nil, "no container requests"},
		{"container without devices", [][]string{{"0000:3b:01.2"}, {}}, "container request 1"},
		{"one device in two containers", [][]string{{"0000:3b:01.2"}, {"0000:3b:01.2"}}, "0000:3b:01.2"},
		{"one device twice in a container", [][]string{{"0000:3b:01.3", "0000:3b:01.3"}}, "0000:3b:01.3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := countEvents(t, n)
			_, err := n.kubelet.Allocate(ctx, vfioPool, tc.containers...)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.mention) {
				t.Errorf("Allocate: %v; want InvalidArgument naming %q", err, tc.mention)
			}
			if after := countEvents(t, n); after != before {
				t.Errorf("the ledger went from %d to %d events", before, after)
			}
		})
	}
}

// TestE2EAllocateSupersedes: a device the ledger holds for a live
// allocation is allocated again. The kubelet hands out only devices it
// holds free, so the old holder is gone: the new allocation's own event
// says it supersedes the old one, which the fold releases, and no conflict
// is recorded.
func TestE2EAllocateSupersedes(t *testing.T) {
	t.Parallel()
	n := sriovNode(t, "legacy", kubelettest.Options{})
	n.startRegistered(t, sriovPools)
	ctx := e2eCtx(t)
	const dev = "0000:af:01.2"
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev}); err != nil {
		t.Fatal(err)
	}
	second, err := n.kubelet.Allocate(ctx, vfioPool, []string{dev, "0000:af:01.3"})
	if err != nil {
		t.Fatalf("second Allocate of %s: %v", dev, err)
	}
	if second.ContainerResponses[0].Envs == nil {
		t.Fatalf("empty answer: %v", second)
	}
	envs := n.waitLedger(t, "two allocations", func(envs []events.Envelope) bool {
		return poolsWith(envs, events.TypeDevicesAllocated)[vfioPool] == 2
	})
	var allocs []events.Envelope
	st := events.NewState()
	for _, e := range envs {
		st = events.Apply(st, e)
		if p, ok := e.Payload.(events.DevicesAllocated); ok && slices.Contains(p.DeviceIDs, dev) {
			allocs = append(allocs, e)
		}
		if e.Type == events.TypeAllocationConflict {
			t.Errorf("conflict recorded: %+v", e.Payload)
		}
	}
	if len(allocs) != 2 {
		t.Fatalf("%d DevicesAllocated hold %s, want 2:\n%s", len(allocs), dev, describeEnvs(envs))
	}
	if p := allocs[1].Payload.(events.DevicesAllocated); !slices.Equal(p.Supersedes, []uint64{allocs[0].Seq}) {
		t.Errorf("the second allocation supersedes %v, want [%d]", p.Supersedes, allocs[0].Seq)
	}
	if _, live := st.Allocations[allocs[0].Seq]; live || !slices.Equal(st.Holders[dev], []uint64{allocs[1].Seq}) {
		t.Errorf("fold: live %v, holders of %s %v; want only #%d", slices.Sorted(maps.Keys(st.Allocations)), dev, st.Holders[dev], allocs[1].Seq)
	}
}

// TestE2ENoKubeletAtStart: without kubelet.sock the daemon serves anyway,
// says once that it waits, and registers as soon as the kubelet starts.
func TestE2ENoKubeletAtStart(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode string) {
		n := sriovNode(t, mode, kubelettest.Options{Delayed: true})
		p := n.start(t)
		ctx := e2eCtx(t)
		waiting := "waiting for kubelet at " + n.kubelet.RegistrationSocket()
		if err := p.stderr.waitFor(ctx, waiting); err != nil {
			t.Fatalf("%v\n%s", err, p.stderr.String())
		}
		n.waitLedger(t, "every pool serving", func(envs []events.Envelope) bool {
			return hasAll(envs, events.TypePluginServing, sriovPools)
		})
		for _, res := range sriovPools {
			if _, err := os.Stat(n.socketPath(t, res)); err != nil {
				t.Errorf("%s does not serve: %v", res, err)
			}
		}
		if regs := n.kubelet.Registrations(); len(regs) > 0 {
			t.Fatalf("registered with a kubelet that is down: %+v", regs)
		}

		if err := n.kubelet.Boot(); err != nil {
			t.Fatal(err)
		}
		if _, err := n.kubelet.RegisteredAfter(ctx, sriovPools, n.kubelet.BootedAt()); err != nil {
			t.Fatal(err)
		}
		if c := strings.Count(p.stderr.String(), "waiting for kubelet at"); c != 1 {
			t.Errorf("said %d times that it waits for the kubelet, want once", c)
		}
	})
}

// TestE2EStartRefused: what must stop the daemon before it serves
// anything, and the exit code and words it stops with.
func TestE2EStartRefused(t *testing.T) {
	t.Parallel()
	t.Run("state dir cannot be made", func(t *testing.T) {
		t.Parallel()
		n := sriovNode(t, "legacy", kubelettest.Options{})
		// Under a regular file, MkdirAll fails whoever runs it (root
		// ignores permission bits, not file types).
		file := filepath.Join(filepath.Dir(n.stateDir), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		n.stateDir = filepath.Join(file, "state")
		p := n.start(t)
		if code := p.wait(t); code != exitFailure {
			t.Errorf("exit %d, want %d", code, exitFailure)
		}
		if log := p.stderr.String(); !strings.Contains(log, n.stateDir) {
			t.Errorf("the error does not name %s:\n%s", n.stateDir, log)
		}
		checkNothingServed(t, n)
	})
	t.Run("ledger locked by another daemon", func(t *testing.T) {
		t.Parallel()
		n := sriovNode(t, "legacy", kubelettest.Options{})
		first, _ := n.startRegistered(t, sriovPools)
		since := time.Now()
		second := n.start(t)
		if code := second.wait(t); code != exitFailure {
			t.Errorf("exit %d, want %d", code, exitFailure)
		}
		log := second.stderr.String()
		for _, want := range []string{n.ledgerPath(), fmt.Sprintf("pid %d", first.pid())} {
			if !strings.Contains(log, want) {
				t.Errorf("the error does not name %q:\n%s", want, log)
			}
		}
		// The first daemon is untouched: its sockets are there and the
		// kubelet saw no new registration.
		for _, res := range sriovPools {
			if _, err := os.Stat(n.socketPath(t, res)); err != nil {
				t.Errorf("%s: %v", res, err)
			}
		}
		for _, r := range n.kubelet.Registrations() {
			if r.At.After(since) {
				t.Errorf("a registration after the second start: %+v", r)
			}
		}
		if _, err := n.kubelet.Allocate(e2eCtx(t), vfioPool, []string{"0000:3b:01.2"}); err != nil {
			t.Errorf("the first daemon stopped serving: %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		t.Parallel()
		n := newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: "testdata/e2e/bad.json", mode: "legacy"})
		p := n.start(t)
		if code := p.wait(t); code != exitUsage {
			t.Errorf("exit %d, want %d", code, exitUsage)
		}
		if log := p.stderr.String(); !strings.Contains(log, "resourceList[0].deviceType") || !strings.Contains(log, n.config) {
			t.Errorf("the error does not name the file and the field:\n%s", log)
		}
		checkNothingServed(t, n)
		// The refused start is in the ledger, and the run is over.
		st := replayJSON(t, n)
		if st.Daemon.Running || st.Config.Rejections != 1 {
			t.Errorf("replayed after a refused config: running %v, %d rejections; want stopped, 1", st.Daemon.Running, st.Config.Rejections)
		}
	})
}

// checkNothingServed: no socket of ours in the kubelet's dirs.
func checkNothingServed(t *testing.T, n *e2eNode) {
	t.Helper()
	for _, s := range sockets(t, n.kubelet.DevicePluginDir()) {
		if s != kubelettest.KubeletSocketName {
			t.Errorf("%s served by a daemon that refused to start", s)
		}
	}
	if regs := n.kubelet.Registrations(); len(regs) > 0 {
		t.Errorf("registered by a daemon that refused to start: %+v", regs)
	}
}

// TestE2ELedgerUnwritable: when the ledger cannot be written, Allocate
// answers Unavailable and nothing is acknowledged; the pools keep serving
// the kubelet (a kubelet restart meanwhile still ends with every pool
// registered and listed); once the ledger can be written again, so can
// allocations.
func TestE2ELedgerUnwritable(t *testing.T) {
	t.Parallel()
	n := sriovNode(t, "legacy", kubelettest.Options{})
	p, _ := n.startRegistered(t, sriovPools)
	ctx := e2eCtx(t)
	// Two pages: bbolt's meta pages stay writable, no data page is.
	restore, err := limitFileSize(p.pid(), 8192)
	if err != nil {
		t.Skipf("cannot limit the daemon's file size: %v", err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			restore()
		}
	})
	before := countEvents(t, n)

	const refused = "0000:3b:01.2"
	_, err = n.kubelet.Allocate(ctx, vfioPool, []string{refused})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "ledger could not record") {
		t.Fatalf("Allocate with the ledger unwritable: %v, want Unavailable saying the ledger could not record it", err)
	}
	// The pools still serve: the stream is up, and a new kubelet gets
	// every pool registered and listed.
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	if err := n.kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.RegisteredAfter(ctx, sriovPools, n.kubelet.BootedAt()); err != nil {
		t.Fatal(err)
	}
	devs, err := n.kubelet.WaitDevices(ctx, vfioPool, func(ds []*pluginapi.Device) bool { return len(ds) == 5 })
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Health != pluginapi.Healthy {
			t.Errorf("%s listed %s while the ledger is unwritable", d.ID, d.Health)
		}
	}
	if after := countEvents(t, n); after != before {
		t.Errorf("the ledger went from %d to %d events while unwritable", before, after)
	}

	if err := restore(); err != nil {
		t.Fatal(err)
	}
	restored = true
	const granted = "0000:3b:01.3"
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{granted}); err != nil {
		t.Fatalf("Allocate once the ledger is writable again: %v", err)
	}
	for _, e := range n.ledgerEvents(t) {
		if da, ok := e.Payload.(events.DevicesAllocated); ok && slices.Contains(da.DeviceIDs, refused) {
			t.Errorf("the refused allocation of %s is in the ledger as #%d", refused, e.Seq)
		}
	}
	if !slices.ContainsFunc(n.ledgerEvents(t), func(e events.Envelope) bool {
		da, ok := e.Payload.(events.DevicesAllocated)
		return ok && slices.Contains(da.DeviceIDs, granted)
	}) {
		t.Errorf("the allocation of %s is not in the ledger", granted)
	}
}
