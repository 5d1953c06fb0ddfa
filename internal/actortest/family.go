// Package actortest runs one actor under test as the only child of a parent
// that records, in order, every message the child sends it: the parent's
// view of the actor. Tests wait on what the parent heard, and on flushes that
// prove a mailbox is drained, never on sleeps.
package actortest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Family is an actor under test (Child) and its recording parent.
type Family struct {
	Sys           *actor.ActorSystem
	Parent, Child *actor.PID
	heard         chan any
	done          chan struct{}
}

// Flush is answered by the parent, and by the child's middleware before
// it reaches the actor: once both answered, the child has handled all sent
// to it before (Started included), and the parent heard all it sent.
type Flush struct{}

// Spawn starts props as the child of a recording parent in a new actor
// system, torn down when the test ends.
func Spawn(t testing.TB, props *actor.Props) *Family {
	t.Helper()
	f := &Family{heard: make(chan any, 64), done: make(chan struct{})}
	f.Sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	props.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if _, ok := env.Message.(*Flush); ok {
				c.ActorSystem().Root.Send(env.Sender, env.Message)
				return
			}
			next(c, env)
		}
	}))
	spawned := make(chan *actor.PID, 1)
	f.Parent = f.Sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			spawned <- ctx.Spawn(props)
		case *Flush:
			ctx.Respond(m)
		case *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.Terminated:
		default:
			select {
			case f.heard <- m:
			case <-f.done:
			}
		}
	}))
	f.Child = <-spawned
	t.Cleanup(func() {
		close(f.done)
		_ = f.Sys.Root.PoisonFuture(f.Parent).Wait()
		f.Sys.Shutdown()
	})
	return f
}

// Drain waits until the child handled everything sent to it so far and the
// parent heard everything the child sent.
func (f *Family) Drain(t testing.TB) {
	t.Helper()
	for _, pid := range []*actor.PID{f.Child, f.Parent} {
		if _, err := f.Sys.Root.RequestFuture(pid, &Flush{}, 5*time.Second).Result(); err != nil {
			t.Fatalf("flush %s: %v", pid.Id, err)
		}
	}
}

// Silent checks that the parent heard nothing more once the child handled
// what was sent to it.
func (f *Family) Silent(t testing.TB) {
	t.Helper()
	f.Drain(t)
	if m, ok := f.Heard(); ok {
		t.Errorf("parent heard %#v, want nothing", m)
	}
}

// NothingFor checks that the parent hears nothing for d: for an actor
// that acts on a timer, waiting is the only way to know nothing is coming.
func (f *Family) NothingFor(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case m := <-f.heard:
		t.Errorf("parent heard %#v, want nothing", m)
	case <-time.After(d):
	}
}

// Heard returns the next message the parent heard, if any, without waiting.
func (f *Family) Heard() (any, bool) {
	select {
	case m := <-f.heard:
		return m, true
	default:
		return nil, false
	}
}

// Next waits up to 5 s for the next message the parent hears, which must
// be a T.
func Next[T any](t testing.TB, f *Family) T {
	t.Helper()
	return NextWithin[T](t, f, 5*time.Second)
}

// NextWithin is Next with a deadline of d, for a message that comes only
// after slow work (probes, retries).
func NextWithin[T any](t testing.TB, f *Family, d time.Duration) (v T) {
	t.Helper()
	select {
	case m := <-f.heard:
		var ok bool
		if v, ok = m.(T); !ok {
			t.Fatalf("parent heard %#v, want a %T", m, v)
		}
	case <-time.After(d):
		t.Fatalf("parent heard no %T within %v", v, d)
	}
	return v
}
