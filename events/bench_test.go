package events

import (
	"fmt"
	"testing"
	"time"
)

// The replay budget (issue 2): 500k events/s including bbolt reads, so
// decoding and folding a typical event must stay well under a microsecond.

// allocationMix is a steady flow of allocations of two devices each, each
// released live allocations later: what most of a ledger is. A node of
// 2*(live+1) devices: no device is allocated twice at once. Seqs wrap around
// the end, so a benchmark can cycle through the events forever.
func allocationMix(live, cycles int) []Envelope {
	dev := func(k int) string { return fmt.Sprintf("0000:%02x:%02x.%d", 0x10+k/256, k/8%32, k%8) }
	at := func(seq uint64) time.Time { return baseTime.Add(time.Duration(seq) * time.Millisecond) }
	slots := live + 1
	pairs := slots * cycles
	devices := func(i int) []string { return []string{dev(2 * (i % slots)), dev(2*(i%slots) + 1)} }
	es := make([]Envelope, 0, 2*pairs)
	for i := range pairs {
		seq := uint64(2*i + 1)
		ids := devices(i)
		alloc := New(DevicesAllocated{
			Pool: streamPools[i%len(streamPools)], DeviceIDs: ids,
			Response: ContainerAllocation{
				Envs:    map[string]string{"PCIDEVICE_INTEL_COM_SRIOV_A": ids[0] + "," + ids[1]},
				Devices: []DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "rw"}, {ContainerPath: "/dev/vfio/87", HostPath: "/dev/vfio/87", Permissions: "rw"}},
			},
		}, at(seq), sampleBootID)
		alloc.Seq = seq
		// The release of the allocation made live pairs before, wrapping.
		j := (i - live + pairs) % pairs
		rel := New(DevicesReleased{
			AllocationSeq: uint64(2*j + 1), Pool: streamPools[j%len(streamPools)],
			DeviceIDs: devices(j), HeldFor: time.Minute, Reason: "pod deleted",
		}, at(seq+1), sampleBootID)
		rel.Seq = seq + 1
		es = append(es, alloc, rel)
	}
	return es
}

func marshalAll(tb testing.TB, es []Envelope) [][]byte {
	recs := make([][]byte, len(es))
	for i, e := range es {
		recs[i] = mustMarshal(tb, e)
	}
	return recs
}

func BenchmarkUnmarshal(b *testing.B) {
	cases := []struct {
		name string
		e    Envelope
	}{
		{"DevicesAllocated", allocationMix(1, 1)[0]},
		{"DevicesReleased", allocationMix(1, 1)[1]},
		{"DeviceHealthChanged", sampleEnvelope(b, TypeDeviceHealthChanged)},
		{"DeviceDiscovered", sampleEnvelope(b, TypeDeviceDiscovered)},
		{"DevicesAllocatedFull", sampleEnvelope(b, TypeDevicesAllocated)},
	}
	for _, c := range cases {
		rec := mustMarshal(b, c.e)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if _, err := Unmarshal(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMarshal(b *testing.B) {
	e := allocationMix(1, 1)[0]
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = AppendMarshal(buf[:0], e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApply folds DevicesAllocated/DevicesReleased pairs into a state
// holding about 64 live allocations.
func BenchmarkApply(b *testing.B) {
	es := allocationMix(64, 32)
	s := fold(NewState(), es...) // warm: the maps have their steady size
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s = Apply(s, es[i])
		if i++; i == len(es) {
			i = 0
		}
	}
}

// BenchmarkReplay is what replay does per event once bbolt handed it the
// record: decode, then fold; with Unmarshal and with UnmarshalForFold.
func BenchmarkReplay(b *testing.B) {
	for _, live := range []int{64, 1024} {
		es := allocationMix(live, max(4096/live, 2))
		recs := marshalAll(b, es)
		b.Run(fmt.Sprint("Unmarshal+Apply/live=", live), func(b *testing.B) {
			s := fold(NewState(), es...)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e, err := Unmarshal(recs[i])
				if err != nil {
					b.Fatal(err)
				}
				s = Apply(s, e)
				if i++; i == len(recs) {
					i = 0
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprint("UnmarshalForFold+Apply/live=", live), func(b *testing.B) {
			s := fold(NewState(), es...)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e, err := UnmarshalForFold(recs[i])
				if err != nil {
					b.Fatal(err)
				}
				s = Apply(s, e)
				if i++; i == len(recs) {
					i = 0
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
