// Package wake is an actor's one timer for its next round: it sends the
// actor a *Tick at the earliest time asked for, and tells the tick it
// waits for from a stale one (of a timer stopped or replaced since, or
// of an earlier incarnation), which must start nothing: each would start
// a timer chain of its own. Only the actor's goroutine touches a Timer.
package wake

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Tick is what a Timer sends. Each is a pointer of its own: not an empty
// struct, whose pointers may all be equal.
type Tick struct{ _ byte }

// Timer is a timer that only moves earlier; its zero value is stopped.
type Timer struct {
	timer *time.Timer
	due   time.Time
	tick  *Tick
}

// At arranges a Tick for the actor of ctx d after now, unless one is
// due sooner.
func (t *Timer) At(ctx actor.Context, now time.Time, d time.Duration) {
	at := now.Add(d)
	if t.timer != nil {
		if !t.due.After(at) {
			return
		}
		t.timer.Stop()
	}
	tick, self, root := &Tick{}, ctx.Self(), ctx.ActorSystem().Root
	t.tick, t.due = tick, at
	t.timer = time.AfterFunc(d, func() { root.Send(self, tick) })
}

// Take says whether k is the tick the timer waits for; if so the timer
// has fired, and the next At starts it again.
func (t *Timer) Take(k *Tick) bool {
	if k != t.tick {
		return false
	}
	*t = Timer{}
	return true
}

// Stop stops the timer: no tick it sent is taken.
func (t *Timer) Stop() {
	if t.timer != nil {
		t.timer.Stop()
	}
	*t = Timer{}
}
