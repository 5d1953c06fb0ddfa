package fswatch

import (
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
