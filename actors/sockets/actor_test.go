package sockets

import (
	"log/slog"
	"os"
	"path/filepath"
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

func spawnFamily(t *testing.T, props *actor.Props) *family {
	t.Helper()
	f := &family{heard: make(chan any, 64), done: make(chan struct{})}
	f.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
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

type dirs struct {
	plugins, registry, kubelet string
}

func newDirs(t *testing.T) dirs {
	root := t.TempDir()
	d := dirs{plugins: filepath.Join(root, "device-plugins"), registry: filepath.Join(root, "plugins_registry")}
	d.kubelet = filepath.Join(d.plugins, "kubelet.sock")
	return d
}

func (d dirs) watch(t *testing.T) *family {
	t.Helper()
	return spawnFamily(t, Props(Config{Dirs: []string{d.plugins, d.registry}, KubeletSocket: d.kubelet, Log: zerolog.Nop()}))
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestReadySaysWhetherTheKubeletIsThere(t *testing.T) {
	tests := []struct {
		name    string
		present bool
	}{
		{"no kubelet yet; the dirs are created", false},
		{"kubelet socket there before the watch", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirs(t)
			if tc.present {
				if err := os.MkdirAll(d.plugins, 0o755); err != nil {
					t.Fatal(err)
				}
				touch(t, d.kubelet)
			}
			f := d.watch(t)
			if r := next[*Ready](t, f); r.KubeletPresent != tc.present {
				t.Errorf("Ready{KubeletPresent: %v}, want %v", r.KubeletPresent, tc.present)
			}
			for _, dir := range []string{d.plugins, d.registry} {
				if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
					t.Errorf("%s not created: %v", dir, err)
				}
			}
		})
	}
}

func TestSocketEvents(t *testing.T) {
	d := newDirs(t)
	f := d.watch(t)
	next[*Ready](t, f)
	pool := filepath.Join(d.plugins, "example.com_gpu.sock")
	watched := filepath.Join(d.registry, "example.com_nic.sock")
	renamed := filepath.Join(d.plugins, "example.com_old.sock")
	hidden := filepath.Join(d.plugins, ".kubelet_internal_tmp")
	for _, p := range []string{pool, watched, renamed, hidden} {
		touch(t, p)
	}

	touch(t, d.kubelet)
	if m := next[*KubeletAppeared](t, f); m.Socket != d.kubelet {
		t.Errorf("KubeletAppeared{%s}, want %s", m.Socket, d.kubelet)
	}
	remove(t, pool)
	if m := next[*SocketRemoved](t, f); m.Path != pool {
		t.Errorf("SocketRemoved{%s}, want %s", m.Path, pool)
	}
	remove(t, watched)
	if m := next[*SocketRemoved](t, f); m.Path != watched {
		t.Errorf("SocketRemoved{%s}, want %s", m.Path, watched)
	}
	if err := os.Rename(renamed, filepath.Join(t.TempDir(), "elsewhere")); err != nil {
		t.Fatal(err)
	}
	if m := next[*SocketRemoved](t, f); m.Path != renamed {
		t.Errorf("renamed away: SocketRemoved{%s}, want %s", m.Path, renamed)
	}

	// Neither a dot file nor the kubelet's own socket vanishing is a lost
	// socket, and other sockets appearing say nothing. fsnotify keeps the
	// order of events, so the marker's removal is the next thing heard.
	remove(t, hidden)
	remove(t, d.kubelet)
	touch(t, filepath.Join(d.plugins, "example.com_new.sock"))
	marker := filepath.Join(d.registry, "marker")
	touch(t, marker)
	remove(t, marker)
	if m := next[*SocketRemoved](t, f); m.Path != marker {
		t.Errorf("heard SocketRemoved{%s}, want only the marker's", m.Path)
	}
}
