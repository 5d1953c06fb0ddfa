package grpcapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
)

// genSource is a RecordSource that makes its records up: record seq is
// size bytes, the big-endian seq then seq's low byte repeated. Like the
// store, it hands every record in one reused buffer.
type genSource struct {
	last   uint64 // the newest seq; records are 1..last
	size   int
	failAt uint64 // fail instead of producing this seq; 0: never
	// dropOnResume skips 5 records at the start of every read after the
	// first, as retention dropping records between two reads would.
	dropOnResume bool

	mu    sync.Mutex
	reads int
}

func (g *genSource) ReadRaw(from uint64, fn func(seq uint64, rec []byte) error) error {
	g.mu.Lock()
	g.reads++
	resumed := g.reads > 1
	g.mu.Unlock()
	from = max(from, 1)
	if g.dropOnResume && resumed {
		from += 5
	}
	buf := make([]byte, g.size)
	for seq := from; seq <= g.last && seq != 0; seq++ {
		if seq == g.failAt {
			return errors.New("disk on fire")
		}
		fillRecord(buf, seq)
		if err := fn(seq, buf); err != nil {
			return err
		}
	}
	return nil
}

func fillRecord(buf []byte, seq uint64) {
	binary.BigEndian.PutUint64(buf, seq)
	for i := 8; i < len(buf); i++ {
		buf[i] = byte(seq)
	}
}

type fakeStatus struct {
	st  AdminStatus
	err error
}

func (f fakeStatus) Status(context.Context) (AdminStatus, error) { return f.st, f.err }

// startAdmin serves an admin socket in a short temp dir until cleanup.
func startAdmin(t *testing.T, records RecordSource, status StatusSource) (*AdminServer, string) {
	t.Helper()
	path := AdminSocketPath(shortDir(t))
	a := NewAdminServer(records, status, AdminServerOptions{})
	if err := a.Serve(path); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return a, path
}

