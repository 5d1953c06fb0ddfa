package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// futureType is an event type no build of devledger knows yet.
const futureType = "KubeletRebooted2"

// ledgerFromTheFuture is the sample ledger with two events appended as a
// newer devledger would write them: one of a type this build does not know
// (a KubeletRestarted record renamed, stored as the store stores records),
// then a KubeletRestarted. It returns the path and the two sequences.
func ledgerFromTheFuture(t *testing.T, path string) (future, after uint64) {
	t.Helper()
	writeSampleLedger(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("events"))
		future = b.Sequence() + 1
		after = future + 1
		at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
		for _, seq := range []uint64{future, after} {
			e := events.New(events.KubeletRestarted{Socket: "/var/lib/kubelet/device-plugins/kubelet.sock"}, at, "future-boot")
			e.Seq = seq
			rec, err := events.Marshal(e)
			if err != nil {
				return err
			}
			if seq == future {
				rec = bytes.Replace(rec, []byte(events.TypeKubeletRestarted), []byte(futureType), 1)
			}
			key := binary.BigEndian.AppendUint64(nil, seq)
			sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, rec)
			if err := b.Put(key, append(binary.BigEndian.AppendUint32(nil, sum), rec...)); err != nil {
				return err
			}
		}
		return b.SetSequence(after)
	})
	if err != nil {
		t.Fatal(err)
	}
	return future, after
}

// After a rollback, an older build meets events a newer one wrote. dump
// shows each as unknown (sequence, time, type) and goes on; replay cannot
// fold past it and says why; the daemon refuses to start on it, saying so.
func TestRollbackReadsANewerLedger(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	future, after := ledgerFromTheFuture(t, db)

	code, stdout, stderr := runCLI(t, "dump", "--db", db)
	if code != exitOK {
		t.Fatalf("dump: exit %d: %s", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	var sawFuture, sawAfter bool
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		switch f[0] {
		case itoa(future):
			sawFuture = f[1] == "09:00:00" && strings.Contains(l, futureType) && strings.Contains(l, "unknown to this build")
		case itoa(after):
			sawAfter = strings.Contains(l, "KubeletRestarted")
		}
	}
	if !sawFuture || !sawAfter {
		t.Errorf("dump shows the future event %v and the one after it %v:\n%s", sawFuture, sawAfter, stdout)
	}
	if code, stdout, _ := runCLI(t, "dump", "--db", db, "--format", "jsonl"); code != exitOK || !strings.Contains(stdout, `"type":"`+futureType+`"`) {
		t.Errorf("dump --format jsonl: exit %d, no %s", code, futureType)
	}
	code, _, stderr = runCLI(t, "replay", "--db", db)
	if code != exitFailure || !strings.Contains(stderr, "#"+itoa(future)) || !strings.Contains(stderr, futureType) || !strings.Contains(stderr, "a newer devledger wrote it") {
		t.Errorf("replay: exit %d, %q", code, stderr)
	}
	// No damage: nothing to salvage.
	if strings.Contains(stderr, "salvage") {
		t.Errorf("replay of a newer devledger's events points at salvage: %q", stderr)
	}

	// Through a running daemon's admin socket (this build older than the
	// daemon), replay, --diff and scan say the same.
	dir := kubelettest.ShortTempDir(t)
	live := filepath.Join(dir, ledgerFileName)
	ledgerFromTheFuture(t, live)
	serveLedger(t, dir, live)
	for _, args := range [][]string{{"replay"}, {"replay", "--diff", "#10.."}, {"replay", "--until-seq", itoa(after)}} {
		code, _, stderr := runCLI(t, append(args, "--state-dir", dir)...)
		if code != exitFailure || !strings.Contains(stderr, "#"+itoa(future)) || !strings.Contains(stderr, futureType) || !strings.Contains(stderr, "a newer devledger wrote it") {
			t.Errorf("%v through the admin socket: exit %d, %q", args, code, stderr)
		}
	}

	n := newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: "testdata/e2e/sriov.json", mode: "legacy"})
	if err := os.MkdirAll(n.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(db, n.ledgerPath()); err != nil {
		t.Fatal(err)
	}
	p := n.start(t)
	if code := p.wait(t); code != exitFailure {
		t.Errorf("the daemon on a newer ledger: exit %d, want %d", code, exitFailure)
	}
	if log := p.stderr.String(); !strings.Contains(log, futureType) || !strings.Contains(log, "a newer devledger wrote it") {
		t.Errorf("the daemon's refusal does not say why:\n%s", log)
	}
	checkNothingServed(t, n)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// replay --verify and ledger backup say how many snapshots they passed
// over as a newer devledger's (after a rollback): no damage, but not one
// this build starts from either.
func TestVerifySaysANewerSnapshotWasPassedOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	writeSampleLedger(t, path)
	l, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Replay(0)
	if err == nil {
		_, err = l.SaveSnapshot(context.Background(), st, "test")
	}
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("snapshots"))
		k, v := b.Cursor().Last()
		if k == nil {
			return errors.New("the sample ledger has no snapshot")
		}
		rec := regexp.MustCompile(`^\{"format":\d+,`).ReplaceAll(v[4:], []byte(`{"format":99,`))
		key := bytes.Clone(k)
		sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, rec)
		return b.Put(key, append(binary.BigEndian.AppendUint32(nil, sum), rec...))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	const want = "(and 1 snapshot of a newer devledger, passed over)"
	if out := cliOK(t, "replay", "--db", path, "--verify"); !strings.Contains(out, want) {
		t.Errorf("replay --verify:\n%s\nwant it to say %q", out, want)
	}
	if out := cliOK(t, "ledger", "backup", "--db", path, "--out", filepath.Join(t.TempDir(), "copy.db")); !strings.Contains(out, want) {
		t.Errorf("ledger backup:\n%s\nwant it to say %q", out, want)
	}
}
