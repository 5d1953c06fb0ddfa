package supervise_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/supervise"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	b := &supervise.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		name string
		n    int
		want time.Duration
	}{
		{"first crash waits Initial", 1, 100 * time.Millisecond},
		{"second doubles", 2, 200 * time.Millisecond},
		{"third doubles again", 3, 400 * time.Millisecond},
		{"fourth", 4, 800 * time.Millisecond},
		{"fifth is capped", 5, time.Second},
		{"far past the cap stays at Max", 1000, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := b.Delay(tc.n); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
	if got := (&supervise.Backoff{Initial: 2 * time.Second, Max: time.Second}).Delay(1); got != time.Second {
		t.Errorf("Initial above Max: Delay(1) = %v, want Max", got)
	}
}

// fakeSupervisor records what the strategy asks of it.
type fakeSupervisor struct {
	restarts chan *actor.PID
	mu       sync.Mutex
	stopped  []*actor.PID
}

func newFakeSupervisor() *fakeSupervisor {
	return &fakeSupervisor{restarts: make(chan *actor.PID, 16)}
}

func (s *fakeSupervisor) Children() []*actor.PID             { return nil }
func (s *fakeSupervisor) EscalateFailure(any, any)           {}
func (s *fakeSupervisor) ResumeChildren(...*actor.PID)       {}
func (s *fakeSupervisor) RestartChildren(pids ...*actor.PID) { s.restarts <- pids[0] }
func (s *fakeSupervisor) StopChildren(pids ...*actor.PID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = append(s.stopped, pids...)
}

func (s *fakeSupervisor) stops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stopped)
}

func (s *fakeSupervisor) awaitRestart(t *testing.T) {
	t.Helper()
	select {
	case <-s.restarts:
	case <-time.After(5 * time.Second):
		t.Fatal("no restart within 5s")
	}
}

// logLines is a log sink that hands each line to the test.
type logLines chan []byte

func (l logLines) Write(p []byte) (int, error) {
	l <- bytes.Clone(p)
	return len(p), nil
}

// restartDelays returns the restart_in_ms, of every
// "restarting" line logged since the last call.
func (l logLines) restartDelays(t *testing.T) []float64 {
	t.Helper()
	var out []float64
	for {
		select {
		case line := <-l:
			var fields struct {
				RestartIn *float64 `json:"restart_in_ms"`
			}
			if err := json.Unmarshal(line, &fields); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if fields.RestartIn != nil {
				out = append(out, *fields.RestartIn)
			}
		default:
			return out
		}
	}
}

type giveUps struct {
	mu      sync.Mutex
	reasons []any
}

func (g *giveUps) record(_ *actor.PID, reason any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reasons = append(g.reasons, reason)
}

func (g *giveUps) list() []any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]any(nil), g.reasons...)
}

func TestHandleFailureGivesUpOnTheMaxCrashesth(t *testing.T) {
	var g giveUps
	logs := make(logLines, 64)
	b := &supervise.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, Window: time.Minute,
		MaxCrashes: 4, GiveUp: g.record, Log: zerolog.New(logs)}
	sup := newFakeSupervisor()
	child := actor.NewPID("test", "child")
	rs := actor.NewRestartStatistics()

	for i := 1; i <= 3; i++ {
		b.HandleFailure(nil, sup, child, rs, "crash", nil)
		sup.awaitRestart(t)
		if n := len(g.list()); n != 0 {
			t.Fatalf("gave up after %d crashes, MaxCrashes is 4", i)
		}
	}
	if got, want := logs.restartDelays(t), []float64{1, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("restart delays %v ms, want %v", got, want)
	}
	b.HandleFailure(nil, sup, child, rs, "fourth crash", nil)
	if got := g.list(); len(got) != 1 || got[0] != "fourth crash" {
		t.Fatalf("GiveUp calls = %v, want one with the last reason", got)
	}
	if sup.stops() != 1 {
		t.Errorf("StopChildren called %d times, want 1", sup.stops())
	}
	select {
	case <-sup.restarts:
		t.Error("a child given up on was restarted")
	case <-time.After(20 * time.Millisecond): // well past Max: a restart would have come
	}
}

