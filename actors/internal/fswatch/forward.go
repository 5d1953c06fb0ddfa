// Package fswatch forwards an fsnotify watcher's events into an actor's
// mailbox, so the actor handles them in order on its own thread.
package fswatch

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
)

// Event is one fsnotify event, as a message.
type Event struct{ fsnotify.Event }

// Error is an fsnotify error (an overflow: events were lost), as a message.
type Error struct{ Err error }

// Forward sends every event and error of w to pid until w is closed. It
// returns at once; the forwarding runs on a goroutine of its own.
func Forward(w *fsnotify.Watcher, root *actor.RootContext, pid *actor.PID) {
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				root.Send(pid, &Event{ev})
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				root.Send(pid, &Error{err})
			}
		}
	}()
}
