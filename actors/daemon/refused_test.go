package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
	"github.com/fsnotify/fsnotify"
)

// appendNewerEvent appends to a stopped daemon's ledger a record of an
// event type this build does not know, as a newer devledger writes one.
func appendNewerEvent(t *testing.T, stateDir string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(stateDir, LedgerFileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("events"))
		e := events.New(events.KubeletRestarted{Socket: "kubelet.sock"}, time.Now(), "newer-boot")
		e.Seq = b.Sequence() + 1
		rec, err := events.Marshal(e)
		if err != nil {
			return err
		}
		// A name as long as the one it replaces: the record's lengths hold.
		rec = bytes.Replace(rec, []byte(events.TypeKubeletRestarted), []byte("KubeletRebooted2"), 1)
		key := binary.BigEndian.AppendUint64(nil, e.Seq)
		sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, rec)
		if err := b.Put(key, append(binary.BigEndian.AppendUint32(nil, sum), rec...)); err != nil {
			return err
		}
		return b.SetSequence(e.Seq)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// killedRun runs a daemon on a new node and leaves its state dir as a
// SIGKILL would: the ledger and the pid file as the run left them, the
// pid file's last-alive mark at lastAlive. It returns the node, the run
// and the pid file's content.
func killedRun(t *testing.T, lastAlive time.Time) (*testNode, *Daemon, []byte) {
	t.Helper()
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	d, err := Start(n.opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	pid := filepath.Join(n.opts.StateDir, PIDFileName)
	if err := os.Chtimes(pid, lastAlive, lastAlive); err != nil {
		t.Fatal(err)
	}
	files := []saved{save(t, filepath.Join(n.opts.StateDir, LedgerFileName)), save(t, pid)}
	if err := d.Stop(ctx, "as if killed"); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.restore(t)
	}
	return n, d, files[1].data
}

// A start refused before it records anything (here: a ledger a newer
// devledger wrote to, as after a rollback) leaves the pid file as it found
// it. A crashed run's pid file is the mark of when it was last alive, which
// the start that succeeds records in DaemonCrashed; each refused start of a
// crash loop used to replace it and then remove it.
func TestARefusedStartLeavesTheCrashedRunsPIDFile(t *testing.T) {
	lastAlive := time.Now().Add(-time.Hour).Truncate(time.Second) // the run's last mark
	n, d, pidData := killedRun(t, lastAlive)
	ctx := waitCtx(t)
	pid := filepath.Join(n.opts.StateDir, PIDFileName)
	bootBefore, aliveBefore := LastAlive(n.opts.StateDir)
	if bootBefore != d.rec.BootID() || !aliveBefore.Equal(lastAlive) {
		t.Fatalf("the killed run's pid file says boot %q alive %v, want %q %v", bootBefore, aliveBefore, d.rec.BootID(), lastAlive)
	}
	appendNewerEvent(t, n.opts.StateDir)

	if d, err := Start(n.opts); err == nil {
		d.Stop(ctx, "test over")
		t.Fatal("a daemon started on a ledger a newer devledger wrote to")
	} else if !strings.Contains(err.Error(), "newer devledger") {
		t.Fatalf("Start: %v, want it refused for the newer event", err)
	}
	data, err := os.ReadFile(pid)
	if err != nil {
		t.Fatalf("the killed run's pid file is gone after a refused start: %v", err)
	}
	if !bytes.Equal(data, pidData) {
		t.Errorf("pid file says %q after a refused start, want the killed run's %q", data, pidData)
	}
	if boot, alive := LastAlive(n.opts.StateDir); boot != bootBefore || !alive.Equal(aliveBefore) {
		t.Errorf("after a refused start the pid file says boot %q alive %v, want %q %v", boot, alive, bootBefore, aliveBefore)
	}
}

