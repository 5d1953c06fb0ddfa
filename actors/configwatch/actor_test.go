package configwatch

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// family runs the actor under test as the only child of a parent that
// records, in order, every message the child sends it (the parent's view).
type family struct {
	sys           *actor.ActorSystem
	parent, child *actor.PID
	heard         chan any
	done          chan struct{}
}

// flush is answered by the child's observer middleware before it reaches
// the actor: once answered, the child has handled everything sent to it
// before, its Started included.
type flush struct{}

func spawnFamily(t *testing.T, props *actor.Props) *family {
	t.Helper()
	f := &family{heard: make(chan any, 64), done: make(chan struct{})}
	f.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	props.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if _, ok := env.Message.(*flush); ok {
				c.ActorSystem().Root.Send(env.Sender, env.Message)
				return
			}
			next(c, env)
		}
	}))
	spawned := make(chan *actor.PID, 1)
	f.parent = f.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			spawned <- ctx.Spawn(props)
		case *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.Terminated:
		default:
			select {
			case f.heard <- m:
			case <-f.done:
			}
		}
	}))
	f.child = <-spawned
	t.Cleanup(func() {
		close(f.done)
		_ = f.sys.Root.PoisonFuture(f.parent).Wait()
		f.sys.Shutdown()
	})
	return f
}

// next waits for the next message the parent hears, which must be a T.
func next[T any](t *testing.T, f *family) (v T) {
	t.Helper()
	select {
	case m := <-f.heard:
		var ok bool
		if v, ok = m.(T); !ok {
			t.Fatalf("parent heard %#v, want a %T", m, v)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("parent heard no %T within 5s", v)
	}
	return v
}

// quiet is the quiet period of the tests; the burst's is longer, so that
// a busy machine's pauses between its writes stay inside it.
const quiet, burstQuiet = 100 * time.Millisecond, 300 * time.Millisecond

// plainFile is a config file written in place.
func plainFile(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	write(t, path, `{"resourceList": []}`)
	return path
}

// configMap lays the dir out as the kubelet mounts a ConfigMap:
// config.json -> ..data/config.json, ..data -> ..<version>/.
func configMap(t *testing.T, dir string) string {
	t.Helper()
	write(t, filepath.Join(dir, "..v1", "config.json"), `{"resourceList": []}`)
	symlink(t, "..v1", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "config.json"), filepath.Join(dir, "config.json"))
	return filepath.Join(dir, "config.json")
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func TestChangesSettleIntoOneReload(t *testing.T) {
	tests := []struct {
		name   string
		layout func(*testing.T, string) string
		// change returns when it made its last change to the config.
		change func(t *testing.T, dir, path string) time.Time
		// reason is the file whose change the Changed names.
		reason string
		quiet  time.Duration
	}{
		{"edit in place", plainFile, func(t *testing.T, _, path string) time.Time {
			write(t, path, `{"resourceList": [{"resourceName": "a"}]}`)
			return time.Now()
		}, "config.json", quiet},
		{"a burst of edits", plainFile, func(t *testing.T, _, path string) time.Time {
			for i := range 5 {
				write(t, path, fmt.Sprintf(`{"resourceList": [], "n": %d}`, i))
			}
			return time.Now()
		}, "config.json", burstQuiet},
		{"a new file renamed over it", plainFile, func(t *testing.T, dir, path string) time.Time {
			tmp := filepath.Join(dir, ".config.json.tmp")
			write(t, tmp, `{"resourceList": [{"resourceName": "b"}]}`)
			rename(t, tmp, path)
			return time.Now()
		}, "config.json", quiet},
		{"a ConfigMap update swaps ..data", configMap, func(t *testing.T, dir, _ string) time.Time {
			write(t, filepath.Join(dir, "..v2", "config.json"), `{"resourceList": [{"resourceName": "c"}]}`)
			symlink(t, "..v2", filepath.Join(dir, "..data_tmp"))
			rename(t, filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
			swapped := time.Now()
			if err := os.RemoveAll(filepath.Join(dir, "..v1")); err != nil {
				t.Fatal(err)
			}
			return swapped
		}, "..data", quiet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.layout(t, dir)
			f := spawnFamily(t, Props(Config{Path: path, Quiet: tc.quiet, Log: zerolog.Nop()}))
			f.ready(t)
			changedAt := tc.change(t, dir, path)
			m := next[*Changed](t, f)
			if took := time.Since(changedAt); took < tc.quiet {
				t.Errorf("Changed %v after the last change, before the quiet period of %v", took, tc.quiet)
			}
			if !strings.Contains(m.Reason, tc.reason) {
				t.Errorf("Changed{%q} does not name %s", m.Reason, tc.reason)
			}
			f.nothingFor(t, 2*tc.quiet)
		})
	}
}

func TestUnrelatedFilesAreIgnored(t *testing.T) {
	dir := t.TempDir()
	path := plainFile(t, dir)
	f := spawnFamily(t, Props(Config{Path: path, Quiet: quiet, Log: zerolog.Nop()}))
	f.ready(t)
	other := filepath.Join(dir, "other.json")
	write(t, other, "{}")
	rename(t, other, filepath.Join(dir, "config.json.bak"))
	if err := os.Remove(filepath.Join(dir, "config.json.bak")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub", "config.json"), "{}") // not the file: another dir
	f.nothingFor(t, 2*quiet)
}

func TestMissingDirIsNoCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	f := spawnFamily(t, Props(Config{Path: filepath.Join(dir, "config.json"), Quiet: quiet, Log: zerolog.Nop()}))
	f.ready(t)
	write(t, filepath.Join(dir, "config.json"), "{}") // created after the watcher gave up
	f.nothingFor(t, 2*quiet)
}

// ready waits until the child handled Started, where the watch is added.
func (f *family) ready(t *testing.T) {
	t.Helper()
	if _, err := f.sys.Root.RequestFuture(f.child, &flush{}, 5*time.Second).Result(); err != nil {
		t.Fatalf("watcher not started: %v", err)
	}
}

// nothingFor checks that the parent hears nothing for d: a Changed comes
// a quiet period after the change that causes it, so waiting a few quiet
// periods is the only way to know none is coming.
func (f *family) nothingFor(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case m := <-f.heard:
		t.Errorf("parent heard %#v, want nothing", m)
	case <-time.After(d):
	}
}
