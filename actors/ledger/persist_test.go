package ledger_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
)

// persisting is an actor that records one event per *record it gets and
// tells its parent, in order, of each record that landed and each note
// it took, holding notes back while a record is in flight.
type persisting struct {
	rec     *ledger.Recorder
	persist *ledger.Persister // shared by its incarnations
}

func persistingProps(rec *ledger.Recorder) *actor.Props {
	p := &ledger.Persister{}
	return actor.PropsFromProducer(func() actor.Actor { return &persisting{rec: rec, persist: p} })
}

type (
	// record asks for one event; then, when set, is the address of a
	// record the continuation persists in its turn.
	record struct{ addr, then string }
	note   struct{ text string }
	crash  struct{}
)

// refused is what the parent hears of a record the ledger did not take.
type refused struct {
	addr string
	err  error
}

// landedAt is what the parent hears of a record that landed.
type landedAt struct {
	addr string
	seq  uint64
}

func (a *persisting) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.persist.Resume(func(m any) { a.handle(ctx, m) })
	case *actor.Stopping, *actor.Restarting:
		a.persist.Settle()
	case *ledger.Landed:
		a.persist.Land(m, func(m any) { a.handle(ctx, m) })
	case *crash:
		panic("injected")
	case *record, *note, *ledger.Quiet:
		if !a.persist.Hold(m) {
			a.handle(ctx, m)
		}
	}
}

func (a *persisting) handle(ctx actor.Context, m any) {
	switch m := m.(type) {
	case *record:
		a.persist.Persist(ctx, a.rec, nil, []events.Payload{discovered(m.addr)}, func(envs []events.Envelope, err error) {
			if err != nil {
				ctx.Send(ctx.Parent(), &refused{addr: m.addr, err: err})
				return
			}
			ctx.Send(ctx.Parent(), &landedAt{addr: m.addr, seq: envs[0].Seq})
			if m.then != "" {
				a.handle(ctx, &record{addr: m.then})
			}
		})
	case *note:
		ctx.Send(ctx.Parent(), m)
	}
}

// heldRecorder is a Recorder whose appends are durable but not answered
// until release.
func heldRecorder(t *testing.T) (rec *ledger.Recorder, held <-chan struct{}, release func()) {
	t.Helper()
	rec = ledger.NewRecorder(openLog(t), "boot-1", nil)
	h, open := make(chan struct{}), make(chan struct{})
	var heldOnce, openOnce sync.Once
	rec.Observe(func([]events.Envelope) {
		heldOnce.Do(func() { close(h) })
		<-open
	})
	release = func() { openOnce.Do(func() { close(open) }) }
	t.Cleanup(release)
	return rec, h, release
}

func waitHeld(t *testing.T, held <-chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the append never reached the store")
	}
}

// Messages that come while a record is in flight wait for it, in order,
// and a record made then waits for its turn.
func TestPersisterHoldsWhatComesMeanwhile(t *testing.T) {
	rec, held, release := heldRecorder(t)
	f := actortest.Spawn(t, persistingProps(rec))
	f.Sys.Root.Send(f.Child, &record{addr: "0000:3b:00.0"})
	waitHeld(t, held)
	f.Sys.Root.Send(f.Child, &note{text: "a"})
	f.Sys.Root.Send(f.Child, &record{addr: "0000:3b:00.1"})
	f.Sys.Root.Send(f.Child, &note{text: "b"})
	quiet := &ledger.Quiet{Done: make(chan struct{})}
	f.Sys.Root.Send(f.Child, quiet)
	f.Silent(t)
	select {
	case <-quiet.Done:
		t.Fatal("Quiet answered while a record was in flight")
	default:
	}
	release()
	if m := actortest.Next[*landedAt](t, f); m.addr != "0000:3b:00.0" || m.seq != 1 {
		t.Errorf("first landed %+v, want the first record at #1", *m)
	}
	if m := actortest.Next[*note](t, f); m.text != "a" {
		t.Errorf("note %q, want a", m.text)
	}
	if m := actortest.Next[*landedAt](t, f); m.addr != "0000:3b:00.1" || m.seq != 2 {
		t.Errorf("second landed %+v, want the second record at #2", *m)
	}
	if m := actortest.Next[*note](t, f); m.text != "b" {
		t.Errorf("note %q, want b", m.text)
	}
	select {
	case <-quiet.Done:
	case <-time.After(5 * time.Second):
		t.Fatal("Quiet not answered once both records landed")
	}
	f.Silent(t)
}

