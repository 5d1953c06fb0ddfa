package sockets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/fswatch"
	"github.com/devledger/devledger/internal/actortest"
)

// The actor under test runs under a recording parent (actortest).
type family = actortest.Family

func spawnFamily(t *testing.T, props *actor.Props) *family { return actortest.Spawn(t, props) }

func next[T any](t *testing.T, f *family) T { return actortest.Next[T](t, f) }

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

	// The kubelet's own socket vanishing is news of the kubelet, not a
	// lost socket.
	remove(t, d.kubelet)
	if m := next[*KubeletGone](t, f); m.Socket != d.kubelet {
		t.Errorf("KubeletGone{%s}, want %s", m.Socket, d.kubelet)
	}

	// A dot file vanishing says nothing, and neither do other sockets
	// appearing. fsnotify keeps the order of events, so the marker's
	// removal is the next thing heard.
	remove(t, hidden)
	touch(t, filepath.Join(d.plugins, "example.com_new.sock"))
	marker := filepath.Join(d.registry, "marker")
	touch(t, marker)
	remove(t, marker)
	if m := next[*SocketRemoved](t, f); m.Path != marker {
		t.Errorf("heard SocketRemoved{%s}, want only the marker's", m.Path)
	}
}

// An overflow loses events: a kubelet may have come, or sockets gone,
// unheard. The watcher watches anew and says Ready again, on which the
// parent looks at the sockets and the kubelet as it does at start.
func TestAWatchThatLostEventsWatchesAnew(t *testing.T) {
	d := newDirs(t)
	f := d.watch(t)
	next[*Ready](t, f)
	touch(t, d.kubelet)
	next[*KubeletAppeared](t, f)
	f.Sys.Root.Send(f.Child, &fswatch.Error{Err: fsnotify.ErrEventOverflow})
	if r := next[*Ready](t, f); !r.KubeletPresent {
		t.Errorf("Ready after the overflow says no kubelet; its socket is there")
	}
	sock := filepath.Join(d.registry, "example.com_nic.sock")
	touch(t, sock)
	remove(t, sock)
	if m := next[*SocketRemoved](t, f); m.Path != sock {
		t.Errorf("SocketRemoved{%s} after the overflow, want %s", m.Path, sock)
	}
}

// A watched directory removed takes its watch with it: nothing in it
// would be heard again (a kubelet's restart, our sockets gone). The
// watcher makes it again and watches it anew.
func TestARemovedDirectoryIsWatchedAgain(t *testing.T) {
	d := newDirs(t)
	f := d.watch(t)
	next[*Ready](t, f)
	if err := os.RemoveAll(d.registry); err != nil {
		t.Fatal(err)
	}
	next[*Ready](t, f)
	fi, err := os.Stat(d.registry)
	if err != nil || !fi.IsDir() {
		t.Fatalf("%s not made again: %v", d.registry, err)
	}
	// As the kubelet makes it: others may not list or reach the sockets.
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		t.Errorf("%s made again with mode %v, want no access for others (the kubelet's 0750)", d.registry, perm)
	}
	sock := filepath.Join(d.registry, "example.com_nic.sock")
	touch(t, sock)
	remove(t, sock)
	if m := next[*SocketRemoved](t, f); m.Path != sock {
		t.Errorf("SocketRemoved{%s} in the directory made again, want %s", m.Path, sock)
	}
}
