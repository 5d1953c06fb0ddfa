package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
)

func TestAppendRead(t *testing.T) {
	l := openTestLog(t)
	h := newHistory(1, 16)
	var want []events.Envelope
	for _, n := range []int{1, 5, 1, 30, 2} {
		got := mustAppend(t, l, h.take(n)...)
		for i, e := range got {
			if e.Seq != uint64(len(want)+i+1) {
				t.Fatalf("seq %d, want %d", e.Seq, len(want)+i+1)
			}
		}
		want = append(want, got...)
	}
	if l.LastSeq() != uint64(len(want)) || l.FirstSeq() != 1 {
		t.Fatalf("bounds %d..%d, want 1..%d", l.FirstSeq(), l.LastSeq(), len(want))
	}

	tests := []struct {
		name string
		from uint64
		want []events.Envelope
	}{
		{"from 0 is from the first", 0, want},
		{"from 1", 1, want},
		{"from the middle", 17, want[16:]},
		{"from the last", uint64(len(want)), want[len(want)-1:]},
		{"past the end", uint64(len(want) + 1), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := readAll(t, l, tc.from); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("read from %d: got %d events, want %d\ngot  %+v\nwant %+v", tc.from, len(got), len(tc.want), first(got), first(tc.want))
			}
		})
	}

	t.Run("fn error stops the read and is returned as is", func(t *testing.T) {
		stop := errors.New("enough")
		n := 0
		err := l.Read(0, func(events.Envelope) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if err != stop || n != 3 {
			t.Fatalf("err %v after %d events, want %v after 3", err, n, stop)
		}
	})

	t.Run("raw records decode to the same events", func(t *testing.T) {
		var got []events.Envelope
		err := l.ReadRaw(0, func(seq uint64, rec []byte) error {
			e, err := events.Unmarshal(rec)
			if err == nil && e.Seq != seq {
				err = fmt.Errorf("seq %d in record %d", e.Seq, seq)
			}
			got = append(got, e)
			return err
		})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("ReadRaw: err %v, %d events", err, len(got))
		}
	})

	// The envelopes Read delivered must not point into bbolt's memory map:
	// after Close unmaps the file, touching them would fault.
	read := readAll(t, l, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, want) {
		t.Fatal("events read before Close changed after it")
	}
}

func first(es []events.Envelope) any {
	if len(es) == 0 {
		return nil
	}
	return es[0]
}

func TestAppendReturnsWhatIsStored(t *testing.T) {
	l := openTestLog(t)
	loc := time.FixedZone("CET", 3600)
	e := events.Envelope{Time: time.Now().In(loc), BootID: "b", Payload: events.DeviceRemoved{Address: "0000:3b:00.1"}}
	got := mustAppend(t, l, e)[0]
	if got.Type != events.TypeDeviceRemoved || got.Subject != "0000:3b:00.1" || got.Version != events.CurrentVersion(events.TypeDeviceRemoved) || got.Seq != 1 {
		t.Errorf("returned %+v", got)
	}
	if read := readAll(t, l, 0)[0]; !reflect.DeepEqual(read, got) {
		t.Errorf("read %+v\nreturned %+v", read, got)
	}
}

