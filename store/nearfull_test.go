package store

import (
	"context"
	"errors"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store/internal/writefault"
)

// On a nearly full disk the ledger takes small commits and refuses
// larger ones, so that every other append fails. The log says that the
// ledger cannot record, that it records again, and, when faults come
// back soon after, that it refuses some writes: three lines, not two a
// flip. Once it has recorded for a minute with none refused, it says
// it records again. AppendFault still tells each append's outcome.
func TestTheLogDoesNotFlapOnADiskThatTakesOnlySomeWrites(t *testing.T) {
	l, logs, clock := nearlyFullLog(t)
	ctx := context.Background()
	removed := events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "test"}, *clock, "b")

	for i := range 50 { // a flip a second
		*clock = clock.Add(time.Second)
		if _, err := l.Append(ctx, removed); err != nil {
			t.Fatalf("round %d: a small append: %v", i, err)
		}
		if l.AppendFault() != nil {
			t.Fatalf("round %d: AppendFault %v after an append that went through", i, l.AppendFault())
		}
		if _, err := l.Append(ctx, removed, removed); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("round %d: a large append: %v, want ENOSPC", i, err)
		}
		if l.AppendFault() == nil {
			t.Fatalf("round %d: no AppendFault after a refused append", i)
		}
		// Unsteady from the warning on, whichever append came last.
		if warned := logs.Count("warn", "the ledger refuses some writes") > 0; warned != (l.Unsteady() != nil) {
			t.Fatalf("round %d: Unsteady %v with the warning logged %v", i, l.Unsteady(), warned)
		}
		if i > 0 && !errors.Is(l.Unsteady(), syscall.ENOSPC) {
			t.Fatalf("round %d: Unsteady %v, want the last refusal", i, l.Unsteady())
		}
	}
	const stopped, some, again = "the ledger cannot record", "the ledger refuses some writes", "the ledger records again"
	if s, w, a := logs.Count("error", stopped), logs.Count("warn", some), logs.Count("info", again); s != 1 || w != 1 || a != 1 {
		t.Errorf("over 50 flips, %d lines that the ledger cannot record, %d that it refuses some writes, %d that it records again; want 1 each:\n%s",
			s, w, a, logs)
	}
	// Only small appends, for less than a minute: not over yet.
	for range 5 {
		*clock = clock.Add(10 * time.Second)
		if _, err := l.Append(ctx, removed); err != nil {
			t.Fatal(err)
		}
	}
	if a := logs.Count("info", again); a != 1 || l.Unsteady() == nil {
		t.Errorf("%d lines that the ledger records again 50 s after the last refusal, want still 1; Unsteady %v, want the last refusal", a, l.Unsteady())
	}
	*clock = clock.Add(10 * time.Second)
	if _, err := l.Append(ctx, removed); err != nil {
		t.Fatal(err)
	}
	if a := logs.Count("info", again); a != 2 || l.Unsteady() != nil {
		t.Errorf("%d lines that the ledger records again a minute after the last refusal, want 2; Unsteady %v, want nil:\n%s", a, l.Unsteady(), logs)
	}
	// A later outage, after a quiet spell, is an outage again.
	*clock = clock.Add(2 * time.Minute)
	if _, err := l.Append(ctx, removed, removed); !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	if s := logs.Count("error", stopped); s != 2 {
		t.Errorf("%d lines that the ledger cannot record after a quiet spell and a refusal, want 2:\n%s", s, logs)
	}
}

// Faults that came and went, then a quiet node: no append comes to say
// that the ledger records again. NoteQuiet, called at each snapshot
// check, says it once the last refusal is a minute past, and only then.
func TestTheLogSaysTheLedgerRecordsAgainOnAQuietNode(t *testing.T) {
	l, logs, clock := nearlyFullLog(t)
	ctx := context.Background()
	removed := events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "test"}, *clock, "b")
	for range 3 { // the ledger cannot record, records again, refuses some
		*clock = clock.Add(time.Second)
		l.Append(ctx, removed, removed)
		l.Append(ctx, removed)
	}
	const some, again = "the ledger refuses some writes", "the ledger records again"
	if w, a := logs.Count("warn", some), logs.Count("info", again); w != 1 || a != 1 {
		t.Fatalf("%d lines that the ledger refuses some writes, %d that it records again; want 1 each:\n%s", w, a, logs)
	}
	*clock = clock.Add(30 * time.Second)
	l.NoteQuiet()
	if a := logs.Count("info", again); a != 1 {
		t.Errorf("%d lines that the ledger records again 30 s after the last refusal, want still 1", a)
	}
	for range 3 {
		*clock = clock.Add(30 * time.Second)
		l.NoteQuiet()
	}
	if a := logs.Count("info", again); a != 2 || l.Unsteady() != nil {
		t.Errorf("%d lines that the ledger records again two minutes after the last refusal with no append, want 2; Unsteady %v, want nil:\n%s", a, l.Unsteady(), logs)
	}
}

