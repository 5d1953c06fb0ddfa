package events

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestRoundTripEveryType(t *testing.T) {
	for _, typ := range Types() {
		t.Run(string(typ), func(t *testing.T) {
			e := sampleEnvelope(t, typ)
			rec, got := roundTrip(t, e)
			if got.Type != typ || got.Version != CurrentVersion(typ) || got.Subject != samples[typ].Subject() {
				t.Errorf("envelope says %s v%d subject %q", got.Type, got.Version, got.Subject)
			}
			again, err := Marshal(got)
			if err != nil {
				t.Fatalf("Marshal of the decoded envelope: %v", err)
			}
			if string(again) != string(rec) {
				t.Errorf("re-encoding differs:\n%x\n%x", again, rec)
			}
		})
	}
}

// roundTrip encodes and decodes e, failing unless the result equals e.
func roundTrip(t *testing.T, e Envelope) (rec []byte, got Envelope) {
	t.Helper()
	rec = mustMarshal(t, e)
	got, err := decodeBoth(t, rec)
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip changed the envelope\n got %#v\nwant %#v", got, e)
	}
	return rec, got
}

func TestRoundTripEdgeValues(t *testing.T) {
	facts := sampleFacts
	facts.NUMANode = -1 // sysfs says -1 on a machine without NUMA
	facts.VFIndex = -1
	facts.Interfaces = nil
	tests := []struct {
		name string
		p    Payload
	}{
		{"negative ints", DeviceDiscovered{Device: facts}},
		{"empty strings and lists", DevicesAllocated{}},
		{"max unsigned", EventsDropped{FromSeq: math.MaxUint64, ToSeq: math.MaxUint64, Count: math.MaxUint64, Bytes: math.MinInt64, SnapshotSeq: math.MaxUint64}},
		{"int beyond 32 bits", SnapshotTaken{Seq: 1 << 40, Size: math.MaxInt}},
		{"negative duration", DevicesReleased{HeldFor: math.MinInt64}},
		{"non-UTF-8 strings", DeviceRemoved{Address: "\xff\xfe", Reason: "\x00"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.p, sampleTime, "")
			e.Seq = math.MaxUint64
			roundTrip(t, e)
		})
	}
}

func TestEnvelopeFields(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	at := time.Date(2031, 7, 1, 2, 3, 4, 999999999, paris)
	e := New(DeviceRemoved{Address: "0000:af:00.3"}, at, "boot-1")
	e.Seq = 1<<63 + 5
	if e.Type != TypeDeviceRemoved || e.Subject != "0000:af:00.3" || e.Version != CurrentVersion(TypeDeviceRemoved) {
		t.Fatalf("New stamped %s %q v%d", e.Type, e.Subject, e.Version)
	}
	rec, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != e.Seq || got.BootID != "boot-1" {
		t.Errorf("seq %d boot %q, want %d boot-1", got.Seq, got.BootID, e.Seq)
	}
	if !got.Time.Equal(at) || got.Time.Location() != time.UTC || got.Time.Nanosecond() != 999999999 {
		t.Errorf("time %s (%s), want %s in UTC to the nanosecond", got.Time, got.Time.Location(), at.UTC())
	}

	// The zero time stays zero.
	e.Time = time.Time{}
	if got, _ = Unmarshal(mustMarshal(t, e)); !got.Time.IsZero() {
		t.Errorf("zero time read back as %s", got.Time)
	}
	// A monotonic clock reading does not survive, the instant does.
	now := time.Now()
	e = New(DaemonStopped{}, now, "b")
	if got, _ = Unmarshal(mustMarshal(t, e)); !got.Time.Equal(now) || got.Time != now.UTC().Round(0) {
		t.Errorf("time.Now() read back as %s, want %s", got.Time, now.UTC().Round(0))
	}
}

func mustMarshal(tb testing.TB, e Envelope) []byte {
	tb.Helper()
	rec, err := Marshal(e)
	if err != nil {
		tb.Fatalf("Marshal: %v", err)
	}
	return rec
}

// Marshal takes type, subject and version from the payload and the catalog,
// not from the envelope.
func TestMarshalTrustsThePayload(t *testing.T) {
	e := sampleEnvelope(t, TypeDeviceRemoved)
	want := mustMarshal(t, e)
	e.Type, e.Subject, e.Version = TypeSocketLost, "elsewhere", 99
	if got := mustMarshal(t, e); string(got) != string(want) {
		t.Errorf("envelope fields leaked into the record:\n%x\n%x", got, want)
	}
}

