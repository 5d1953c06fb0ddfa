package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
)

// crashChildEnv names the ledger a re-executed test binary appends to until
// it is killed.
const crashChildEnv = "DEVLEDGER_STORE_CRASH_CHILD"

// TestCrashChild is the child of TestKilledWriterLosesNothingAcknowledged;
// run directly it does nothing.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("only runs as the child of TestKilledWriterLosesNothingAcknowledged")
	}
	l, err := Open(path, Options{Node: "crash"})
	if err != nil {
		fmt.Println("open failed:", err)
		os.Exit(3)
	}
	// Several appenders, so that the kill also lands inside group commits.
	// A seq is printed only after Append returned it: printed means
	// acknowledged, hence on disk.
	var out sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				envs := make([]events.Envelope, 1+i%3)
				for j := range envs {
					envs[j] = ev(i, events.DeviceHealthChanged{Address: fmt.Sprintf("0000:3b:00.%d", g), Healthy: i%2 == 0, Reason: strings.Repeat("x", i%200)})
				}
				got, err := l.Append(context.Background(), envs...)
				if err != nil {
					fmt.Println("append failed:", err)
					os.Exit(3)
				}
				out.Lock()
				for _, e := range got {
					fmt.Printf("acked %d\n", e.Seq)
				}
				out.Unlock()
			}
		})
	}
	wg.Wait()
}

func TestKilledWriterLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	for round := range 3 {
		acked := runAndKill(t, path, 150*(round+1))
		l, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after the kill: %v", round, err)
		}
		rep, err := l.Check(context.Background())
		if err != nil {
			t.Fatalf("round %d: check after the kill: %v", round, err)
		}
		var missing []uint64
		for seq := range acked {
			if seq > rep.LastSeq {
				missing = append(missing, seq)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("round %d: %d acknowledged events lost (e.g. %d); the ledger ends at %d", round, len(missing), missing[0], rep.LastSeq)
		}
		if rep.Events != rep.LastSeq || rep.FirstSeq != 1 {
			t.Fatalf("round %d: report %+v", round, rep)
		}
		t.Logf("round %d: %d acknowledged, %d in the ledger", round, len(acked), rep.LastSeq)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		checkBolt(t, path)
	}
}

// runAndKill runs the child on path, SIGKILLs it once it has acknowledged at
// least n more events, and returns every seq it acknowledged.
func runAndKill(t *testing.T, path string, n int) map[uint64]bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]bool{}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		if seq, ok := strings.CutPrefix(line, "acked "); ok {
			v, err := strconv.ParseUint(seq, 10, 64)
			if err != nil {
				t.Fatalf("child said %q", line)
			}
			acked[v] = true
		} else if strings.Contains(line, "failed") {
			t.Errorf("child: %s", line)
		}
		if len(acked) >= n && !killed {
			cmd.Process.Kill() // SIGKILL: no deferred code, no Close
			killed = true
		}
	}
	cmd.Wait()
	if !killed {
		t.Fatalf("the child exited by itself after %d acknowledgements", len(acked))
	}
	return acked
}
