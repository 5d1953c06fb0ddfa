package wake

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/devledger/devledger/internal/actortest"
)

// took is what the timer's actor tells its parent of each tick it got:
// whether it was the one the timer waited for.
type took struct{ ok bool }

// timerProps is an actor that runs each func it gets on its Timer and
// reports every tick to its parent.
func timerProps() *actor.Props {
	var timer Timer
	return actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case func(actor.Context, *Timer):
			m(ctx, &timer)
		case *Tick:
			ctx.Send(ctx.Parent(), &took{timer.Take(m)})
		}
	})
}

// A timer stopped, then asked for a tick later than the one it had, ticks:
// Stop leaves nothing of the old timer that would make At keep it.
func TestAtAfterStopArmsAnew(t *testing.T) {
	f := actortest.Spawn(t, timerProps())
	now := time.Now()
	f.Sys.Root.Send(f.Child, func(ctx actor.Context, tm *Timer) {
		tm.At(ctx, now, time.Hour)
		tm.Stop()
		tm.At(ctx, now.Add(2*time.Hour), time.Millisecond)
	})
	if m := actortest.Next[*took](t, f); !m.ok {
		t.Fatal("the tick asked for after Stop was not taken")
	}
}

// At moves the timer earlier, never later; the tick taken is the one due
// first, and once taken the timer is stopped until the next At.
func TestAtOnlyMovesEarlier(t *testing.T) {
	f := actortest.Spawn(t, timerProps())
	now := time.Now()
	f.Sys.Root.Send(f.Child, func(ctx actor.Context, tm *Timer) {
		tm.At(ctx, now, time.Hour)
		tm.At(ctx, now, time.Millisecond)
		tm.At(ctx, now, 2*time.Hour)
	})
	if m := actortest.Next[*took](t, f); !m.ok {
		t.Fatal("the earliest tick was not taken")
	}
	f.Sys.Root.Send(f.Child, func(ctx actor.Context, tm *Timer) {
		tm.At(ctx, now.Add(3*time.Hour), time.Millisecond)
	})
	if m := actortest.Next[*took](t, f); !m.ok {
		t.Fatal("the tick asked for after one was taken was not taken")
	}
}
