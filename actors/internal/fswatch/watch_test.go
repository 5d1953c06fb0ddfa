package fswatch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"

	"github.com/devledger/devledger/internal/actortest"
)

// An event with none of the ops asked for does not reach the actor: the
// kubelet's checkpoint writes in device-plugins/ do not wake the socket
// watcher.
func TestWatchForwardsOnlyTheOpsAskedFor(t *testing.T) {
	dir := t.TempDir()
	f := actortest.Spawn(t, actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			if _, err := Watch(ctx, fsnotify.Create|fsnotify.Remove, dir); err != nil {
				t.Error(err)
			}
		case *Event:
			ctx.Send(ctx.Parent(), m)
		}
	}))
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.Drain(t) // the watch is in place
	write("checkpoint", "one")
	write("checkpoint", "two")
	if err := os.Chmod(filepath.Join(dir, "checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	write("marker", "")
	want := []fsnotify.Event{
		{Name: filepath.Join(dir, "checkpoint"), Op: fsnotify.Create},
		{Name: filepath.Join(dir, "checkpoint"), Op: fsnotify.Remove},
		{Name: filepath.Join(dir, "marker"), Op: fsnotify.Create},
	}
	for _, w := range want {
		got := actortest.Next[*Event](t, f)
		if got.Event != w {
			t.Fatalf("heard %v, want %v", got.Event, w)
		}
	}
}

// Errors (an overflow: events were lost) reach the actor, which must
// list its directories again.
func TestWatchForwardsErrors(t *testing.T) {
	dir := t.TempDir()
	watchers := make(chan *fsnotify.Watcher, 1)
	f := actortest.Spawn(t, actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			w, err := Watch(ctx, fsnotify.Create, dir)
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { w.Close() })
			watchers <- w
		case *Error:
			ctx.Send(ctx.Parent(), m)
		}
	}))
	w := <-watchers
	w.Errors <- fsnotify.ErrEventOverflow
	if got := actortest.Next[*Error](t, f); !errors.Is(got.Err, fsnotify.ErrEventOverflow) {
		t.Fatalf("heard %v, want the overflow", got.Err)
	}
}

// A directory that cannot be watched leaves no watcher behind: an actor
// that tries again until the directory appears must not use up the
// node's inotify instances.
func TestWatchLeavesNoWatcherOnError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	openFDs := func() int {
		t.Helper()
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd:", err)
		}
		return len(fds)
	}
	f := actortest.Spawn(t, actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); !ok {
			return
		}
		before := openFDs()
		for range 3 {
			if w, err := Watch(ctx, fsnotify.Create, t.TempDir(), missing); err == nil {
				w.Close()
				t.Error("watching a missing directory succeeded")
			}
		}
		if after := openFDs(); after != before {
			t.Errorf("%d files open after three failed watches, %d before", after, before)
		}
	}))
	f.Drain(t)
}
