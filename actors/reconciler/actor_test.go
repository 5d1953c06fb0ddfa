package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
)

// listerFunc is a Lister.
type listerFunc func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error)

func (f listerFunc) List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	return f(ctx)
}

// awaitStatus asks the reconciler of f for its status until done says
// so, for up to 10 s, and returns the last.
func awaitStatus(t *testing.T, f *actortest.Family, done func(*Status) bool) *Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if st := res.(*Status); done(st) || time.Now().After(deadline) {
			return st
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bindings are the AllocationBound events in l, by sequence.
func bindings(t *testing.T, l *store.Log) map[uint64]events.AllocationBound {
	t.Helper()
	out := map[uint64]events.AllocationBound{}
	err := l.Read(0, func(e events.Envelope) error {
		if b, ok := e.Payload.(events.AllocationBound); ok {
			out[e.Seq] = b
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseOf is when l recorded the release of allocation seq, and why;
// the zero time if it did not.
func releaseOf(t *testing.T, l *store.Log, seq uint64) (at time.Time, reason string) {
	t.Helper()
	if err := l.Read(seq, func(e events.Envelope) error {
		if r, ok := e.Payload.(events.DevicesReleased); ok && r.AllocationSeq == seq {
			at, reason = e.Time, r.Reason
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return at, reason
}

// holdCommits holds l's writer on a commit (of a KubeletRestarted) for
// d: what is queued meanwhile commits after it.
func holdCommits(t *testing.T, l *store.Log, d time.Duration) {
	t.Helper()
	held := make(chan struct{})
	if err := l.AppendAsync(context.Background(), []events.Envelope{events.New(events.KubeletRestarted{Socket: "k"}, time.Now(), "boot-1")},
		func([]events.Envelope, error) { <-held }); err != nil {
		t.Error(err)
	}
	time.AfterFunc(d, func() { close(held) })
}

// ledgerWithAllocation opens a ledger holding one allocation of dev in
// pool, and returns it with its Recorder, the allocation's sequence and
// the ledger's state.
func ledgerWithAllocation(t *testing.T, pool string, devs ...string) (*store.Log, *ledger.Recorder, uint64, events.State) {
	t.Helper()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	rec := ledger.NewRecorder(l, "boot-1", nil)
	envs, err := rec.Record(context.Background(), events.ConfigApplied{Path: "config.json", SHA256: "1", Pools: []events.PoolSpec{{Resource: pool}}},
		events.DevicesAllocated{Pool: pool, DeviceIDs: devs})
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	return l, rec, envs[1].Seq, replayed
}

// ledgerAllocatedAt is ledgerWithAllocation with both events stamped at,
// as a node whose clock NTP has since stepped recorded them; a restarted
// daemon's recorder reads it back.
func ledgerAllocatedAt(t *testing.T, pool, dev string, at time.Time) (*ledger.Recorder, uint64, events.State) {
	t.Helper()
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	envs, err := l.Append(context.Background(),
		events.New(events.ConfigApplied{Path: "config.json", SHA256: "1", Pools: []events.PoolSpec{{Resource: pool}}}, at, "boot-1"),
		events.New(events.DevicesAllocated{Pool: pool, DeviceIDs: []string{dev}}, at, "boot-1"))
	if err != nil {
		t.Fatal(err)
	}
	rec := ledger.NewRecorder(l, "boot-2", nil)
	replayed, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	return rec, envs[1].Seq, replayed
}

// kubeletPods is a kubelet whose listed pods a test sets as it goes.
type kubeletPods struct {
	pods atomic.Pointer[[]*podresourcesapi.PodResources]
}

func listing(pods ...*podresourcesapi.PodResources) *kubeletPods {
	k := &kubeletPods{}
	k.set(pods...)
	return k
}

func (k *kubeletPods) set(pods ...*podresourcesapi.PodResources) { k.pods.Store(&pods) }

func (k *kubeletPods) lister() listerFunc {
	return func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return &podresourcesapi.ListPodResourcesResponse{PodResources: *k.pods.Load()}, nil
	}
}

// noPods is a kubelet that lists no pods: no container claims anything.
var noPods = listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{}, nil
})

// A round records nothing about an allocation that another allocation of
// its device superseded after the round read the ledger: the pods it
// listed may predate the new allocation. It is stale, and a round that
// follows attributes the allocation live then, once the node has told of
// it. Here the new allocation is queued with the store after the round
// read the ledger and before it records, as a pool's Allocate may be.
func TestARoundDoesNotRecordWhatWentStale(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)

	pods := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}
	var once sync.Once
	second := make(chan uint64, 1)
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		once.Do(func() {
			// A new allocation of dev, behind a held commit: the round
			// reads the ledger without it, and its events queue after it.
			holdCommits(t, l, 300*time.Millisecond)
			if err := l.AppendAsync(context.Background(), []events.Envelope{events.New(events.DevicesAllocated{Pool: pool, DeviceIDs: []string{dev}, Supersedes: []uint64{first}}, time.Now(), "boot-1")},
				func(envs []events.Envelope, err error) {
					if err == nil {
						second <- envs[0].Seq
					}
				}); err != nil {
				t.Error(err)
			}
		})
		return pods, nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: 10 * time.Millisecond, LeakGrace: time.Hour, Log: zerolog.Nop()}))

	var seq uint64
	select {
	case seq = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the second allocation never landed")
	}
	// The round that follows the stale one leaves the new allocation
	// alone: the node has not told of it (its pool may not hold it yet).
	status := func(done func(*Status) bool) *Status { return awaitStatus(t, f, done) }
	if st := status(func(st *Status) bool { return st.Rounds > 0 }); st.Rounds == 0 || st.Allocations[seq] != "" {
		t.Fatalf("after the stale round: %+v, want a round done and #%d live, unbound", st, seq)
	}
	// Told of it, as the node does once the pool holds it, the next
	// round binds it.
	f.Sys.Root.Send(f.Child, &Allocated{Seq: seq})
	if st := status(func(st *Status) bool { return st.Allocations[seq] != "" }); st.Allocations[seq] != "ns/pod-a/main" {
		t.Fatalf("allocation #%d: %+v, want it bound to ns/pod-a/main", seq, st)
	}
	for e, b := range bindings(t, l) {
		if b.AllocationSeq != seq {
			t.Errorf("#%d binds allocation #%d, superseded by #%d before it", e, b.AllocationSeq, seq)
		}
	}
}

