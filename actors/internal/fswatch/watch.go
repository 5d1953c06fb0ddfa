// Package fswatch watches directories with fsnotify and forwards the
// events into an actor's mailbox, so the actor handles them in order on
// its own thread.
package fswatch

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
)

// Event is one fsnotify event, as a message.
type Event struct{ fsnotify.Event }

// Error is an fsnotify error (an overflow: events were lost), as a message.
type Error struct{ Err error }

// Watch watches dirs and sends every event with one of ops, and every
// error, to the actor of ctx until the watcher it returns is closed; on
// error no watcher is left. The forwarding runs on a goroutine of its
// own: fsnotify delivers on channels, which a mailbox cannot wait on; the
// goroutine only relays, and drops the events the actor has no use for,
// which would wake it for nothing (the kubelet rewrites its checkpoint in
// device-plugins/ at every pod admission).
func Watch(ctx actor.Context, ops fsnotify.Op, dirs ...string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	root, pid := ctx.ActorSystem().Root, ctx.Self()
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op&ops != 0 {
					root.Send(pid, &Event{ev})
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				root.Send(pid, &Error{err})
			}
		}
	}()
	return w, nil
}
