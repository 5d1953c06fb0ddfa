// Package supervise holds how devledger runs its actors: Backoff, a truly
// exponential restart that gives up loudly after repeated crashes
// (protoactor-go's "exponential" grows linearly and never gives up; a
// quiet crash loop is worse than an exit), and Warm, their dispatcher.
package supervise

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Backoff restarts a crashed child after a delay that doubles, from
// Initial up to Max, with every crash inside Window; a child up for a
// whole Window starts again from Initial. The MaxCrashes-th crash inside
// Window stops it for good and calls GiveUp (the daemon exits loudly).
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Window     time.Duration
	MaxCrashes int
	// GiveUp is called once per child that crashed MaxCrashes times, with
	// the reason of its last crash. It must not block.
	GiveUp func(child *actor.PID, reason any)
	Log    zerolog.Logger
}

// DefaultBackoff is the daemon's strategy: 100ms doubling to 5s, and five
// crashes within a minute stop the child.
func DefaultBackoff(log zerolog.Logger, giveUp func(*actor.PID, any)) *Backoff {
	return &Backoff{
		Initial:    100 * time.Millisecond,
		Max:        5 * time.Second,
		Window:     time.Minute,
		MaxCrashes: 5,
		GiveUp:     giveUp,
		Log:        log,
	}
}

var _ actor.SupervisorStrategy = (*Backoff)(nil)

// Delay is the wait before the restart that follows the n-th crash (n ≥ 1).
func (b *Backoff) Delay(n int) time.Duration { return Doubling(b.Initial, b.Max, n) }

// FailureLevel is the level to log the n-th (n ≥ 1) failure in a row of
// something an actor tries again at: error for the first, debug for the
// others. A disk that stays full so makes a line, not one per try.
func FailureLevel(n int) zerolog.Level {
	if n > 1 {
		return zerolog.DebugLevel
	}
	return zerolog.ErrorLevel
}

// OrDefault sets *d to def unless *d is positive: a zero (or negative)
// duration in an actor's Config asks for its default.
func OrDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Doubling is the n-th (n ≥ 1) of the waits that start at initial and
// double up to limit.
func Doubling(initial, limit time.Duration, n int) time.Duration {
	d := initial
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// HandleFailure implements actor.SupervisorStrategy.
func (b *Backoff) HandleFailure(_ *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, _ any) {
	if rs.NumberOfFailures(b.Window) == 0 {
		rs.Reset()
	}
	rs.Fail()
	n := rs.NumberOfFailures(b.Window)
	if n >= b.MaxCrashes {
		b.Log.Error().Str("actor", child.Id).Int("crashes", n).Dur("window_ms", b.Window).
			Str("reason", fmt.Sprint(reason)).Msg("actor keeps crashing; giving up")
		supervisor.StopChildren(child)
		if b.GiveUp != nil {
			b.GiveUp(child, reason)
		}
		return
	}
	delay := b.Delay(n)
	b.Log.Warn().Str("actor", child.Id).Int("crash", n).Dur("restart_in_ms", delay).
		Str("reason", fmt.Sprint(reason)).Msg("actor crashed; restarting it from the ledger")
	time.AfterFunc(delay, func() { supervisor.RestartChildren(child) })
}
