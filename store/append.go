package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Group commit. Append puts its call in a queue. If no commit is in
// progress, the caller becomes the leader: it takes every call waiting in
// the queue (up to MaxBatch events), encodes each call's events (a call whose
// events do not encode fails alone, before the transaction), commits them
// all in one bbolt transaction (one commit, one pair of fsyncs) and answers
// every call. While it commits, later calls queue up; once its own call is
// answered it hands the lead to the oldest of them, which commits the next
// batch. So there is one writer at a time, a lone caller commits on its own
// goroutine with no hand-off and no delay, and concurrent callers share
// commits. (A dedicated writer goroutine would cost two goroutine hand-offs
// per Append: some 30-50µs measured on a small VM, next to a bare bbolt
// commit of 250µs.)
//
// The batch adapts to the concurrency it sees. Before it commits, the
// leader waits a little (at most batchWait, about one commit) until the
// calls it can expect are queued: those that were already waiting when the
// last commit ended, and the recurring callers that commit answered
// (WithRecurringCaller: callers that serve a stream of requests, such as
// the kubelet's Allocates, come back a round trip after their answer).
// Without the wait, recurring callers that share commits split into two
// halves that take turns, each commit half full. Other callers (an event
// recorded as it happens) are never waited for: they do not come back, and
// a wait for them would hold up everyone queued. A lone caller never waits.

// Request states. A leader claims a request when its transaction is about to
// start; a waiting caller whose context ends first withdraws it; a leader
// handing over promotes the oldest waiting request, whose caller leads next.
// Each transition is a compare-and-swap, so exactly one side wins.
const (
	reqQueued int32 = iota
	reqPromoted
	reqClaimed
	reqWithdrawn
)

type appendReq struct {
	ctx       context.Context
	envs      []events.Envelope
	epoch     uint64 // Log.committed when it was queued
	recurring bool   // WithRecurringCaller
	state     atomic.Int32
	out       []events.Envelope
	err       error
	done      chan struct{} // closed when answered
	promoted  chan struct{} // closed when its caller is to lead
}

func (r *appendReq) finish(out []events.Envelope, err error) {
	r.out, r.err = out, err
	close(r.done)
}