func TestHandleFailureStartsOverAfterAQuietWindow(t *testing.T) {
	var g giveUps
	logs := make(logLines, 64)
	// The first two crashes must fall inside one window, restart and all,
	// on a loaded machine that stalls between them; the test then
	// waits one out.
	const window = time.Second
	b := &supervise.Backoff{Initial: time.Millisecond, Max: 8 * time.Millisecond, Window: window,
		MaxCrashes: 3, GiveUp: g.record, Log: zerolog.New(logs)}
	sup := newFakeSupervisor()
	child := actor.NewPID("test", "child")
	rs := actor.NewRestartStatistics()

	for range 2 {
		b.HandleFailure(nil, sup, child, rs, "crash", nil)
		sup.awaitRestart(t)
	}
	// The child now stays up for a whole Window.
	deadline := time.Now().Add(5 * time.Second)
	for rs.NumberOfFailures(window) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("failures never left the window")
		}
		time.Sleep(time.Millisecond) // polling the window's clock, not waiting for an actor
	}
	b.HandleFailure(nil, sup, child, rs, "crash after a quiet window", nil)
	sup.awaitRestart(t)
	if got := g.list(); len(got) != 0 {
		t.Fatalf("gave up on a child that stayed up a whole window: %v", got)
	}
	if got, want := logs.restartDelays(t), []float64{1, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("restart delays %v ms, want %v (Initial again after the quiet window)", got, want)
	}
}

// crasher panics on "boom" and reports every start to started.
type crasher struct{ started chan<- struct{} }

func (c *crasher) Receive(ctx actor.Context) {
	switch ctx.Message() {
	case "boom":
		panic("boom")
	}
	if _, ok := ctx.Message().(*actor.Started); ok {
		c.started <- struct{}{}
	}
}

// supervisor spawns one crasher under the strategy and forwards to the test
// what it hears of it (its Terminated).
type supervisor struct {
	props *actor.Props
	child chan<- *actor.PID
	seen  chan<- any
}

func (s *supervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		pid := ctx.Spawn(s.props)
		ctx.Watch(pid)
		s.child <- pid
	case *actor.Terminated:
		s.seen <- m
	}
}

func quietSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

func TestPanickingActorIsRestartedThenGivenUpOn(t *testing.T) {
	sys := quietSystem(t)
	var g giveUps
	gaveUp := make(chan struct{}, 4)
	b := &supervise.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Window: time.Minute, MaxCrashes: 3,
		GiveUp: func(pid *actor.PID, reason any) { g.record(pid, reason); gaveUp <- struct{}{} }, Log: zerolog.Nop()}
	started := make(chan struct{}, 8)
	childCh := make(chan *actor.PID, 1)
	seen := make(chan any, 8)
	parent := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &supervisor{props: actor.PropsFromProducer(func() actor.Actor { return &crasher{started: started} }), child: childCh, seen: seen}
	}, actor.WithSupervisor(b)))
	t.Cleanup(func() { _ = sys.Root.PoisonFuture(parent).Wait() })
	child := <-childCh

	await := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s within 5s", what)
		}
	}
	await("first start", started)
	for i := 1; i <= 2; i++ {
		sys.Root.Send(child, "boom")
		await("restart after a crash", started)
	}
	sys.Root.Send(child, "boom")
	await("give-up", gaveUp)
	select {
	case m := <-seen:
		if term, ok := m.(*actor.Terminated); !ok || !term.Who.Equal(child) {
			t.Errorf("supervisor heard %#v, want the child's Terminated", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the child given up on did not stop")
	}
	if got := g.list(); len(got) != 1 || got[0] != "boom" {
		t.Errorf("GiveUp calls = %v, want one with the panic value", got)
	}
	select {
	case <-started:
		t.Error("the child given up on was started again")
	default:
	}
}

// The daemon's promise (docs/operations.md): five crashes within a minute
// stop it. The fifth crash gives up, the fourth does not.
func TestDefaultBackoffGivesUpOnTheFifthCrash(t *testing.T) {
	var g giveUps
	b := supervise.DefaultBackoff(zerolog.Nop(), g.record)
	if b.Window != time.Minute {
		t.Errorf("crashes counted within %v, the docs promise a minute", b.Window)
	}
	b.Initial, b.Max = time.Millisecond, time.Millisecond
	sup := newFakeSupervisor()
	child := actor.NewPID("test", "child")
	rs := actor.NewRestartStatistics()
	for i := 1; i <= 4; i++ {
		b.HandleFailure(nil, sup, child, rs, "crash", nil)
		sup.awaitRestart(t)
		if n := len(g.list()); n != 0 {
			t.Fatalf("gave up after %d crashes", i)
		}
	}
	b.HandleFailure(nil, sup, child, rs, "fifth crash", nil)
	if got := g.list(); len(got) != 1 || got[0] != "fifth crash" {
		t.Fatalf("GiveUp calls = %v, want one on the fifth crash", got)
	}
}

// A failure that repeats is logged at error once, then at debug.
func TestFailureLevel(t *testing.T) {
	tests := []struct {
		name string
		n    int
		want zerolog.Level
	}{
		{"the first failure is an error", 1, zerolog.ErrorLevel},
		{"the second is debug", 2, zerolog.DebugLevel},
		{"so are later ones", 10, zerolog.DebugLevel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := supervise.FailureLevel(tc.n); got != tc.want {
				t.Errorf("FailureLevel(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}
