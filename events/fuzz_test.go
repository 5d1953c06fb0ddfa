package events

import (
	"fmt"
	"reflect"
	"testing"
)

// checkReencodes asserts the fuzz property of a record that decoded: its
// envelope encodes again, and that encoding decodes to an equal envelope.
func checkReencodes(t *testing.T, e Envelope) {
	t.Helper()
	rec, err := Marshal(e)
	if err != nil {
		t.Fatalf("a decoded envelope does not encode: %v\n%#v", err, e)
	}
	again, err := Unmarshal(rec)
	if err != nil {
		t.Fatalf("a re-encoded envelope does not decode: %v\n%x", err, rec)
	}
	// Marshal writes the current schema version; the payload is the same.
	e.Version = CurrentVersion(e.Type)
	if !reflect.DeepEqual(again, e) {
		t.Fatalf("re-encoding changed the envelope\n got %#v\nwant %#v", again, e)
	}
}

// decodeBoth is Unmarshal, checking on the way that UnmarshalForFold,
// which decodes less, accepts and refuses exactly what Unmarshal does and
// that Apply folds what it accepts the same way.
func decodeBoth(t *testing.T, rec []byte) (Envelope, error) {
	t.Helper()
	e, err := Unmarshal(rec)
	f, errFold := UnmarshalForFold(rec)
	if fmt.Sprint(err) != fmt.Sprint(errFold) {
		t.Fatalf("Unmarshal says %v, UnmarshalForFold says %v\n%x", err, errFold, rec)
	}
	if err == nil && !Apply(NewState(), f).Equal(Apply(NewState(), e)) {
		t.Fatalf("UnmarshalForFold's %s folds differently from Unmarshal's\n%x", e.Type, rec)
	}
	return e, err
}

// FuzzUnmarshal feeds arbitrary records to the decoder. The seed corpus in
// testdata/fuzz/FuzzUnmarshal holds the golden samples (refreshed with
// -update) and every crasher found so far.
func FuzzUnmarshal(f *testing.F) {
	for _, typ := range Types() {
		if p, ok := samples[typ]; ok {
			e := New(p, sampleTime, sampleBootID)
			e.Seq = sampleSeq
			rec, err := Marshal(e)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(rec)
		}
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		e, err := decodeBoth(t, rec)
		if err != nil {
			return
		}
		checkReencodes(t, e)
		_ = e.Devices()
		_ = e.Pool()
		_ = Apply(NewState(), e)
	})
}

// FuzzUnmarshalState feeds arbitrary snapshots to UnmarshalState; whatever it
// accepts must fold further and encode again without panicking. Its inputs
// are large, so the fuzzer spends long stretches minimizing them (execs/sec
// shows 0); -fuzzminimizetime 5s keeps it fuzzing.
func FuzzUnmarshalState(f *testing.F) {
	s := NewState()
	for i, typ := range Types() {
		e := New(samples[typ], sampleTime, sampleBootID)
		e.Seq = uint64(i + 1)
		s = Apply(s, e)
	}
	snap, err := MarshalState(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(snap)
	f.Add([]byte(`{"format":1,"state":null}`))
	f.Add([]byte(`{"format":1,"state":{"pools":{"p":{"members":["b","a"]}},"holders":{"x":[1,1]}}}`))
	f.Add([]byte(`{"format":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalState(b)
		if err != nil {
			return
		}
		c := s.Clone()
		if !c.Equal(s) {
			t.Fatal("a clone differs from its original")
		}
		for _, typ := range Types() {
			s = Apply(s, New(samples[typ], sampleTime, sampleBootID))
		}
		if _, err := MarshalState(s); err != nil {
			t.Fatalf("a state from a snapshot does not encode: %v", err)
		}
	})
}
