package configwatch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/fswatch"
	"github.com/devledger/devledger/internal/actortest"
)

// The actor under test runs under a recording parent (actortest).
type family = actortest.Family

func spawnFamily(t *testing.T, props *actor.Props) *family { return actortest.Spawn(t, props) }

// spawnWatching spawns a watcher and takes the Changed it sends once it
// watches.
func spawnWatching(t *testing.T, cfg Config) *family {
	t.Helper()
	f := spawnFamily(t, Props(cfg))
	if m := next[*Changed](t, f); m.Reason != WatchStarted {
		t.Fatalf("a new watcher said %q, want %q", m.Reason, WatchStarted)
	}
	f.Drain(t)
	return f
}

func next[T any](t *testing.T, f *family) T { return actortest.Next[T](t, f) }

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

// linkedFile is a config file that is a symlink to another file in the
// same dir (one config of several, picked by the link).
func linkedFile(t *testing.T, dir string) string {
	t.Helper()
	write(t, filepath.Join(dir, "real.json"), `{"resourceList": []}`)
	symlink(t, "real.json", filepath.Join(dir, "config.json"))
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
		// change returns when it began its last change to the config:
		// the watcher may hear of a change before the call making it
		// returns, so the quiet period is measured from the call's start.
		change func(t *testing.T, dir, path string) time.Time
		// reason is the file whose change the Changed names.
		reason string
		quiet  time.Duration
	}{
		{"edit in place", plainFile, func(t *testing.T, _, path string) time.Time {
			last := time.Now()
			write(t, path, `{"resourceList": [{"resourceName": "a"}]}`)
			return last
		}, "config.json", burstQuiet}, // a truncate, then a write
		{"a burst of edits", plainFile, func(t *testing.T, _, path string) time.Time {
			var last time.Time
			for i := range 5 {
				last = time.Now()
				write(t, path, fmt.Sprintf(`{"resourceList": [], "n": %d}`, i))
			}
			return last
		}, "config.json", burstQuiet},
		{"a new file renamed over it", plainFile, func(t *testing.T, dir, path string) time.Time {
			tmp := filepath.Join(dir, ".config.json.tmp")
			write(t, tmp, `{"resourceList": [{"resourceName": "b"}]}`)
			last := time.Now()
			rename(t, tmp, path)
			return last
		}, "config.json", quiet},
		{"a ConfigMap update swaps ..data", configMap, func(t *testing.T, dir, _ string) time.Time {
			write(t, filepath.Join(dir, "..v2", "config.json"), `{"resourceList": [{"resourceName": "c"}]}`)
			symlink(t, "..v2", filepath.Join(dir, "..data_tmp"))
			swapped := time.Now()
			rename(t, filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
			if err := os.RemoveAll(filepath.Join(dir, "..v1")); err != nil {
				t.Fatal(err)
			}
			return swapped
		}, "..data", burstQuiet}, // a rename, then a removal
		{"the file it links to edited", linkedFile, func(t *testing.T, dir, _ string) time.Time {
			last := time.Now()
			write(t, filepath.Join(dir, "real.json"), `{"resourceList": [{"resourceName": "d"}]}`)
			return last
		}, "real.json", burstQuiet}, // a truncate, then a write
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.layout(t, dir)
			f := spawnWatching(t, Config{Path: path, Quiet: tc.quiet, Log: zerolog.Nop()})
			changedAt := tc.change(t, dir, path)
			m := next[*Changed](t, f)
			if took := time.Since(changedAt); took < tc.quiet {
				t.Errorf("Changed %v after the last change, before the quiet period of %v", took, tc.quiet)
			}
			if !strings.Contains(m.Reason, tc.reason) {
				t.Errorf("Changed{%q} does not name %s", m.Reason, tc.reason)
			}
			f.NothingFor(t, 2*tc.quiet)
		})
	}
}

func TestUnrelatedFilesAreIgnored(t *testing.T) {
	dir := t.TempDir()
	path := plainFile(t, dir)
	f := spawnWatching(t, Config{Path: path, Quiet: quiet, Log: zerolog.Nop()})
	other := filepath.Join(dir, "other.json")
	write(t, other, "{}")
	rename(t, other, filepath.Join(dir, "config.json.bak"))
	if err := os.Remove(filepath.Join(dir, "config.json.bak")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub", "config.json"), "{}") // not the file: another dir
	f.NothingFor(t, 2*quiet)
}

func TestMissingDirIsNoCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent", "config") // the one above absent too
	f := spawnFamily(t, Props(Config{Path: filepath.Join(dir, "config.json"), Quiet: quiet, Log: zerolog.Nop()}))
	f.Drain(t)
	write(t, filepath.Join(dir, "config.json"), "{}") // created after the watcher gave up
	f.NothingFor(t, 2*quiet)
}

