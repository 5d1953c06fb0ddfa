package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Group commit by one writer. Appends queue on a channel in the order they
// are made; one goroutine takes the oldest, drains what else is queued (up
// to MaxBatch events), commits the lot in one bbolt transaction (one
// commit, one pair of fsyncs) and answers each call. While it commits, new
// calls queue for the next batch. Nothing waits for company: a lone call
// commits at once, and calls that come together share a commit because
// they queue during the one before.

// Request states: the writer claims a request as its transaction is about
// to start; a synchronous caller whose context ends first withdraws it.
// One compare-and-swap decides which.
const (
	reqQueued int32 = iota
	reqClaimed
	reqWithdrawn
)

type appendReq struct {
	ctx   context.Context
	envs  []events.Envelope
	guard *Guard
	state atomic.Int32
	out   []events.Envelope
	// done is called once, on the writer's goroutine, with the outcome.
	done func(out []events.Envelope, err error)
}

func (r *appendReq) finish(out []events.Envelope, err error) { r.done(out, err) }

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
	return l.append(ctx, nil, envs)
}

func (l *Log) append(ctx context.Context, g *Guard, envs []events.Envelope) ([]events.Envelope, error) {
	if l.readOnly {
		return nil, l.errReadOnly("append")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		if err := l.enter(); err != nil {
			return nil, err
		}
		l.leave()
		return nil, nil
	}
	type result struct {
		out []events.Envelope
		err error
	}
	answer := make(chan result, 1)
	r := &appendReq{ctx: ctx, envs: envs, guard: g, done: func(out []events.Envelope, err error) { answer <- result{out, err} }}
	if err := l.enqueue(ctx, r); err != nil {
		return nil, err
	}
	select {
	case a := <-answer:
		return a.out, a.err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqWithdrawn) {
			return nil, ctx.Err()
		}
		a := <-answer // claimed: the transaction decides
		return a.out, a.err
	}
}