// The pods a round lists may predate an allocation that lands while it
// lists them, even one the node tells of before the list comes back: the
// round is stale, and the next list says who holds the device now. Here
// the kubelet first lists the container the device was taken from, then
// the one it was given to: the allocation is bound to the second only.
func TestARoundIsStaleByWhatLandsWhileItLists(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	holding := func(pod string) *podresourcesapi.ListPodResourcesResponse {
		return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			kubelettest.PodHolding("ns", pod, "main", pool, dev)}}
	}
	spawned := make(chan *actortest.Family, 1)
	second := make(chan uint64, 1)
	var calls atomic.Int32
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		if calls.Add(1) > 1 {
			return holding("pod-b"), nil
		}
		// The kubelet gives dev to pod-b as the list of pod-a goes out.
		f := <-spawned
		envs, err := rec.Record(context.Background(), events.DevicesAllocated{Pool: pool, DeviceIDs: []string{dev}, Supersedes: []uint64{first}})
		if err != nil {
			t.Error(err)
			return holding("pod-a"), nil
		}
		f.Sys.Root.Send(f.Child, &Allocated{Seq: envs[0].Seq})
		second <- envs[0].Seq
		return holding("pod-a"), nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: 10 * time.Millisecond, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	spawned <- f
	seq := <-second
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if res.(*Status).Allocations[seq] == "ns/pod-b/main" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("allocation #%d never bound to pod-b: %+v", seq, res)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for e, b := range bindings(t, l) {
		if b.Pod != "pod-b" {
			t.Errorf("#%d binds allocation #%d to %s, which the list of before it showed", e, b.AllocationSeq, b.Pod)
		}
	}
}

// A pool releases an allocation whose Allocate the kubelet gave up on
// once it lands late: a round that read the ledger before that release
// must not record anything of the allocation, which is no longer live
// (here it would be a leak suspect: no pod holds it). The round is stale,
// as for an allocation that lands while it lists.
func TestARoundIsStaleByAReleaseThatLandsWhileItLists(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	var once sync.Once
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		once.Do(func() {
			// The pool's release, behind a held commit: the round reads
			// the ledger without it, and its events queue after it.
			holdCommits(t, l, 300*time.Millisecond)
			if err := rec.RecordAsync(context.Background(), nil, []events.Payload{events.DevicesReleased{AllocationSeq: first, Pool: pool, DeviceIDs: []string{dev},
				Reason: "the kubelet gave up on its Allocate before the ledger recorded it"}}, func([]events.Envelope, error) {}); err != nil {
				t.Error(err)
			}
		})
		return &podresourcesapi.ListPodResourcesResponse{}, nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: 10 * time.Millisecond, LeakGrace: time.Nanosecond, Log: zerolog.Nop()}))
	f.Sys.Root.Send(f.Child, &Allocated{Seq: first})
	if st := awaitStatus(t, f, func(st *Status) bool { return st.Rounds > 0 }); st.Rounds == 0 || len(st.Allocations) > 0 {
		t.Fatalf("after the round: %+v, want a round done and nothing live", st)
	}
	if err := l.Read(0, func(e events.Envelope) error {
		if s, ok := e.Payload.(events.AllocationLeakSuspected); ok {
			t.Errorf("#%d suspects allocation #%d of a leak after its release", e.Seq, s.AllocationSeq)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A restarted reconciler has lost what it was told: it asks its parent
// to tell it again (NeedTold), and attributes no allocation the ledger
// has until then, since its pool may not hold it yet.
func TestARestartedReconcilerIsToldAgain(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	_, rec, first, _ := ledgerWithAllocation(t, pool, dev)
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}, nil
	})
	// No Replayed: it starts as a restarted reconciler does.
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister,
		Interval: time.Hour, AfterAllocate: 10 * time.Millisecond, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	actortest.Next[*NeedTold](t, f)
	status := func(done func(*Status) bool) *Status { return awaitStatus(t, f, done) }
	if st := status(func(st *Status) bool { return st.Rounds > 0 }); st.Rounds == 0 || st.Allocations[first] != "" {
		t.Fatalf("before it was told: %+v, want a round done and #%d unbound", st, first)
	}
	f.Sys.Root.Send(f.Child, &Allocated{Seq: first})
	if st := status(func(st *Status) bool { return st.Allocations[first] != "" }); st.Allocations[first] != "ns/pod-a/main" {
		t.Fatalf("once told: %+v, want #%d bound to ns/pod-a/main", st, first)
	}
}

// A round's events are applied once they are durable, and the mailbox
// does not wait for the fsync meanwhile: a Query is answered from the
// fold so far, and what comes after it waits for the round.
func TestARoundDoesNotHoldTheMailboxForItsRecord(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	_, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
	var heldOnce, openOnce sync.Once
	held, open := make(chan struct{}), make(chan struct{})
	release := func() { openOnce.Do(func() { close(open) }) }
	t.Cleanup(release) // a failing test must not leave the writer held
	rec.Observe(func(envs []events.Envelope) {
		if envs[0].Type == events.TypeAllocationBound {
			heldOnce.Do(func() { close(held) })
			<-open
		}
	})
	pods := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) { return pods, nil })
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the round's binding never reached the ledger")
	}
	f.Sys.Root.Send(f.Child, &Reconcile{})
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("a Query while a round's events are being recorded: %v", err)
	}
	if st := res.(*Status); st.Rounds != 0 || st.Allocations[seq] != "" {
		t.Errorf("before the round's events are durable: %+v, want no round done and #%d unbound", st, seq)
	}
	release()
	if st := awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 2 }); st.Rounds != 2 || st.Allocations[seq] != "ns/pod-a/main" {
		t.Errorf("after the round and the one asked for meanwhile: %+v, want 2 rounds and #%d bound", st, seq)
	}
}

