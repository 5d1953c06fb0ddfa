package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// openLog opens a fresh ledger in a temp dir, closed at cleanup.
func openLog(t *testing.T) *store.Log {
	t.Helper()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close ledger: %v", err)
		}
	})
	return l
}

func discovered(addr string) events.DeviceDiscovered {
	return events.DeviceDiscovered{Device: events.DeviceFacts{Address: addr, Vendor: "8086", Device: "1889", Class: "020000"}}
}

func TestRecordStampsAndSequences(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 8, time.FixedZone("CET", 3600))
	l := openLog(t)
	r := ledger.NewRecorder(l, "boot-1", func() time.Time { return at })
	var observed [][]events.Envelope
	r.Observe(func(envs []events.Envelope) {
		// Durable when observed: the store already reads them back.
		if got := l.LastSeq(); got != envs[len(envs)-1].Seq {
			t.Errorf("observer called before the batch was durable: last seq %d, batch ends at %d", got, envs[len(envs)-1].Seq)
		}
		observed = append(observed, slices.Clone(envs))
	})

	first, err := r.Record(context.Background(), discovered("0000:3b:02.0"), discovered("0000:3b:02.1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.Record(context.Background(), events.DeviceRemoved{Address: "0000:3b:02.0", Reason: "gone"})
	if err != nil {
		t.Fatal(err)
	}

	all := append(slices.Clone(first), second...)
	want := []struct {
		seq     uint64
		typ     events.Type
		subject string
	}{
		{1, events.TypeDeviceDiscovered, "0000:3b:02.0"},
		{2, events.TypeDeviceDiscovered, "0000:3b:02.1"},
		{3, events.TypeDeviceRemoved, "0000:3b:02.0"},
	}
	if len(all) != len(want) {
		t.Fatalf("got %d envelopes, want %d", len(all), len(want))
	}
	for i, w := range want {
		e := all[i]
		if e.Seq != w.seq || e.Type != w.typ || e.Subject != w.subject {
			t.Errorf("envelope %d = seq %d %s %s, want seq %d %s %s", i, e.Seq, e.Type, e.Subject, w.seq, w.typ, w.subject)
		}
		if e.BootID != "boot-1" {
			t.Errorf("envelope %d boot id = %q, want boot-1", i, e.BootID)
		}
		if !e.Time.Equal(at) || e.Time.Location() != time.UTC {
			t.Errorf("envelope %d time = %v, want %v in UTC", i, e.Time, at)
		}
	}
	if len(observed) != 2 || len(observed[0]) != 2 || len(observed[1]) != 1 {
		t.Fatalf("observer saw batches of %v, want [2 1]", batchSizes(observed))
	}
	if observed[1][0].Seq != 3 {
		t.Errorf("observer saw seq %d, want 3", observed[1][0].Seq)
	}

	var read []uint64
	if err := l.Read(1, func(e events.Envelope) error {
		if e.BootID != "boot-1" {
			t.Errorf("stored seq %d has boot id %q", e.Seq, e.BootID)
		}
		read = append(read, e.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []uint64{1, 2, 3}) {
		t.Errorf("ledger holds seqs %v, want [1 2 3]", read)
	}
	if r.BootID() != "boot-1" || r.Log() != l {
		t.Errorf("BootID/Log = %q/%p, want boot-1/%p", r.BootID(), r.Log(), l)
	}
}

func batchSizes(bs [][]events.Envelope) []int {
	out := make([]int, len(bs))
	for i, b := range bs {
		out[i] = len(b)
	}
	return out
}

func TestRecordNothingIsANoOp(t *testing.T) {
	l := openLog(t)
	r := ledger.NewRecorder(l, "boot-1", nil)
	r.Observe(func([]events.Envelope) { t.Error("observer called for an empty Record") })
	envs, err := r.Record(context.Background())
	if err != nil || envs != nil {
		t.Errorf("Record() = %v, %v; want nil, nil", envs, err)
	}
	if l.LastSeq() != 0 {
		t.Errorf("last seq %d after an empty Record, want 0", l.LastSeq())
	}
}

func TestRecordErrorNamesTheEventType(t *testing.T) {
	l := openLog(t)
	r := ledger.NewRecorder(l, "boot-1", nil)
	r.Observe(func([]events.Envelope) { t.Error("observer called for a failed Record") })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	envs, err := r.Record(context.Background(), events.KubeletRestarted{Socket: "kubelet.sock"}, discovered("0000:3b:02.0"))
	if err == nil {
		t.Fatalf("Record on a closed ledger succeeded with %d envelopes", len(envs))
	}
	if !strings.Contains(err.Error(), string(events.TypeKubeletRestarted)) {
		t.Errorf("error %q does not name %s", err, events.TypeKubeletRestarted)
	}
	if !errors.Is(err, store.ErrClosed) {
		t.Errorf("error %q does not wrap store.ErrClosed", err)
	}
	if envs != nil {
		t.Errorf("failed Record returned envelopes %v", envs)
	}
}

func TestRecordConcurrentCallsGetDistinctSequences(t *testing.T) {
	l := openLog(t)
	r := ledger.NewRecorder(l, "boot-1", nil)
	const callers, each = 8, 2
	var mu sync.Mutex
	var seqs []uint64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			envs, err := r.Record(context.Background(), discovered("0000:3b:02.0"), discovered(fmt.Sprintf("0000:3c:%02x.0", i)))
			if err != nil {
				t.Error(err)
				return
			}
			if envs[1].Seq != envs[0].Seq+1 {
				t.Errorf("one call's events split: seqs %d and %d", envs[0].Seq, envs[1].Seq)
			}
			mu.Lock()
			seqs = append(seqs, envs[0].Seq, envs[1].Seq)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs %v, want 1..%d without gaps or repeats", seqs, callers*each)
		}
	}
}

func TestReplayFoldsWhatWasRecorded(t *testing.T) {
	l := openLog(t)
	r := ledger.NewRecorder(l, "boot-1", nil)
	if _, err := r.Record(context.Background(), discovered("0000:3b:02.0"), discovered("0000:3b:02.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Record(context.Background(), events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "gone"}); err != nil {
		t.Fatal(err)
	}
	st, err := r.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Devices["0000:3b:02.0"]; !d.Present {
		t.Errorf("0000:3b:02.0 not present after replay: %+v", d)
	}
	if d := st.Devices["0000:3b:02.1"]; d.Present {
		t.Errorf("0000:3b:02.1 present after its removal: %+v", d)
	}
}

// A restarted actor replays what its last incarnation queued before it
// went, durable or not yet: Replay waits for the records queued before
// it. (A pool spawned in place of one of its name that stopped with a
// membership change in the queue took the ledger's members without it,
// and recorded its own change against them: live and ledger differed.)
func TestReplayReadsWhatWasQueuedBefore(t *testing.T) {
	rec, held, release := heldRecorder(t)
	// The writer holds the first record's batch: the second one queues
	// behind it, not yet written.
	for _, addr := range []string{"0000:3b:02.0", "0000:3b:02.1"} {
		if err := rec.RecordAsync(context.Background(), nil, []events.Payload{discovered(addr)}, func([]events.Envelope, error) {}); err != nil {
			t.Fatal(err)
		}
		waitHeld(t, held)
	}
	replayed := make(chan events.State, 1)
	go func() {
		st, err := rec.Replay()
		if err != nil {
			t.Error(err)
		}
		replayed <- st
	}()
	select {
	case st := <-replayed:
		t.Fatalf("Replay returned at seq %d while a record queued before it was not written", st.Seq)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case st := <-replayed:
		if _, ok := st.Devices["0000:3b:02.1"]; !ok || st.Seq != 2 {
			t.Fatalf("Replay at seq %d has %v, want both records", st.Seq, slices.Sorted(maps.Keys(st.Devices)))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Replay did not return once the records were written")
	}
}

// RecordAsync of nothing answers at once: an actor that persists nothing
// is not left waiting for an answer.
func TestRecordAsyncNothingAnswers(t *testing.T) {
	r := ledger.NewRecorder(openLog(t), "boot-1", nil)
	answered := false
	err := r.RecordAsync(context.Background(), nil, nil, func(envs []events.Envelope, err error) {
		answered = true
		if envs != nil || err != nil {
			t.Errorf("done(%v, %v), want nil, nil", envs, err)
		}
	})
	if err != nil || !answered {
		t.Errorf("RecordAsync of nothing = %v, answered %v; want nil, answered", err, answered)
	}
}

// A guard that refuses fails the record with its error, and nothing is
// written or observed.
func TestRecordAsyncHonoursTheGuard(t *testing.T) {
	l := openLog(t)
	r := ledger.NewRecorder(l, "boot-1", nil)
	if _, err := r.Record(context.Background(), discovered("0000:3b:02.0")); err != nil {
		t.Fatal(err)
	}
	r.Observe(func([]events.Envelope) { t.Error("observer called for a refused record") })
	errStale := errors.New("stale")
	g := &store.Guard{After: 0, Check: func(events.Envelope) error { return errStale }}
	answered := make(chan error, 1)
	if err := r.RecordAsync(context.Background(), g, []events.Payload{discovered("0000:3b:02.1")}, func(envs []events.Envelope, err error) {
		if envs != nil {
			t.Errorf("refused record answered with envelopes %v", envs)
		}
		answered <- err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-answered:
		if !errors.Is(err, errStale) || !strings.Contains(err.Error(), string(events.TypeDeviceDiscovered)) {
			t.Errorf("answer %v, want the guard's error, naming %s", err, events.TypeDeviceDiscovered)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	if got := l.LastSeq(); got != 1 {
		t.Errorf("last seq %d after a refused record, want 1", got)
	}
}
