// Package configwatch is the config watcher actor: it watches the directory
// of the config file, not the file itself, so it sees an edit in place, a
// file replaced by rename, and a Kubernetes ConfigMap update (the mounted
// file is a symlink through ..data, which the kubelet swaps atomically).
// The directory itself replaced (removed, or renamed away, and made again),
// or absent when the watcher starts, is watched from the one above until
// it is back. A burst of changes becomes one reload request to its parent.
package configwatch

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/fswatch"
	"github.com/devledger/devledger/actors/supervise"
)

// Config is what the watcher needs.
type Config struct {
	// Path is the config file.
	Path string
	// Quiet is how long changes must pause before the reload is asked for
	// (default 100ms).
	Quiet time.Duration
	Log   zerolog.Logger
}

// Changed is sent to the parent after a burst of changes to the config file
// (or the ConfigMap's ..data link) settled, and once the watch is in place
// (Reason WatchStarted): the parent reads the file and compares.
type Changed struct{ Reason string }

// WatchStarted is the Reason of the Changed sent as the watch begins.
const WatchStarted = "the config watch started"

type settled struct{ gen int }

// Props returns the props of a config watcher.
func Props(cfg Config) *actor.Props {
	supervise.OrDefault(&cfg.Quiet, 100*time.Millisecond)
	return actor.PropsFromProducer(func() actor.Actor { return &watcher{cfg: cfg} }, actor.WithDispatcher(supervise.Warm))
}

type watcher struct {
	cfg  Config
	w    *fsnotify.Watcher
	gen  int
	last string
	// away says the config's directory went, taking its watch: the
	// watch is on the directory above until it is back.
	away bool
}

// ops are the changes watched for.
const ops = fsnotify.Create | fsnotify.Write | fsnotify.Remove | fsnotify.Rename | fsnotify.Chmod

// Receive implements actor.Actor.
func (c *watcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w, err := fswatch.Watch(ctx, ops, filepath.Dir(c.cfg.Path))
		if errors.Is(err, fs.ErrNotExist) {
			// The directory is away (replaced as this watcher started, or
			// restarted): wait for it from the one above, as after a
			// swap, rather than never watch it again.
			c.watchAgain(ctx)
			return
		}
		if err != nil {
			// Without a watch the config can still be reloaded by SIGHUP;
			// say so rather than crash-loop on a watch it cannot make (the
			// inotify limits reached).
			c.cfg.Log.Error().Err(err).Msg("not watching the config; reload it with SIGHUP")
			return
		}
		c.w = w
		// Watching now: a change made before (since the config in force
		// was read, or while a crashed watcher was down) is looked for.
		ctx.Send(ctx.Parent(), &Changed{Reason: WatchStarted})
	case *actor.Stopping, *actor.Restarting:
		if c.w != nil {
			c.w.Close()
			c.w = nil
		}
	case *fswatch.Error:
		// Events were lost (an overflow): a change to the config may be
		// among them. The parent reads the file and compares.
		c.cfg.Log.Warn().Err(m.Err).Msg("the config watch lost events; reading the config again")
		c.changed(ctx, "the config watch lost events")
	case *fswatch.Event:
		if c.namesDir(m) {
			c.watchAgain(ctx)
			return
		}
		if !c.concerns(m.Name) {
			return
		}
		c.changed(ctx, fmt.Sprintf("config file changed (%s %s)", m.Op, filepath.Base(m.Name)))
	case *settled:
		if m.gen == c.gen {
			ctx.Send(ctx.Parent(), &Changed{Reason: c.last})
		}
	}
}

// watchAgain watches the config's directory anew after it was removed or
// renamed away (its watch went with it), or came back: from the directory
// above while it is away, so that its return is heard. The one above is
// watched first, so a directory made in between is found either way. One
// above that cannot be watched (gone too) is logged: nothing is watched.
func (c *watcher) watchAgain(ctx actor.Context) {
	if c.w != nil {
		c.w.Close()
		c.w = nil
	}
	dir := filepath.Dir(c.cfg.Path)
	w, err := fswatch.Watch(ctx, ops, filepath.Dir(dir))
	if err != nil {
		c.cfg.Log.Error().Err(err).Str("dir", dir).Msg("the config's directory went; not watching the config; reload it with SIGHUP")
		return
	}
	c.w = w
	if err := w.Add(dir); err != nil {
		if !c.away {
			c.cfg.Log.Warn().Str("dir", dir).Msg("the config's directory went; watching for it to come back")
		}
		c.away = true
		return
	}
	_ = w.Remove(filepath.Dir(dir))
	c.away = false
	c.cfg.Log.Info().Str("dir", dir).Msg("the config's directory was replaced; watching the new one")
	c.changed(ctx, "the config's directory was replaced")
}

// namesDir says whether ev names the config's directory made, removed
// or renamed away, or, while that is away, the directory above removed
// or renamed away, taking the watch that waits for it.
func (c *watcher) namesDir(ev *fswatch.Event) bool {
	name, dir := filepath.Clean(ev.Name), filepath.Dir(c.cfg.Path)
	if name == dir {
		return ev.Has(fsnotify.Create | fsnotify.Remove | fsnotify.Rename)
	}
	return c.away && name == filepath.Dir(dir) && ev.Has(fsnotify.Remove|fsnotify.Rename)
}

// changed asks for a reload once changes have paused for Quiet; reason
// is the last change's.
func (c *watcher) changed(ctx actor.Context, reason string) {
	c.gen++
	c.last = reason
	gen, self, root := c.gen, ctx.Self(), ctx.ActorSystem().Root
	time.AfterFunc(c.cfg.Quiet, func() { root.Send(self, &settled{gen: gen}) })
}

// concerns reports whether a change to name may change the config: the file
// itself, the ConfigMap's ..data link, or whatever the file links to.
func (c *watcher) concerns(name string) bool {
	base := filepath.Base(name)
	if base == filepath.Base(c.cfg.Path) || base == "..data" {
		return true
	}
	target, err := filepath.EvalSymlinks(c.cfg.Path)
	return err == nil && filepath.Clean(name) == target
}