// A reconciler attributes the pools of the config in force in the ledger,
// also after a restart: here a reload added a pool after the reconciler
// started, and a device of that pool is reported by the kubelet and
// lacking in the ledger: recovered on its second sight, after a restart.
func TestAReconcilerAttributesThePoolsOfTheConfigInForce(t *testing.T) {
	const pool, added, dev = "example.com/vf", "example.com/net", "0000:3b:02.4"
	_, rec, _, replayed := ledgerWithAllocation(t, pool, "0000:3b:02.1")
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			kubelettest.PodHolding("ns", "pod-b", "main", added, dev)}}, nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds > 0 })
	if _, err := rec.Record(context.Background(), events.ConfigApplied{Path: "config.json", SHA256: "2",
		Pools: []events.PoolSpec{{Resource: pool}, {Resource: added}}}); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	actortest.Next[*NeedTold](t, f)
	f.Sys.Root.Send(f.Child, &Reconcile{})
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 2 })
	recovered := false
	if err := rec.Log().Read(0, func(e events.Envelope) error {
		if r, ok := e.Payload.(events.AllocationRecovered); ok && r.Pool == added {
			recovered = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !recovered {
		t.Errorf("no AllocationRecovered of %s after the restart: it does not attribute the pools of the config in force", added)
	}
}

// The answer to a List an earlier incarnation sent out is not taken by
// the next one: it may be older than what the next one read and listed.
// Here the first incarnation's List (the pod holds the device) comes back
// after the restarted one listed no pod at all; no binding is recorded.
func TestAnEarlierIncarnationsListIsNotTaken(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	var calls atomic.Int32
	release, returned := make(chan struct{}), make(chan struct{})
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		if calls.Add(1) > 1 {
			return &podresourcesapi.ListPodResourcesResponse{}, nil
		}
		<-release
		defer close(returned)
		return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}, nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	defer close(release)
	for deadline := time.Now().Add(10 * time.Second); calls.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first round never listed")
		}
	}
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	actortest.Next[*NeedTold](t, f)
	f.Sys.Root.Send(f.Child, &Allocated{Seq: first})
	f.Sys.Root.Send(f.Child, &Reconcile{})
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds > 0 })
	release <- struct{}{}
	<-returned
	time.Sleep(100 * time.Millisecond) // the stale answer reaches the mailbox
	awaitStatus(t, f, func(*Status) bool { return true })
	if b := bindings(t, l); len(b) != 0 {
		t.Errorf("bindings %v recorded from the earlier incarnation's List", b)
	}
}

// A kubelet just started lists no pod until it has synced them: a bound
// allocation whose pod it does not list is not released while it
// settles, and a round of its own once it has settled releases it when
// the pod is gone indeed. It has started when the parent says so
// (KubeletBack), or when PodResources answers after failing as it does
// while the kubelet is away (Unavailable): a kubelet may serve it before
// its kubelet.sock is there, so before the parent hears of it and before
// KubeletRestarted is in the ledger. An answer after a call that merely
// timed out is not a kubelet's start: the pod is released at once.
func TestAKubeletThatJustStartedReleasesNothingUntilItSettles(t *testing.T) {
	for _, how := range []string{"told", "unavailable", "timed out"} {
		t.Run(how, func(t *testing.T) {
			const pool, dev = "example.com/vf", "0000:3b:02.1"
			l, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
			type answer struct {
				pods []*podresourcesapi.PodResources
				err  error
			}
			var now atomic.Pointer[answer]
			now.Store(&answer{pods: []*podresourcesapi.PodResources{kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}})
			lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
				a := now.Load()
				return &podresourcesapi.ListPodResourcesResponse{PodResources: a.pods}, a.err
			})
			settle := 500 * time.Millisecond
			if how == "timed out" {
				// Released at once, not after the settle: an hour, so
				// that a slow machine's release is not taken for one
				// that waited for it.
				settle = time.Hour
			}
			f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
				Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, RetryMax: 50 * time.Millisecond,
				KubeletSettle: settle, Log: zerolog.Nop()}))
			awaitStatus(t, f, func(st *Status) bool { return st.Allocations[seq] == "ns/pod-a/main" })

			var back time.Time
			var st *Status
			if how == "told" {
				now.Store(&answer{}) // the kubelet restarts
				back = time.Now()
				f.Sys.Root.Send(f.Child, &Reconcile{KubeletBack: true})
				st = awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 2 })
			} else {
				err := status.Error(codes.Unavailable, "connection refused") // the kubelet goes down
				if how == "timed out" {
					err = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
				}
				now.Store(&answer{err: fmt.Errorf("list pod resources: %w", err)})
				f.Sys.Root.Send(f.Child, &Reconcile{})
				awaitStatus(t, f, func(st *Status) bool { return !st.Available })
				back = time.Now()
				now.Store(&answer{}) // and answers: the backoff's retry finds it
				st = awaitStatus(t, f, func(st *Status) bool { return st.Available })
			}
			if how == "timed out" {
				awaitStatus(t, f, func(st *Status) bool { _, live := st.Allocations[seq]; return !live })
				if released, _ := releaseOf(t, l, seq); released.IsZero() || released.Sub(back) >= settle {
					t.Errorf("#%d released %s after an answer that followed a timeout, want within %s", seq, released.Sub(back), settle)
				}
				return
			}
			if time.Since(back) < settle && st.Allocations[seq] != "ns/pod-a/main" {
				t.Fatalf("a round while the kubelet settles let go of #%d: %q", seq, st.Allocations[seq])
			}
			// The pod is gone indeed: released once the kubelet has
			// settled, with no round asked for.
			awaitStatus(t, f, func(st *Status) bool { _, live := st.Allocations[seq]; return !live })
			released, _ := releaseOf(t, l, seq)
			if released.IsZero() {
				t.Fatalf("#%d was not released after the kubelet settled", seq)
			}
			if d := released.Sub(back); d < settle {
				t.Errorf("#%d released %s after the kubelet came back, within its %s to settle", seq, d, settle)
			}
		})
	}
}

// A kubelet serves PodResources as it starts, before it has its pods
// and before its kubelet.sock is there for the parent to hear of it. A
// restart between two rounds fails no List, but the registrar records
// the kubelet stopped as its streams end: the first answer after that
// comes from a kubelet that has just started, and releases nothing until
// it settles.
func TestAnAnswerAfterTheLedgerSaysTheKubeletStoppedSettles(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
	pods := listing(kubelettest.PodHolding("ns", "pod-a", "main", pool, dev))
	const settle = 500 * time.Millisecond
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, KubeletSettle: settle, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Allocations[seq] == "ns/pod-a/main" })

	if _, err := rec.Record(context.Background(), events.KubeletStopped{Socket: "kubelet.sock", Reason: "kubelet.sock refuses connections"}); err != nil {
		t.Fatal(err)
	}
	pods.set() // the new kubelet has no pod yet
	back := time.Now()
	f.Sys.Root.Send(f.Child, &Reconcile{})
	st := awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 2 })
	if time.Since(back) < settle && st.Allocations[seq] != "ns/pod-a/main" {
		t.Fatalf("a round answered by a kubelet recorded stopped let go of #%d: %q", seq, st.Allocations[seq])
	}
	// The pod is gone indeed: released once the kubelet has settled.
	awaitStatus(t, f, func(st *Status) bool { _, live := st.Allocations[seq]; return !live })
	released, _ := releaseOf(t, l, seq)
	if released.IsZero() {
		t.Fatalf("#%d was not released after the kubelet settled", seq)
	}
	if d := released.Sub(back); d < settle {
		t.Errorf("#%d released %s after the kubelet answered again, within its %s to settle", seq, d, settle)
	}
}

