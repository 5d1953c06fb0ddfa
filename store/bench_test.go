package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	bolt "go.etcd.io/bbolt"
)

// Comparative benchmarks (issue 2, "Speed"). Each runs its baseline and the
// store in the same function, alternating operation by operation (or round
// by round), so that a disk that speeds up or slows down during the run
// affects both alike, and reports:
//
//	ns/op           the store's cost per operation
//	baseline-ns/op  the baseline's
//	x-baseline      ns/op / baseline-ns/op (0.25 = four times cheaper)
//
// `-benchtime 1x` (task bench) sets b.N to 1, which measures nothing useful
// for an operation of a millisecond; every benchmark therefore runs at least
// a fixed number of operations whatever b.N says.

// appendBench opens a new ledger and, beside it, a bare bbolt file with the
// same bucket for the baseline, whose put is one bbolt Update storing one
// key and value. It returns n events as the store will number them from
// seq 1, with their encoded keys and values for the baseline to put: both
// sides write the same bytes.
func appendBench(b *testing.B, n int) (l *Log, put func(key, value []byte) error, envs []events.Envelope, kvs [][2][]byte) {
	dir := b.TempDir()
	l, err := Open(filepath.Join(dir, "ledger.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	db, err := bolt.Open(filepath.Join(dir, "baseline.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucketEvents); return err }); err != nil {
		b.Fatal(err)
	}
	put = func(key, value []byte) error {
		return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Put(key, value) })
	}

	envs = newHistory(11, 64).take(n)
	kvs = make([][2][]byte, n)
	for i, e := range envs {
		e, err := stamp(e, uint64(i+1))
		if err != nil {
			b.Fatal(err)
		}
		buf, err := encodeEvent(nil, e)
		if err != nil {
			b.Fatal(err)
		}
		kvs[i] = [2][]byte{buf[:keySize], buf[keySize:]}
	}
	return l, put, envs, kvs
}

func reportVsBaseline(b *testing.B, ours, baseline time.Duration, ops int) {
	o := float64(ours.Nanoseconds()) / float64(ops)
	base := float64(baseline.Nanoseconds()) / float64(ops)
	b.ReportMetric(o, "ns/op")
	b.ReportMetric(base, "baseline-ns/op")
	b.ReportMetric(o/base, "x-baseline")
}

func BenchmarkAppendSequential(b *testing.B) {
	const warmup = 20
	ops := max(b.N, 1000)
	l, put, envs, kvs := appendBench(b, warmup+ops)
	ctx := context.Background()

	// fsync latency on a shared disk wanders by a factor of several within
	// seconds: alternate single operations, so that both sides see the
	// same disk. The medians are reported too: a mean is at the mercy of a
	// few stalled fsyncs.
	ours := make([]time.Duration, 0, ops)
	base := make([]time.Duration, 0, ops)
	for i := range warmup + ops {
		if i == warmup {
			b.ResetTimer()
			ours, base = ours[:0], base[:0]
		}
		for side := range 2 {
			start := time.Now()
			if (i+side)%2 == 0 {
				if _, err := l.Append(ctx, envs[i]); err != nil {
					b.Fatal(err)
				}
				ours = append(ours, time.Since(start))
			} else {
				if err := put(kvs[i][0], kvs[i][1]); err != nil {
					b.Fatal(err)
				}
				base = append(base, time.Since(start))
			}
		}
	}
	b.StopTimer()
	reportVsBaseline(b, sum(ours), sum(base), ops)
	reportMedianRatio(b, ours, base)
}

