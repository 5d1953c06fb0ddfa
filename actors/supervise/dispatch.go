package supervise

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Warm is the dispatcher of the daemon's actors. protoactor's default runs
// each mailbox turn on a new goroutine whose stack must grow again (about
// a twentieth of an Allocate's CPU). Warm hands a turn to a waiting
// goroutine, its stack already grown, starting one only when none waits;
// one idle for a second ends. Up to 300 messages run per turn, as in
// protoactor's own dispatcher.
var Warm actor.Dispatcher = newWarm(time.Second)

type warm struct {
	work chan func()
	idle time.Duration
}

func newWarm(idle time.Duration) warm { return warm{work: make(chan func()), idle: idle} }

func (warm) Throughput() int { return 300 }

func (d warm) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go d.run(fn)
	}
}

func (d warm) run(fn func()) {
	idle := time.NewTimer(d.idle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(d.idle)
		select {
		case fn = <-d.work:
		case <-idle.C:
			return
		}
	}
}
