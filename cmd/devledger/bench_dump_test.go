package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/store/storetest"
)

// dumpLedger is a 1,000,000-event ledger of a busy node, built once per
// benchmark process, in the process's temp dir (which TestMain removes):
// a benchmark's own TempDir is gone when -count runs it again.
var dumpLedger struct {
	once sync.Once
	path string
	err  error
}

func buildDumpLedger(b *testing.B) string {
	b.Helper()
	dumpLedger.once.Do(func() {
		dir, err := os.MkdirTemp(binDir, "dump-ledger")
		if err != nil {
			dumpLedger.err = err
			return
		}
		path := filepath.Join(dir, "ledger.db")
		l, err := store.Open(path, store.Options{Node: "bench"})
		if err != nil {
			dumpLedger.err = err
			return
		}
		defer l.Close()
		pools := map[string][]string{}
		for p := range 4 {
			var ids []string
			for i := range 128 {
				ids = append(ids, fmt.Sprintf("0000:%02x:%02x.%d", 0x3b+p, 1+i/8, i%8))
			}
			pools[fmt.Sprintf("intel.com/pool%d", p)] = ids
		}
		answer := func(pool string, ids []string) events.ContainerAllocation {
			return events.ContainerAllocation{Envs: map[string]string{"PCIDEVICE_X": ids[0]},
				Devices: []events.DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"}}}
		}
		h := storetest.NewPodHistory(7, pools, answer, "bench-boot", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		_, dumpLedger.err = storetest.Grow(context.Background(), l, events.NewState(), h, 1_000_000, storetest.GrowOptions{})
		dumpLedger.path = path
	})
	if dumpLedger.err != nil {
		b.Fatal(dumpLedger.err)
	}
	return dumpLedger.path
}

// BenchmarkDump streams 1,000,000 events as JSON lines to a discarded
// writer, as `devledger dump --format jsonl` does (read, decode, filter,
// encode, write). The baseline in the same run reads the same records raw
// (checksums verified, nothing decoded): x-baseline is what decoding and
// encoding add to reading. Targets: at least 200k events/s, and a flat heap
// (peak-heap-MiB, sampled while dumping, stays near the baseline's and does
// not grow with the log).
func BenchmarkDump(b *testing.B) {
	path := buildDumpLedger(b)
	runtime.GC()
	var ours, base time.Duration
	var peakHeap, basePeak uint64
	n := 0
	for b.Loop() {
		l, err := store.Open(path, store.Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		stopSample, peak := sampleHeap()
		start := time.Now()
		count := 0
		if err := l.ReadRaw(0, func(seq uint64, rec []byte) error { count++; return nil }); err != nil {
			b.Fatal(err)
		}
		base += time.Since(start)
		basePeak = max(basePeak, stopSample(peak))
		runtime.GC()

		stopSample, peak = sampleHeap()
		start = time.Now()
		p, err := newPrinter("jsonl", io.Discard, false, false, "")
		if err != nil {
			b.Fatal(err)
		}
		printed := 0
		var f eventFilter
		if err := l.Read(0, func(e events.Envelope) error {
			if !f.match(e) {
				return nil
			}
			printed++
			return p.event(e)
		}); err != nil {
			b.Fatal(err)
		}
		if err := p.end(); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		peakHeap = max(peakHeap, stopSample(peak))
		l.Close()
		if printed != count || count < 1_000_000 {
			b.Fatalf("dumped %d of %d events", printed, count)
		}
		n += printed
		runtime.GC()
	}
	b.ReportMetric(float64(n)/ours.Seconds(), "events/s")
	b.ReportMetric(float64(ours)/float64(base), "x-baseline")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(basePeak)/(1<<20), "baseline-peak-heap-MiB")
}

// sampleHeap samples the live heap every 10 ms until stopped and returns
// the peak.
func sampleHeap() (func(*uint64) uint64, *uint64) {
	var peak uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func(p *uint64) uint64 { close(done); <-stopped; return *p }, &peak
}