func BenchmarkAppendConcurrent8(b *testing.B) {
	// Rounds of 8 goroutines doing perGoroutine operations each, the
	// store's and the baseline's rounds alternating.
	const goroutines, perGoroutine, warmup = 8, 8, 2
	perRound := goroutines * perGoroutine
	rounds := max(b.N, 1024) / perRound
	l, put, envs, kvs := appendBench(b, (warmup+rounds)*perRound)
	ctx := context.Background()

	// The cost per operation is the wall time of a round over its
	// operations.
	round := func(op func() error) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for range goroutines {
			wg.Go(func() {
				for range perGoroutine {
					if err := op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var next, nextBase atomic.Int64
	// Each goroutine appends again as soon as it is answered, as a server
	// of a stream of requests would.
	ourOp := func() error {
		_, err := l.Append(ctx, envs[next.Add(1)-1])
		return err
	}
	baseOp := func() error {
		kv := kvs[nextBase.Add(1)-1]
		return put(kv[0], kv[1])
	}
	ours := make([]time.Duration, 0, rounds)
	base := make([]time.Duration, 0, rounds)
	var commits0 uint64
	for r := range warmup + rounds {
		if r == warmup {
			b.ResetTimer()
			ours, base = ours[:0], base[:0]
			commits0 = l.commits.Load()
		}
		if r%2 == 0 {
			ours = append(ours, round(ourOp))
			base = append(base, round(baseOp))
		} else {
			base = append(base, round(baseOp))
			ours = append(ours, round(ourOp))
		}
	}
	b.StopTimer()
	ops := rounds * perRound
	reportVsBaseline(b, sum(ours), sum(base), ops)
	reportMedianRatio(b, ours, base)
	b.ReportMetric(float64(ops)/float64(l.commits.Load()-commits0), "events/commit")
}

func sum(ds []time.Duration) (t time.Duration) {
	for _, d := range ds {
		t += d
	}
	return t
}

// reportMedianRatio reports the ratio of the medians: the figure to read
// when a few stalled fsyncs throw the means off.
func reportMedianRatio(b *testing.B, ours, base []time.Duration) {
	slices.Sort(ours)
	slices.Sort(base)
	b.ReportMetric(float64(ours[len(ours)/2])/float64(base[len(base)/2]), "p50-x-baseline")
}

// The replay ledger is built once per test process, in a temp dir that
// TestMain removes.
var replayFixture struct {
	once    sync.Once
	dir     string
	path    string
	events  uint64
	snapSeq uint64
	err     error
}

// replayEvents is the size of the replay benchmark's ledger; -short makes
// it a tenth.
func replayEvents() int {
	if testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// replayLedger returns a ledger of replayEvents() generated events with a
// snapshot 1,000 events before the end (its SnapshotTaken is the last
// event). It is written in large calls, so that building it takes seconds.
func replayLedger(b *testing.B) (path string, snapSeq uint64) {
	f := &replayFixture
	f.once.Do(func() {
		start := time.Now()
		f.dir, f.err = os.MkdirTemp("", "devledger-store-bench-")
		if f.err != nil {
			return
		}
		f.path = filepath.Join(f.dir, "ledger.db")
		f.err = buildReplayLedger(f.path, replayEvents(), &f.snapSeq, &f.events)
		b.Logf("built a ledger of %d events in %s", f.events, time.Since(start).Round(time.Millisecond))
	})
	if f.err != nil {
		b.Fatal(f.err)
	}
	return f.path, f.snapSeq
}

func buildReplayLedger(path string, n int, snapSeq, total *uint64) error {
	l, err := Open(path, Options{Node: "bench"})
	if err != nil {
		return err
	}
	defer l.Close()
	h := newHistory(42, 300)
	ctx := context.Background()
	*snapSeq = uint64(n - 1000)
	s := events.NewState()
	var snap events.State
	for done := 0; done < n; {
		k := min(20_000, n-done)
		out, err := l.Append(ctx, h.take(k)...)
		if err != nil {
			return err
		}
		for _, e := range out {
			s = events.Apply(s, e)
			if e.Seq == *snapSeq {
				snap = s.Clone()
			}
		}
		done += k
	}
	if _, err := l.SaveSnapshot(ctx, snap, "benchmark"); err != nil {
		return err
	}
	*total = l.LastSeq()
	return l.Close()
}

func BenchmarkReplay(b *testing.B) {
	path, snapSeq := replayLedger(b)
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	// Fault the file's pages into the map once, so that both replays
	// measure the read path, not the first touch of the page cache.
	if err := l.ReadRaw(0, func(uint64, []byte) error { return nil }); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	var scratch, fromSnap time.Duration
	var fromScratch, viaSnap events.State
	for range b.N {
		start := time.Now()
		fromScratch, err = l.replay(0, false)
		scratch += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
	}
	const snapRuns = 10
	for range snapRuns {
		start := time.Now()
		viaSnap, err = l.Replay(0)
		fromSnap += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !fromScratch.Equal(viaSnap) {
		b.Fatal("replay from the snapshot differs from the replay from scratch")
	}
	if fromScratch.Seq != l.LastSeq() || l.LastSeq()-snapSeq != 1001 {
		b.Fatalf("replayed to %d of %d (snapshot at %d)", fromScratch.Seq, l.LastSeq(), snapSeq)
	}
	scratchNs := float64(scratch.Nanoseconds()) / float64(b.N)
	snapNs := float64(fromSnap.Nanoseconds()) / snapRuns
	b.ReportMetric(scratchNs, "ns/op")
	b.ReportMetric(snapNs, "snapshot-ns/op")
	b.ReportMetric(float64(l.LastSeq())/(scratchNs/1e9), "events/s")
	b.ReportMetric(snapNs/scratchNs, "x-baseline")
	b.ReportMetric(float64(l.SizeBytes())/float64(l.LastSeq()), "file-bytes/event")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if replayFixture.dir != "" {
		os.RemoveAll(replayFixture.dir)
	}
	os.Exit(code)
}

// BenchmarkCheckStructure: the page-graph check Open runs before bbolt
// walks a file (checkStructure: both meta pages, every page reachable from
// the root, the freelist), on the 1M-event ledger. Baseline: reading the
// whole file once, sequentially, into a reused buffer.
//
//	x-baseline  check time / read time
//	ms          check time per Open
func BenchmarkCheckStructure(b *testing.B) {
	path, _ := replayLedger(b)
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	pageSize := l.db.Info().PageSize
	buf := make([]byte, 1<<20)
	readAll := func() time.Duration {
		start := time.Now()
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for {
			if _, err := f.Read(buf); err != nil {
				break
			}
		}
		return time.Since(start)
	}
	readAll() // into the page cache
	b.ResetTimer()
	var ours, base time.Duration
	for range b.N {
		start := time.Now()
		fatal, damage := l.checkStructure(pageSize, true)
		ours += time.Since(start)
		if fatal != nil || damage != nil {
			b.Fatal(fatal, damage)
		}
		base += readAll()
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms")
	b.ReportMetric(float64(ours)/float64(base), "x-baseline")
	b.ReportMetric(float64(l.LastSeq()), "events")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCheckAfterStart: what the daemon checks in the background soon
// after it starts (CheckPages, then Check: every record's checksum, every
// snapshot against the fold), on the 1M-event ledger opened for writing as
// the daemon opens it. Baseline: a replay of every event from the start,
// which reads and folds the same records.
//
//	x-baseline  check time / full replay time
//	ms          check time
func BenchmarkCheckAfterStart(b *testing.B) {
	path, _ := replayLedger(b)
	l := openWarm(b, path)
	b.ResetTimer()
	var ours, base time.Duration
	for range b.N {
		start := time.Now()
		if err := l.CheckPages(context.Background()); err != nil {
			b.Fatal(err)
		}
		if _, err := l.Check(context.Background()); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		start = time.Now()
		if _, err := l.replay(0, false); err != nil {
			b.Fatal(err)
		}
		base += time.Since(start)
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms")
	b.ReportMetric(float64(ours)/float64(base), "x-baseline")
	b.ReportMetric(float64(l.LastSeq()), "events")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRetainBlocksAppends: an Append made while retention runs on a
// copy of the 1M-event ledger, with bounds it does not reach (the pass
// that drops nothing, the common one: the default 1 GiB is more than this
// ledger holds). An Append is one Allocate's commit: what retention holds
// the writer for, an Allocate waits. Each round starts a pass that counts
// the ledger's size from scratch, as the first after a start does,
// appends once 2 ms later (the count reads for tens of milliseconds here,
// seconds where the ledger is large and its pages are not in memory),
// and appends once with no pass running, the baseline; then it times a
// pass that goes on from that one's count, as the passes after do.
// Medians, as in BenchmarkAppendSequential.
//
//	x-baseline  median Append during a pass / median Append without
//	ms          median Append during a pass
//	retain-ms   median pass counting from scratch
//	carried-ms  median pass going on from the last one's count
func BenchmarkRetainBlocksAppends(b *testing.B) {
	src, _ := replayLedger(b)
	path := filepath.Join(b.TempDir(), "ledger.db")
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	data = nil
	l := openWarm(b, path)
	ctx := context.Background()
	h := newHistory(7, 300)
	appendOne := func() time.Duration {
		start := time.Now()
		if _, err := l.Append(ctx, h.take(1)...); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 20 { // the first commits of a file opened anew grow its map
		appendOne()
	}
	bounds := Retention{MaxAge: 100 * 365 * 24 * time.Hour, MaxBytes: 1 << 40}
	rounds := max(b.N, 15)
	ours, base, passes := make([]time.Duration, 0, rounds), make([]time.Duration, 0, rounds), make([]time.Duration, 0, rounds)
	b.ResetTimer()
	carried := make([]time.Duration, 0, rounds)
	for range rounds {
		l.writeMu.Lock()
		l.sized = bytesCounted{}
		l.writeMu.Unlock()
		done := make(chan time.Duration)
		go func() {
			start := time.Now()
			if _, dropped, err := l.Retain(ctx, bounds); err != nil || dropped {
				b.Error(dropped, err)
			}
			done <- time.Since(start)
		}()
		time.Sleep(2 * time.Millisecond)
		ours = append(ours, appendOne())
		passes = append(passes, <-done)
		base = append(base, appendOne())
		start := time.Now()
		if _, dropped, err := l.Retain(ctx, bounds); err != nil || dropped {
			b.Fatal(dropped, err)
		}
		carried = append(carried, time.Since(start))
	}
	b.StopTimer()
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2])
	}
	b.ReportMetric(median(ours)/1e6, "ms")
	b.ReportMetric(median(passes)/1e6, "retain-ms")
	b.ReportMetric(median(carried)/1e6, "carried-ms")
	b.ReportMetric(median(ours)/median(base), "x-baseline")
	b.ReportMetric(0, "ns/op")
}

// openWarm opens the ledger at path for writing, as the daemon does, with
// its pages read into the page cache; it is closed when b ends.
func openWarm(b *testing.B, path string) *Log {
	l, err := Open(path, Options{LockTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	if _, err := l.replay(0, false); err != nil {
		b.Fatal(err)
	}
	return l
}
