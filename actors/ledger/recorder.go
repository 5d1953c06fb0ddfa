// Package ledger gives actors one way to record facts: a Recorder stamps
// payloads with the boot id and the time, appends them to the store, and
// hands back the durable envelopes, sequence numbers set, ready to Apply.
// Actors persist through it, then apply, then reply.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// Recorder appends events for one daemon run. It is safe for concurrent use:
// concurrent Records share group commits in the store.
type Recorder struct {
	log      *store.Log
	bootID   string
	now      func() time.Time
	observer func([]events.Envelope)
}

// Observe sets fn, called with every batch once it is durable (the
// metrics); set it before the first Record. For RecordAsync fn runs on the
// store's writer, which commits nothing else meanwhile: it must be fast
// and must not block.
func (r *Recorder) Observe(fn func([]events.Envelope)) { r.observer = fn }

// NewRecorder returns a Recorder appending to log as boot bootID. now is the
// clock; nil means time.Now.
func NewRecorder(log *store.Log, bootID string, now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{log: log, bootID: bootID, now: now}
}

// BootID is the id of this daemon run.
func (r *Recorder) BootID() string { return r.bootID }

// Log is the store the Recorder appends to, for reading back.
func (r *Recorder) Log() *store.Log { return r.log }

// Record appends the payloads as one all-or-nothing batch and returns their
// envelopes once they are durable. On error nothing was recorded.
func (r *Recorder) Record(ctx context.Context, ps ...events.Payload) ([]events.Envelope, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	envs := r.envelopes(ps)
	out, err := r.log.Append(ctx, envs...)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", envs[0].Type, err)
	}
	if r.observer != nil {
		r.observer(out)
	}
	return out, nil
}

// RecordAsync is Record without the wait, under g (store.Guard) when set:
// done gets Record's outcome, or the guard's refusal, on the store's writer
// goroutine, so it must be quick and not block (an actor's done sends the
// actor a message). Batches are durable in queue order. An error means
// nothing was queued and done is not called.
func (r *Recorder) RecordAsync(ctx context.Context, g *store.Guard, ps []events.Payload, done func([]events.Envelope, error)) error {
	if len(ps) == 0 {
		done(nil, nil)
		return nil
	}
	envs := r.envelopes(ps)
	typ := envs[0].Type
	answer := func(out []events.Envelope, err error) {
		if err != nil {
			done(nil, fmt.Errorf("record %s: %w", typ, err))
			return
		}
		if r.observer != nil {
			r.observer(out)
		}
		done(out, nil)
	}
	var err error
	if g != nil {
		err = r.log.AppendAsyncGuarded(ctx, *g, envs, answer)
	} else {
		err = r.log.AppendAsync(ctx, envs, answer)
	}
	if err != nil {
		return fmt.Errorf("record %s: %w", typ, err)
	}
	return nil
}

// envelopes stamps ps with this run's boot id and one time.
func (r *Recorder) envelopes(ps []events.Payload) []events.Envelope {
	at := r.now()
	envs := make([]events.Envelope, len(ps))
	for i, p := range ps {
		envs[i] = events.New(p, at, r.bootID)
	}
	return envs
}

// Replay folds the ledger (newest snapshot plus the events after it) once
// every record queued before the call is durable or refused: how an actor
// rebuilds its state at a restart, with what its last incarnation, or a
// pool of its name stopped since, queued and was not answered yet. A
// ledger that takes longer than syncWait (a hung disk) is read as it is.
func (r *Recorder) Replay() (events.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), syncWait)
	defer cancel()
	if err := r.log.Sync(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return events.State{}, fmt.Errorf("wait for the records queued before the replay: %w", err)
	}
	return r.log.Replay(0)
}

// syncWait bounds how long Replay waits for the records queued before it.
const syncWait = 10 * time.Second