// Sync returns once every append queued before it has been answered,
// committed or failed, or when ctx ends: a read after it sees what those
// calls wrote. It is how an actor that starts again reads what its last
// incarnation recorded without waiting for the answers. It returns nil
// only in the first case: a ctx that has ended when the writer takes the
// call, ahead of the appends of its batch, is ctx.Err().
func (l *Log) Sync(ctx context.Context) error {
	answered := make(chan error, 1)
	if err := l.enqueue(ctx, &appendReq{ctx: ctx, done: func(_ []events.Envelope, err error) { answered <- err }}); err != nil {
		return err
	}
	select {
	case err := <-answered:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AppendAsync queues envs as Append does and returns at once; done is called
// once with Append's outcome, on the store's writer goroutine, so it must
// be quick and must not block (an actor's done sends itself a message).
// Calls are committed in the order they were made: an event queued after
// another is never durable before it. A call whose ctx has ended when its
// transaction is about to start is answered with ctx.Err() and writes
// nothing. It returns an error, and done is not called, only when the call
// cannot be queued (the ledger is closed or read-only).
func (l *Log) AppendAsync(ctx context.Context, envs []events.Envelope, done func(out []events.Envelope, err error)) error {
	if len(envs) == 0 {
		if l.readOnly {
			return l.errReadOnly("append")
		}
		if err := l.enter(); err != nil {
			return err
		}
		l.leave()
		done(nil, nil)
		return nil
	}
	return l.enqueue(context.Background(), &appendReq{ctx: ctx, envs: envs, done: done})
}

// Guard makes an append conditional: the writer, as it is about to write
// the call's events, shows Check every event committed after After (and
// those of the same batch queued before the call), oldest first; events
// retention dropped (a snapshot holds them) are not shown. An error from
// Check fails the call with that error, and nothing of it is written. A
// refusal by an event of the same batch is answered once that event is
// durable, or with the commit's error should it fail: what refused the call
// never landed.
// It is how a caller that decided on the ledger as it was at After writes
// only if nothing it depended on changed since: Check must be quick, as
// the writer commits nothing else meanwhile.
type Guard struct {
	After uint64
	Check func(events.Envelope) error
}

// AppendGuarded is Append under g (see Guard).
func (l *Log) AppendGuarded(ctx context.Context, g Guard, envs ...events.Envelope) ([]events.Envelope, error) {
	return l.append(ctx, &g, envs)
}

// AppendAsyncGuarded is AppendAsync under g (see Guard): done gets the
// guard's error when it refuses the call.
func (l *Log) AppendAsyncGuarded(ctx context.Context, g Guard, envs []events.Envelope, done func(out []events.Envelope, err error)) error {
	if len(envs) == 0 {
		return l.AppendAsync(ctx, envs, done)
	}
	return l.enqueue(context.Background(), &appendReq{ctx: ctx, envs: envs, guard: &g, done: done})
}

// enqueue hands r to the writer; the call counts as in progress (Close
// waits for it) until r is answered.
func (l *Log) enqueue(ctx context.Context, r *appendReq) error {
	if l.readOnly {
		return l.errReadOnly("append")
	}
	if err := l.enter(); err != nil {
		return err
	}
	answer := r.done
	r.done = func(out []events.Envelope, err error) {
		answer(out, err)
		l.leave()
	}
	select {
	case l.reqs <- r:
		return nil
	case <-ctx.Done():
		l.leave()
		return ctx.Err()
	}
}

// writer is the one goroutine that commits appends, until reqs is closed
// (Close, once every call in progress was answered).
func (l *Log) writer() {
	defer close(l.writerDone)
	var carry *appendReq // taken from the queue but left for the next batch
	for {
		r := carry
		carry = nil
		if r == nil {
			var ok bool
			if r, ok = <-l.reqs; !ok {
				return
			}
		}
		batch := append(l.batch[:0], r)
		n := len(r.envs)
	drain:
		for n < l.maxBatch {
			select {
			case r, ok := <-l.reqs:
				if !ok {
					break drain
				}
				if n+len(r.envs) > l.maxBatch {
					carry = r
					break drain
				}
				batch = append(batch, r)
				n += len(r.envs)
			default:
				break drain
			}
		}
		l.commit(batch)
		clear(batch)
		l.batch = batch[:0]
	}
}

// span locates one encoded event in the writer's arena: the key at off, the
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
	type refusal struct {
		r   *appendReq
		err error
	}
	var refused []refusal  // by a batch-mate's event: answered after the commit
	var syncs []*appendReq // Sync calls: answered after the commit
	next := l.lastSeq.Load() + 1
	for _, r := range batch {
		if !r.state.CompareAndSwap(reqQueued, reqClaimed) {
			// Withdrawn: its caller has returned; the answer goes
			// nowhere, but the call is over.
			r.finish(nil, r.ctx.Err())
			continue
		}
		if err := r.ctx.Err(); err != nil {
			r.finish(nil, err)
			continue
		}
		if len(r.envs) == 0 {
			syncs = append(syncs, r)
			continue
		}
		if r.guard != nil {
			if byMate, err := l.checkGuard(r.guard, live); err != nil {
				if byMate {
					refused = append(refused, refusal{r, err})
				} else {
					r.finish(nil, err)
				}
				continue
			}
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
	var err error
	defer func() {
		for _, f := range refused {
			f.r.finish(nil, cmp.Or(err, f.err))
		}
		for _, r := range syncs {
			r.finish(nil, nil)
		}
	}()
	if len(live) == 0 {
		return
	}

	var appended []events.Envelope
	if l.writeFault.Load() != nil { // a test's fault may choose by them
		for _, r := range live {
			appended = append(appended, r.out...)
		}
	}
	err = l.updateAppending(appended, func(tx *bolt.Tx) error {
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
	if err != nil {
		err = fmt.Errorf("append to ledger %s: %w", l.path, err)
		l.failed(err)
		for _, r := range live {
			r.finish(nil, err)
		}
		return
	}
	l.advance(live[0].out[0].Seq, next-1)
	l.commits.Add(1)
	l.recorded()
	for _, r := range live {
		r.finish(r.out, nil)
	}
	if cap(arena) <= 4<<20 {
		l.arena = arena[:0]
	} else {
		l.arena = nil // one huge call should not pin its memory
	}
}

// checkGuard shows g.Check the events committed after g.After, then those
// of before, the calls of this batch that will be written ahead of the
// guarded one (callers hold writeMu); byMate says a refusal came from
// one of the latter.
func (l *Log) checkGuard(g *Guard, before []*appendReq) (byMate bool, err error) {
	check := func(e events.Envelope) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("append to ledger %s: the guard panicked at #%d: %v", l.path, e.Seq, p)
			}
		}()
		return g.Check(e)
	}
	if last := l.lastSeq.Load(); g.After < last {
		err := l.view(func(tx *bolt.Tx) error {
			return l.scan(tx, g.After+1, last, true, func(seq uint64, rec []byte) error {
				e, err := l.decodeRecord(seq, rec)
				if err != nil {
					return err
				}
				return check(e)
			})
		})
		if err != nil {
			return false, err
		}
	}
	for _, r := range before {
		for _, e := range r.out {
			if e.Seq > g.After {
				if err := check(e); err != nil {
					return true, err
				}
			}
		}
	}
	return false, nil
}

// stampAndEncode stamps e with seq and appends its key and value to buf. A
// payload that panics (a nil pointer, say) is that call's error, not the
// end of the writer that encodes it for everybody.
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