// The start after a run that was killed records that run's crash ahead of
// its own start, and when the run was last alive from the pid file's
// mark when that is later than the run's last event (a quiet node's run
// records nothing for hours and touches the mark every few seconds).
func TestAStartRecordsTheKilledRunsCrashAtItsLastMark(t *testing.T) {
	lastAlive := time.Now().Add(time.Hour).Truncate(time.Second) // past every event of the run
	n, killed, _ := killedRun(t, lastAlive)
	d := n.start(t)
	var crashed []events.DaemonCrashed
	var startedAt uint64
	err := d.rec.Log().Read(1, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.DaemonCrashed:
			crashed = append(crashed, p)
		case events.DaemonStarted:
			if e.BootID == d.rec.BootID() {
				startedAt = uint64(len(crashed))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(crashed) != 1 || startedAt != 1 {
		t.Fatalf("the ledger has %d crashes, %d before this start's DaemonStarted; want the killed run's one, before it", len(crashed), startedAt)
	}
	if c := crashed[0]; c.BootID != killed.rec.BootID() || !c.LastAlive.Equal(lastAlive) {
		t.Errorf("crash recorded of boot %s last alive %v, want boot %s last alive %v (the pid file's mark)", c.BootID, c.LastAlive, killed.rec.BootID(), lastAlive)
	}
}

// A start writes its pid file only once the ledger has its start (and the
// crashed run's end): killed before, while it opens or replays the ledger
// (the OOM kill ledger.opening is for), it must leave the crashed run's
// mark of when it was last alive to the next start. The state dir's
// notifications, in order, show which came first.
func TestAStartWritesItsPIDFileOnceItIsRecorded(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	if err := n.start(t).Stop(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(n.opts.StateDir); err != nil {
		t.Fatal(err)
	}
	n.start(t)
	recorded := false
	for {
		select {
		case ev := <-w.Events:
			switch filepath.Base(ev.Name) {
			case LedgerFileName:
				recorded = recorded || ev.Has(fsnotify.Write)
			case PIDFileName:
				if !recorded {
					t.Fatalf("the pid file was written (%s) before the ledger was", ev.Op)
				}
				return
			}
		case err := <-w.Errors:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("no pid file written")
		}
	}
}

// A start whose config is rejected records its run whole (the killed
// run's DaemonCrashed, DaemonStarted, ConfigRejected, DaemonStopped): the
// killed run is settled and this one stopped cleanly, so the pid file goes,
// as after any clean stop. Put back, it would say the killed run was never
// accounted for until some later start replaced it.
func TestAStartWithARejectedConfigRemovesThePIDFile(t *testing.T) {
	n, _, _ := killedRun(t, time.Now())
	ctx := waitCtx(t)
	pid := filepath.Join(n.opts.StateDir, PIDFileName)
	if err := os.WriteFile(n.opts.ConfigPath, []byte(`{"resourceList": [{"resourceName": "bad name!"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}

	if d, err := Start(n.opts); err == nil {
		d.Stop(ctx, "test over")
		t.Fatal("a daemon started on a rejected config")
	} else if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Start: %v, want ErrBadConfig", err)
	}
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{Node: n.opts.Node})
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Replay(0)
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.Daemon.Running {
		t.Fatalf("the ledger says a run is going after the rejected start: %+v", st.Daemon)
	}
	if _, err := os.Stat(pid); !os.IsNotExist(err) {
		data, _ := os.ReadFile(pid)
		t.Errorf("pid file %q left after a start that recorded its clean stop (%v)", data, err)
	}
}

// nextStartAtClose writes, once the ledger's lock has gone ("ledger
// closed" is logged just after), the pid file a start waiting for the
// lock writes once it has it, and returns that file's content.
func nextStartAtClose(t *testing.T, n *testNode) []byte {
	t.Helper()
	next := []byte("pid 1, boot next-start, started 2030-01-01T00:00:00Z\n")
	closed := func(line []byte) {
		if bytes.Contains(line, []byte(`"message":"ledger closed"`)) && !replacePIDFile(n.opts.StateDir, next) {
			t.Error("cannot write the next start's pid file")
		}
	}
	n.opts.Logger = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), lineHook(closed))).Level(zerolog.InfoLevel)
	return next
}

// lineHook calls itself with each log line zerolog writes.
type lineHook func([]byte)

func (h lineHook) Write(p []byte) (int, error) {
	h(p)
	return len(p), nil
}

// A daemon that stops, or a start that fails once recorded, removes its
// pid file while it still holds the ledger: a start that takes the lock
// the moment it goes writes its own, which must stay.
func TestThePIDFileGoesBeforeTheLedgersLock(t *testing.T) {
	tests := []struct {
		name string
		run  func(*testing.T, *testNode)
	}{
		{"a stop", func(t *testing.T, n *testNode) {
			d, err := Start(n.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Stop(context.Background(), "test"); err != nil {
				t.Fatal(err)
			}
		}},
		{"a start that fails once recorded", func(t *testing.T, n *testNode) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			n.opts.MetricsAddr = taken.Addr().String()
			if d, err := Start(n.opts); err == nil {
				d.Stop(context.Background(), "test over")
				t.Fatal("Start served with its metrics address taken")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
			want := nextStartAtClose(t, n)
			tc.run(t, n)
			got, err := os.ReadFile(filepath.Join(n.opts.StateDir, PIDFileName))
			if err != nil {
				t.Fatalf("the next start's pid file is gone: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("pid file says %q, want the next start's %q", got, want)
			}
		})
	}
}