// A kubelet restart recorded while the node's clock ran hours ahead,
// which NTP then stepped back: the kubelet settles for KubeletSettle from
// then, not for as long as the step, and a pod gone meanwhile is released.
func TestAKubeletRestartStampedAheadOfASteppedClockSettles(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
	pods := listing(kubelettest.PodHolding("ns", "pod-a", "main", pool, dev))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, KubeletSettle: 100 * time.Millisecond, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Allocations[seq] == "ns/pod-a/main" })

	ahead := time.Now().Add(8 * time.Hour)
	if _, err := l.Append(context.Background(), events.New(events.KubeletRestarted{Socket: "kubelet.sock"}, ahead, "boot-1")); err != nil {
		t.Fatal(err)
	}
	pods.set() // the pod is gone
	f.Sys.Root.Send(f.Child, &Reconcile{})
	awaitStatus(t, f, func(st *Status) bool { _, live := st.Allocations[seq]; return !live })
	if released, _ := releaseOf(t, l, seq); released.IsZero() {
		t.Errorf("#%d was not released: the kubelet still settles by the clock before its step", seq)
	}
}

// An allocation recorded while the node's clock ran hours ahead, which
// NTP then stepped back, and that no container claims: it is suspected
// once LeakGrace has passed from when the reconciler met it, not once the
// clock has caught up with its stamp.
func TestAnAllocationStampedAheadOfASteppedClockIsSuspected(t *testing.T) {
	rec, seq, replayed := ledgerAllocatedAt(t, "example.com/vf", "0000:3b:02.1", time.Now().Add(8*time.Hour))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: noPods, Replayed: &replayed,
		Interval: 20 * time.Millisecond, AfterAllocate: time.Hour, LeakGrace: 100 * time.Millisecond, Log: zerolog.Nop()}))
	st := awaitStatus(t, f, func(st *Status) bool { return slices.Contains(st.Suspects, seq) })
	if !slices.Contains(st.Suspects, seq) {
		t.Errorf("#%d is not suspected after %d rounds: its age is counted from a stamp ahead of the stepped clock", seq, st.Rounds)
	}
}

// An allocation recorded while the node's clock ran hours ahead, which
// NTP then stepped back: a reconciler restarted after LeakGrace has passed
// from when the first incarnation met it counts on from then, not from a
// fresh reading of the wall clock, which would start its grace over.
func TestAnAllocationsGraceOutlivesAReconcilerRestart(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&start)
	rec, seq, replayed := ledgerAllocatedAt(t, "example.com/vf", "0000:3b:02.1", start.Add(8*time.Hour))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: noPods, Replayed: &replayed, Now: func() time.Time { return *clock.Load() },
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	if st := awaitStatus(t, f, func(st *Status) bool { return st.Rounds > 0 }); len(st.Suspects) != 0 {
		t.Fatalf("suspected at once: %+v", st)
	}
	later := start.Add(2 * time.Hour)
	clock.Store(&later)
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	actortest.Next[*NeedTold](t, f)
	// A round before the parent tells of the allocation again.
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds > 0 })
	f.Sys.Root.Send(f.Child, &Allocated{Seq: seq})
	f.Sys.Root.Send(f.Child, &Reconcile{})
	st := awaitStatus(t, f, func(st *Status) bool { return slices.Contains(st.Suspects, seq) })
	if !slices.Contains(st.Suspects, seq) {
		t.Errorf("#%d is not suspected two hours after the reconciler met it: its restart started the grace over", seq)
	}
}

// A kubelet restarted while the API server is away lists static pods
// alone, past any settle time: while it does not list the daemon's own
// pod, no bound allocation whose pod it does not list is released; once it
// lists it again, one whose pod is gone is.
func TestAKubeletThatDoesNotListThisDaemonReleasesNothing(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
	self := kubelettest.Pod("devledger", "devledger-x7k2p", kubelettest.Container("devledger"))
	static := kubelettest.Pod("kube-system", "etcd-node-1", kubelettest.Container("etcd"))
	pods := listing(self, kubelettest.PodHolding("ns", "pod-a", "main", pool, dev))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed,
		Interval: 20 * time.Millisecond, AfterAllocate: time.Hour, LeakGrace: time.Hour, KubeletSettle: 50 * time.Millisecond,
		Self: Pod{Namespace: "devledger", Name: "devledger-x7k2p"}, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Allocations[seq] == "ns/pod-a/main" })

	pods.set(static) // the kubelet restarts, no API server
	f.Sys.Root.Send(f.Child, &Reconcile{KubeletBack: true})
	time.Sleep(300 * time.Millisecond) // six times its settle
	st := awaitStatus(t, f, func(st *Status) bool { return true })
	rounds := st.Rounds
	st = awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= rounds+3 })
	if st.Allocations[seq] != "ns/pod-a/main" {
		t.Fatalf("a kubelet that does not list the daemon's pod let go of #%d: %q", seq, st.Allocations[seq])
	}
	pods.set(static, self) // synced: pod-a is gone indeed
	awaitStatus(t, f, func(st *Status) bool { _, live := st.Allocations[seq]; return !live })
	if _, reason := releaseOf(t, l, seq); reason != "ns/pod-a/main no longer holds it" {
		t.Errorf("#%d released for %q", seq, reason)
	}
}

// A daemon that does not know its own pod (POD_NAME unset, as in a
// manifest that dropped the downward API) cannot tell a kubelet that has
// not synced its pods at its start: it says so once, as it starts, and a
// daemon that knows its pod does not.
func TestADaemonThatDoesNotKnowItsPodSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name string
		self Pod
		want int
	}{
		{name: "no pod: warned once", want: 1},
		{name: "its pod: no warning", self: Pod{Namespace: "devledger", Name: "devledger-x7k2p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pool, dev = "example.com/vf", "0000:3b:02.1"
			_, rec, _, replayed := ledgerWithAllocation(t, pool, dev)
			lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
				return &podresourcesapi.ListPodResourcesResponse{}, nil
			})
			var log actortest.Log
			f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed, Self: tc.self,
				Interval: 10 * time.Millisecond, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.New(&log)}))
			// Restarted, it is still the same daemon: no second warning.
			f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
			awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 2 })
			if n := log.Count("warn", "POD_NAME unset"); n != tc.want {
				t.Errorf("the log warns %d times that the daemon's pod is unknown, want %d:\n%s", n, tc.want, log.String())
			}
		})
	}
}