func TestMarshalPointerPayload(t *testing.T) {
	for _, typ := range Types() {
		t.Run(string(typ), func(t *testing.T) {
			e := sampleEnvelope(t, typ)
			want := mustMarshal(t, e)
			ptr := reflect.New(reflect.TypeOf(e.Payload))
			ptr.Elem().Set(reflect.ValueOf(e.Payload))
			e.Payload = ptr.Interface().(Payload)
			if got := mustMarshal(t, e); string(got) != string(want) {
				t.Errorf("a pointer payload encodes differently:\n%x\n%x", got, want)
			}
		})
	}
}

func TestMarshalErrors(t *testing.T) {
	prefix := []byte("keep")
	tests := []struct {
		name string
		e    Envelope
		want string
	}{
		{"no payload", Envelope{Seq: 3}, "no payload"},
		{"nil pointer payload", Envelope{Seq: 3, Payload: (*DevicesAllocated)(nil)}, "no payload"},
		{"time before 1678", New(DaemonStopped{}, time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), ""), "out of range"},
		{"time after 2262", New(DaemonStopped{}, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), ""), "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf, err := AppendMarshal(prefix, tc.e)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if string(buf) != "keep" {
				t.Errorf("AppendMarshal returned %q on error, want the buffer unchanged", buf)
			}
		})
	}
}

func TestAppendMarshalAppends(t *testing.T) {
	e := sampleEnvelope(t, TypeDevicesAllocated)
	buf, err := AppendMarshal([]byte("hdr"), e)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf) != "hdr"+string(mustMarshal(t, e)) {
		t.Errorf("AppendMarshal did not append the record to the buffer")
	}
}

// Maps are written in key order: one value has one encoding.
func TestMarshalDeterministic(t *testing.T) {
	e := sampleEnvelope(t, TypeDevicesAllocated)
	p := e.Payload.(DevicesAllocated)
	p.Response.Envs = map[string]string{}
	for i := range 64 {
		p.Response.Envs[strings.Repeat("K", i%7)+string(rune('a'+i%26))+string(rune('0'+i/26))] = "v"
	}
	e.Payload = p
	want := mustMarshal(t, e)
	for range 20 {
		if got := mustMarshal(t, e); string(got) != string(want) {
			t.Fatal("two encodings of one envelope differ")
		}
	}
}

// The decoded envelope must not alias the record: bbolt's memory is gone once
// its transaction ends.
func TestUnmarshalCopies(t *testing.T) {
	for _, typ := range Types() {
		e := sampleEnvelope(t, typ)
		rec := mustMarshal(t, e)
		got, err := Unmarshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rec {
			rec[i] = 0xAA
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: the decoded envelope changed with the record's bytes", typ)
		}
	}
}

// header writes the envelope part of a record by hand, for records Marshal
// would never write.
func header(typ Type, version uint16, subject string) *writer {
	w := &writer{}
	w.buf = append(w.buf, codecV1)
	w.uvarint(7)
	w.time(sampleTime)
	w.string(string(typ))
	w.uvarint(uint64(version))
	w.string(sampleBootID)
	w.string(subject)
	return w
}