// An actor that stops with a record in flight waits for it and keeps its
// word; one that restarts hands what it held to its next incarnation,
// which takes it before what its mailbox got meanwhile.
func TestPersisterSettlesAsTheActorStopsOrRestarts(t *testing.T) {
	rec, held, release := heldRecorder(t)
	f := actortest.Spawn(t, persistingProps(rec))
	f.Sys.Root.Send(f.Child, &record{addr: "0000:3b:00.0"})
	waitHeld(t, held)
	f.Sys.Root.Send(f.Child, &note{text: "held"})
	f.Sys.Root.Send(f.Child, &crash{})
	f.Sys.Root.Send(f.Child, &note{text: "queued"})
	time.AfterFunc(50*time.Millisecond, release)
	if m := actortest.Next[*landedAt](t, f); m.addr != "0000:3b:00.0" {
		t.Errorf("landed %+v, want the record in flight as the actor restarted", *m)
	}
	if m := actortest.Next[*note](t, f); m.text != "held" {
		t.Errorf("note %q, want the one held, taken by the next incarnation", m.text)
	}
	if m := actortest.Next[*note](t, f); m.text != "queued" {
		t.Errorf("note %q, want the one queued during the restart", m.text)
	}

	f.Sys.Root.Send(f.Child, &record{addr: "0000:3b:00.1"})
	stopped := f.Sys.Root.PoisonFuture(f.Child)
	if err := stopped.Wait(); err != nil {
		t.Fatal(err)
	}
	if m := actortest.Next[*landedAt](t, f); m.addr != "0000:3b:00.1" {
		t.Errorf("landed %+v, want the record in flight as the actor stopped", *m)
	}
}

// A Quiet that comes while nothing is in flight is answered at once.
func TestPersisterAnswersQuietWhenIdle(t *testing.T) {
	f := actortest.Spawn(t, persistingProps(ledger.NewRecorder(openLog(t), "boot-1", nil)))
	quiet := &ledger.Quiet{Done: make(chan struct{})}
	f.Sys.Root.Send(f.Child, quiet)
	select {
	case <-quiet.Done:
	case <-time.After(5 * time.Second):
		t.Fatal("Quiet not answered by an actor with nothing in flight")
	}
}

// An append the store does not take (the ledger closed) is answered at
// once with the store's error, and leaves nothing in flight: what comes
// next is handled, not held for an answer that never comes.
func TestPersisterAnswersAnAppendNotTaken(t *testing.T) {
	l := openLog(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f := actortest.Spawn(t, persistingProps(ledger.NewRecorder(l, "boot-1", nil)))
	f.Sys.Root.Send(f.Child, &record{addr: "0000:3b:00.0"})
	f.Sys.Root.Send(f.Child, &note{text: "after"})
	if m := actortest.Next[*refused](t, f); m.addr != "0000:3b:00.0" || !errors.Is(m.err, store.ErrClosed) {
		t.Errorf("refused %+v, want the record, with store.ErrClosed", *m)
	}
	if m := actortest.Next[*note](t, f); m.text != "after" {
		t.Errorf("note %q, want after", m.text)
	}
}

// A continuation that persists again keeps what is held waiting for its
// own record too.
func TestPersisterHoldsForARecordItsContinuationMakes(t *testing.T) {
	rec, held, release := heldRecorder(t)
	f := actortest.Spawn(t, persistingProps(rec))
	f.Sys.Root.Send(f.Child, &record{addr: "0000:3b:00.0", then: "0000:3b:00.1"})
	waitHeld(t, held)
	f.Sys.Root.Send(f.Child, &note{text: "held"})
	f.Silent(t)
	release()
	for _, want := range []string{"0000:3b:00.0", "0000:3b:00.1"} {
		if m := actortest.Next[*landedAt](t, f); m.addr != want {
			t.Errorf("landed %+v, want %s", *m, want)
		}
	}
	if m := actortest.Next[*note](t, f); m.text != "held" {
		t.Errorf("note %q, want held", m.text)
	}
	f.Silent(t)
}