// Retention may drop events the reconciler's fold has not read yet (it
// reads at its rounds and queries): it then folds the ledger's state,
// which holds them, and does not crash. Here the node goes on after the
// reconciler read the ledger: an allocation, a snapshot, and retention up
// to it.
func TestAReconcilerBehindRetentionFoldsTheLedgersState(t *testing.T) {
	const pool, dev, other = "example.com/vf", "0000:3b:02.1", "0000:3b:02.2"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return &podresourcesapi.ListPodResourcesResponse{}, nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Replayed: &replayed, Lister: lister,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds > 0 })

	ctx := context.Background()
	envs, err := rec.Record(ctx, events.DevicesAllocated{Pool: pool, DeviceIDs: []string{other}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, st, "test"); err != nil {
		t.Fatal(err)
	}
	if _, dropped, err := l.Retain(ctx, store.Retention{MaxBytes: 1}); err != nil || !dropped || l.FirstSeq() <= envs[0].Seq {
		t.Fatalf("retention: dropped %v, %v; the ledger starts at #%d", dropped, err, l.FirstSeq())
	}
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatalf("a query after retention cut past the reconciler's fold: %v", err)
	}
	got := res.(*Status)
	if _, ok := got.Allocations[envs[0].Seq]; !ok {
		t.Errorf("allocations %v: #%d, dropped before the reconciler read it, is missing", got.Allocations, envs[0].Seq)
	}
	if _, ok := got.Allocations[first]; !ok {
		t.Errorf("allocations %v: #%d is missing", got.Allocations, first)
	}
	f.NothingFor(t, 100*time.Millisecond) // no NeedTold: it did not restart
}

// Retention may drop the reconciler's own events between their commit and
// its reading them back. They are not in the ledger to read then, yet the
// node must hear of them: it tells of them from what the store answered,
// and folds the ledger's state, which holds them. Here the reconciler's
// mailbox is held from the commit of its binding until retention dropped
// it.
func TestAReconcilersOwnEventsDroppedBeforeItReadThemAreTold(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	pods := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}
	var f *actortest.Family
	spawned, landed := make(chan struct{}), make(chan events.Envelope, 1)
	rec.Observe(func(envs []events.Envelope) {
		if _, ok := envs[0].Payload.(events.AllocationBound); ok {
			proc, _ := f.Sys.ProcessRegistry.Get(f.Child)
			proc.SendSystemMessage(f.Child, &actor.SuspendMailbox{})
			landed <- envs[0]
		}
	})
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		<-spawned
		return pods, nil
	})
	f = actortest.Spawn(t, Props(Config{Recorder: rec, Replayed: &replayed, Lister: lister,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	close(spawned)
	var bound events.Envelope
	select {
	case bound = <-landed:
	case <-time.After(10 * time.Second):
		t.Fatal("no binding recorded")
	}
	ctx := context.Background()
	st, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(ctx, st, "test"); err != nil {
		t.Fatal(err)
	}
	if _, dropped, err := l.Retain(ctx, store.Retention{MaxBytes: 1}); err != nil || !dropped || l.FirstSeq() <= bound.Seq {
		t.Fatalf("retention: dropped %v, %v; the ledger starts at #%d", dropped, err, l.FirstSeq())
	}
	proc, _ := f.Sys.ProcessRegistry.Get(f.Child)
	proc.SendSystemMessage(f.Child, &actor.ResumeMailbox{})

	if got := actortest.Next[*Recorded](t, f); got.Event.Seq != bound.Seq {
		t.Errorf("the node heard of #%d (%s), want the binding #%d", got.Event.Seq, got.Event.Type, bound.Seq)
	}
	if got := awaitStatus(t, f, func(*Status) bool { return true }); got.Allocations[first] != "ns/pod-a/main" {
		t.Errorf("allocations %v: #%d not bound to ns/pod-a/main", got.Allocations, first)
	}
	f.NothingFor(t, 100*time.Millisecond) // no NeedTold: it did not restart
}

// A device two containers hold is a conflict, recorded once while it
// stands: not again by the reconciler that a crash started afresh.
func TestAStandingConflictIsRecordedOnceAcrossCrashes(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			kubelettest.PodHolding("ns", "pod-a", "main", pool, dev),
			kubelettest.PodHolding("ns", "pod-b", "main", pool, dev)}}, nil
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	conflicts := func() int {
		n := 0
		if err := l.Read(0, func(e events.Envelope) error {
			if _, ok := e.Payload.(events.AllocationConflict); ok {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	twoRounds := func() {
		t.Helper()
		awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 1 })
		f.Sys.Root.Send(f.Child, &Reconcile{})
		awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 2 })
	}
	twoRounds()
	if n := conflicts(); n != 1 {
		t.Fatalf("%d conflicts recorded, want 1", n)
	}
	for crash := range 2 {
		f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
		actortest.Next[*NeedTold](t, f)
		f.Sys.Root.Send(f.Child, &Allocated{Seq: first})
		twoRounds()
		if n := conflicts(); n != 1 {
			t.Fatalf("after crash %d: the standing conflict recorded %d times, want once", crash+1, n)
		}
	}
}

// A daemon started on a ledger that says PodResources is unavailable,
// with PodResources failing still, says so once in its own log: not with
// each retry, and not never because the ledger said it before.
func TestAReconcilerSaysOnceThatPodResourcesStillFails(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	_, rec, _, _ := ledgerWithAllocation(t, pool, dev)
	if _, err := rec.Record(context.Background(), events.AttributionChanged{Available: false, Reason: "feature gate off"}); err != nil {
		t.Fatal(err)
	}
	replayed, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		calls.Add(1)
		return nil, errors.New("feature gate off")
	})
	var log actortest.Log
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, RetryMax: 10 * time.Millisecond, Log: zerolog.New(&log)}))
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	awaitStatus(t, f, func(st *Status) bool { return !st.Available })
	if n := strings.Count(log.String(), "pod resources still unavailable"); n != 1 {
		t.Errorf("after %d failed lists the log says %d times that pod resources are unavailable, want once:\n%s", calls.Load(), n, log.String())
	}
}