// The config's directory away as the watcher starts (a host path replaced
// while the daemon, or a crashed watcher, started) is waited for as after
// a swap: once it is back, it is watched and read.
func TestADirectoryAbsentAtStartIsWaitedFor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	path := filepath.Join(dir, "config.json")
	logs := &actortest.Log{}
	f := spawnFamily(t, Props(Config{Path: path, Quiet: quiet, Log: zerolog.New(logs)}))
	for deadline := time.Now().Add(10 * time.Second); logs.Count("warn", "watching for it to come back") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never said it waits for the directory:\n%s", logs)
		}
	}
	plainFile(t, dir)
	next[*Changed](t, f)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(next[*Changed](t, f).Reason, "CHMOD config.json") {
	}
}

// A change made before the watch is in place (while the config in force
// was read, or while a crashed watcher was down) is not lost: a new
// watcher asks its parent to look, and only once.
func TestAWatcherAsksForALookWhenItStarts(t *testing.T) {
	dir := t.TempDir()
	path := plainFile(t, dir)
	write(t, path, `{"resourceList": [{"resourceName": "changed before the watch"}]}`)
	f := spawnWatching(t, Config{Path: path, Quiet: quiet, Log: zerolog.Nop()})
	f.NothingFor(t, 2*quiet)
}

// An overflow loses events, a ConfigMap's ..data swap perhaps among them:
// the watcher asks its parent to read the file again, which finds a
// change that was not heard, and nothing when there was none.
func TestAWatchThatLostEventsAsksForALook(t *testing.T) {
	dir := t.TempDir()
	path := plainFile(t, dir)
	f := spawnWatching(t, Config{Path: path, Quiet: quiet, Log: zerolog.Nop()})
	f.Sys.Root.Send(f.Child, &fswatch.Error{Err: fsnotify.ErrEventOverflow})
	if m := next[*Changed](t, f); !strings.Contains(m.Reason, "lost events") {
		t.Errorf("Changed{%q} after an overflow, want it to say events were lost", m.Reason)
	}
	f.NothingFor(t, 2*quiet)
}

// The config's directory removed, or renamed away, takes its watch with
// it (a hostPath config replaced whole): the watcher watches the one made
// in its place, asks for a look at once, and hears its changes after.
func TestAReplacedDirectoryIsWatchedAgain(t *testing.T) {
	tests := []struct {
		name    string
		replace func(t *testing.T, dir string)
	}{
		{"removed, then made again", func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			plainFile(t, dir)
		}},
		{"renamed away, a new one renamed in", func(t *testing.T, dir string) {
			next := dir + ".new"
			plainFile(t, next)
			rename(t, dir, dir+".old")
			rename(t, next, dir)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			path := plainFile(t, dir)
			f := spawnWatching(t, Config{Path: path, Quiet: quiet, Log: zerolog.Nop()})
			tc.replace(t, dir)
			next[*Changed](t, f)
			// A change the replacing makes none of, so that a Changed the
			// replacing asked for late is not taken for its.
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(next[*Changed](t, f).Reason, "CHMOD config.json") {
			}
			// The one above, watched while it was away, is watched no more.
			write(t, filepath.Join(filepath.Dir(dir), "config.json"), "{}")
			f.NothingFor(t, 2*quiet)
		})
	}
}

// The directory above the config's, watched while the config's is away,
// can go too (the whole tree replaced): its watch goes with it, so the
// watcher says it watches the config no more, rather than wait in
// silence for a directory whose return it can no longer hear.
func TestTheDirectoryAboveRemovedWhileAwayIsSaid(t *testing.T) {
	above := filepath.Join(t.TempDir(), "etc")
	dir := filepath.Join(above, "config")
	path := plainFile(t, dir)
	logs := &actortest.Log{}
	spawnWatching(t, Config{Path: path, Quiet: quiet, Log: zerolog.New(logs)})
	awaitLog := func(level, msg string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); logs.Count(level, msg) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never logged %q at %s:\n%s", msg, level, logs)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	awaitLog("warn", "watching for it to come back")
	if err := os.RemoveAll(above); err != nil {
		t.Fatal(err)
	}
	awaitLog("error", "reload it with SIGHUP")
}