// checkedReader returns a ReadRecordsFromAdmin callback that checks each
// record is the next of a genSource of record size size starting at from,
// and counts them in *n.
func checkedReader(t *testing.T, from uint64, size int, n *uint64) func([]byte) error {
	want := make([]byte, size)
	return func(rec []byte) error {
		fillRecord(want, from+*n)
		if !bytes.Equal(rec, want) {
			t.Fatalf("record %d: got %x..., want %x...", from+*n, rec[:min(len(rec), 12)], want[:12])
		}
		*n++
		return nil
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestAdminStreamsManyRecordsInFlatMemory(t *testing.T) {
	const records, size = 100_000, 200 // 20 MB in all
	_, path := startAdmin(t, &genSource{last: records, size: size}, nil)
	base := heapInUse()
	var peak uint64
	var n uint64
	check := checkedReader(t, 1, size, &n)
	err := ReadRecordsFromAdmin(testCtx(t), path, 0, func(rec []byte) error {
		if n%10_000 == 0 {
			peak = max(peak, heapInUse())
		}
		return check(rec)
	})
	if err != nil {
		t.Fatalf("ReadRecordsFromAdmin: %v", err)
	}
	if n != records {
		t.Errorf("read %d records, want %d", n, records)
	}
	t.Logf("live heap grew by %d bytes while streaming %d bytes", int64(peak)-int64(base), records*size)
	// Buffering the stream on either side would hold most of 20 MB.
	if grown := int64(peak) - int64(base); grown > 8<<20 {
		t.Errorf("live heap grew by %d bytes while streaming, want it flat", grown)
	}
}

func TestAdminStreamsFromASequence(t *testing.T) {
	_, path := startAdmin(t, &genSource{last: 100, size: 16}, nil)
	var n uint64
	if err := ReadRecordsFromAdmin(testCtx(t), path, 60, checkedReader(t, 60, 16, &n)); err != nil {
		t.Fatalf("ReadRecordsFromAdmin: %v", err)
	}
	if n != 41 {
		t.Errorf("read %d records from 60 of 100, want 41", n)
	}
}

func TestAdminErrorMidStream(t *testing.T) {
	// 5,000 records of 100 bytes span more than one chunk before the fault.
	_, path := startAdmin(t, &genSource{last: 10_000, size: 100, failAt: 5_001}, nil)
	var n uint64
	err := ReadRecordsFromAdmin(testCtx(t), path, 1, checkedReader(t, 1, 100, &n))
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("ReadRecordsFromAdmin = %v, want the daemon's error", err)
	}
	if n != 5_000 {
		t.Errorf("read %d records before the error, want 5000", n)
	}
}

func TestAdminRecordsDroppedWhileStreaming(t *testing.T) {
	_, path := startAdmin(t, &genSource{last: 100_000, size: 100, dropOnResume: true}, nil)
	var n uint64
	err := ReadRecordsFromAdmin(testCtx(t), path, 1, checkedReader(t, 1, 100, &n))
	if err == nil || !strings.Contains(err.Error(), "dropped while streaming") {
		t.Fatalf("ReadRecordsFromAdmin = %v, want a dropped-records error", err)
	}
	if n == 0 {
		t.Error("no records before the error")
	}
}

func TestAdminCallerStops(t *testing.T) {
	_, path := startAdmin(t, &genSource{last: math.MaxUint64, size: 100}, nil)
	readAndHangUp(t, path, 3_000)
}

// readAndHangUp reads records from the admin socket at path and stops
// after n, as dump --limit does: the read ends with the callback's own
// error.
func readAndHangUp(t *testing.T, path string, n int) {
	t.Helper()
	errEnough := errors.New("enough")
	read := 0
	err := ReadRecordsFromAdmin(testCtx(t), path, 1, func([]byte) error {
		if read++; read == n {
			return errEnough
		}
		return nil
	})
	if err != errEnough {
		t.Fatalf("ReadRecordsFromAdmin = %v, want the callback's own error", err)
	}
}

func TestAdminCallerThatStopsIsNoWarning(t *testing.T) {
	// dump --limit, or dump piped into head, hangs up mid-stream on any
	// ledger longer than the socket buffers: the client's choice, made
	// on every such run, which the daemon's log must not warn of.
	var logs actortest.Log
	a := NewAdminServer(&genSource{last: math.MaxUint64, size: 100}, nil,
		AdminServerOptions{Logger: zerolog.New(&logs)})
	path := AdminSocketPath(shortDir(t))
	if err := a.Serve(path); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	readAndHangUp(t, path, 3_000)
	const ended = "record stream ended early"
	ctx := testCtx(t)
	for logs.Count("", ended) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("the stream's end was never logged; log:\n%s", logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if all, debug := logs.Count("", ended), logs.Count("debug", ended); debug != all {
		t.Errorf("a caller that stopped reading is logged %d times, %d at debug, want all; log:\n%s", all, debug, logs.String())
	}
}

func TestAdminStopEndsAStream(t *testing.T) {
	a, path := startAdmin(t, &genSource{last: math.MaxUint64, size: 100}, nil)
	stopped := make(chan error, 1)
	var n int
	err := ReadRecordsFromAdmin(testCtx(t), path, 1, func([]byte) error {
		if n++; n == 3_000 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				stopped <- a.Stop(ctx)
			}()
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "daemon stopping") {
		t.Errorf("ReadRecordsFromAdmin during Stop = %v, want a daemon-stopping error", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("admin socket after Stop: %v, want it removed", err)
	}
}

func TestAdminStreamCutShort(t *testing.T) {
	// A server that dies after one frame: no zero frame, no trailer.
	path := filepath.Join(shortDir(t), "a.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", RecordsContentType)
		w.Write([]byte{3, 'a', 'b', 'c'})
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })

	var got []string
	err = ReadRecordsFromAdmin(testCtx(t), path, 0, func(rec []byte) error {
		got = append(got, string(rec))
		return nil
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadRecordsFromAdmin = %v, want io.ErrUnexpectedEOF", err)
	}
	if len(got) != 1 || got[0] != "abc" {
		t.Errorf("records = %q, want [abc]", got)
	}
}

func TestAdminBadQuery(t *testing.T) {
	_, path := startAdmin(t, &genSource{}, nil)
	resp, err := adminGet(testCtx(t), path, "/v1/records?from=yesterday")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	err = adminAnswerOK(resp, RecordsContentType)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "want a sequence number") {
		t.Errorf("from=yesterday: %v, want a 400 naming the problem", err)
	}
}

func TestAdminStatus(t *testing.T) {
	want := AdminStatus{Version: "v0.1.0", BootID: "b00t", Pools: []AdminPoolStatus{
		{Resource: testResource, Socket: "/k/device-plugins/p.sock", Registered: true},
		{Resource: "example.com/gpu", Socket: "/k/device-plugins/g.sock", Reason: "unsupported version"},
	}}
	_, path := startAdmin(t, &genSource{}, fakeStatus{st: want})
	got, err := ReadStatusFromAdmin(testCtx(t), path)
	if err != nil {
		t.Fatalf("ReadStatusFromAdmin: %v", err)
	}
	if len(got.Pools) != 2 || got.Version != want.Version || got.BootID != want.BootID || got.Pools[0] != want.Pools[0] || got.Pools[1] != want.Pools[1] {
		t.Errorf("status = %+v, want %+v", got, want)
	}

	for name, src := range map[string]StatusSource{"none": nil, "failing": fakeStatus{err: errors.New("registrar busy")}} {
		t.Run(name, func(t *testing.T) {
			_, path := startAdmin(t, &genSource{}, src)
			if _, err := ReadStatusFromAdmin(testCtx(t), path); err == nil || !strings.Contains(err.Error(), "503") {
				t.Errorf("ReadStatusFromAdmin = %v, want a 503", err)
			}
		})
	}
}

func TestAdminSocketIsPrivate(t *testing.T) {
	_, path := startAdmin(t, &genSource{}, nil)
	checkPrivateSocket(t, path)
}

func TestAdminNoDaemon(t *testing.T) {
	dir := shortDir(t)
	err := ReadRecordsFromAdmin(testCtx(t), AdminSocketPath(dir), 0, func([]byte) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no socket: %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(dir, "stale.sock")
	staleSocket(t, path)
	err = ReadRecordsFromAdmin(testCtx(t), path, 0, func([]byte) error { return nil })
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("stale socket: %v, want ECONNREFUSED", err)
	}
}

// backupSource is a genSource that also backs up: size bytes of a pattern,
// failing after failAfter of them when that is set.
type backupSource struct {
	genSource
	bytes, failAfter int64
	// returned, when set, is closed as Backup returns.
	returned chan struct{}
}

func (b *backupSource) Backup(w io.Writer) (int64, error) {
	if b.returned != nil {
		defer close(b.returned)
	}
	buf := make([]byte, 4096)
	var n int64
	for n < b.bytes {
		if b.failAfter > 0 && n >= b.failAfter {
			return n, errors.New("disk on fire")
		}
		for i := range buf {
			buf[i] = byte(n + int64(i))
		}
		k, err := w.Write(buf[:min(int64(len(buf)), b.bytes-n)])
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// GET /v1/backup streams the copy whole; one cut short is an error, not a
// shorter copy; a source that cannot back up has no such endpoint.
func TestAdminBackup(t *testing.T) {
	_, sock := startAdmin(t, &backupSource{bytes: 3<<20 + 17}, nil)
	var got bytes.Buffer
	n, err := BackupFromAdmin(t.Context(), sock, &got)
	if err != nil || n != 3<<20+17 || int64(got.Len()) != n {
		t.Fatalf("BackupFromAdmin = %d, %v (%d bytes written), want %d", n, err, got.Len(), 3<<20+17)
	}
	for i, c := range got.Bytes() {
		if c != byte(i) {
			t.Fatalf("byte %d is %d, want %d", i, c, byte(i))
		}
	}

	_, sock = startAdmin(t, &backupSource{bytes: 1 << 20, failAfter: 64 << 10}, nil)
	if _, err := BackupFromAdmin(t.Context(), sock, io.Discard); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("a backup that failed: %v, want its error", err)
	}

	_, sock = startAdmin(t, &genSource{last: 1, size: 8}, nil)
	if _, err := BackupFromAdmin(t.Context(), sock, io.Discard); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a daemon that cannot back up: %v, want a 404", err)
	}
}

// A copy spooled by a daemon killed while it streamed a backup would take
// the ledger's disk for good: the next daemon to serve the socket removes
// it, and only it.
func TestAdminServeRemovesACopyAKilledDaemonLeft(t *testing.T) {
	dir := shortDir(t)
	left := filepath.Join(dir, ".ledger-backup-1234")
	kept := filepath.Join(dir, "ledger.db")
	for _, f := range []string{left, kept} {
		if err := os.WriteFile(f, []byte("copy"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a := NewAdminServer(&backupSource{bytes: 1}, nil, AdminServerOptions{})
	if err := a.Serve(AdminSocketPath(dir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy a stopped daemon left is still there: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the ledger beside it: %v", err)
	}
}

// The copy's read is over before the client gets a byte: a client that
// reads slowly (kubectl exec through the API server) does not hold the
// ledger's read transaction, which would hold an append that must grow the
// file's memory map, and every read queued behind it.
func TestAdminBackupDoesNotWaitForTheClient(t *testing.T) {
	src := &backupSource{bytes: 1 << 20, returned: make(chan struct{})}
	_, sock := startAdmin(t, src, nil)
	n, err := BackupFromAdmin(t.Context(), sock, writerFunc(func(p []byte) (int, error) {
		select {
		case <-src.returned:
			return len(p), nil
		case <-time.After(5 * time.Second):
			return 0, errors.New("the copy was still being read as the client got its first bytes")
		}
	}))
	if err != nil || n != 1<<20 {
		t.Errorf("BackupFromAdmin = %d, %v", n, err)
	}
	// The handler removes its spool as it returns, which may be just
	// after the client has the last byte.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left, _ := filepath.Glob(filepath.Join(filepath.Dir(sock), backupSpoolPattern))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spooled copies left: %v", left)
		}
	}
}

// writerFunc is an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// ackStatus is a StatusSource that takes acknowledgements of ledger damage.
type ackStatus struct {
	fakeStatus
	damage []string
	notes  []string
}

func (a *ackStatus) AcknowledgeDamage(_ context.Context, note string) ([]string, error) {
	a.notes = append(a.notes, note)
	out := a.damage
	a.damage = nil
	return out, nil
}

// The one write of the admin socket: an operator's acknowledgement reaches
// the daemon with its note, and the answer names what was acknowledged.
func TestAdminAcknowledgesDamage(t *testing.T) {
	src := &ackStatus{damage: []string{"ledger x is corrupt at seq 29: checksum mismatch"}}
	_, path := startAdmin(t, &genSource{last: 3, size: 16}, src)
	got, err := AcknowledgeDamageThroughAdmin(testCtx(t), path, "salvaged; seq 29 lost")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "ledger x is corrupt at seq 29: checksum mismatch" {
		t.Errorf("acknowledged %q", got)
	}
	if len(src.notes) != 1 || src.notes[0] != "salvaged; seq 29 lost" {
		t.Errorf("the daemon heard notes %q", src.notes)
	}
	if got, err := AcknowledgeDamageThroughAdmin(testCtx(t), path, ""); err != nil || len(got) != 0 {
		t.Errorf("second acknowledgement: %q, %v; want none", got, err)
	}
	// A daemon whose status source takes none has no such endpoint.
	_, plain := startAdmin(t, &genSource{last: 3, size: 16}, fakeStatus{})
	if _, err := AcknowledgeDamageThroughAdmin(testCtx(t), plain, ""); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("acknowledge without an acknowledger: %v, want 404", err)
	}
}

// snapSource is a genSource that keeps snapshots, by sequence.
type snapSource struct {
	genSource
	snaps map[uint64]events.State
}

func (s *snapSource) LatestSnapshot(atOrBefore uint64) (events.State, bool, error) {
	var best events.State
	for seq, st := range s.snaps {
		if (atOrBefore == 0 || seq <= atOrBefore) && seq > best.Seq {
			best = st
		}
	}
	return best, best.Seq > 0, nil
}

// GET /v1/snapshot answers the newest snapshot at or before a sequence,
// as the source reads it; none there is false, not an error; a daemon that
// keeps no snapshots (an older version) is an error.
func TestAdminSnapshot(t *testing.T) {
	at := func(seq uint64) events.State {
		s := events.NewState()
		s.Seq, s.Time = seq, time.Date(2026, 11, 24, 9, 0, int(seq), 0, time.UTC)
		s.Devices["0000:3b:02.0"] = events.Device{Present: true, Pool: "example.com/vf"}
		return s
	}
	_, sock := startAdmin(t, &snapSource{genSource: genSource{last: 100, size: 8}, snaps: map[uint64]events.State{40: at(40), 80: at(80)}}, nil)
	for _, tc := range []struct {
		atOrBefore, want uint64
	}{{0, 80}, {100, 80}, {79, 40}, {40, 40}, {39, 0}} {
		st, ok, err := SnapshotFromAdmin(t.Context(), sock, tc.atOrBefore)
		if err != nil || ok != (tc.want > 0) || st.Seq != tc.want {
			t.Errorf("SnapshotFromAdmin(%d) = seq %d, %v, %v; want seq %d", tc.atOrBefore, st.Seq, ok, err, tc.want)
		}
		if ok && !st.Equal(at(tc.want)) {
			t.Errorf("SnapshotFromAdmin(%d) = %+v, want %+v", tc.atOrBefore, st, at(tc.want))
		}
	}

	_, sock = startAdmin(t, &genSource{last: 1, size: 8}, nil)
	if _, ok, err := SnapshotFromAdmin(t.Context(), sock, 0); err == nil || ok {
		t.Errorf("a daemon that serves no snapshots: %v, %v; want an error", ok, err)
	}
}

// exactSource is a snapSource that reads the snapshot at one sequence:
// those in unreadable are there but cannot be read, for the error kept.
type exactSource struct {
	snapSource
	unreadable map[uint64]error
}

func (s *exactSource) SnapshotAt(seq uint64) (events.State, bool, error) {
	if err := s.unreadable[seq]; err != nil {
		return events.State{}, false, err
	}
	st, ok := s.snaps[seq]
	return st, ok, nil
}

// errFakeDamage is the damage an exactSource's daemon tells as such.
var errFakeDamage = errors.New("ledger x is corrupt at seq 60: snapshot: checksum mismatch")

// GET /v1/snapshot?exact=1 answers the snapshot at one sequence, or says
// there is none there, or why the one there cannot be read (a newer
// devledger's, or damaged); a daemon that cannot answer so (an older one
// ignores exact) is told apart from one with none there.
func TestAdminSnapshotAt(t *testing.T) {
	at := func(seq uint64) events.State {
		s := events.NewState()
		s.Seq = seq
		return s
	}
	src := &exactSource{
		snapSource: snapSource{genSource: genSource{last: 100, size: 8}, snaps: map[uint64]events.State{40: at(40)}},
		unreadable: map[uint64]error{
			50: fmt.Errorf("ledger x: the snapshot at #50: %w 99: a newer devledger wrote it", events.ErrSnapshotFormat),
			60: errFakeDamage,
			70: errors.New("ledger x: ledger closed"),
		},
	}
	a := NewAdminServer(src, nil, AdminServerOptions{SnapshotDamaged: func(err error) bool { return errors.Is(err, errFakeDamage) }})
	sock := AdminSocketPath(shortDir(t))
	if err := a.Serve(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })

	if st, ok, err := SnapshotAtFromAdmin(t.Context(), sock, 40); err != nil || !ok || st.Seq != 40 {
		t.Errorf("the snapshot at #40: seq %d, %v, %v", st.Seq, ok, err)
	}
	if _, ok, err := SnapshotAtFromAdmin(t.Context(), sock, 41); err != nil || ok {
		t.Errorf("none at #41: %v, %v; want none, no error", ok, err)
	}
	var why *UnreadableSnapshotError
	_, _, err := SnapshotAtFromAdmin(t.Context(), sock, 50)
	if !errors.Is(err, events.ErrSnapshotFormat) || errors.Is(err, ErrSnapshotDamaged) || !errors.As(err, &why) || err.Error() != src.unreadable[50].Error() {
		t.Errorf("a newer devledger's at #50: %v; want the daemon's reason, told a newer format", err)
	}
	_, _, err = SnapshotAtFromAdmin(t.Context(), sock, 60)
	if !errors.Is(err, ErrSnapshotDamaged) || errors.Is(err, events.ErrSnapshotFormat) || err.Error() != errFakeDamage.Error() {
		t.Errorf("a damaged one at #60: %v; want the daemon's reason, told damaged", err)
	}
	_, _, err = SnapshotAtFromAdmin(t.Context(), sock, 70)
	if err == nil || errors.As(err, &why) || errors.Is(err, ErrExactSnapshotUnsupported) || !strings.Contains(err.Error(), "ledger closed") {
		t.Errorf("a failure at #70: %v; want it, told neither unreadable nor unsupported", err)
	}
	// Without exact the endpoint answers as before.
	if st, ok, err := SnapshotFromAdmin(t.Context(), sock, 60); err != nil || !ok || st.Seq != 40 {
		t.Errorf("the newest at or before #60: seq %d, %v, %v; want #40", st.Seq, ok, err)
	}

	// A daemon whose ledger reads no snapshot at one sequence.
	_, plain := startAdmin(t, &src.snapSource, nil)
	if _, _, err := SnapshotAtFromAdmin(t.Context(), plain, 40); !errors.Is(err, ErrExactSnapshotUnsupported) {
		t.Errorf("a ledger without SnapshotAt: %v; want ErrExactSnapshotUnsupported", err)
	}

	// A daemon older than exact answers the newest it reads at or
	// before: the one asked for is still right; anything else cannot be
	// told from none, or from one it could not read.
	older := AdminSocketPath(shortDir(t))
	lis, err := net.Listen("unix", older)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseUint(r.URL.Query().Get("at"), 10, 64)
		st, ok, _ := src.LatestSnapshot(n)
		if !ok {
			writeJSON(w, http.StatusNotFound, adminTrailer{Error: fmt.Sprintf("no snapshot at or before seq %d", n)})
			return
		}
		body, _ := events.MarshalState(st)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	if st, ok, err := SnapshotAtFromAdmin(t.Context(), older, 40); err != nil || !ok || st.Seq != 40 {
		t.Errorf("an older daemon, the snapshot at #40: seq %d, %v, %v", st.Seq, ok, err)
	}
	for _, seq := range []uint64{39, 50} {
		if _, ok, err := SnapshotAtFromAdmin(t.Context(), older, seq); ok || !errors.Is(err, ErrExactSnapshotUnsupported) {
			t.Errorf("an older daemon, #%d: %v, %v; want ErrExactSnapshotUnsupported", seq, ok, err)
		}
	}
}

// sizedBackupSource is a backupSource that says how long its copy is, as
// the store says its file's size.
type sizedBackupSource struct {
	backupSource
	said   atomic.Int64
	called atomic.Bool
}

func (s *sizedBackupSource) SizeBytes() int64 { return s.said.Load() }

func (s *sizedBackupSource) Backup(w io.Writer) (int64, error) {
	s.called.Store(true)
	return s.backupSource.Backup(w)
}

// The spooled copy lands on the ledger's disk: one that would fill it is
// refused before a byte is written, or the daemon's own appends, and every
// Allocate, would fail until the copy went.
func TestAdminBackupNeedsRoomForItsCopy(t *testing.T) {
	src := &sizedBackupSource{backupSource: backupSource{bytes: 64 << 10}}
	_, sock := startAdmin(t, src, nil)
	free, err := freeBytes(filepath.Dir(sock))
	if err != nil {
		t.Fatal(err)
	}
	src.said.Store(int64(free)) // all there is: nothing left to grow into
	_, err = BackupFromAdmin(t.Context(), sock, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "507") || !strings.Contains(err.Error(), "no room") {
		t.Errorf("a backup the disk has no room for: %v, want 507 saying so", err)
	}
	if src.called.Load() {
		t.Error("the ledger was copied all the same")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(sock), backupSpoolPattern)); len(left) > 0 {
		t.Errorf("spooled copies left: %v", left)
	}

	src.said.Store(64 << 10)
	if n, err := BackupFromAdmin(t.Context(), sock, io.Discard); err != nil || n != 64<<10 {
		t.Errorf("a backup with room: %d, %v", n, err)
	}
}