// A ledger that refuses a round's events (here one opened read-only; on a
// node, a full disk) is logged as an error once: the rounds that try again
// say it at debug, not once each.
func TestALedgerThatRefusesRoundsIsLoggedOnce(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, _, _, replayed := ledgerWithAllocation(t, pool, dev)
	ro := storetest.ReopenReadOnly(t, l)
	var lists atomic.Int32
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		lists.Add(1)
		return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}, nil // a binding to record
	})
	var log actortest.Log
	actortest.Spawn(t, Props(Config{Recorder: ledger.NewRecorder(ro, "boot-1", nil), Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: 10 * time.Millisecond, LeakGrace: time.Hour, Log: zerolog.New(&log)}))
	deadline := time.Now().Add(10 * time.Second)
	for log.Count("", "cannot record reconciliation") < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	all, errorLines := log.Count("", "cannot record reconciliation"), log.Count("error", "cannot record reconciliation")
	if all < 4 || errorLines != 1 {
		t.Errorf("%d rounds (%d lists) the ledger refused logged %d errors, want %d rounds logging 1:\n%s", all, lists.Load(), errorLines, 4, log.String())
	}
}

// A Quiet that comes while a round's List is out is answered once the
// round has recorded what it found, not before: a test that waits for the
// reconciler to be at rest must not take a round in flight for none (the
// daemon's model test then raced its next step against the round).
func TestAQuietWaitsForTheRoundOut(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	l, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
	listing, answer := make(chan struct{}, 1), make(chan struct{})
	pods := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		kubelettest.PodHolding("ns", "pod-a", "main", pool, dev)}}
	lister := listerFunc(func(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		select {
		case listing <- struct{}{}:
		default:
		}
		select {
		case <-answer:
			return pods, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed, CallTimeout: time.Minute,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	select {
	case <-listing:
	case <-time.After(10 * time.Second):
		t.Fatal("the first round never listed")
	}
	q := &ledger.Quiet{Done: make(chan struct{})}
	f.Sys.Root.Send(f.Child, q)
	// The reconciler takes its mailbox meanwhile: a Query is answered.
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-q.Done:
		t.Fatal("a Quiet was answered while the round's List was out")
	default:
	}
	close(answer)
	select {
	case <-q.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the Quiet was never answered after the round")
	}
	if b := bindings(t, l); len(b) != 1 {
		t.Errorf("at rest, the ledger has bindings %v, want the round's binding of #%d", b, seq)
	}
}

// The node hears of every change to a live allocation that a round
// records, the first of a round's events included: the binding, then the
// release once its pod is gone.
func TestTheParentHearsOfEachBindingAndRelease(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	_, rec, seq, replayed := ledgerWithAllocation(t, pool, dev)
	pods := listing(kubelettest.PodHolding("ns", "pod-a", "main", pool, dev))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	if got := actortest.Next[*Recorded](t, f); got.Event.Type != events.TypeAllocationBound {
		t.Fatalf("the node heard of #%d (%s), want the binding of #%d", got.Event.Seq, got.Event.Type, seq)
	}
	pods.set() // the pod is gone
	f.Sys.Root.Send(f.Child, &Reconcile{})
	got := actortest.Next[*Recorded](t, f)
	if r, ok := got.Event.Payload.(events.DevicesReleased); !ok || r.AllocationSeq != seq {
		t.Fatalf("the node heard of #%d (%s), want the release of #%d", got.Event.Seq, got.Event.Type, seq)
	}
}

// An allocation recovered from the kubelet is attributed as any other:
// released once its container lets go of it.
func TestARecoveredAllocationIsReleasedWhenItsContainerGoes(t *testing.T) {
	const pool, dev, lost = "example.com/vf", "0000:3b:02.1", "0000:3b:02.2"
	_, rec, _, replayed := ledgerWithAllocation(t, pool, dev)
	pods := listing(kubelettest.PodHolding("ns", "pod-b", "main", pool, lost))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 1 })
	f.Sys.Root.Send(f.Child, &Reconcile{}) // the second sight recovers it
	recovered := actortest.Next[*Recorded](t, f)
	if _, ok := recovered.Event.Payload.(events.AllocationRecovered); !ok {
		t.Fatalf("the node heard of #%d (%s), want the recovery of %s", recovered.Event.Seq, recovered.Event.Type, lost)
	}
	pods.set() // pod-b is gone
	f.Sys.Root.Send(f.Child, &Reconcile{})
	st := awaitStatus(t, f, func(st *Status) bool { _, live := st.Allocations[recovered.Event.Seq]; return !live })
	if _, live := st.Allocations[recovered.Event.Seq]; live {
		t.Errorf("the recovered allocation #%d is live after its container went: %+v", recovered.Event.Seq, st)
	}
}

// A reconciler that starts on a ledger whose kubelet restarted a moment
// ago (the node restarted after it) lets the kubelet settle: a bound pod
// it does not list yet is not taken as gone.
func TestAReconcilerStartedAfterAKubeletRestartLetsItSettle(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	_, rec, seq, _ := ledgerWithAllocation(t, pool, dev)
	if _, err := rec.Record(context.Background(),
		events.AllocationBound{AllocationSeq: seq, Pool: pool, DeviceIDs: []string{dev}, Namespace: "ns", Pod: "pod-a", Container: "main"},
		events.KubeletRestarted{Socket: "kubelet.sock"}); err != nil {
		t.Fatal(err)
	}
	replayed, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	lister := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return &podresourcesapi.ListPodResourcesResponse{}, nil // no pod synced yet
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: lister, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, KubeletSettle: time.Hour, Log: zerolog.Nop()}))
	if st := awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 1 }); st.Allocations[seq] != "ns/pod-a/main" {
		t.Errorf("a round while the kubelet settles let go of #%d: %+v", seq, st)
	}
}

// checkpointEntry is a container's devices as the kubelet's device
// manager checkpoints them.
type checkpointEntry struct {
	uid, container, resource string
	devices                  []string
}

