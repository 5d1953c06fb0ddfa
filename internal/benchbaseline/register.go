package benchbaseline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/devledger/devledger/grpcapi"
)

// Pool is one resource served by a baseline Server.
type Pool struct {
	Resource string
	Server   *Server
}

// RegisterAll registers every pool with the kubelet at kubeletSocket (legacy
// mode: the pool's socket file name is its endpoint), all at once, and
// returns when every Register call has been answered.
func RegisterAll(ctx context.Context, kubeletSocket string, pools []Pool) error {
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Go(func() {
			errs[i] = grpcapi.RegisterWithKubelet(ctx, kubeletSocket, p.Resource, filepath.Base(p.Server.Path()), nil)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// registerTimeout bounds the re-registration after a kubelet restart.
const registerTimeout = 10 * time.Second

// Reregisterer is the least a plugin can do about kubelet restarts: it
// watches the kubelet's device-plugins dir with fsnotify and, the moment
// kubelet.sock is created, re-creates every pool's socket (the kubelet
// deleted it) and registers every pool again, all at once. It records
// nothing and retries nothing.
type Reregisterer struct {
	w    *fsnotify.Watcher
	done chan struct{}
}

// WatchAndReregister starts a Reregisterer for the pools, whose sockets
// must be in the same dir as kubeletSocket. done hears, from the watcher's
// goroutine, the outcome of each re-registration once every Register call
// has been answered (nil: all registered), and any watch error.
func WatchAndReregister(kubeletSocket string, pools []Pool, done func(error)) (*Reregisterer, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("baseline watcher: %w", err)
	}
	if err := w.Add(filepath.Dir(kubeletSocket)); err != nil {
		w.Close()
		return nil, fmt.Errorf("baseline watcher: %w", err)
	}
	r := &Reregisterer{w: w, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Create) && filepath.Clean(ev.Name) == filepath.Clean(kubeletSocket) {
					done(reregister(kubeletSocket, pools))
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				done(err)
			}
		}
	}()
	return r, nil
}

func reregister(kubeletSocket string, pools []Pool) error {
	for _, p := range pools {
		if err := p.Server.Relisten(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	return RegisterAll(ctx, kubeletSocket, pools)
}

// Close stops watching and waits for a re-registration in progress.
func (r *Reregisterer) Close() error {
	err := r.w.Close()
	<-r.done
	return err
}