func TestAppendConcurrentIsGapFree(t *testing.T) {
	l := openTestLog(t)
	const goroutines, calls = 16, 40
	var (
		mu  sync.Mutex
		got = map[uint64]events.Envelope{}
		wg  sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for c := range calls {
				n := 1 + (g+c)%3
				envs := make([]events.Envelope, n)
				for i := range envs {
					envs[i] = ev(c, events.DeviceHealthChanged{Address: fmt.Sprintf("g%d", g), Reason: fmt.Sprintf("call %d event %d", c, i)})
				}
				out, err := l.Append(context.Background(), envs...)
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				for i := range out {
					if i > 0 && out[i].Seq != out[i-1].Seq+1 {
						t.Errorf("one call's events got seqs %d then %d", out[i-1].Seq, out[i].Seq)
					}
				}
				mu.Lock()
				for _, e := range out {
					if _, dup := got[e.Seq]; dup {
						t.Errorf("seq %d handed out twice", e.Seq)
					}
					got[e.Seq] = e
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if uint64(len(got)) != l.LastSeq() {
		t.Fatalf("%d events acknowledged, last seq %d", len(got), l.LastSeq())
	}
	for i, e := range readAll(t, l, 0) {
		if e.Seq != uint64(i+1) || !reflect.DeepEqual(e, got[e.Seq]) {
			t.Fatalf("event %d read back as %+v, acknowledged as %+v", i+1, e, got[uint64(i+1)])
		}
	}
	if _, err := l.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// testReq is a request as Append hands it to the writer, with its answer.
type testReq struct {
	*appendReq
	answered chan struct{}
	out      []events.Envelope
	err      error
}

func queued(ctx context.Context, envs ...events.Envelope) *testReq {
	tr := &testReq{answered: make(chan struct{})}
	tr.appendReq = &appendReq{ctx: ctx, envs: envs, done: func(out []events.Envelope, err error) {
		tr.out, tr.err = out, err
		close(tr.answered)
	}}
	return tr
}

func TestCommitGivesEachCallerItsOwnResult(t *testing.T) {
	l := openTestLog(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	good1 := queued(bg, ev(1, events.KubeletRestarted{Socket: "a"}), ev(2, events.KubeletRestarted{Socket: "b"}))
	bad := queued(bg, ev(3, events.KubeletRestarted{Socket: "c"}), events.Envelope{Time: baseTime})
	late := queued(cancelled, ev(4, events.KubeletRestarted{Socket: "d"}))
	withdrawn := queued(bg, ev(5, events.KubeletRestarted{Socket: "e"}))
	withdrawn.state.Store(reqWithdrawn)
	mismatched := queued(bg, events.Envelope{Type: events.TypeSocketLost, Payload: events.KubeletRestarted{Socket: "f"}})
	good2 := queued(bg, ev(6, events.KubeletRestarted{Socket: "g"}))

	l.commit([]*appendReq{good1.appendReq, bad.appendReq, late.appendReq, withdrawn.appendReq, mismatched.appendReq, good2.appendReq})

	for _, r := range []*testReq{good1, bad, late, mismatched, good2} {
		<-r.answered
	}
	if good1.err != nil || good2.err != nil {
		t.Fatalf("good calls failed: %v, %v", good1.err, good2.err)
	}
	if bad.err == nil || mismatched.err == nil {
		t.Fatalf("bad calls succeeded: %v, %v", bad.err, mismatched.err)
	}
	if !errors.Is(late.err, context.Canceled) {
		t.Fatalf("cancelled call: %v", late.err)
	}
	if seqs := []uint64{good1.out[0].Seq, good1.out[1].Seq, good2.out[0].Seq}; !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("seqs %v, want [1 2 3]", seqs)
	}
	var sockets []string
	for _, e := range readAll(t, l, 0) {
		sockets = append(sockets, e.Payload.(events.KubeletRestarted).Socket)
	}
	if !slices.Equal(sockets, []string{"a", "b", "g"}) {
		t.Fatalf("ledger holds %v, want [a b g]", sockets)
	}
}

func TestFailedCommitFailsEveryCallerAndWritesNothing(t *testing.T) {
	l := openTestLog(t)
	mustAppend(t, l, ev(0, events.KubeletRestarted{Socket: "first"}))
	// Make the writer's idea of the next sequence disagree with bbolt's:
	// the transaction fails on its first put.
	l.lastSeq.Store(5)
	a := queued(context.Background(), ev(1, events.KubeletRestarted{Socket: "a"}))
	b := queued(context.Background(), ev(2, events.KubeletRestarted{Socket: "b"}))
	l.commit([]*appendReq{a.appendReq, b.appendReq})
	if a.err == nil || b.err == nil {
		t.Fatalf("errors %v, %v; want both to fail", a.err, b.err)
	}
	l.lastSeq.Store(1)
	if got := readAll(t, l, 0); len(got) != 1 {
		t.Fatalf("%d events in the ledger, want 1", len(got))
	}
	if out := mustAppend(t, l, ev(3, events.KubeletRestarted{Socket: "c"})); out[0].Seq != 2 {
		t.Fatalf("next append got seq %d, want 2", out[0].Seq)
	}
}

func TestAppendContext(t *testing.T) {
	l := openTestLog(t)

	t.Run("done before the call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := l.Append(ctx, ev(0, events.KubeletRestarted{Socket: "x"})); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})

	t.Run("done while waiting for the writer", func(t *testing.T) {
		// Hold the write lock: the writer takes the first call and blocks
		// in its commit, so the second call waits its turn.
		l.writeMu.Lock()
		firstDone := make(chan error, 1)
		if err := l.AppendAsync(context.Background(), []events.Envelope{ev(1, events.KubeletRestarted{Socket: "kept"})}, func(_ []events.Envelope, err error) {
			firstDone <- err
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return len(l.reqs) == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := l.Append(ctx, ev(2, events.KubeletRestarted{Socket: "dropped"}))
		l.writeMu.Unlock()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want context.DeadlineExceeded", err)
		}
		if err := <-firstDone; err != nil {
			t.Fatal(err)
		}
	})

	var sockets []string
	for _, e := range readAll(t, l, 0) {
		sockets = append(sockets, e.Payload.(events.KubeletRestarted).Socket)
	}
	if !slices.Equal(sockets, []string{"kept"}) {
		t.Fatalf("ledger holds %v, want [kept]", sockets)
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

func TestCloseWaitsForAppendsInFlight(t *testing.T) {
	l := openTestLog(t)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked []uint64
	)
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 50 {
				out, err := l.Append(context.Background(), ev(i, events.KubeletRestarted{Socket: fmt.Sprint(g)}))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, out[0].Seq)
				mu.Unlock()
			}
		})
	}
	close(start)
	// Close while appends are in flight: each either commits or gets
	// ErrClosed, and none is lost or half-written.
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 20
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.Append(context.Background(), ev(0, events.KubeletRestarted{})); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if err := l.Read(0, func(events.Envelope) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}

	l2, err := Open(l.Meta().Path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.LastSeq() != uint64(len(acked)) {
		t.Fatalf("%d appends acknowledged, ledger ends at %d", len(acked), l2.LastSeq())
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	l := openTestLog(t)
	h := newHistory(2, 8)
	want := mustAppend(t, l, h.take(40)...)
	meta := l.Meta()
	l = reopen(t, l, Options{Node: "another-node"})
	if got := l.Meta(); got != meta || got.Node != "node-7" || got.FormatVersion != FormatVersion || got.Created.IsZero() {
		t.Errorf("meta after reopen %+v, before %+v", got, meta)
	}
	if l.LastSeq() != 40 || l.FirstSeq() != 1 {
		t.Fatalf("bounds %d..%d", l.FirstSeq(), l.LastSeq())
	}
	want = append(want, mustAppend(t, l, h.take(3)...)...)
	if want[40].Seq != 41 {
		t.Fatalf("append after reopen got seq %d", want[40].Seq)
	}
	if got := readAll(t, l, 0); !reflect.DeepEqual(got, want) {
		t.Fatal("events differ after reopen")
	}
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	l := openTestLog(t)
	mustAppend(t, l, newHistory(3, 4).take(10)...)
	l = reopen(t, l, Options{ReadOnly: true})
	ctx := context.Background()
	if _, err := l.Append(ctx, ev(0, events.KubeletRestarted{})); !errors.Is(err, ErrReadOnly) {
		t.Errorf("append: %v", err)
	}
	if _, err := l.SaveSnapshot(ctx, events.NewState(), "x"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("snapshot: %v", err)
	}
	if _, _, err := l.Retain(ctx, Retention{MaxAge: time.Hour}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("retain: %v", err)
	}
	if got := readAll(t, l, 0); len(got) != 10 {
		t.Errorf("read %d events", len(got))
	}
}

// TestAppendUnderCancellationStorm races withdrawals against claims and
// promotions: every call must end, a call that failed must have written
// nothing, and every call that succeeded must be in the ledger, gap-free.
func TestAppendUnderCancellationStorm(t *testing.T) {
	l := openTestLog(t)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		acked  = map[string]uint64{}
		failed = map[string]bool{}
	)
	for g := range 16 {
		wg.Go(func() {
			for i := range 30 {
				id := fmt.Sprintf("g%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13)%2000)*time.Microsecond)
				out, err := l.Append(ctx, ev(i, events.DeviceRemoved{Address: "a", Reason: id}))
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					acked[id] = out[0].Seq
				case errors.Is(err, context.DeadlineExceeded):
					failed[id] = true
				default:
					t.Errorf("append %s: %v", id, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := readAll(t, l, 0)
	if len(got) != len(acked) {
		t.Fatalf("%d events in the ledger, %d acknowledged (%d failed)", len(got), len(acked), len(failed))
	}
	for _, e := range got {
		id := e.Payload.(events.DeviceRemoved).Reason
		if failed[id] || acked[id] != e.Seq {
			t.Fatalf("event %d (%s): acknowledged as %d, failed %v", e.Seq, id, acked[id], failed[id])
		}
	}
	t.Logf("%d acknowledged, %d withdrawn", len(acked), len(failed))
	// A withdrawn call returns before the writer takes it off the queue;
	// one more append, queued after every one of them, returns only once
	// the writer has drained them all.
	mustAppend(t, l, ev(0, events.KubeletRestarted{}))
	if n := len(l.reqs); n != 0 {
		t.Fatalf("after the storm: %d queued", n)
	}
}

// AppendAsync answers every call, in the order made, once durable; a
// synchronous Append made after it is committed after it.
func TestAppendAsyncKeepsOrder(t *testing.T) {
	l := openTestLog(t)
	var mu sync.Mutex
	var answered []uint64
	const n = 200
	for i := range n {
		err := l.AppendAsync(context.Background(), []events.Envelope{ev(i, events.KubeletRestarted{Socket: fmt.Sprint(i)})}, func(out []events.Envelope, err error) {
			if err != nil {
				t.Errorf("async append %d: %v", i, err)
				return
			}
			if got := out[0].Payload.(events.KubeletRestarted).Socket; got != fmt.Sprint(i) {
				t.Errorf("call %d answered with %s", i, got)
			}
			mu.Lock()
			answered = append(answered, out[0].Seq)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	last := mustAppend(t, l, ev(n, events.KubeletRestarted{Socket: "sync"}))
	if last[0].Seq != n+1 {
		t.Errorf("the synchronous append after %d async ones got seq %d", n, last[0].Seq)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(answered) != n || !slices.IsSorted(answered) || answered[0] != 1 {
		t.Errorf("answers in order %v, want 1..%d", answered, n)
	}
	for i, e := range readAll(t, l, 0)[:n] {
		if got := e.Payload.(events.KubeletRestarted).Socket; got != fmt.Sprint(i) {
			t.Fatalf("event %d is %s, want %d", e.Seq, got, i)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendAsync(context.Background(), []events.Envelope{ev(0, events.KubeletRestarted{})}, func([]events.Envelope, error) {
		t.Error("done called for a call that was refused")
	}); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendAsync after Close: %v, want ErrClosed", err)
	}
}

// A call that would take a batch past MaxBatch is carried to the next
// commit, neither merged into an oversized one nor left out: with calls of
// two events and MaxBatch three, each commit holds exactly one call, and
// every call is answered with its own events, in order.
func TestMaxBatchCarriesACallToTheNextCommit(t *testing.T) {
	l := openTestLog(t, func(o *Options) { o.MaxBatch = 3 })
	const calls = 6
	type answer struct {
		out []events.Envelope
		err error
	}
	answers := make([]chan answer, calls)
	for i := range answers {
		answers[i] = make(chan answer, 1)
	}
	before := l.Commits()
	// Hold the writer in its first commit, so that the calls after it
	// queue and the batches form from what is queued.
	l.writeMu.Lock()
	queuedAll := make(chan error, 1)
	go func() {
		for i := range calls {
			envs := []events.Envelope{
				ev(2*i, events.KubeletRestarted{Socket: fmt.Sprintf("%d-a", i)}),
				ev(2*i+1, events.KubeletRestarted{Socket: fmt.Sprintf("%d-b", i)}),
			}
			if err := l.AppendAsync(context.Background(), envs, func(out []events.Envelope, err error) {
				answers[i] <- answer{out, err}
			}); err != nil {
				queuedAll <- err
				return
			}
		}
		queuedAll <- nil
	}()
	waitFor(t, func() bool { return len(l.reqs) == cap(l.reqs) })
	l.writeMu.Unlock()
	if err := <-queuedAll; err != nil {
		t.Fatalf("AppendAsync: %v", err)
	}

	var want []string
	for i, ch := range answers {
		a := <-ch
		if a.err != nil || len(a.out) != 2 {
			t.Fatalf("call %d answered %d events, %v; want its 2", i, len(a.out), a.err)
		}
		for j, e := range a.out {
			if seq := uint64(2*i + j + 1); e.Seq != seq {
				t.Errorf("call %d event %d got seq %d, want %d", i, j, e.Seq, seq)
			}
		}
		want = append(want, fmt.Sprintf("%d-a", i), fmt.Sprintf("%d-b", i))
	}
	var got []string
	for _, e := range readAll(t, l, 0) {
		got = append(got, e.Payload.(events.KubeletRestarted).Socket)
	}
	if !slices.Equal(got, want) {
		t.Errorf("ledger holds %v, want %v", got, want)
	}
	if n := l.Commits() - before; n != calls {
		t.Errorf("%d commits for %d calls of 2 events under MaxBatch 3, want one each", n, calls)
	}
}

// A guarded append is written only when its guard passes every event
// committed after its After, and those of its batch ahead of it; it sees
// none before, and a refusal fails that call alone, writing nothing of it.
func TestAppendGuarded(t *testing.T) {
	l := openTestLog(t)
	mustAppend(t, l, ev(0, events.KubeletRestarted{Socket: "a"}), ev(1, events.KubeletRestarted{Socket: "b"}))
	errChanged := errors.New("changed")
	// refuse fails at a socket named in sockets, and lists what it saw.
	var saw []string
	refuse := func(sockets ...string) Guard {
		saw = nil
		return Guard{After: 1, Check: func(e events.Envelope) error {
			s := e.Payload.(events.KubeletRestarted).Socket
			saw = append(saw, s)
			if slices.Contains(sockets, s) {
				return fmt.Errorf("%w: %s", errChanged, s)
			}
			return nil
		}}
	}
	ctx := context.Background()

	// Committed after After: b is seen, a (at After) is not.
	if _, err := l.AppendGuarded(ctx, refuse("b"), ev(2, events.KubeletRestarted{Socket: "c"})); !errors.Is(err, errChanged) {
		t.Fatalf("guarded append after a change: %v, want the guard's error", err)
	}
	if !slices.Equal(saw, []string{"b"}) {
		t.Errorf("the guard saw %v, want [b]", saw)
	}
	if got := readAll(t, l, 0); len(got) != 2 {
		t.Fatalf("%d events after a refused append, want 2", len(got))
	}
	out, err := l.AppendGuarded(ctx, refuse("a"), ev(2, events.KubeletRestarted{Socket: "c"}))
	if err != nil || out[0].Seq != 3 {
		t.Fatalf("guarded append with nothing changed: %v, %v", out, err)
	}

	// In one batch: the guard sees the call queued ahead of it, not the
	// one behind, and only it fails.
	ahead := queued(ctx, ev(3, events.KubeletRestarted{Socket: "d"}))
	guarded := queued(ctx, ev(4, events.KubeletRestarted{Socket: "e"}))
	g := refuse("d")
	g.After = 3
	guarded.guard = &g
	behind := queued(ctx, ev(5, events.KubeletRestarted{Socket: "f"}))
	var answered []string // in the order the calls were answered
	for name, r := range map[string]*testReq{"ahead": ahead, "guarded": guarded, "behind": behind} {
		done := r.done
		r.done = func(out []events.Envelope, err error) { answered = append(answered, name); done(out, err) }
	}
	l.commit([]*appendReq{ahead.appendReq, guarded.appendReq, behind.appendReq})
	if !errors.Is(guarded.err, errChanged) || ahead.err != nil || behind.err != nil {
		t.Fatalf("batch: ahead %v, guarded %v, behind %v; want only the guarded call refused", ahead.err, guarded.err, behind.err)
	}
	// The refusal rests on ahead: it is answered once ahead is durable.
	if !slices.Equal(answered, []string{"ahead", "behind", "guarded"}) {
		t.Errorf("calls answered in the order %v, want the refusal last", answered)
	}
	if !slices.Equal(saw, []string{"d"}) {
		t.Errorf("the guard saw %v, want [d]", saw)
	}
	var sockets []string
	for _, e := range readAll(t, l, 0) {
		sockets = append(sockets, e.Payload.(events.KubeletRestarted).Socket)
	}
	if !slices.Equal(sockets, []string{"a", "b", "c", "d", "f"}) {
		t.Fatalf("ledger holds %v, want [a b c d f]", sockets)
	}

	// The same for an asynchronous call: done gets the guard's error.
	refused := make(chan error, 1)
	if err := l.AppendAsyncGuarded(ctx, refuse("f"), []events.Envelope{ev(8, events.KubeletRestarted{Socket: "x"})},
		func(_ []events.Envelope, err error) { refused <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-refused; !errors.Is(err, errChanged) {
		t.Fatalf("guarded async append after a change: %v, want the guard's error", err)
	}

	// Should the batch-mate it rests on not commit, the refusal is that
	// failure: what refused the call never landed.
	before := l.LastSeq()
	mate := queued(ctx, ev(9, events.KubeletRestarted{Socket: "y"}))
	guarded = queued(ctx, ev(10, events.KubeletRestarted{Socket: "z"}))
	g = refuse("y")
	g.After = before
	guarded.guard = &g
	// One refused by a committed event keeps its refusal.
	old := queued(ctx, ev(11, events.KubeletRestarted{Socket: "w"}))
	g2 := refuse("a")
	g2.After = 0
	old.guard = &g2
	l.lastSeq.Store(before + 5) // the transaction fails on its first put
	l.commit([]*appendReq{mate.appendReq, guarded.appendReq, old.appendReq})
	l.lastSeq.Store(before)
	if mate.err == nil || guarded.err == nil || errors.Is(guarded.err, errChanged) || guarded.err.Error() != mate.err.Error() {
		t.Fatalf("failed commit: mate %v, guarded %v; want the commit's error for both", mate.err, guarded.err)
	}
	if !errors.Is(old.err, errChanged) {
		t.Fatalf("failed commit: a call refused by a committed event got %v, want the guard's error", old.err)
	}

	// A guard that panics fails its call, not the writer.
	boom := Guard{After: 0, Check: func(events.Envelope) error { panic("boom") }}
	if _, err := l.AppendGuarded(ctx, boom, ev(6, events.KubeletRestarted{Socket: "g"})); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("a panicking guard: %v", err)
	}
	mustAppend(t, l, ev(7, events.KubeletRestarted{Socket: "h"}))
}

// Sync returns only once every append queued before it is answered, and
// gives up when its ctx ends; a Sync with nothing queued returns at once.
func TestSyncWaitsForTheAppendsQueuedBefore(t *testing.T) {
	l := openTestLog(t)
	if err := l.Sync(context.Background()); err != nil {
		t.Fatalf("Sync on an idle ledger: %v", err)
	}
	// The first append's answer holds the writer, so what comes next
	// queues: the second append (its answer held too), then the Syncs.
	entered, release, proceed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	answered := make(chan uint64, 2)
	defer close(proceed)
	defer close(release)
	for i, socket := range []string{"a", "b"} {
		if err := l.AppendAsync(context.Background(), []events.Envelope{ev(i+1, events.KubeletRestarted{Socket: socket})}, func(out []events.Envelope, err error) {
			if err != nil {
				t.Error(err)
			}
			answered <- out[0].Seq
			if i == 0 {
				close(entered)
				<-release
			} else {
				<-proceed
			}
		}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-entered
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Sync(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sync while the appends before it wait: %v, want context.DeadlineExceeded", err)
	}
	synced := make(chan error, 1)
	go func() { synced <- l.Sync(context.Background()) }()
	waitFor(t, func() bool { return len(l.reqs) == 3 }) // the second append, the two Syncs
	release <- struct{}{}
	select {
	case err := <-synced:
		t.Fatalf("Sync returned (%v) before the second append was answered", err)
	case <-time.After(100 * time.Millisecond):
	}
	proceed <- struct{}{}
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if len(answered) != 2 || l.LastSeq() != 2 {
		t.Fatalf("Sync returned with %d of the 2 appends before it answered, the ledger at seq %d", len(answered), l.LastSeq())
	}
}

// Sync whose ctx has ended when the writer takes it, in a batch behind an
// append, does not return nil before that append commits: the writer
// answers it ctx.Err() as it takes it, ahead of the commit, and Sync may
// see that answer and the end of its ctx at once.
func TestSyncWhoseCtxEndedInTheWriterDoesNotReportSuccess(t *testing.T) {
	l := openTestLog(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	// Which of two ready cases a select takes is chance: try often enough
	// that the wrong one is taken at least once.
	for i := range 32 {
		// The first append's answer holds the writer, so what comes next
		// queues into one batch: an append, the Sync, and a guarded
		// append whose guard, shown the first, holds the writer between
		// its answer to the Sync and the commit.
		entered, release := make(chan struct{}), make(chan struct{})
		if err := l.AppendAsync(bg, []events.Envelope{ev(3*i, events.KubeletRestarted{Socket: "a"})}, func([]events.Envelope, error) {
			close(entered)
			<-release
		}); err != nil {
			t.Fatal(err)
		}
		<-entered
		if err := l.AppendAsync(bg, []events.Envelope{ev(3*i+1, events.KubeletRestarted{Socket: "b"})}, func(_ []events.Envelope, err error) {
			if err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		ctx := &gatedCtx{Context: ended, gate: make(chan struct{})}
		synced := make(chan error, 1)
		go func() { synced <- l.Sync(ctx) }()
		waitFor(t, func() bool { return len(l.reqs) == 2 })
		var got error
		uncommitted := l.LastSeq() + 1
		g := Guard{After: l.LastSeq(), Check: func(events.Envelope) error {
			close(ctx.gate)
			got = <-synced
			return nil
		}}
		guarded := make(chan error, 1)
		if err := l.AppendAsyncGuarded(bg, g, []events.Envelope{ev(3*i+2, events.KubeletRestarted{Socket: "c"})}, func(_ []events.Envelope, err error) {
			guarded <- err
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return len(l.reqs) == 3 })
		close(release)
		if err := <-guarded; err != nil {
			t.Fatal(err)
		}
		if !errors.Is(got, context.Canceled) {
			t.Fatalf("try %d: Sync with an ended ctx returned %v before seq %d committed, want context.Canceled", i, got, uncommitted)
		}
	}
}

// gatedCtx is an ended context whose Done, after its first call (Sync
// queueing the call), waits for gate before it answers: Sync's select
// then finds the writer's answer and the end of its ctx both ready.
type gatedCtx struct {
	context.Context
	calls atomic.Int32
	gate  chan struct{}
}

func (c *gatedCtx) Done() <-chan struct{} {
	if c.calls.Add(1) == 1 {
		return nil // queue the call, which an ended ctx might not
	}
	<-c.gate
	return c.Context.Done()
}