// writeCheckpoint writes entries to path laid out as the kubelet's
// device manager writes kubelet_internal_checkpoint (devices by NUMA
// node, the allocation response, the registered devices, a checksum),
// into a temporary file renamed into place as it does.
func writeCheckpoint(t *testing.T, path string, entries ...checkpointEntry) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"Data":{"PodDeviceEntries":[`)
	for i, e := range entries {
		if i > 0 {
			b.WriteString(",")
		}
		ids, err := json.Marshal(e.devices)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, `{"PodUID":%q,"ContainerName":%q,"ResourceName":%q,"DeviceIDs":{"0":%s},"AllocResp":"CgA="}`,
			e.uid, e.container, e.resource, ids)
	}
	b.WriteString(`],"RegisteredDevices":{}},"Checksum":1234567890}`)
	writeAtomically(t, path, b.String())
}

func writeAtomically(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-checkpoint")
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A binding carries the UID the kubelet's checkpoint gives the one pod
// whose container of that name holds exactly the allocation's devices
// of its resource; any other entry, or two pods that match, leave it
// empty rather than guess.
func TestABindingCarriesThePodUIDOfTheKubeletsCheckpoint(t *testing.T) {
	const pool, dev, other = "example.com/vf", "0000:3b:02.1", "0000:3b:02.2"
	const uid, uid2 = "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00", "0d3e7a42-81b6-4f0e-b3c9-5e6f7a8b9c01"
	for _, tc := range []struct {
		name    string
		entries []checkpointEntry
		want    string
		// allocated are the devices allocated and held, if not dev.
		allocated []string
	}{
		{"match", []checkpointEntry{{uid2, "main", pool, []string{other}}, {uid, "main", pool, []string{dev}}, {uid2, "side", pool, []string{dev}}}, uid, nil},
		{"another container", []checkpointEntry{{uid, "side", pool, []string{dev}}}, "", nil},
		{"another resource", []checkpointEntry{{uid, "main", "example.com/net", []string{dev}}}, "", nil},
		{"more devices", []checkpointEntry{{uid, "main", pool, []string{dev, other}}}, "", nil},
		{"two pods", []checkpointEntry{{uid, "main", pool, []string{dev}}, {uid2, "main", pool, []string{dev}}}, "", nil},
		{"no entries", nil, "", nil},
		// The kubelet asks for devices in no order, and files them by
		// NUMA node; the checkpoint is read sorted.
		{"devices in another order", []checkpointEntry{{uid, "main", pool, []string{dev, other}}}, uid, []string{other, dev}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs := tc.allocated
			if devs == nil {
				devs = []string{dev}
			}
			l, rec, seq, replayed := ledgerWithAllocation(t, pool, devs...)
			path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
			writeCheckpoint(t, path, tc.entries...)
			pods := listing(kubelettest.PodHolding("db", "db-0", "main", pool, devs...))
			f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed, Checkpoint: path,
				Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
			if got := actortest.Next[*Recorded](t, f); got.Event.Type != events.TypeAllocationBound {
				t.Fatalf("recorded %s, want the binding of #%d", got.Event.Type, seq)
			}
			for _, b := range bindings(t, l) {
				if b.AllocationSeq != seq || b.UID != tc.want {
					t.Errorf("binding of #%d to %s/%s/%s has UID %q, want %q", b.AllocationSeq, b.Namespace, b.Pod, b.Container, b.UID, tc.want)
				}
			}
			st, err := rec.Replay()
			if err != nil {
				t.Fatal(err)
			}
			if b := st.Allocations[seq].Binding; b == nil || b.UID != tc.want {
				t.Errorf("the fold's binding of #%d is %+v, want UID %q", seq, b, tc.want)
			}
		})
	}
}

// A checkpoint that is missing, unreadable or in a layout not read here
// never keeps a binding from being recorded: it is recorded without a
// UID. The log says so once each time the checkpoint's condition
// changes, not each round.
func TestACheckpointThatCannotBeReadLeavesTheUIDEmptyAndIsLoggedOnce(t *testing.T) {
	const pool, dev, uid = "example.com/vf", "0000:3b:02.1", "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00"
	l, rec, _, replayed := ledgerWithAllocation(t, pool, dev)
	path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	pods := listing()
	var log actortest.Log
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed, Checkpoint: path,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.New(&log)}))
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 1 })

	// Each round binds the allocation to another container of the pod.
	steps := []struct {
		checkpoint func()
		wantUID    string
	}{
		{func() {}, ""}, // missing
		{func() {}, ""},
		{func() { writeCheckpoint(t, path, checkpointEntry{uid, "c2", pool, []string{dev}}) }, uid},
		{func() { writeAtomically(t, path, `{"Data":{"PodDeviceEntries":[{"PodUID":"`) }, ""}, // torn
		{func() {}, ""},
		{func() { writeAtomically(t, path, `{"Data":{"PodDeviceEntries":null},"Checksum":1}`) }, ""},
	}
	for i, step := range steps {
		step.checkpoint()
		container := fmt.Sprintf("c%d", i)
		pods.set(kubelettest.PodHolding("db", "db-0", container, pool, dev))
		f.Sys.Root.Send(f.Child, &Reconcile{})
		if got := actortest.Next[*Recorded](t, f); got.Event.Type != events.TypeAllocationBound {
			t.Fatalf("round %d recorded %s, want a binding", i, got.Event.Type)
		}
		all := bindings(t, l)
		last := all[slices.Max(slices.Collect(maps.Keys(all)))]
		if last.Container != container || last.UID != step.wantUID {
			t.Errorf("round %d bound to %s with UID %q, want %s with %q", i, last.Container, last.UID, container, step.wantUID)
		}
	}
	if n := log.Count("warn", "device checkpoint"); n != 2 {
		t.Errorf("the log warns %d times of the checkpoint, want 2 (missing, then torn):\n%s", n, log.String())
	}
	if n := log.Count("info", "device checkpoint is read again"); n != 2 {
		t.Errorf("the log says %d times that the checkpoint is read again, want 2:\n%s", n, log.String())
	}
}

// The kubelet writes a container's checkpoint entry after our Allocate
// has answered, and leaves a deleted pod's entries in the file until it
// next writes it. A pod deleted and made again under its name, given the
// same devices, is listed by PodResources before its entry is written:
// a round then reads the old pod's entry, which matches the new pod's
// binding in all but the UID. It is not taken: the reconciler read it
// before the new allocation was in the ledger. An entry the kubelet
// writes after the allocation is taken.
func TestAPodMadeAgainOnItsDevicesIsNotGivenTheOldPodsUID(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	const uid1, uid2 = "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00", "0d3e7a42-81b6-4f0e-b3c9-5e6f7a8b9c01"
	l, rec, first, replayed := ledgerWithAllocation(t, pool, dev)
	path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	writeCheckpoint(t, path, checkpointEntry{uid1, "main", pool, []string{dev}})
	pods := listing(kubelettest.PodHolding("db", "db-0", "main", pool, dev))
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed, Checkpoint: path,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	bound := func(seq uint64, want string) {
		t.Helper()
		got := actortest.Next[*Recorded](t, f)
		if b, ok := got.Event.Payload.(events.AllocationBound); !ok || b.AllocationSeq != seq || b.UID != want {
			t.Fatalf("recorded %s %+v, want the binding of #%d with UID %q", got.Event.Type, got.Event.Payload, seq, want)
		}
	}
	bound(first, uid1)

	// db-0 is deleted; the kubelet does not write its checkpoint for that.
	pods.set()
	f.Sys.Root.Send(f.Child, &Reconcile{})
	if got := actortest.Next[*Recorded](t, f); got.Event.Type != events.TypeDevicesReleased {
		t.Fatalf("recorded %s, want the release of #%d", got.Event.Type, first)
	}

	// db-0 made again gets dev; the round runs before the kubelet has
	// written the new pod's entry.
	allocate := func() uint64 {
		t.Helper()
		envs, err := rec.Record(context.Background(), events.DevicesAllocated{Pool: pool, DeviceIDs: []string{dev}})
		if err != nil {
			t.Fatal(err)
		}
		f.Sys.Root.Send(f.Child, &Allocated{Seq: envs[0].Seq})
		pods.set(kubelettest.PodHolding("db", "db-0", "main", pool, dev))
		return envs[0].Seq
	}
	second := allocate()
	f.Sys.Root.Send(f.Child, &Reconcile{})
	bound(second, "")

	// Deleted and made again once more, with the kubelet's entry for it
	// written before the round.
	pods.set()
	f.Sys.Root.Send(f.Child, &Reconcile{})
	if got := actortest.Next[*Recorded](t, f); got.Event.Type != events.TypeDevicesReleased {
		t.Fatalf("recorded %s, want the release of #%d", got.Event.Type, second)
	}
	third := allocate()
	writeCheckpoint(t, path, checkpointEntry{uid2, "main", pool, []string{dev}})
	f.Sys.Root.Send(f.Child, &Reconcile{})
	bound(third, uid2)
	if n := len(bindings(t, l)); n != 3 {
		t.Errorf("the ledger has %d bindings, want 3", n)
	}
}

// So too across a daemon restart: the checkpoint still holds the entry
// of a pod the last daemon bound and released, which this one has not
// read. Its first round reads the file, so that the entry is known to
// be older than any allocation made since.
func TestAPodMadeAgainAfterADaemonRestartIsNotGivenTheOldPodsUID(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	const uid1 = "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00"
	_, rec, first, _ := ledgerWithAllocation(t, pool, dev)
	if _, err := rec.Record(context.Background(),
		events.AllocationBound{AllocationSeq: first, Pool: pool, DeviceIDs: []string{dev}, Namespace: "db", Pod: "db-0", UID: uid1, Container: "main"},
		events.DevicesReleased{AllocationSeq: first, Pool: pool, DeviceIDs: []string{dev}, Reason: "db/db-0/main no longer holds it"}); err != nil {
		t.Fatal(err)
	}
	replayed, err := rec.Replay()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	writeCheckpoint(t, path, checkpointEntry{uid1, "main", pool, []string{dev}})
	pods := listing()
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: pods.lister(), Replayed: &replayed, Checkpoint: path,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, Log: zerolog.Nop()}))
	awaitStatus(t, f, func(st *Status) bool { return st.Rounds >= 1 })

	envs, err := rec.Record(context.Background(), events.DevicesAllocated{Pool: pool, DeviceIDs: []string{dev}})
	if err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Allocated{Seq: envs[0].Seq})
	pods.set(kubelettest.PodHolding("db", "db-0", "main", pool, dev))
	f.Sys.Root.Send(f.Child, &Reconcile{})
	got := actortest.Next[*Recorded](t, f)
	if b, ok := got.Event.Payload.(events.AllocationBound); !ok || b.AllocationSeq != envs[0].Seq || b.UID != "" {
		t.Fatalf("recorded %s %+v, want the binding of #%d without a UID", got.Event.Type, got.Event.Payload, envs[0].Seq)
	}
}