func TestUnmarshalErrors(t *testing.T) {
	valid := mustMarshal(t, sampleEnvelope(t, TypeDeviceRemoved))
	unknown := header("DevicesTeleported", 1, "x")
	unknown.string("payload")
	newer := header(TypeDeviceRemoved, CurrentVersion(TypeDeviceRemoved)+1, "0000:3b:02.1")
	newer.string("0000:3b:02.1")
	newer.string("a field of the future")
	newer.int(7)
	never := header(TypeDeviceRemoved, 0, "0000:3b:02.1")
	never.string("0000:3b:02.1")
	never.string("")
	subject := header(TypeDeviceRemoved, 1, "0000:3b:02.2")
	subject.string("0000:3b:02.1")
	subject.string("")
	badBool := header(TypeDaemonStopped, 1, SubjectDaemon)
	badBool.string("SIGTERM")
	badBool.buf = append(badBool.buf, 2)
	bigVersion := &writer{buf: []byte{codecV1}}
	bigVersion.uvarint(7)
	bigVersion.time(sampleTime)
	bigVersion.string(string(TypeDeviceRemoved))
	bigVersion.uvarint(math.MaxUint16 + 1)

	tests := []struct {
		name string
		rec  []byte
		want error
		text string
	}{
		{"nil", nil, ErrCorrupt, "empty record"},
		{"empty", []byte{}, ErrCorrupt, "empty record"},
		{"codec byte 0", append([]byte{0}, valid[1:]...), ErrCorrupt, "codec byte 0"},
		{"codec byte 2", append([]byte{2}, valid[1:]...), ErrCorrupt, "codec byte 2"},
		{"codec byte 255", append([]byte{255}, valid[1:]...), ErrCorrupt, "codec byte 255"},
		{"trailing zero", append(slices.Clone(valid), 0), ErrCorrupt, "1 trailing bytes"},
		{"trailing record", append(slices.Clone(valid), valid...), ErrCorrupt, "trailing bytes"},
		{"unknown type", unknown.buf, ErrUnknownType, `"DevicesTeleported"`},
		{"newer version", newer.buf, ErrUnknownVersion, "this build reads up to 1"},
		{"version 0", never.buf, ErrCorrupt, "never written"},
		{"version beyond uint16", bigVersion.buf, ErrCorrupt, "out of range"},
		{"subject disagrees with payload", subject.buf, ErrCorrupt, "subject"},
		{"bool neither 0 nor 1", badBool.buf, ErrCorrupt, "bad bool"},
		{"overlong varint", append([]byte{codecV1}, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), ErrCorrupt, "varint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeBoth(t, tc.rec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("err = %q, want it to say %q", err, tc.text)
			}
		})
	}
}

func TestUnmarshalTruncated(t *testing.T) {
	for _, typ := range Types() {
		t.Run(string(typ), func(t *testing.T) {
			rec := mustMarshal(t, sampleEnvelope(t, typ))
			for n := range len(rec) {
				// A copy whose capacity ends where the record does, so a
				// read past the end cannot hide in spare capacity.
				cut := slices.Clip(slices.Clone(rec[:n]))
				if _, err := decodeBoth(t, cut); !errors.Is(err, ErrCorrupt) {
					t.Errorf("cut at %d of %d: err = %v, want ErrCorrupt", n, len(rec), err)
				}
			}
		})
	}
}

// Every byte of every sample changed to values that matter to varints,
// bools and lengths: the decoder may accept or refuse, but never panic, and
// what it accepts encodes again. The fuzzer tries the rest.
func TestUnmarshalEveryByteChanged(t *testing.T) {
	for _, typ := range Types() {
		rec := mustMarshal(t, sampleEnvelope(t, typ))
		bad := slices.Clone(rec)
		for i, was := range rec {
			for _, v := range []byte{0, 1, 2, 0x7f, 0x80, 0xff, was ^ 1, was ^ 0x80, was + 1, was - 1} {
				bad[i] = v
				if e, err := decodeBoth(t, bad); err == nil {
					checkReencodes(t, e)
				}
			}
			bad[i] = was
		}
	}
}