// gatedBackup is a backupSource whose copy waits for gate, having said on
// entered that it began; calls counts the copies begun.
type gatedBackup struct {
	backupSource
	entered, gate chan struct{}
	calls         atomic.Int32
}

func (g *gatedBackup) Backup(w io.Writer) (int64, error) {
	if g.calls.Add(1) == 1 {
		close(g.entered)
	}
	<-g.gate
	return g.backupSource.Backup(w)
}

// A backup waiting for another's spool ends when its client goes away,
// rather than spool a whole copy of the ledger for nobody, holding a long
// read transaction, once the other is done.
func TestAdminBackupWaitingForAnotherEndsWithItsClient(t *testing.T) {
	src := &gatedBackup{backupSource: backupSource{bytes: 64 << 10}, entered: make(chan struct{}), gate: make(chan struct{})}
	a := NewAdminServer(src, nil, AdminServerOptions{})
	active, closed := make(chan struct{}, 8), make(chan struct{}, 8)
	a.srv.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateActive:
			active <- struct{}{}
		case http.StateClosed:
			closed <- struct{}{}
		}
	}
	sock := AdminSocketPath(shortDir(t))
	if err := a.Serve(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	var opened sync.Once
	release := func() { opened.Do(func() { close(src.gate) }) }
	t.Cleanup(release)
	ctx := testCtx(t)
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		}
	}

	first := make(chan error, 1)
	go func() {
		_, err := BackupFromAdmin(ctx, sock, io.Discard)
		first <- err
	}()
	wait(active, "the first backup's request")
	wait(src.entered, "the first backup's copy")
	gone, leave := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := BackupFromAdmin(gone, sock, io.Discard)
		second <- err
	}()
	wait(active, "the second backup's request")
	leave()
	if err := <-second; err == nil {
		t.Fatal("a backup whose client went away succeeded")
	}
	wait(closed, "the second backup's handler, its client gone, while the first spools")
	release()
	if err := <-first; err != nil {
		t.Errorf("the first backup: %v", err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d copies spooled, want only the first's", n)
	}
}