// A node whose PodResources never answers (its socket not mounted in the
// daemon's pod, say) still gives devices to pod after pod, for weeks:
// the reconciler keeps no allocation it was told of once it has ended,
// though no round succeeds.
func TestAReconcilerWithoutPodResourcesForgetsAllocationsThatEnded(t *testing.T) {
	const pool, dev = "example.com/vf", "0000:3b:02.1"
	_, rec, prev, replayed := ledgerWithAllocation(t, pool, dev)
	away := listerFunc(func(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
		return nil, status.Error(codes.Unavailable, "no socket")
	})
	f := actortest.Spawn(t, Props(Config{Recorder: rec, Lister: away, Replayed: &replayed,
		Interval: time.Hour, AfterAllocate: time.Hour, LeakGrace: time.Hour, RetryMax: time.Hour, Log: zerolog.Nop()}))
	// Pod after pod gets dev: each allocation supersedes the last.
	const allocations = 50
	for range allocations {
		envs, err := rec.Record(context.Background(), events.DevicesAllocated{Pool: pool, DeviceIDs: []string{dev}, Supersedes: []uint64{prev}})
		if err != nil {
			t.Fatal(err)
		}
		prev = envs[0].Seq
		f.Sys.Root.Send(f.Child, &Allocated{Seq: prev})
	}
	// A round, which fails as every one does here; at rest once it has.
	f.Sys.Root.Send(f.Child, &Reconcile{})
	q := &ledger.Quiet{Done: make(chan struct{})}
	f.Sys.Root.Send(f.Child, q)
	select {
	case <-q.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the round never ended")
	}
	st := awaitStatus(t, f, func(*Status) bool { return true })
	if st.Available || len(st.Allocations) != 1 {
		t.Fatalf("after %d allocations of one device: %+v, want PodResources unavailable and one live allocation", allocations, st)
	}
	if st.Told > len(st.Allocations) {
		t.Errorf("after %d allocations of one device the reconciler keeps %d as told of, want at most the %d live", allocations, st.Told, len(st.Allocations))
	}
}