func TestUnmarshalHostileLengths(t *testing.T) {
	huge := func(build func(w *writer)) []byte {
		w := &writer{}
		build(w)
		return w.buf
	}
	payload := func(typ Type, subject string, build func(w *writer)) []byte {
		w := header(typ, CurrentVersion(typ), subject)
		build(w)
		return w.buf
	}
	const lots = math.MaxUint64
	tests := []struct {
		name string
		rec  []byte
	}{
		{"type name", huge(func(w *writer) {
			w.buf = append(w.buf, codecV1)
			w.uvarint(1)
			w.time(sampleTime)
			w.uvarint(1 << 62)
			w.buf = append(w.buf, "DaemonStopped"...)
		})},
		{"boot id", huge(func(w *writer) {
			w.buf = append(w.buf, codecV1)
			w.uvarint(1)
			w.time(sampleTime)
			w.string(string(TypeDaemonStopped))
			w.uvarint(1)
			w.uvarint(lots)
		})},
		{"subject", payload(TypeDaemonStopped, "", func(w *writer) { w.buf[len(w.buf)-1] = 0xff; w.buf = append(w.buf, 0xff, 0xff, 0xff, 0x7f) })},
		{"string", payload(TypeDaemonStopped, SubjectDaemon, func(w *writer) { w.uvarint(1 << 40) })},
		{"string list", payload(TypeConfigRejected, SubjectConfig, func(w *writer) { w.string(""); w.string(""); w.uvarint(lots) })},
		{"pool list", payload(TypeConfigApplied, SubjectConfig, func(w *writer) { w.string(""); w.string(""); w.uvarint(1 << 50) })},
		{"claims", payload(TypeAllocationConflict, "", func(w *writer) { w.string(""); w.string(""); w.uvarint(lots / 3) })},
		{"device ids", payload(TypeDevicesAllocated, "", func(w *writer) { w.string(""); w.uvarint(lots) })},
		{"envs", payload(TypeDevicesAllocated, "", func(w *writer) { w.string(""); w.uvarint(0); w.int(0); w.uvarint(lots) })},
		{"mounts", payload(TypeDevicesAllocated, "", func(w *writer) { w.string(""); w.uvarint(0); w.int(0); w.uvarint(0); w.uvarint(lots) })},
		{"device nodes", payload(TypeDevicesAllocated, "", func(w *writer) {
			w.string("")
			w.uvarint(0)
			w.int(0)
			w.uvarint(0)
			w.uvarint(0)
			w.uvarint(1 << 33)
		})},
		{"count just over what is left", payload(TypeConfigRejected, SubjectConfig, func(w *writer) {
			w.string("")
			w.string("")
			w.uvarint(65)
			w.buf = append(w.buf, make([]byte, 64)...)
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeBoth(t, tc.rec); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			const runs = 50
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range runs {
				_, _ = Unmarshal(tc.rec)
			}
			runtime.ReadMemStats(&after)
			if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4096 {
				t.Errorf("a refused %d-byte record allocated %d bytes", len(tc.rec), per)
			}
		})
	}
}

func TestEnvelopeDevicesAndPool(t *testing.T) {
	const dpdk = "intel.com/intel_sriov_dpdk"
	pair := []string{"0000:3b:02.1", "0000:3b:02.2"}
	tests := map[Type]struct {
		devices []string
		pool    string
	}{
		TypeDaemonStarted:           {nil, ""},
		TypeDaemonStopped:           {nil, ""},
		TypeConfigApplied:           {[]string{"0000:3b:02.1", "0000:3b:02.2", "0000:3b:02.0"}, ""},
		TypeConfigRejected:          {nil, ""},
		TypeDeviceDiscovered:        {[]string{"0000:3b:02.1"}, ""},
		TypeDeviceChanged:           {[]string{"0000:3b:02.1"}, ""},
		TypeDeviceRemoved:           {[]string{"0000:3b:02.1"}, ""},
		TypeDeviceHealthChanged:     {[]string{"0000:3b:02.1"}, ""},
		TypePoolMembershipChanged:   {[]string{"0000:3b:02.1", "0000:3b:02.2", "0000:3b:02.0"}, dpdk},
		TypePluginServing:           {nil, dpdk},
		TypePluginRegistered:        {nil, dpdk},
		TypeRegistrationFailed:      {nil, dpdk},
		TypeKubeletRestarted:        {nil, ""},
		TypeKubeletStopped:          {nil, ""},
		TypeSocketLost:              {nil, dpdk},
		TypeDevicesAllocated:        {pair, dpdk},
		TypeAllocationConflict:      {[]string{"0000:3b:02.1"}, dpdk},
		TypeAllocationBound:         {pair, dpdk},
		TypeDevicesReleased:         {pair, dpdk},
		TypeSnapshotTaken:           {nil, ""},
		TypeEventsDropped:           {nil, ""},
		TypeEventLost:               {nil, ""},
		TypeAllocationRecovered:     {pair, dpdk},
		TypePluginWithdrawn:         {nil, dpdk},
		TypeDaemonCrashed:           {nil, ""},
		TypeLedgerDamaged:           {nil, ""},
		TypeDamageAcknowledged:      {nil, ""},
		TypeAllocationLeakSuspected: {[]string{"0000:3b:02.3"}, dpdk},
		TypeAttributionChanged:      {nil, ""},
	}
	for _, typ := range Types() {
		t.Run(string(typ), func(t *testing.T) {
			want, ok := tests[typ]
			if !ok {
				t.Fatalf("no expectation for %s: say which devices and pool it concerns", typ)
			}
			e := sampleEnvelope(t, typ)
			got := e.Devices()
			if !slices.Equal(got, want.devices) {
				t.Errorf("Devices() = %q, want %q", got, want.devices)
			}
			if p := e.Pool(); p != want.pool {
				t.Errorf("Pool() = %q, want %q", p, want.pool)
			}
			// The result is the caller's: changing it leaves the event be.
			for i := range got {
				got[i] = "changed"
			}
			if again := e.Devices(); !slices.Equal(again, want.devices) {
				t.Errorf("Devices() returned the payload's own slice")
			}
		})
	}
	if got := (Envelope{}).Devices(); got != nil {
		t.Errorf("Devices() of an empty envelope = %q", got)
	}
	if got := (Envelope{Payload: &DeviceRemoved{Address: "x"}}).Devices(); !slices.Equal(got, []string{"x"}) {
		t.Errorf("Devices() of a pointer payload = %q", got)
	}
}

func TestTypesAndParseType(t *testing.T) {
	ts := Types()
	if !slices.IsSorted(ts) || len(ts) < 19 {
		t.Fatalf("Types() = %v, want the sorted catalog", ts)
	}
	for _, typ := range ts {
		got, err := ParseType(string(typ))
		if err != nil || got != typ {
			t.Errorf("ParseType(%q) = %q, %v", typ, got, err)
		}
		if CurrentVersion(typ) < 1 {
			t.Errorf("CurrentVersion(%s) = %d", typ, CurrentVersion(typ))
		}
	}
	_, err := ParseType("devicesallocated")
	if !errors.Is(err, ErrUnknownType) || !strings.Contains(err.Error(), "DevicesAllocated, DevicesReleased") {
		t.Errorf("ParseType of an unknown name: %v", err)
	}
	if v := CurrentVersion("Nope"); v != 0 {
		t.Errorf("CurrentVersion of an unknown type = %d, want 0", v)
	}
}

// Every type reads every version from 1 to its current one: a version is
// never dropped, so an old ledger always reads.
func TestCatalogKeepsEveryVersion(t *testing.T) {
	for typ, k := range catalog {
		if k.name != typ {
			t.Errorf("%s is registered as %s", typ, k.name)
		}
		if len(k.decoders) != int(k.version)+1 || k.decoders[0] != nil {
			t.Errorf("%s: decoders for versions 0 to %d, current is %d", typ, len(k.decoders)-1, k.version)
		}
		for v := uint16(1); v <= k.version; v++ {
			if k.decoders[v] == nil {
				t.Errorf("%s: no decoder for version %d of %d", typ, v, k.version)
			}
		}
	}
}

// Decoding shares a reader pool, a boot id cache and interned strings between
// goroutines: the store's replay, dump through the admin socket and snapshots
// run at once.
func TestUnmarshalConcurrent(t *testing.T) {
	var recs [][]byte
	var want []Envelope
	for i, typ := range Types() {
		e := sampleEnvelope(t, typ)
		e.BootID = fmt.Sprint("boot-", i%3)
		recs = append(recs, mustMarshal(t, e))
		want = append(want, e)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for n := range 200 {
				i := (g + n) % len(recs)
				got, err := Unmarshal(recs[i])
				if err == nil && !reflect.DeepEqual(got, want[i]) {
					err = fmt.Errorf("%s decoded as %#v", want[i].Type, got)
				}
				if err == nil {
					var f Envelope
					if f, err = UnmarshalForFold(recs[i]); err == nil {
						Apply(NewState(), f)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestIntern(t *testing.T) {
	a := intern([]byte("0000:3b:02.1"))
	b := intern([]byte("0000:3b:02.1"))
	if a != "0000:3b:02.1" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("intern gave %q and %q, not one string", a, b)
	}
	if c := intern([]byte("0000:3b:02.2")); c != "0000:3b:02.2" {
		t.Errorf("intern gave %q", c)
	}
	// Whatever lands in the same slot, each call returns its own bytes.
	for i := range 3 * len(interned) {
		want := fmt.Sprint(i)
		if got := intern([]byte(want)); got != want {
			t.Fatalf("intern(%q) = %q", want, got)
		}
	}
}
