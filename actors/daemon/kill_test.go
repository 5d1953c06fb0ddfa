package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// killed is what a killed daemon left: the ledger as of its last commit,
// and the Allocates it answered before it fell.
type killed struct {
	bootID string
	// lastSeq is the ledger's last event at the kill.
	lastSeq uint64
	// since is the ledger's last event before the Allocates began.
	since uint64
	// answered are the Allocates answered before the kill: "pool id".
	answered []string
}

// kill leaves n's state dir and sockets as a SIGKILL of d would: the
// ledger as of a commit (none half written, none after), the pid file as
// the run last touched it, and every socket the run served still on disk,
// answered by nobody. A few Allocates, drawn with rng, are on their way
// when it falls.
//
// A process cannot SIGKILL itself and go on: the store's writer is held
// (a guarded append whose check waits) while the files are copied, the
// Allocates not answered by then give up (their callers see the call
// fail, as the kubelet sees a dead plugin's), and d stops; then the
// copies replace what its stop wrote, and stale sockets what it removed.
func kill(ctx context.Context, t *testing.T, n *testNode, d *Daemon, rng *rand.Rand, pools []string) killed {
	t.Helper()
	log := d.rec.Log()
	k := killed{since: log.LastSeq()}
	calls, giveUp := context.WithCancel(ctx)
	defer giveUp()
	type call struct {
		pool, id string
		err      error
	}
	out := make([]call, rng.IntN(4))
	var wg sync.WaitGroup
	for i := range out {
		res := pools[rng.IntN(len(pools))]
		devs := n.kubelet.Devices(res)
		if len(devs) == 0 {
			out[i].err = errors.New("no devices")
			continue
		}
		out[i].pool, out[i].id = res, devs[rng.IntN(len(devs))].ID
		wg.Go(func() { _, out[i].err = n.kubelet.Allocate(calls, res, []string{out[i].id}) })
	}
	// Some land before the kill, some are in the batch it cuts short,
	// some not yet handed to the writer.
	time.Sleep(time.Duration(rng.IntN(8000)) * time.Microsecond)

	release := holdWriter(ctx, t, log)
	k.lastSeq = log.LastSeq()
	k.bootID = d.rec.BootID()
	files := []saved{save(t, filepath.Join(n.opts.StateDir, LedgerFileName)), save(t, filepath.Join(n.opts.StateDir, PIDFileName))}
	sockets := socketsIn(t, filepath.Join(n.opts.KubeletDir, kubelettest.DevicePluginsDir), n.opts.StateDir)

	giveUp()
	wg.Wait()
	for _, c := range out {
		if c.err == nil {
			k.answered = append(k.answered, c.pool+" "+c.id)
		}
	}
	release()
	if err := d.Stop(ctx, "model kill"); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.restore(t)
	}
	for _, path := range sockets {
		staleSocket(t, path)
	}
	return k
}

// checkKillRecovered checks what the start after k found: the killed run's
// end recorded as a crash at its last event, and every Allocate answered
// before the kill in the ledger it read.
func checkKillRecovered(t *testing.T, d *Daemon, k killed) string {
	t.Helper()
	var b strings.Builder
	granted := map[string]bool{}
	var first *events.Envelope
	err := d.rec.Log().Read(k.since+1, func(e events.Envelope) error {
		if a, ok := e.Payload.(events.DevicesAllocated); ok && e.Seq <= k.lastSeq {
			for _, id := range a.DeviceIDs {
				granted[a.Pool+" "+id] = true
			}
		}
		if e.Seq == k.lastSeq+1 {
			first = &e
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range k.answered {
		if !granted[a] {
			fmt.Fprintf(&b, "Allocate %s was answered before the kill; the ledger at #%d has no such grant\n", a, k.lastSeq)
		}
	}
	var c events.DaemonCrashed
	if first != nil {
		c, _ = first.Payload.(events.DaemonCrashed)
	}
	if c.BootID != k.bootID || c.LastSeq != k.lastSeq {
		fmt.Fprintf(&b, "after the kill at #%d (boot %s) the restart recorded %+v first, want DaemonCrashed of that boot at that seq\n", k.lastSeq, k.bootID, first)
	}
	return b.String()
}

// socketsIn lists the unix sockets in dirs, the kubelet's own left out.
func socketsIn(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Type()&os.ModeSocket != 0 && e.Name() != kubelettest.KubeletSocketName {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out
}

// staleSocket leaves a socket file at path that nobody listens on, as a
// killed process leaves its own.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		return
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// saved is a file as it was: its bytes, mode and modification time (the
// pid file's tells when the run was last alive).
type saved struct {
	path string
	data []byte
	info os.FileInfo
}

func save(t *testing.T, path string) saved {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return saved{path, data, info}
}

func (f saved) restore(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(f.path, f.data, f.info.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f.path, f.info.ModTime(), f.info.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// holdWriter holds log's writer, a guarded append whose check waits for
// release, and returns once it does: the writer holds the store's write
// lock, so the file is as the last commit left it, and nothing commits
// before release. A failing test releases it at its end.
func holdWriter(ctx context.Context, t *testing.T, log *store.Log) (release func()) {
	t.Helper()
	held, release := queueHold(ctx, t, log, log.LastSeq()-1, func(events.Envelope) bool { return true })
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatalf("the store's writer never took the holding append: %v", ctx.Err())
	}
	return release
}

// queueHold queues a guarded append that holds log's writer, from the
// first event its check is shown (those committed after after, then
// those of the calls of its batch ahead of it) that at takes, until
// release; held closes then. The append is refused; should at take none
// of them, it is written.
func queueHold(ctx context.Context, t *testing.T, log *store.Log, after uint64, at func(events.Envelope) bool) (held <-chan struct{}, release func()) {
	t.Helper()
	holding, open := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(open) })
	t.Cleanup(release)
	err := log.AppendAsyncGuarded(ctx, store.Guard{After: after, Check: func(e events.Envelope) error {
		if !at(e) {
			return nil
		}
		close(holding)
		<-open
		return errors.New("refused by the test")
	}}, []events.Envelope{events.New(events.KubeletStopped{}, time.Now(), "test")}, func([]events.Envelope, error) {})
	if err != nil {
		t.Fatal(err)
	}
	return holding, release
}

// A pool the config drops while no daemon runs has no pool at the next
// start to remove what a killed run left under its name: the start does,
// or the kubelet's plugin watcher dials it again and again.
func TestAStartRemovesTheStaleSocketsOfAPoolTheConfigDropped(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d := n.start(t)
	ctx := waitCtx(t)
	for _, res := range []string{vfioPool, netPool} {
		if _, err := n.kubelet.WaitRegistered(ctx, res); err != nil {
			t.Fatal(err)
		}
	}
	left := socketsIn(t, n.kubelet.DevicePluginDir())
	if err := d.Stop(ctx, "as if killed"); err != nil {
		t.Fatal(err)
	}
	for _, path := range left { // what a kill leaves
		staleSocket(t, path)
	}
	vfioOnly := `{"resourceList": [{"resourceName": "sriov_vfio", "selectors": {"vendors": ["8086"], "devices": ["1889"], "drivers": ["vfio-pci"]}}]}`
	if err := os.WriteFile(n.opts.ConfigPath, []byte(vfioOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	n.start(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	for _, path := range socketsIn(t, n.kubelet.DevicePluginDir()) {
		if pool.IsSocketName(netPool, filepath.Base(path)) {
			t.Errorf("the dropped pool's socket is left: %s", path)
		}
	}
}
