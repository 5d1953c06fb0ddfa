package supervise

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// goroutineID is the running goroutine's number, read from its stack
// header ("goroutine 42 [running]:").
func goroutineID(t *testing.T) int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		t.Fatalf("stack header %q", buf)
	}
	id, err := strconv.Atoi(string(f[1]))
	if err != nil {
		t.Fatalf("stack header %q: %v", buf, err)
	}
	return id
}

// TestWarmRunsEveryTurn: turns scheduled from many goroutines at once all
// run, each once.
func TestWarmRunsEveryTurn(t *testing.T) {
	d := newWarm(50 * time.Millisecond)
	const n = 2000
	var mu sync.Mutex
	ran := make(map[int]int)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		go d.Schedule(func() {
			mu.Lock()
			ran[i]++
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	if len(ran) != n {
		t.Fatalf("%d of %d turns ran", len(ran), n)
	}
	for i, c := range ran {
		if c != 1 {
			t.Fatalf("turn %d ran %d times", i, c)
		}
	}
}

// TestWarmReusesAWaitingGoroutine: a turn scheduled after the last one
// finished runs on a goroutine that ran an earlier turn, not on a new one,
// and the goroutines end once idle.
func TestWarmReusesAWaitingGoroutine(t *testing.T) {
	d := newWarm(200 * time.Millisecond)
	seen := make(map[int]bool)
	reused := 0
	const turns = 100
	for range turns {
		done := make(chan int)
		d.Schedule(func() { done <- goroutineID(t) })
		id := <-done
		if seen[id] {
			reused++
		}
		seen[id] = true
		time.Sleep(time.Millisecond) // the goroutine gets back to waiting
	}
	if reused < turns*9/10 {
		t.Fatalf("%d of %d turns ran on a goroutine that had run one before (%d goroutines)", reused, turns, len(seen))
	}

	before := runtime.NumGoroutine()
	d.Schedule(func() {})
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() >= before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if now := runtime.NumGoroutine(); now >= before {
		t.Fatalf("%d goroutines 5s after the last turn, %d before it: the waiting ones did not end", now, before)
	}
}
