package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// flipAll flips one byte of every copy of needle in the ledger of a
// stopped daemon (bbolt copies pages on write: stale copies may sit in
// free pages, and flipping all is sure to hit the live one).
func flipAll(t *testing.T, stateDir, needle string) {
	t.Helper()
	path := filepath.Join(stateDir, LedgerFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := bytes.Count(b, []byte(needle))
	if n == 0 {
		t.Fatalf("%q is not in %s", needle, path)
	}
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(needle))
		if i < 0 {
			break
		}
		b[off+i+len(needle)-1] ^= 0x20
		off += i + len(needle)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// damageRecorded lists the LedgerDamaged events of a stopped daemon's
// ledger; the ledger is damaged, so it reads from the newest snapshot on.
func damageRecorded(t *testing.T, d *Daemon) []events.LedgerDamaged {
	t.Helper()
	var out []events.LedgerDamaged
	l := d.rec.Log()
	from, _ := l.LatestSnapshotSeq(0)
	if err := l.Read(from+1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.LedgerDamaged); ok {
			out = append(out, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// allocateAndStop starts a daemon on n, allocates one VF and stops it (it
// snapshots as it stops).
func allocateAndStop(t *testing.T, ctx context.Context, n *testNode) {
	t.Helper()
	d := n.start(t)
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kubelet.Allocate(ctx, vfioPool, []string{"0000:3b:01.2"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
}

// waitReadyzSays waits until /readyz answers code with a body holding want.
func waitReadyzSays(t *testing.T, ctx context.Context, base string, code int, want string) {
	t.Helper()
	for {
		got, body := httpGet(t, base+"/readyz")
		if got == code && strings.Contains(body, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/readyz = %d %q, want %d with %q", got, body, code, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A flipped byte in an event older than the newest snapshot does not stop
// a start (the state is rebuilt from the snapshot), but the check after
// start finds it: it is recorded, /readyz is false and the metric says so
// until an operator acknowledges it. A later start finds it again and
// records nothing new.
func TestDamageFoundAfterStartWaitsForAnOperator(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr, n.opts.SnapshotCheck = "127.0.0.1:0", 10*time.Millisecond
	ctx := waitCtx(t)
	allocateAndStop(t, ctx, n)
	// Only the allocation's record holds its answer's variable: the
	// snapshot keeps no answers.
	flipAll(t, n.opts.StateDir, "PCIDEVICE_INTEL_COM_SRIOV_VFIO")

	d := n.start(t)
	base := "http://" + d.metricsAddr
	waitReadyzSays(t, ctx, base, http.StatusServiceUnavailable, "the ledger is damaged (1 not acknowledged")
	if _, body := httpGet(t, base+"/metrics"); !strings.Contains(body, "devledger_ledger_damage_unacknowledged 1") {
		t.Error("/metrics lacks devledger_ledger_damage_unacknowledged 1")
	}
	got := damageRecorded(t, d)
	if len(got) != 1 || !strings.Contains(got[0].Problem, "checksum mismatch") || got[0].Seq == 0 {
		t.Fatalf("recorded %+v, want one checksum mismatch naming its sequence", got)
	}
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d with a damaged ledger, want 200", code)
	}
	acked, err := d.AcknowledgeDamage(ctx, "test: old event lost, state is sound")
	if err != nil || len(acked) != 1 {
		t.Fatalf("acknowledge: %v, %v", acked, err)
	}
	waitReadyzSays(t, ctx, base, http.StatusOK, "ok")
	if again, err := d.AcknowledgeDamage(ctx, "twice"); err != nil || len(again) != 0 {
		t.Errorf("a second acknowledgement: %v, %v; want nothing to acknowledge", again, err)
	}
	if err := d.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}

	// Found again, known already: nothing new, ready.
	d = n.start(t)
	base = "http://" + d.metricsAddr
	waitReadyzSays(t, ctx, base, http.StatusOK, "ok")
	time.Sleep(100 * time.Millisecond) // a few check intervals
	if got := damageRecorded(t, d); len(got) != 0 {
		t.Errorf("the acknowledged damage was recorded again: %+v", got)
	}
	waitReadyzSays(t, ctx, base, http.StatusOK, "ok")
}

// A snapshot that cannot be read does not stop a start: the state is
// rebuilt from the events, as it was, and the damage is recorded at start.
func TestDamagedSnapshotIsPassedOverAtStart(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	ctx := waitCtx(t)
	allocateAndStop(t, ctx, n)
	want := replayStopped(t, n.opts.StateDir)
	flipAll(t, n.opts.StateDir, `"holders"`) // only snapshots say it
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, ok := l.LatestSnapshotSeq(0)
	if err := l.Close(); err != nil || !ok {
		t.Fatalf("the newest snapshot: %v, %v", ok, err)
	}

	d := n.start(t)
	base := "http://" + d.metricsAddr
	waitReadyzSays(t, ctx, base, http.StatusServiceUnavailable, "snapshot")
	// The admin socket tells the snapshot damaged, as dump names it.
	if _, _, err := grpcapi.SnapshotAtFromAdmin(ctx, grpcapi.AdminSocketPath(n.opts.StateDir), snap); !errors.Is(err, grpcapi.ErrSnapshotDamaged) {
		t.Errorf("the snapshot at #%d through the admin socket: %v; want it told damaged", snap, err)
	}
	ds := damageRecorded(t, d)
	if len(ds) == 0 || !strings.Contains(ds[0].Problem, "snapshot") {
		t.Fatalf("recorded %+v, want the snapshot's damage", ds)
	}
	st, err := d.rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := st.Allocations[firstAllocation(want)]; !ok || a.DeviceIDs[0] != "0000:3b:01.2" {
		t.Errorf("the allocation made before the damage is not live after it: %+v", st.Allocations)
	}
}

func firstAllocation(st events.State) uint64 {
	for seq := range st.Allocations {
		return seq
	}
	return 0
}

// A torn write of the newer meta page (zeroed here): bbolt reads the file
// through the older one, so the newest transactions are gone. The start
// says so in the ledger, and the daemon is not ready until an operator
// has looked.
func TestTornMetaPageIsRecordedAtStart(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr = "127.0.0.1:0"
	ctx := waitCtx(t)
	allocateAndStop(t, ctx, n)
	path := filepath.Join(n.opts.StateDir, LedgerFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// bbolt's meta pages 0 and 1 are of the OS's page size (64 KiB on some
	// arm64 nodes), kept 24 bytes in; the transaction id is 64 bytes in.
	pageSize, txid := int(binary.LittleEndian.Uint32(b[24:])), 64
	newer := 0
	if binary.LittleEndian.Uint64(b[pageSize+txid:]) > binary.LittleEndian.Uint64(b[txid:]) {
		newer = 1
	}
	clear(b[newer*pageSize : (newer+1)*pageSize])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	d := n.start(t)
	waitReadyzSays(t, ctx, "http://"+d.metricsAddr, http.StatusServiceUnavailable, "the newest transactions may be missing")
	ds := damageRecorded(t, d)
	if len(ds) == 0 || !strings.Contains(ds[0].Problem, fmt.Sprintf("meta page %d is damaged", newer)) {
		t.Fatalf("recorded %+v, want meta page %d named", ds, newer)
	}
}

// No damage is read silently by the daemon: started on each file of the
// damaged-ledger corpus, it either refuses to start, naming the damage, or
// starts and records it, and is not ready.
func TestDaemonOnTheDamagedCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "ledger", "damaged", "*.db"))
	if err != nil || len(files) < 10 {
		t.Fatalf("corpus: %v, %v", files, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".db")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
			n.opts.MetricsAddr, n.opts.SnapshotCheck = "127.0.0.1:0", 10*time.Millisecond
			if err := os.WriteFile(filepath.Join(n.opts.StateDir, LedgerFileName), data, 0o600); err != nil {
				t.Fatal(err)
			}
			d, err := Start(n.opts)
			if err != nil {
				if !strings.Contains(err.Error(), "devledger ledger salvage") && !strings.Contains(err.Error(), "not a devledger ledger") {
					t.Errorf("refused with %v; want the damage named and salvage suggested", err)
				}
				return
			}
			t.Cleanup(func() { d.Stop(context.Background(), "test over") })
			ctx := waitCtx(t)
			waitReadyzSays(t, ctx, "http://"+d.metricsAddr, http.StatusServiceUnavailable, "the ledger is damaged")
		})
	}
}

// A start that finds the mark of one that died opening the ledger walks
// the file's pages before bbolt reads them: a page graph bbolt would
// follow for ever (a loop) or read wrongly (a page two branches point to,
// made here, as a loop would take a regression's test down with it) is
// refused, named. The mark goes once the ledger is replayed; a start
// refused for damage leaves it, so that the next start walks the pages
// again and names the damage too, rather than read them (and follow a
// loop until it is killed for memory).
func TestAStartAfterOneDiedOpeningWalksThePages(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	opening := filepath.Join(n.opts.StateDir, OpeningFileName)
	n.start(t).Stop(context.Background(), "test")
	if _, err := os.Stat(opening); !os.IsNotExist(err) {
		t.Fatalf("a start that replayed left its mark: %v", err)
	}

	path := filepath.Join(n.opts.StateDir, LedgerFileName)
	l, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		e := events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: fmt.Sprintf("filler %d", i)}, time.Now(), "test")
		if _, err := l.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	crossEventsRoot(t, path)
	if err := os.WriteFile(opening, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, start := range []string{"first", "next"} {
		_, err = Start(n.opts)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "crossed") || !strings.Contains(err.Error(), "devledger ledger salvage") {
			t.Fatalf("%s start: %v, want the crossed pages of %s named and salvage suggested", start, err, path)
		}
		if _, err := os.Stat(opening); err != nil {
			t.Fatalf("%s start, refused for damage, took the mark away: %v", start, err)
		}
	}
}

// A start that finds the ledger locked and another start's mark there
// leaves the mark (that start may yet die replaying) and names it as the
// likely holder, not the run before it that the pid file still names.
func TestALockedStartLeavesTheOpeningMark(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.start(t).Stop(context.Background(), "test")
	writePIDFile(n.opts.StateDir, "crashedrun")
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	opening := filepath.Join(n.opts.StateDir, OpeningFileName)
	if err := os.WriteFile(opening, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(n.opts)
	if !errors.Is(err, ErrLedgerLocked) || !strings.Contains(err.Error(), "a start still opening or replaying it") {
		t.Errorf("start: %v, want the ledger locked by a start opening it", err)
	}
	if _, err := os.Stat(opening); err != nil {
		t.Errorf("the other start's mark: %v", err)
	}
}

// A start that wrote the opening mark and is refused the lock leaves the
// mark when another start has marked it since: that start may have won
// the lock (a third holder gone, say) and be replaying the file.
func TestALockedStartLeavesAMarkRewrittenSince(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.start(t).Stop(context.Background(), "test")
	opening := filepath.Join(n.opts.StateDir, OpeningFileName)
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() { _, err := Start(n.opts); done <- err }()
	// The mark as written, not only created: a write of ours between its
	// create and its write would be overwritten.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, err := os.ReadFile(opening); err == nil && strings.HasSuffix(string(b), "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the start wrote no mark")
		}
	}
	// The other start's mark, while the first waits for the lock.
	if err := os.WriteFile(opening, []byte("otherstart\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrLedgerLocked) {
		t.Fatalf("start: %v, want the ledger locked", err)
	}
	if _, err := os.Stat(opening); err != nil {
		t.Errorf("the other start's mark: %v", err)
	}
}

// A start refused the lock takes its own mark away: it never opened the
// ledger, and a mark left behind would have the next start walk the
// pages and warn that a start died there, and every start refused in
// between name a start still opening it as the holder.
func TestALockedStartRemovesItsOwnMark(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.start(t).Stop(context.Background(), "test")
	l, err := store.Open(filepath.Join(n.opts.StateDir, LedgerFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Start(n.opts); !errors.Is(err, ErrLedgerLocked) {
		t.Fatalf("start: %v, want the ledger locked", err)
	}
	if _, err := os.Stat(filepath.Join(n.opts.StateDir, OpeningFileName)); !os.IsNotExist(err) {
		t.Errorf("a start refused the lock left its mark: %v", err)
	}
}

// crossEventsRoot points the second element of the events bucket's root
// branch at the first one's page (bbolt's file format 2: a 16-byte page
// header, its flags at 8, then 16-byte elements, their page id at 8).
func crossEventsRoot(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket([]byte("events")).Root())
		return nil
	})
	pageSize := db.Info().PageSize
	db.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	page := b[int(root)*pageSize:]
	if le.Uint16(page[8:]) != 0x01 || le.Uint16(page[10:]) < 2 {
		t.Fatalf("the events root, page %d, is not a branch of two elements or more", root)
	}
	le.PutUint64(page[16+16+8:], le.Uint64(page[16+8:]))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Damage an operator acknowledged does not hide damage past it: the check
// after start stops at 32 problems it has not recorded yet, and more than
// 32 acknowledged ones used to fill it at every start, so that nothing
// past them was ever recorded and /readyz stayed true.
func TestAcknowledgedDamageDoesNotHideNewDamage(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.MetricsAddr, n.opts.SnapshotCheck = "127.0.0.1:0", 10*time.Millisecond
	ctx := waitCtx(t)
	// allocate allocates times from pool, registered by a start at or
	// after since (not an endpoint of the daemon before, which the
	// stand-in may still list), then stops d, which takes a snapshot: the
	// start reads none of the records allocated.
	allocate := func(d *Daemon, since time.Time, pool string, times int) {
		t.Helper()
		if _, err := n.kubelet.RegisteredAfter(ctx, []string{pool}, since); err != nil {
			t.Fatal(err)
		}
		devs, err := n.kubelet.WaitDevices(ctx, pool, func(ds []*pluginapi.Device) bool { return len(ds) > 0 })
		if err != nil {
			t.Fatal(err)
		}
		for i := range times {
			if _, err := n.kubelet.Allocate(ctx, pool, []string{devs[i%len(devs)].ID}); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Stop(ctx, "test"); err != nil {
			t.Fatal(err)
		}
	}
	allocate(n.start(t), time.Time{}, vfioPool, 40)
	flipAll(t, n.opts.StateDir, "PCIDEVICE_INTEL_COM_SRIOV_VFIO")
	started := time.Now()
	d := n.start(t)
	waitReadyzSays(t, ctx, "http://"+d.metricsAddr, http.StatusServiceUnavailable, "the ledger is damaged")
	for len(damageRecorded(t, d)) < 32 { // the check's records land
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := d.AcknowledgeDamage(ctx, "old allocations lost; accepted"); err != nil {
		t.Fatal(err)
	}
	allocate(d, started, netPool, 3)
	flipAll(t, n.opts.StateDir, "PCIDEVICE_INTEL_COM_SRIOV_NET") // new damage, later in the file
	d = n.start(t)
	waitReadyzSays(t, ctx, "http://"+d.metricsAddr, http.StatusServiceUnavailable, "the ledger is damaged")
}