// The quiet is the ledger's option where it is given one: steady again
// once it has recorded for that long with none refused.
func TestTheQuietIsTheOptionGiven(t *testing.T) {
	l, logs, clock := nearlyFullLog(t, func(o *Options) { o.FaultQuiet = 10 * time.Second })
	ctx := context.Background()
	removed := events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "test"}, *clock, "b")
	for range 3 { // the ledger cannot record, records again, refuses some
		*clock = clock.Add(time.Second)
		l.Append(ctx, removed, removed)
		l.Append(ctx, removed)
	}
	if l.Unsteady() == nil {
		t.Fatalf("Unsteady nil after faults came and went a second apart:\n%s", logs)
	}
	*clock = clock.Add(11 * time.Second)
	l.NoteQuiet()
	if a := logs.Count("info", "the ledger records again"); a != 2 || l.Unsteady() != nil {
		t.Errorf("%d lines that the ledger records again 11 s after the last refusal with a quiet of 10 s, want 2; Unsteady %v, want nil:\n%s", a, l.Unsteady(), logs)
	}
}

// NoteQuiet says nothing while the last write was refused, however long
// ago: the ledger does not record again until an append goes through.
// Once NoteQuiet has said it records again, faults back within a minute
// are the same nearly full disk, as after an append that said so.
func TestNoteQuietOnANodeWhoseLastWriteFailed(t *testing.T) {
	l, logs, clock := nearlyFullLog(t)
	ctx := context.Background()
	removed := events.New(events.DeviceRemoved{Address: "0000:3b:02.1", Reason: "test"}, *clock, "b")
	for range 3 { // the ledger cannot record, records again, refuses some
		*clock = clock.Add(time.Second)
		l.Append(ctx, removed)
		l.Append(ctx, removed, removed)
	}
	const some, again = "the ledger refuses some writes", "the ledger records again"
	if w, a := logs.Count("warn", some), logs.Count("info", again); w != 1 || a != 1 {
		t.Fatalf("%d lines that the ledger refuses some writes, %d that it records again; want 1 each:\n%s", w, a, logs)
	}
	for range 4 {
		*clock = clock.Add(time.Minute)
		l.NoteQuiet()
	}
	if a := logs.Count("info", again); a != 1 {
		t.Errorf("%d lines that the ledger records again while its last write is refused, want still 1:\n%s", a, logs)
	}
	if _, err := l.Append(ctx, removed); err != nil {
		t.Fatal(err)
	}
	if a := logs.Count("info", again); a != 2 {
		t.Errorf("%d lines that the ledger records again after an append went through, want 2:\n%s", a, logs)
	}
	// Faults back soon after the check said so are the same nearly full
	// disk: the log says it refuses some writes, not that it cannot
	// record.
	*clock = clock.Add(time.Second)
	l.Append(ctx, removed, removed)
	*clock = clock.Add(time.Second)
	l.Append(ctx, removed)
	*clock = clock.Add(time.Minute)
	l.NoteQuiet()
	if a := logs.Count("info", again); a != 3 {
		t.Fatalf("%d lines that the ledger records again a minute after a refusal, want 3:\n%s", a, logs)
	}
	*clock = clock.Add(10 * time.Second)
	l.Append(ctx, removed, removed)
	if s, w := logs.Count("error", "the ledger cannot record"), logs.Count("warn", some); s != 1 || w != 3 {
		t.Errorf("refusals soon after the ledger was said to record again: %d lines that it cannot record, %d that it refuses some writes; want 1 and 3:\n%s",
			s, w, logs)
	}
}

// nearlyFullLog is a test ledger on a disk that takes appends of one
// event and refuses larger ones, logging to logs, on a clock the test
// moves.
func nearlyFullLog(t *testing.T, opts ...func(*Options)) (l *Log, logs *actortest.Log, clock *time.Time) {
	t.Helper()
	logs = &actortest.Log{}
	l = openTestLog(t, func(o *Options) {
		o.Logger = zerolog.New(logs)
		for _, f := range opts {
			f(o)
		}
	})
	clock = new(time.Time)
	*clock = time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return *clock }
	writefault.Set(l, &fs.PathError{Op: "write", Path: l.path, Err: syscall.ENOSPC},
		func(appended []events.Envelope) bool { return len(appended) > 1 })
	t.Cleanup(func() { writefault.Set(l, nil, nil) })
	return l, logs, clock
}
