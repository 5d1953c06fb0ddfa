package events

import (
	"errors"
	"reflect"
	"testing"
)

// registerForTest adds a type to the catalog for the length of a test, so a
// test can exercise what the shipped catalog does not (yet) have: an old
// schema version. Tests that use it must not run in parallel with others.
func registerForTest(t *testing.T, typ Type, version uint16, decoders map[uint16]func(*reader) Payload) {
	t.Helper()
	register(typ, version, decoders)
	t.Cleanup(func() { delete(catalog, typ) })
}

const typeWidgetTuned Type = "WidgetTuned"

// widgetTuned is a test-only event at schema version 2. Version 1 had no
// Level: every widget then ran at level 1, which is what the upcast says.
type widgetTuned struct {
	Widget string
	Level  int
}

func (widgetTuned) EventType() Type   { return typeWidgetTuned }
func (p widgetTuned) Subject() string { return p.Widget }

func (p widgetTuned) encode(w *writer) {
	w.string(p.Widget)
	w.int(p.Level)
}

func decodeWidgetTunedV1(r *reader) Payload { return widgetTuned{Widget: r.string(), Level: 1} }

func decodeWidgetTunedV2(r *reader) Payload { return widgetTuned{Widget: r.string(), Level: r.int()} }

func TestUpcastOldVersion(t *testing.T) {
	t.Run("registered", func(t *testing.T) {
		registerForTest(t, typeWidgetTuned, 2, map[uint16]func(*reader) Payload{
			1: decodeWidgetTunedV1,
			2: decodeWidgetTunedV2,
		})

		// A record as the build of version 1 wrote it.
		v1 := header(typeWidgetTuned, 1, "w-7")
		v1.string("w-7")
		e, err := Unmarshal(v1.buf)
		if err != nil {
			t.Fatalf("Unmarshal of a version 1 record: %v", err)
		}
		if want := (widgetTuned{Widget: "w-7", Level: 1}); e.Payload != want {
			t.Errorf("payload %#v, want the upcast %#v", e.Payload, want)
		}
		if e.Version != 1 || e.Type != typeWidgetTuned || e.Subject != "w-7" {
			t.Errorf("envelope %s v%d %q, want WidgetTuned v1 w-7 (the version on disk)", e.Type, e.Version, e.Subject)
		}

		// Written again, it is a version 2 record of the same facts.
		rec := mustMarshal(t, e)
		again, err := Unmarshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		e.Version = 2
		if !reflect.DeepEqual(again, e) {
			t.Errorf("rewritten as %#v, want %#v", again, e)
		}

		// The current version round-trips; a later one is refused.
		cur := New(widgetTuned{Widget: "w-8", Level: 5}, sampleTime, sampleBootID)
		if cur.Version != 2 {
			t.Errorf("New stamps version %d, want 2", cur.Version)
		}
		roundTrip(t, cur)
		v3 := header(typeWidgetTuned, 3, "w-9")
		v3.string("w-9")
		v3.int(5)
		v3.string("a field of version 3")
		if _, err := Unmarshal(v3.buf); !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("version 3: err = %v, want ErrUnknownVersion", err)
		}

		// Apply knows nothing of it: only Seq and Time move.
		s := Apply(NewState(), Envelope{Seq: 9, Time: sampleTime, Payload: e.Payload})
		want := NewState()
		want.Seq, want.Time = 9, sampleTime
		if !s.Equal(want) {
			t.Errorf("Apply of a payload outside the fold changed the state")
		}
	})

	// The catalog is as it was.
	v1 := header(typeWidgetTuned, 1, "w-7")
	v1.string("w-7")
	if _, err := Unmarshal(v1.buf); !errors.Is(err, ErrUnknownType) {
		t.Errorf("after the test, err = %v, want ErrUnknownType", err)
	}
	if _, ok := catalog[typeWidgetTuned]; ok {
		t.Error("registerForTest left its type in the catalog")
	}
}

func TestRegisterRefusesMistakes(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: register did not panic", name)
			}
		}()
		f()
	}
	mustPanic("a type twice", func() {
		register(TypeDevicesAllocated, 1, map[uint16]func(*reader) Payload{1: decodeDevicesAllocated})
	})
	mustPanic("a decoder for a version after the current", func() {
		register(typeWidgetTuned, 1, map[uint16]func(*reader) Payload{1: decodeWidgetTunedV1, 2: decodeWidgetTunedV2})
	})
	mustPanic("a decoder for version 0", func() {
		register(typeWidgetTuned, 1, map[uint16]func(*reader) Payload{0: decodeWidgetTunedV1, 1: decodeWidgetTunedV1})
	})
	mustPanic("no decoder for the current version", func() {
		register(typeWidgetTuned, 2, map[uint16]func(*reader) Payload{1: decodeWidgetTunedV1})
	})
	if _, ok := catalog[typeWidgetTuned]; ok {
		t.Error("a refused registration stayed in the catalog")
	}
}
