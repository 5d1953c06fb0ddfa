package ledger

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// Persister lets an actor persist without waiting for the fsync in its
// mailbox: Persist queues the append, and the store's answer comes back to
// the actor as a *Landed, which the actor hands to Land. Meanwhile the
// actor holds back (Hold) the messages whose handling reads or changes
// what the append will change, and Land hands them back, in order, once
// the continuation has applied the events. One append is in flight at a
// time. A Persister outlives an actor's restart (keep it in what the
// producer shares between incarnations): the next incarnation takes what
// was held, first (Resume). Only the actor's goroutine touches it.
type Persister struct {
	flight *Landed
	held   []any
}

// Landed is the store's answer to a Persist, sent to the actor that
// persisted.
type Landed struct {
	envs []events.Envelope
	err  error
	then func([]events.Envelope, error)
	done chan struct{} // closed once envs and err are set
}

// Persist records ps (under g when set) and runs then in the actor with the
// outcome once the actor hands the Landed to Land. An append the store
// does not take is answered at once.
func (p *Persister) Persist(ctx actor.Context, r *Recorder, g *store.Guard, ps []events.Payload, then func([]events.Envelope, error)) {
	l := &Landed{then: then, done: make(chan struct{})}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	answer := func(envs []events.Envelope, err error) {
		l.envs, l.err = envs, err
		close(l.done)
		root.Send(self, l)
	}
	if err := r.RecordAsync(context.Background(), g, ps, answer); err != nil {
		then(nil, err)
		return
	}
	p.flight = l
}

// Quiet asks an actor that persists through a Persister, and passes it
// its messages (Hold), to close Done once what it persisted before is
// applied: how a test knows the actor is at rest.
type Quiet struct{ Done chan struct{} }

// Busy says whether an append is in flight.
func (p *Persister) Busy() bool { return p.flight != nil }

// Hold keeps m back while an append is in flight, and says whether it did
// (or took m itself: a Quiet).
func (p *Persister) Hold(m any) bool {
	if p.flight != nil {
		p.held = append(p.held, m)
		return true
	}
	return quiet(m)
}

// quiet closes m's Done if m is a Quiet, and says whether it was.
func quiet(m any) bool {
	q, ok := m.(*Quiet)
	if ok {
		close(q.Done)
	}
	return ok
}

// Land runs l's continuation, then hands each message held meanwhile to
// handle, in order, until one persists again (the rest stay held). A
// Landed settled already (Settle), or of an earlier incarnation, is
// ignored.
func (p *Persister) Land(l *Landed, handle func(any)) {
	if p.flight == l {
		p.Settle() // l is done: it was sent once its outcome was set
		p.Resume(handle)
	}
}

// Resume hands each message held to handle, in order, until one persists
// again (the rest stay held): how a restarted actor takes, in its Started,
// what its last incarnation held, before anything its mailbox has; and,
// once settled, what an actor that stops for good owes those who wait.
func (p *Persister) Resume(handle func(any)) {
	for len(p.held) > 0 && p.flight == nil {
		m := p.held[0]
		p.held = p.held[1:]
		if !quiet(m) {
			handle(m)
		}
	}
}

// Settle waits for the append in flight, if any, and runs its
// continuation; what is held stays held. Land settles an append that has
// landed. An actor that stops or restarts settles what it owes to those
// it tells; a continuation run then must start no new work (the
// incarnation is ending), and what is held is the next incarnation's.
func (p *Persister) Settle() {
	if l := p.flight; l != nil {
		<-l.done
		p.flight = nil
		l.then(l.envs, l.err)
	}
}
