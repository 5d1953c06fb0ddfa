package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/testdata/sysfsgen"
	bolt "go.etcd.io/bbolt"
)

// ledger backup of a running daemon goes through its admin socket, and of
// a stopped one reads the file; either copy holds every event the ledger
// held, verifies, and is private. It never writes over a file.
func TestE2ELedgerBackup(t *testing.T) {
	n := sriovNode(t, "legacy", kubelettest.Options{})
	p, _ := n.startRegistered(t, sriovPools)
	if _, err := n.kubelet.Allocate(e2eCtx(t), vfioPool, []string{"0000:3b:01.2"}); err != nil {
		t.Fatal(err)
	}
	live := n.ledgerEvents(t)

	dir := t.TempDir()
	out := filepath.Join(dir, "live.db")
	said := cliOK(t, "ledger", "backup", "--state-dir", n.stateDir, "--out", out)
	if !strings.Contains(said, "the daemon (") || !strings.Contains(said, "verified") {
		t.Errorf("backup of a running daemon said:\n%s", said)
	}
	checkCopy(t, out, live)
	checkMode(t, out, 0o600) // private, as the ledger: it names every pod
	if code, _, stderr := cli(t, "ledger", "backup", "--state-dir", n.stateDir, "--out", out); code != exitUsage || !strings.Contains(stderr, "exists") {
		t.Errorf("backup over an existing file: exit %d, %q", code, stderr)
	}

	// To stdout, as kubectl exec ... > FILE takes it.
	code, stream, stderr := cli(t, "ledger", "backup", "--state-dir", n.stateDir, "--out", "-")
	if code != exitOK || !strings.Contains(stderr, "to stdout") {
		t.Fatalf("backup to stdout: exit %d, %q", code, stderr)
	}
	streamed := filepath.Join(dir, "streamed.db")
	if err := os.WriteFile(streamed, []byte(stream), 0o600); err != nil {
		t.Fatal(err)
	}
	checkCopy(t, streamed, live)

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	stopped := n.ledgerEvents(t)
	out = filepath.Join(dir, "stopped.db")
	said = cliOK(t, "ledger", "backup", "--state-dir", n.stateDir, "--out", out)
	if !strings.Contains(said, n.ledgerPath()) {
		t.Errorf("backup of a stopped daemon's ledger said:\n%s", said)
	}
	checkCopy(t, out, stopped)
	checkMode(t, out, 0o600)
}

