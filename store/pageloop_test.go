package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/events"
)

// loopingLedger writes a ledger whose events bucket has a branch page
// for its root, then points that branch's first element back at itself:
// bbolt's cursor would descend it until memory ran out.
func loopingLedger(t *testing.T) string {
	t.Helper()
	return withEventsRoot(t, markedLedger(t, 2000), func(page []byte, root uint64) {
		binary.LittleEndian.PutUint64(page[pageHeader+8:], root) // element 0's page id
	})
}

// withEventsRoot copies the ledger at src (whose own check at cleanup
// would meet the damage) and edits its events bucket's root page, which
// must be a branch of three elements or more.
func withEventsRoot(t *testing.T, src string, edit func(page []byte, root uint64)) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "damaged.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket(bucketEvents).Root())
		return nil
	})
	pageSize := db.Info().PageSize
	db.Close()
	page := b[int(root)*pageSize:]
	le := binary.LittleEndian
	if le.Uint16(page[8:]) != pageBranch || le.Uint16(page[10:]) < 3 {
		t.Fatalf("the events root, page %d, is not a branch of three or more", root)
	}
	edit(page, root)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runChild runs the test named test of this binary with env naming path,
// for what would take the suite down with it (a loop, a fault), and
// returns its output. A child that runs 20 s fails the test.
func runChild(t *testing.T, test, env, path string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+path)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not return in 20s: %s", test, out)
	}
	return out, err
}

const loopChildEnv = "DEVLEDGER_TEST_LOOP_LEDGER"

// TestLoopChild opens, for TestAWriterAskedRefusesALoopingFile, the
// ledger its parent names, as a writer that walks the pages.
func TestLoopChild(t *testing.T) {
	path := os.Getenv(loopChildEnv)
	if path == "" {
		t.Skip("run by TestAWriterAskedRefusesALoopingFile")
	}
	l, err := Open(path, Options{BootID: "b", CheckPages: true})
	if err == nil {
		_, err = l.Replay(0)
		l.Close()
	}
	fmt.Printf("open: %v\n", err)
}

// A writer asked to walk the pages refuses a file whose page graph loops,
// naming it, where without the walk bbolt would read until memory ran out.
// The open runs in a child the test kills, lest a regression take the
// suite down with it.
func TestAWriterAskedRefusesALoopingFile(t *testing.T) {
	path := loopingLedger(t)
	if _, err := Open(path, Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "loops") {
		t.Fatalf("read-only open: %v, want the loop named", err)
	}
	out, err := runChild(t, "TestLoopChild", loopChildEnv, path)
	if err != nil || !strings.Contains(string(out), "open: ledger "+filepath.Clean(path)) || !strings.Contains(string(out), "loops") {
		t.Fatalf("child: %v\n%s\nwant the open refused, naming the file and the loop", err, out)
	}
}

const faultChildEnv = "DEVLEDGER_TEST_FAULT_LEDGER"

