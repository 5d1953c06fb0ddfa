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
)

// loopingLedger writes a ledger whose events bucket has a branch page
// for its root, then points that branch's first element back at itself:
// bbolt's cursor would descend it until memory ran out.
func loopingLedger(t *testing.T) string {
	t.Helper()
	// A copy: the written ledger's own check at cleanup would meet the loop.
	b, err := os.ReadFile(markedLedger(t, 2000))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "loop.db")
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
	if le.Uint16(page[8:]) != pageBranch {
		t.Fatalf("the events root, page %d, is not a branch", root)
	}
	le.PutUint64(page[pageHeader+8:], root) // element 0's page id
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLoopChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), loopChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the writer's open did not return in 20s: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "open: ledger "+filepath.Clean(path)) || !strings.Contains(string(out), "loops") {
		t.Fatalf("child: %v\n%s\nwant the open refused, naming the file and the loop", err, out)
	}
}