// ledger acknowledge on a node whose daemon holds the ledger goes through
// its admin socket: the daemon records the acknowledgement, with the
// operator's note, and the command says what was acknowledged, and where.
func TestE2ELedgerAcknowledgeThroughTheDaemon(t *testing.T) {
	n := sriovNode(t, "legacy", kubelettest.Options{})
	p, _ := n.startRegistered(t, sriovPools)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	// Damage as the daemon's check records it, for the next run to hold.
	const problem = "ledger ledger.db is corrupt at seq 3: checksum mismatch"
	l, err := store.Open(n.ledgerPath(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Append(context.Background(), events.New(events.LedgerDamaged{Problem: problem, Seq: 3}, time.Now(), "test"))
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	n.startRegistered(t, sriovPools)
	const note = "restored from last night's backup"
	said := cliOK(t, "ledger", "acknowledge", "--state-dir", n.stateDir, "--note", note)
	if !strings.Contains(said, "the daemon (") || !strings.Contains(said, "acknowledged 1 damage") || !strings.Contains(said, problem) {
		t.Errorf("acknowledge through the daemon said:\n%s", said)
	}
	var acked []events.DamageAcknowledged
	for _, e := range n.ledgerEvents(t) {
		if a, ok := e.Payload.(events.DamageAcknowledged); ok {
			acked = append(acked, a)
		}
	}
	if len(acked) != 1 || acked[0].Note != note || !slices.Equal(acked[0].Problems, []string{problem}) {
		t.Errorf("the ledger records %+v, want one acknowledgement of %q noting %q", acked, problem, note)
	}
	if said := cliOK(t, "ledger", "acknowledge", "--state-dir", n.stateDir); !strings.Contains(said, "no damage waits") {
		t.Errorf("a second acknowledge said:\n%s", said)
	}
}

// checkCopy checks that the ledger at path verifies and holds want's events
// at least (a live ledger may have moved on between the two reads).
func checkCopy(t *testing.T, path string, want []events.Envelope) {
	t.Helper()
	l, err := store.Open(path, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Check(context.Background()); err != nil {
		t.Fatalf("the copy does not verify: %v", err)
	}
	i := 0
	if err := l.Read(0, func(e events.Envelope) error {
		if i < len(want) && (e.Seq != want[i].Seq || e.Type != want[i].Type) {
			t.Errorf("the copy has #%d %s where the ledger has #%d %s", e.Seq, e.Type, want[i].Seq, want[i].Type)
		}
		i++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i < len(want) {
		t.Errorf("the copy has %d events, the ledger %d", i, len(want))
	}
}

// ledger backup refuses a file whose meta page or freelist is damaged,
// naming the damage and the salvage that copies every intact event, and
// writes nothing: bbolt's copy would put fresh meta pages over what it
// read, so a file read through an older meta page would be copied
// without its newest events, and the copy would verify.
func TestLedgerBackupOfADamagedFile(t *testing.T) {
	for _, tc := range []struct{ file, damage string }{
		{"meta1-zeroed.db", "meta page 1 is damaged"},
		{"meta0-zeroed.db", "meta page 0 is damaged"},
		{"freelist-garbage.db", "the freelist, is damaged"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			db := filepath.Join(damagedDir, tc.file)
			out := filepath.Join(t.TempDir(), "copy.db")
			code, stdout, stderr := runCLI(t, "ledger", "backup", "--db", db, "--out", out)
			if code != exitFailure || !strings.Contains(stderr, tc.damage) || !strings.Contains(stderr, "devledger ledger salvage --db "+db) {
				t.Errorf("exit %d: %s%s", code, stdout, stderr)
			}
			if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused copy was written: %v", err)
			}
			if code, _, stderr := runCLI(t, "ledger", "backup", "--db", db, "--out", "-"); code != exitFailure || !strings.Contains(stderr, tc.damage) {
				t.Errorf("to stdout: exit %d: %s", code, stderr)
			}
		})
	}
}

// ledger backup of a file whose pages bbolt reads but whose records do
// not verify (a byte flipped in an event) copies it, finds the damage in
// the copy, and puts nothing at --out: a backup job must not find a copy
// that fails replay --verify where it looks for a sound one. The error
// names the damage as the ledger's, and the salvage.
func TestLedgerBackupThatDoesNotVerifyWritesNothing(t *testing.T) {
	db := filepath.Join(damagedDir, "event-byte-flipped.db")
	dir := t.TempDir()
	out := filepath.Join(dir, "copy.db")
	code, stdout, stderr := runCLI(t, "ledger", "backup", "--db", db, "--out", out)
	for _, want := range []string{
		"ledger " + db + " is corrupt at seq 29: checksum mismatch",
		out + " was not written",
		"devledger ledger salvage --db " + db + " --out FILE",
	} {
		if code != exitFailure || stdout != "" || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in --out's dir: %v", left)
	}
}

// ledger backup of a ledger whose copy does not verify for a reason other
// than damage (an event of a newer devledger, after a rollback) names the
// copy by --out, not by the temporary name it was checked under, which
// is gone when the error is read. Such a copy is no damage: it is kept
// at --out, whole, and the error says so (exit 1: this release could
// not verify it).
func TestLedgerBackupNamesTheCopyByOut(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	future, after := ledgerFromTheFuture(t, db)
	out := filepath.Join(t.TempDir(), "copy.db")
	code, _, stderr := runCLI(t, "ledger", "backup", "--db", db, "--out", out)
	if code != exitFailure || !strings.Contains(stderr, "ledger "+out+": #"+itoa(future)) || strings.Contains(stderr, ".tmp-") ||
		!strings.Contains(stderr, out+" holds the copy: check it with that newer devledger") {
		t.Errorf("exit %d, stderr %q; want the copy named %s, kept, no temporary name", code, stderr, out)
	}
	l, err := store.Open(out, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("the kept copy: %v", err)
	}
	defer l.Close()
	if got := l.LastSeq(); got != after {
		t.Errorf("the kept copy ends at #%d, the ledger at #%d", got, after)
	}
}

// A ledger someone else holds while no daemon answers on its admin socket
// (a dump still reading it, a daemon starting): backup and acknowledge say
// that the file is locked, not only that the socket refused them.
func TestLedgerCommandsOnALockedFileWithoutADaemon(t *testing.T) {
	db := sampleCopy(t)
	holder, err := store.Open(db, store.Options{BootID: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	dir := filepath.Dir(db)
	for _, args := range [][]string{
		{"ledger", "backup", "--state-dir", dir, "--out", filepath.Join(t.TempDir(), "copy.db")},
		{"ledger", "backup", "--state-dir", dir, "--out", "-"},
		{"ledger", "compact", "--state-dir", dir, "--out", filepath.Join(t.TempDir(), "compact.db")},
		{"ledger", "acknowledge", "--state-dir", dir},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitFailure || !strings.Contains(stderr, "is locked by another process") || !strings.Contains(stderr, "admin socket does not answer") {
			t.Errorf("%q: exit %d: %s", args, code, stderr)
		}
	}
}

// ledger salvage names what it lost and exits 1, or exits 0 when it lost
// nothing; dump reads what it wrote, the losses as EventLost.
func TestLedgerSalvage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "salvaged.db")
	code, stdout, stderr := runCLI(t, "ledger", "salvage", "--db", filepath.Join(damagedDir, "events-page-garbage.db"), "--out", out)
	if code != exitFailure || !strings.Contains(stdout, "lost #21-#44 (24 events)") || !strings.Contains(stderr, "24 events lost") {
		t.Errorf("salvage of a ledger with a page of events destroyed: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "dump", "--db", out)
	if code != exitOK || strings.Count(stdout, "EventLost") != 24 {
		t.Errorf("dump of the salvaged ledger: exit %d, %d EventLost\n%s", code, strings.Count(stdout, "EventLost"), stdout)
	}

	// One event lost is a loss as much as many: exit 1 all the same.
	out = filepath.Join(dir, "one-lost.db")
	code, stdout, stderr = runCLI(t, "ledger", "salvage", "--db", filepath.Join(damagedDir, "event-byte-flipped.db"), "--out", out)
	if code != exitFailure || !strings.Contains(stdout, "(1 event)") || !strings.Contains(stderr, "1 event lost") {
		t.Errorf("salvage of a ledger with one event's record damaged: exit %d\n%s%s", code, stdout, stderr)
	}

	out = filepath.Join(dir, "whole.db")
	code, stdout, stderr = runCLI(t, "ledger", "salvage", "--db", filepath.Join(damagedDir, "meta1-zeroed.db"), "--out", out)
	if code != exitOK || strings.Contains(stdout, "lost") {
		t.Errorf("salvage of a ledger bbolt reads through an old meta: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "ledger", "salvage", "--db", filepath.Join(damagedDir, "meta1-zeroed.db"), "--out", out); code != exitUsage || !strings.Contains(stderr, "exists") {
		t.Errorf("salvage over an existing file: exit %d, %q", code, stderr)
	}
	// A file that is not a ledger, an empty one and a directory have
	// nothing to salvage: bad input, as dump and replay say of them.
	notLedger := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notLedger, []byte("not a ledger\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{notLedger, empty, t.TempDir()} {
		code, _, stderr := runCLI(t, "ledger", "salvage", "--db", db, "--out", filepath.Join(dir, "none.db"))
		if code != exitUsage || !strings.Contains(stderr, db) {
			t.Errorf("salvage of %s: exit %d, %q; want %d naming it", db, code, stderr, exitUsage)
		}
		if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
			t.Errorf("salvage of %s left its --out", db)
		}
	}
	// A newer devledger's file format is no damage, nor this build's
	// to read page by page: bad input, as dump and replay say of it.
	newer := filepath.Join(dir, "newer.db")
	writeNewerFormatLedger(t, newer)
	code, _, stderr = runCLI(t, "ledger", "salvage", "--db", newer, "--out", filepath.Join(dir, "none.db"))
	if code != exitUsage || !strings.Contains(stderr, "has format version 99") {
		t.Errorf("salvage of a newer format: exit %d, %q; want %d naming the format", code, stderr, exitUsage)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
		t.Error("salvage of a newer format left its --out")
	}
	if code, _, _ := runCLI(t, "ledger", "nope"); code != exitUsage {
		t.Errorf("ledger nope: exit %d", code)
	}
}

// ledgerWithDamage is a ledger file whose one event records problem.
func ledgerWithDamage(t *testing.T, problem string) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(db, store.Options{BootID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(context.Background(), events.New(events.LedgerDamaged{Problem: problem, Seq: 3}, time.Now(), "b")); err != nil {
		t.Fatal(err)
	}
	return db
}

// `ledger acknowledge` on a ledger no daemon holds: the damage recorded is
// acknowledged once, in the file, with the operator's note; the fold says
// none waits after it.
func TestLedgerAcknowledgeInFile(t *testing.T) {
	const problem = "ledger ledger.db is corrupt at seq 3: checksum mismatch"
	db := ledgerWithDamage(t, problem)

	code, out, errOut := runCLI(t, "ledger", "acknowledge", "--db", db, "--note", "restored from last night's backup")
	if code != 0 || !strings.Contains(out, "acknowledged 1 damage") || !strings.Contains(out, problem) {
		t.Fatalf("acknowledge: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "ledger", "acknowledge", "--db", db)
	if code != 0 || !strings.Contains(out, "no damage waits") {
		t.Errorf("second acknowledge: exit %d\n%s", code, out)
	}
	ro, err := store.Open(db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	st, err := ro.Replay(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ledger.Damage) != 0 || len(st.Ledger.Acknowledged) != 1 {
		t.Errorf("after acknowledge the fold has %+v", st.Ledger)
	}
	var note string
	if err := ro.Read(0, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.DamageAcknowledged); ok {
			note = p.Note
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if note != "restored from last night's backup" {
		t.Errorf("note %q", note)
	}
	// Said as the read-only tools say it, the path once.
	none := filepath.Join(t.TempDir(), "none.db")
	if code, _, errOut := runCLI(t, "ledger", "acknowledge", "--db", none); code != exitUsage || errOut != "devledger ledger acknowledge: no ledger at "+none+"\n" {
		t.Errorf("acknowledge of a missing file: exit %d (%q), want %d", code, errOut, exitUsage)
	}
}

// acknowledge writes to the file --db names: its help must not call it a
// read, as the read-only tools' help does.
func TestLedgerAcknowledgeHelpSaysItWrites(t *testing.T) {
	_, help, _ := runCLI(t, "ledger", "acknowledge", "-h")
	if strings.Contains(help, "read this ledger") || !strings.Contains(help, "record the acknowledgement in this ledger FILE") {
		t.Errorf("ledger acknowledge -h:\n%s", help)
	}
}

// scan --db shows the damage the daemon recorded and no operator
// acknowledged, and stops showing it once acknowledged.
func TestScanShowsUnacknowledgedDamage(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	const problem = "ledger ledger.db is corrupt at seq 3: checksum mismatch"
	db := ledgerWithDamage(t, problem)
	args := scanArgs(r, scanConfigs[sysfsgen.ScenarioSRIOV], "--db", db)
	_, out, errOut := runCLI(t, args...)
	if !strings.Contains(out, "1 damage found by the daemon, not acknowledged") || !strings.Contains(out, "  "+problem+"\n") {
		t.Fatalf("scan --db of a ledger with damage recorded says\n%s%s", out, errOut)
	}
	if code, out, _ := runCLI(t, "ledger", "acknowledge", "--db", db); code != 0 {
		t.Fatalf("acknowledge: exit %d\n%s", code, out)
	}
	if _, out, _ = runCLI(t, args...); strings.Contains(out, "not acknowledged") {
		t.Errorf("scan --db still shows the damage after it was acknowledged:\n%s", out)
	}
}

// wedgedStatus is a daemon's status while its node coordinator or
// registrar does not answer (Daemon.Status asks both).
type wedgedStatus struct{}

func (wedgedStatus) Status(context.Context) (grpcapi.AdminStatus, error) {
	return grpcapi.AdminStatus{}, errors.New("ask node: future: timeout")
}

// dump and replay on a live node read the ledger through the admin
// socket's records and snapshots, which need no actor: a daemon whose
// actors do not answer (when an operator most needs the ledger) still
// serves them, and the tools read them.
func TestToolsReadADaemonWhoseActorsDoNotAnswer(t *testing.T) {
	dir := kubelettest.ShortTempDir(t)
	db := filepath.Join(dir, ledgerFileName)
	writeSampleLedger(t, db)
	l, err := store.Open(db, store.Options{Node: "worker-3"}) // holds the lock
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	admin := grpcapi.NewAdminServer(l, wedgedStatus{}, grpcapi.AdminServerOptions{})
	if err := admin.Serve(grpcapi.AdminSocketPath(dir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Stop(context.Background()) })
	for _, args := range [][]string{{"dump"}, {"replay"}} {
		code, out, errOut := runCLI(t, append(args, "--state-dir", dir)...)
		if code != exitOK || out == "" {
			t.Errorf("%s on a live node whose actors do not answer: exit %d: %s", args[0], code, strings.TrimSpace(errOut))
		}
	}
}

// writeNewerFormatLedger writes the sample ledger at path as a newer
// devledger's file format (99) would hold it.
func writeNewerFormatLedger(t *testing.T, path string) {
	t.Helper()
	writeSampleLedger(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("format_version"), []byte("99"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// newerBackup is a daemon's ledger whose backup is of a newer devledger's
// file format: what an older CLI receives from a newer daemon.
type newerBackup struct {
	*store.Log
	file string
}

func (b newerBackup) Backup(w io.Writer) (int64, error) {
	f, err := os.Open(b.file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

// ledger backup through a daemon of a newer release, whose file format
// this release does not read, keeps the copy: a faithful one, which that
// release can check. It says so and exits 1.
func TestLedgerBackupKeepsACopyOfANewerFormat(t *testing.T) {
	dir := kubelettest.ShortTempDir(t)
	db := filepath.Join(dir, ledgerFileName)
	writeSampleLedger(t, db)
	newer := filepath.Join(t.TempDir(), "newer.db")
	writeNewerFormatLedger(t, newer)
	l, err := store.Open(db, store.Options{Node: "worker-3"}) // holds the lock
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	admin := grpcapi.NewAdminServer(newerBackup{l, newer}, wedgedStatus{}, grpcapi.AdminServerOptions{})
	if err := admin.Serve(grpcapi.AdminSocketPath(dir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Stop(context.Background()) })

	out := filepath.Join(t.TempDir(), "copy.db")
	code, _, stderr := runCLI(t, "ledger", "backup", "--state-dir", dir, "--out", out)
	if code != exitFailure || !strings.Contains(stderr, "has format version 99") ||
		!strings.Contains(stderr, out+" holds the copy") || strings.Contains(stderr, ".tmp-") {
		t.Errorf("exit %d, stderr %q; want the copy kept at %s", code, stderr, out)
	}
	want, err := os.ReadFile(newer)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the copy at --out: %d bytes, %v; want the daemon's %d", len(got), err, len(want))
	}
}

// backup or salvage --out into a directory that does not exist is bad
// usage, said with the path asked for, not the temporary name or place
// the copy is written under first.
func TestLedgerBackupIntoAMissingDir(t *testing.T) {
	for _, cmd := range []string{"backup", "compact", "salvage"} {
		t.Run(cmd, func(t *testing.T) {
			db := sampleCopy(t)
			out := filepath.Join(t.TempDir(), "nodir", "copy.db")
			code, stdout, stderr := runCLI(t, "ledger", cmd, "--db", db, "--out", out)
			want := "cannot create " + out + ": no such file or directory (no directory " + filepath.Dir(out) + ")"
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, want) || strings.Contains(stderr, ".tmp-") {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
			}
		})
	}
}

// swollenLedger is a ledger in its own state dir that held 50,000
// events of pods coming and going on four pools of 32 devices, a
// snapshot every 5,000, of which retention kept the last 512 KiB or so
// (a --retain-size lowered to free disk): the file keeps its size.
func swollenLedger(t *testing.T) string {
	t.Helper()
	db := filepath.Join(kubelettest.ShortTempDir(t), ledgerFileName) // beside an admin socket
	l, err := store.Open(db, store.Options{Node: "worker-3", BootID: "boot-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pools := map[string][]string{}
	for p := range 4 {
		for i := range 32 {
			pools[fmt.Sprintf("intel.com/pool%d", p)] = append(pools[fmt.Sprintf("intel.com/pool%d", p)], fmt.Sprintf("0000:%02x:%02x.%d", 0x3b+p, 1+i/8, i%8))
		}
	}
	answer := func(pool string, ids []string) events.ContainerAllocation {
		return events.ContainerAllocation{Envs: map[string]string{"PCIDEVICE_INTEL_COM_" + strings.ToUpper(pool[len("intel.com/"):]): strings.Join(ids, ",")},
			Devices: []events.DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"}}}
	}
	h := storetest.NewPodHistory(3, pools, answer, "boot-1", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	if _, err := storetest.Grow(ctx, l, events.NewState(), h, 50_000, storetest.GrowOptions{SnapshotEvery: 5_000}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.Retain(ctx, store.Retention{MaxBytes: 512 << 10, Now: retainedAt}); err != nil || !ok {
		t.Fatalf("retain: %v %v", ok, err)
	}
	return db
}

// TestLedgerCompact: ledger compact of a ledger retention emptied writes
// a far smaller file that every tool reads as it reads the ledger, and
// says so with both sizes; it never writes over a file.
func TestLedgerCompact(t *testing.T) {
	db := swollenLedger(t)
	out := filepath.Join(t.TempDir(), "compact.db")
	code, stdout, stderr := runCLI(t, "ledger", "compact", "--db", db, "--out", out)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	before, after := int64(len(mustRead(t, db))), int64(len(mustRead(t, out)))
	t.Logf("%s", stdout)
	want := regexp.MustCompile(`^compacted ` + regexp.QuoteMeta(db) + ` into ` + regexp.QuoteMeta(out) +
		fmt.Sprintf(`: %d bytes of the ledger's %d \(%d%%\); \d+ events \(#\d+-#50001\), \d+ snapshots?; verified\n$`, after, before, percentOf(after, before)))
	if !want.MatchString(stdout) {
		t.Errorf("it says %q; want it to match %s", stdout, want)
	}
	if after*4 > before {
		t.Errorf("%d bytes compacted to %d: want a quarter at most", before, after)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the copy: %v, %v; want mode 0600", fi.Mode(), err)
	}
	for _, args := range [][]string{
		{"dump", "--format", "jsonl"},
		{"dump", "--pool", "intel.com/pool2"},
		{"replay", "--format", "json"},
		{"replay", "--verify"},
	} {
		wantCode, want, wantErr := runCLI(t, append(args, "--db", db)...)
		code, got, gotErr := runCLI(t, append(args, "--db", out)...)
		got, gotErr = strings.ReplaceAll(got, out, db), strings.ReplaceAll(gotErr, out, db)
		if wantCode != exitOK || code != wantCode || got != want || gotErr != wantErr {
			t.Errorf("%q of the copy: exit %d, %d bytes, %q; of the ledger: exit %d, %d bytes, %q", args, code, len(got), gotErr, wantCode, len(want), wantErr)
		}
	}
	if code, _, stderr := runCLI(t, "ledger", "compact", "--db", db, "--out", out); code != exitUsage || !strings.Contains(stderr, out+" exists: name a new file") {
		t.Errorf("compact over an existing file: exit %d, %q", code, stderr)
	}
}

// ledger compact refuses what it cannot copy as the ledger, naming why,
// and writes nothing.
func TestLedgerCompactRefuses(t *testing.T) {
	dir := t.TempDir()
	newerFormat := filepath.Join(dir, "newer-format.db")
	writeNewerFormatLedger(t, newerFormat)
	newerEvents := filepath.Join(dir, "newer-events.db")
	ledgerFromTheFuture(t, newerEvents)

	// A daemon's: it holds the lock and answers on its admin socket.
	live := kubelettest.ShortTempDir(t)
	holder, err := store.Open(filepath.Join(live, ledgerFileName), store.Options{Node: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	lis, err := net.Listen("unix", grpcapi.AdminSocketPath(live))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })

	out := filepath.Join(t.TempDir(), "compact.db")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"a newer devledger's format", []string{"--db", newerFormat, "--out", out}, exitUsage, "has format version 99"},
		{"a newer devledger's events", []string{"--db", newerEvents, "--out", out}, exitFailure, out + " was not written: compact it with that newer devledger"},
		{"a running daemon's", []string{"--state-dir", live, "--out", out}, exitFailure, "the daemon (" + grpcapi.AdminSocketPath(live) + ") holds it: stop it first"},
		{"no --out", []string{"--db", newerFormat}, exitUsage, "--out is required"},
		{"stdout", []string{"--db", newerFormat, "--out", "-"}, exitUsage, "--out -: a compacted ledger is written to a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"ledger", "compact"}, tc.args...)...)
			if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.says) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d saying %q", code, stdout, stderr, tc.code, tc.says)
			}
			if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 0 {
				t.Errorf("left in --out's dir: %v", left)
			}
		})
	}
}

// percentOf rounds up, as ledger compact says it: a copy of a few bytes
// is not 0% of the ledger. TestLedgerCompact reads its figure through
// percentOf itself, so only this pins it.
func TestPercentOfRoundsUp(t *testing.T) {
	for _, tc := range []struct{ part, whole, want int64 }{
		{1048576, 16777216, 7}, // 6.25%, as docs/operations.md shows it
		{1, 16777216, 1},
		{0, 16777216, 0},
		{4096, 4096, 100},
		{4097, 4096, 101},
		{4096, 0, 100},
	} {
		if got := percentOf(tc.part, tc.whole); got != tc.want {
			t.Errorf("percentOf(%d, %d) = %d, want %d", tc.part, tc.whole, got, tc.want)
		}
	}
}
