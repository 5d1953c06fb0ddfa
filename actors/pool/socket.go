package pool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A pool serves under a socket name that is new for every server it starts
// and every socket it re-creates: <prefix>_<name>.<8 hex digits>.sock. The
// kubelet keys its endpoints by socket path and refuses a second Register
// of a path it holds an endpoint for ("device plugin already connected");
// an endpoint whose client it lost (a Register of the same path twice, from
// any cause) stays until the kubelet restarts. A path that was never
// registered cannot be refused so: a pool that must register again does so
// on a new name, and no kubelet state left from an earlier name can stand in
// its way.

// SocketBase is the part of a pool's socket names that stays the same:
// the resource name with its '/' replaced, as the SR-IOV device plugin
// names its sockets.
func SocketBase(resource string) string {
	return strings.ReplaceAll(resource, "/", "_")
}

// newSocketPath returns a fresh socket path for resource in dir.
func newSocketPath(dir, resource string) string {
	return filepath.Join(dir, fmt.Sprintf("%s.%08x.sock", SocketBase(resource), rand.Uint32()))
}

// IsSocketName reports whether name, a file name, is one of resource's
// socket names: this build's, or the fixed <base>.sock of earlier builds.
func IsSocketName(resource, name string) bool {
	base := SocketBase(resource)
	if name == base+".sock" {
		return true
	}
	rest, ok := strings.CutPrefix(name, base+".")
	return ok && socketSuffix.MatchString(rest)
}

var socketSuffix = regexp.MustCompile(`^[0-9a-f]{8}\.sock$`)

// removeStaleSockets removes the sockets of resource's names in dir (but
// keep): what a daemon that was killed, or an earlier incarnation of the
// pool, left behind. In plugins_registry/ the kubelet's plugin watcher
// deregisters each one it sees go. Only sockets are removed; anything else
// by such a name is left alone. It returns the paths removed.
func removeStaleSockets(dir, resource, keep string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s for stale sockets: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.Type() != os.ModeSocket || path == keep || !IsSocketName(resource, e.Name()) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("remove stale socket: %w", err)
		}
		removed = append(removed, path)
	}
	return removed, nil
}