// TestRetainFaultChild opens, for TestRetentionMeetingAPageOutsideTheFile,
// the ledger its parent names, replays it and retains by age alone.
func TestRetainFaultChild(t *testing.T) {
	path := os.Getenv(faultChildEnv)
	if path == "" {
		t.Skip("run by TestRetentionMeetingAPageOutsideTheFile")
	}
	l, err := Open(path, Options{BootID: "b"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer l.Close()
	if _, err := l.Replay(0); err != nil {
		t.Fatalf("replay: %v", err)
	}
	_, _, err = l.Retain(context.Background(), Retention{MaxAge: time.Second, Now: baseTime.Add(time.Hour)})
	fmt.Printf("retain: %v\n", err)
}

// Retention by age alone walks the old events in its write transaction.
// A branch there pointing past the end of the file (replay, from the
// newest snapshot, never reads it) is damage to name, not a fault that
// ends the daemon at every start. The retention runs in a child, lest a
// regression take the suite down with it.
func TestRetentionMeetingAPageOutsideTheFile(t *testing.T) {
	l := openTestLog(t)
	var envs []events.Envelope
	for i := 1; i <= 400; i++ {
		envs = append(envs, mustAppend(t, l, ev(i, events.DeviceRemoved{Address: "0000:3b:00.1", Reason: marker(i)}))...)
	}
	if _, err := l.SaveSnapshot(context.Background(), foldAll(envs), "test"); err != nil {
		t.Fatal(err)
	}
	src := l.Meta().Path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := withEventsRoot(t, src, func(page []byte, _ uint64) {
		el := page[pageHeader+elemSize:] // element 1, old events
		binary.LittleEndian.PutUint64(el[8:], binary.LittleEndian.Uint64(el[8:])|1<<24)
	})
	out, err := runChild(t, "TestRetainFaultChild", faultChildEnv, path)
	if err != nil || !strings.Contains(string(out), "ledger "+filepath.Clean(path)+" is corrupt") || !strings.Contains(string(out), "points outside the file") {
		t.Fatalf("child: %v\n%.2000s\nwant retention refused, naming the damage", err, out)
	}
}

const freelistChildEnv = "DEVLEDGER_TEST_FREELIST_LEDGER"

// TestFreelistChild opens, for TestADamagedFreelistCountIsNamed, the
// ledger its parent names: as a writer, then read-only to check it.
func TestFreelistChild(t *testing.T) {
	path := os.Getenv(freelistChildEnv)
	if path == "" {
		t.Skip("run by TestADamagedFreelistCountIsNamed")
	}
	if l, err := Open(path, Options{BootID: "b"}); err == nil {
		l.Close()
		fmt.Println("writer: opened")
	} else {
		fmt.Printf("writer: %v\n", err)
	}
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		fmt.Printf("reader: %v\n", err)
		return
	}
	defer l.Close()
	_, err = l.Check(context.Background())
	fmt.Printf("check: %v\n", err)
}

// bbolt copies the page ids a freelist page counts out of the mapped file
// as it opens a file to write, and as it checks one: a count past the
// page's span faults, and an id outside the file would be written to. A
// writer's open refuses such a file, and a check names it, rather than
// die. Each runs in a child, lest a regression take the suite down.
func TestADamagedFreelistCountIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(page []byte, pages uint64)
		want string
	}{
		{"count past its page", func(page []byte, _ uint64) {
			binary.LittleEndian.PutUint16(page[10:], 0xFFFF) // the count is in the first id
			binary.LittleEndian.PutUint64(page[pageHeader:], 1<<22)
		}, "more than its 1 pages hold"},
		{"id outside the file", func(page []byte, pages uint64) {
			binary.LittleEndian.PutUint16(page[10:], 1)
			binary.LittleEndian.PutUint64(page[pageHeader:], pages+100)
		}, "outside the file's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(markedLedger(t, 30))
			if err != nil {
				t.Fatal(err)
			}
			pageSize := os.Getpagesize()
			le := binary.LittleEndian
			meta := b[:pageSize]
			if other := b[pageSize : 2*pageSize]; le.Uint64(other[metaTxID:]) > le.Uint64(meta[metaTxID:]) {
				meta = other
			}
			freelist := le.Uint64(meta[metaFreelist:])
			page := b[int(freelist)*pageSize:]
			if le.Uint64(page) != freelist || le.Uint16(page[8:]) != 0x10 || le.Uint32(page[12:]) != 0 {
				t.Fatalf("page %d is no freelist page of one page", freelist)
			}
			tc.edit(page, le.Uint64(meta[metaPgid:]))
			path := filepath.Join(t.TempDir(), "freelist.db")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := runChild(t, "TestFreelistChild", freelistChildEnv, path)
			for _, line := range []string{"writer: ", "check: "} {
				if err != nil || !strings.Contains(string(out), line+"ledger "+path+" is corrupt: page") || !strings.Contains(string(out), tc.want) {
					t.Fatalf("child: %v\n%.2000s\nwant %q refused, naming the freelist: %s", err, out, line, tc.want)
				}
			}
		})
	}
}