// Append records envs, in order, under the next sequence numbers and returns
// them as stored: Seq assigned, Type, Version and Subject taken from the
// payload, Time in UTC without a monotonic reading. It returns only once the
// events are committed and fsynced, and it is all or nothing: on error none
// of the call's events is in the ledger.
//
// Calls made at the same time share one transaction and one fsync; each
// gets its own result. An event that cannot be encoded (no payload, a Type
// that contradicts its payload) fails its own call only; a failed commit
// fails every call in it. A call whose ctx ends before its transaction starts
// returns ctx.Err() and writes nothing; once its transaction has started it
// waits for the outcome, whatever ctx says, so that its answer is true.
func (l *Log) Append(ctx context.Context, envs ...events.Envelope) ([]events.Envelope, error) {
	if l.readOnly {
		return nil, l.errReadOnly("append")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.leave()
	if len(envs) == 0 {
		return nil, nil
	}
	r := &appendReq{ctx: ctx, envs: envs, recurring: ctx.Value(recurringKey{}) != nil, done: make(chan struct{}), promoted: make(chan struct{})}
	l.qmu.Lock()
	r.epoch = l.committed
	l.queue = append(l.queue, r)
	if !l.leading {
		l.leading = true
		l.qmu.Unlock()
		l.lead(r)
		return r.out, r.err
	}
	l.qmu.Unlock()
	select {
	case l.arrived <- struct{}{}:
	default:
	}

	ctxDone := ctx.Done()
	for {
		select {
		case <-r.done:
			return r.out, r.err
		case <-r.promoted:
			l.lead(r)
			return r.out, r.err
		case <-ctxDone:
			if r.state.CompareAndSwap(reqQueued, reqWithdrawn) {
				return nil, ctx.Err()
			}
			ctxDone = nil // claimed or promoted: wait for the outcome
		}
	}
}

// lead commits batches from the queue until me, the leader's own call, is
// answered, then hands the lead to the oldest call still waiting.
func (l *Log) lead(me *appendReq) {
	handedOver := false
	defer func() {
		if !handedOver { // a panic on the way: do not leave the queue without a leader
			l.handOver()
		}
	}()
	for {
		// Let callers that were just answered, and are about to append
		// again, join this batch rather than wait a whole commit for the
		// next one: awaitCompany when the last commit was shared. A lone
		// caller goes straight on: other goroutines of the process (the
		// caller's own callers) would only delay it.
		l.awaitCompany()
		l.qmu.Lock()
		n, i := 0, 0
		for ; i < len(l.queue); i++ {
			k := len(l.queue[i].envs)
			if n > 0 && n+k > l.maxBatch {
				break
			}
			n += k
		}
		batch := append(l.batch[:0], l.queue[:i]...)
		was := len(l.queue)
		l.queue = append(l.queue[:0], l.queue[i:]...)
		clear(l.queue[len(l.queue):was]) // the array's tail still points at calls
		l.qmu.Unlock()

		l.prevRecurring = 0
		for _, r := range batch {
			if r.recurring {
				l.prevRecurring++
			}
		}
		l.commit(batch)
		clear(batch)
		l.batch = batch[:0]
		select {
		case <-me.done:
			handedOver = true
			l.handOver()
			return
		default:
		}
	}
}

// batchWait bounds how long a leader waits for concurrent callers to join its
// batch: about one commit with its two fsyncs, which is what a caller left
// out would wait for the next one.
const batchWait = 400 * time.Microsecond

// burstGap is how long after a commit its callers are still expected back:
// a few commits. A leader that starts later than that is not in a burst
// (a leader of a burst starts as the commit before it ends, but may wait
// for the CPU as long as a commit or two).
const burstGap = 2 * time.Millisecond

// awaitCompany waits until the callers the leader can expect are queued, or
// batchWait passed. The leader only. It expects the calls queued before the
// last commit ended (they were waiting for it) and the recurring callers
// that commit answered (they append again, a round trip later). A lone
// caller expects nobody but itself: it was answered by the last commit and
// is back. Recurring callers that share commits settle into sharing them
// all, rather than into two halves that take turns, each half full.
func (l *Log) awaitCompany() {
	l.qmu.Lock()
	want, prev := l.expectedCompany(time.Now()), l.prevRecurring
	l.qmu.Unlock()
	if want <= 1 {
		if prev > 1 {
			// Recurring callers, but none lately: a burst may be
			// starting, its other callers runnable; let them queue.
			runtime.Gosched()
		}
		return
	}
	var timer *time.Timer
	for {
		l.qmu.Lock()
		n := len(l.queue)
		l.qmu.Unlock()
		if n >= want {
			break
		}
		if timer == nil {
			timer = time.NewTimer(batchWait)
			defer timer.Stop()
		}
		select {
		case <-l.arrived:
		case <-timer.C:
			return
		}
	}
}

// expectedCompany is how many calls a leader about to commit at now can
// expect: those queued before the last commit answered its calls, plus the
// recurring callers it answered, unless that was more than burstGap ago (a
// burst that ended: its callers are not coming back). Callers hold qmu.
func (l *Log) expectedCompany(now time.Time) int {
	waiting := 0
	for _, r := range l.queue {
		if r.epoch < l.committed {
			waiting++
		}
	}
	back := l.prevRecurring
	if now.Sub(l.committedAt) > burstGap {
		back = 0
	}
	return min(waiting+back, l.maxBatch)
}

// handOver promotes the oldest waiting call to leader, or records that no
// commit is in progress when none waits.
func (l *Log) handOver() {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	for len(l.queue) > 0 {
		r := l.queue[0]
		if r.state.CompareAndSwap(reqQueued, reqPromoted) {
			close(r.promoted)
			return
		}
		// Withdrawn while waiting: its caller has gone.
		l.queue[0] = nil
		l.queue = l.queue[1:]
	}
	l.queue = nil
	l.leading = false
}

// span locates one encoded event in the leader's arena: the key at off, the
// value after it up to end.
type span struct{ off, end int }

// commit encodes and writes one batch and answers its callers.
func (l *Log) commit(batch []*appendReq) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()

	// The arena holds every key and value of the batch; bbolt keeps
	// references to them until the commit, so nothing is overwritten before
	// then (a reallocation leaves earlier bytes where they were).
	arena := l.arena[:0]
	var spans []span
	live := make([]*appendReq, 0, len(batch))
	next := l.lastSeq.Load() + 1
	for _, r := range batch {
		if !r.state.CompareAndSwap(reqQueued, reqClaimed) && !r.state.CompareAndSwap(reqPromoted, reqClaimed) {
			continue // withdrawn: its caller has returned
		}
		if err := r.ctx.Err(); err != nil {
			r.finish(nil, err)
			continue
		}
		mark, spanMark := len(arena), len(spans)
		out := make([]events.Envelope, len(r.envs))
		var err error
		for i, e := range r.envs {
			off := len(arena)
			if e, arena, err = stampAndEncode(arena, e, next+uint64(i)); err != nil {
				err = fmt.Errorf("append to ledger %s: event %d of %d: %w", l.path, i+1, len(r.envs), err)
				break
			}
			spans = append(spans, span{off, len(arena)})
			out[i] = e
		}
		if err != nil {
			arena, spans = arena[:mark], spans[:spanMark]
			r.finish(nil, err)
			continue
		}
		next += uint64(len(r.envs))
		r.out = out
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}

	err := l.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		b.FillPercent = 1 // keys only ever grow: pack pages full
		for _, s := range spans {
			key := arena[s.off : s.off+keySize]
			if err := putNext(b, key, arena[s.off+keySize:s.end]); err != nil {
				return err
			}
		}
		return nil
	})
	l.qmu.Lock()
	l.committed++ // before any caller is answered: those that come back are not "waiting"
	l.committedAt = time.Now()
	l.qmu.Unlock()
	if err != nil {
		err = fmt.Errorf("append to ledger %s: %w", l.path, err)
		for _, r := range live {
			r.finish(nil, err)
		}
		return
	}
	l.advance(live[0].out[0].Seq, next-1)
	l.commits.Add(1)
	for _, r := range live {
		r.finish(r.out, nil)
	}
	if cap(arena) <= 4<<20 {
		l.arena = arena[:0]
	} else {
		l.arena = nil // one huge call should not pin its memory
	}
}

