// Package sockets is the socket watcher actor: through fsnotify it tells
// its parent at once that the kubelet's registration socket appeared (a
// new kubelet) or went, or that a socket vanished (perhaps ours: a
// starting kubelet empties device-plugins/). It watches first and lists
// after, so nothing slips between.
package sockets

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/fswatch"
	"github.com/devledger/devledger/actors/supervise"
)

// Config is what the watcher needs.
type Config struct {
	// Dirs are the directories to watch (device-plugins/, and
	// plugins_registry/ in watcher mode). Missing ones are created, mode
	// 0750 as the kubelet makes them.
	Dirs []string
	// KubeletSocket is the kubelet's registration socket; its creation
	// means a new kubelet.
	KubeletSocket string
	Log           zerolog.Logger
}

// KubeletAppeared is sent to the parent when KubeletSocket is created.
type KubeletAppeared struct{ Socket string }

// SocketRemoved is sent to the parent when a socket file in a watched
// directory is removed or renamed away.
type SocketRemoved struct{ Path string }

// KubeletGone is sent to the parent when KubeletSocket is removed: a
// kubelet that stopped cleanly, or one starting that makes it anew.
type KubeletGone struct{ Socket string }

// Ready is sent to the parent once the watches are in place, with whether
// the kubelet socket existed then.
type Ready struct{ KubeletPresent bool }

// Props returns the props of a socket watcher.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &watcher{cfg: cfg} }, actor.WithDispatcher(supervise.Warm))
}

type watcher struct {
	cfg Config
	w   *fsnotify.Watcher
}

// Receive implements actor.Actor.
func (s *watcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if err := s.start(ctx); err != nil {
			panic(err)
		}
	case *actor.Stopping, *actor.Restarting:
		if s.w != nil {
			s.w.Close()
			s.w = nil
		}
	case *fswatch.Event:
		s.handle(ctx, m.Event)
	case *fswatch.Error:
		// Events were lost (an overflow): which sockets went, or whether a
		// kubelet came, is unknown. Watch anew and look.
		s.cfg.Log.Warn().Err(m.Err).Msg("the socket watch lost events; watching anew")
		s.rewatch(ctx)
	}
}

// rewatch closes the watch and starts another, whose Ready has the parent
// look at the sockets and the kubelet again (level-triggered, as at
// start): what the old watch missed is found.
func (s *watcher) rewatch(ctx actor.Context) {
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
	if err := s.start(ctx); err != nil {
		panic(err)
	}
}

func (s *watcher) start(ctx actor.Context) error {
	for _, dir := range s.cfg.Dirs {
		// 0750, as the kubelet makes them: a dir made here outlives the
		// kubelet's own MkdirAll, which leaves an existing one as it is.
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("socket watcher: %w", err)
		}
	}
	w, err := fswatch.Watch(ctx, fsnotify.Create|fsnotify.Remove|fsnotify.Rename, s.cfg.Dirs...)
	if err != nil {
		return fmt.Errorf("socket watcher: %w", err)
	}
	s.w = w
	// Watching already: a kubelet appearing from here on is an event.
	_, statErr := os.Stat(s.cfg.KubeletSocket)
	ctx.Send(ctx.Parent(), &Ready{KubeletPresent: statErr == nil})
	return nil
}

func (s *watcher) handle(ctx actor.Context, ev fsnotify.Event) {
	path := filepath.Clean(ev.Name)
	kubelet := path == filepath.Clean(s.cfg.KubeletSocket)
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	switch {
	case gone && slices.Contains(s.cfg.Dirs, path):
		// A watched directory went (removed by hand, or a kubelet
		// reinstalled), and its watch with it.
		s.cfg.Log.Warn().Str("dir", path).Msg("a watched directory was removed; making it again")
		s.rewatch(ctx)
	case kubelet && ev.Has(fsnotify.Create):
		ctx.Send(ctx.Parent(), &KubeletAppeared{Socket: path})
	case kubelet && gone:
		ctx.Send(ctx.Parent(), &KubeletGone{Socket: path})
	case gone && !strings.HasPrefix(filepath.Base(path), "."):
		ctx.Send(ctx.Parent(), &SocketRemoved{Path: path})
	}
}
