package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Group commit. Append hands its events to one writer goroutine over an
// unbuffered channel. The writer takes every call waiting at that moment (up
// to MaxBatch events), encodes each call's events (a call whose events do not
// encode fails alone, before the transaction), and commits all of them in one
// bbolt transaction: one commit, one pair of fsyncs. Then it answers every
// call. While it commits, the next calls queue up on the channel and form
// the next batch, so there is no timer and no delay for a lone caller.

// Request states: the writer claims a request before its transaction starts;
// a caller whose context ends first withdraws it. Exactly one of the two wins.
const (
	reqQueued int32 = iota
	reqClaimed
	reqWithdrawn
)

type appendReq struct {
	ctx   context.Context
	envs  []events.Envelope
	state atomic.Int32
	out   []events.Envelope
	err   error
	done  chan struct{}
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
	r := &appendReq{ctx: ctx, envs: envs, done: make(chan struct{})}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closing:
		return nil, fmt.Errorf("append to ledger %s: %w", l.path, ErrClosed)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqWithdrawn) {
			return nil, ctx.Err()
		}
		<-r.done
	}
	return r.out, r.err
}

// writeLoop is the single writer. It runs until Close, then commits what was
// already handed to it and exits.
func (l *Log) writeLoop() {
	defer close(l.writerDone)
	var (
		batch    []*appendReq
		carry    *appendReq
		stopping bool
	)
	for {
		first := carry
		carry = nil
		if first == nil {
			if stopping {
				select {
				case first = <-l.reqs:
				default:
					return
				}
			} else {
				select {
				case first = <-l.reqs:
				case <-l.closing:
					stopping = true
					continue
				}
			}
		}
		batch = append(batch[:0], first)
		n := len(first.envs)
		// Let callers that were just answered, and are about to append
		// again, reach the channel: they join this batch instead of
		// waiting a whole commit for the next one. A lone caller loses
		// nothing, there being nobody else to run.
		runtime.Gosched()
	gather:
		for n < l.maxBatch {
			select {
			case r := <-l.reqs:
				if n+len(r.envs) > l.maxBatch {
					carry = r
					break gather
				}
				batch = append(batch, r)
				n += len(r.envs)
			default:
				break gather
			}
		}
		l.commit(batch)
		clear(batch)
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
	next := l.lastSeq.Load() + 1
	for _, r := range batch {
		if !r.state.CompareAndSwap(reqQueued, reqClaimed) {
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
			if e, err = stamp(e, next+uint64(i)); err != nil {
				err = fmt.Errorf("append to ledger %s: event %d of %d: %w", l.path, i+1, len(r.envs), err)
				break
			}
			off := len(arena)
			if arena, err = encodeEvent(arena, e); err != nil {
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

// putNext stores value under key, which must be the bucket's next sequence:
// the sequence comes from bbolt's counter, so it is gap-free and rolls back
// with the transaction; the writer, holding writeMu, predicted it to encode
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