// stampAndEncode stamps e with seq and appends its key and value to buf. A
// payload that panics (a nil pointer, say) is that call's error, not the
// end of the leader that encodes it for everybody.
func stampAndEncode(buf []byte, e events.Envelope, seq uint64) (stamped events.Envelope, out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = buf, fmt.Errorf("encoding panicked: %v", p)
		}
	}()
	if stamped, err = stamp(e, seq); err != nil {
		return stamped, buf, err
	}
	out, err = encodeEvent(buf, stamped)
	return stamped, out, err
}

// putNext stores value under key, which must be the bucket's next sequence:
// the sequence comes from bbolt's counter, so it is gap-free and rolls back
// with the transaction; the committer, holding writeMu, predicted it to encode
// it into the record, and a mismatch means the file changed under it.
func putNext(b *bolt.Bucket, key, value []byte) error {
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	if want := binary.BigEndian.Uint64(key); seq != want {
		return fmt.Errorf("next sequence is %d, expected %d", seq, want)
	}
	return b.Put(key, value)
}

// advance records a commit of the events first..last (callers hold
// writeMu).
func (l *Log) advance(first, last uint64) {
	if l.firstSeq.Load() == 0 {
		l.firstSeq.Store(first)
	}
	l.lastSeq.Store(last)
}

// stamp makes e what will be stored under seq.
func stamp(e events.Envelope, seq uint64) (events.Envelope, error) {
	if e.Payload == nil {
		return e, fmt.Errorf("no payload")
	}
	t := e.Payload.EventType()
	if e.Type != "" && e.Type != t {
		return e, fmt.Errorf("envelope type %s does not match its %s payload", e.Type, t)
	}
	e.Seq = seq
	e.Type = t
	e.Version = events.CurrentVersion(t)
	e.Subject = e.Payload.Subject()
	if !e.Time.IsZero() {
		e.Time = e.Time.Round(0).UTC()
	}
	return e, nil
}

// appendInTx appends one event of the store's own (SnapshotTaken,
// EventsDropped) inside a write transaction; callers hold writeMu and call
// advance after the commit.
func (l *Log) appendInTx(tx *bolt.Tx, e events.Envelope) (events.Envelope, error) {
	e, err := stamp(e, l.lastSeq.Load()+1)
	if err != nil {
		return e, err
	}
	buf, err := encodeEvent(nil, e)
	if err != nil {
		return e, err
	}
	b := tx.Bucket(bucketEvents)
	b.FillPercent = 1
	return e, putNext(b, buf[:keySize], buf[keySize:])
}

type recurringKey struct{}

// WithRecurringCaller marks the appends made with ctx as those of a caller
// that serves a stream of requests (a gRPC handler answering the kubelet's
// Allocates, say): once answered, such callers tend to append again a round
// trip later, and a leader of the group commit waits a little for them
// (see awaitCompany) so that they keep sharing commits.
func WithRecurringCaller(ctx context.Context) context.Context {
	return context.WithValue(ctx, recurringKey{}, true)
}
