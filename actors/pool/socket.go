package pool

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/devledger/devledger/grpcapi"
	"github.com/rs/zerolog"
)

// A pool serves on a new socket name for every server and re-created
// socket: <prefix>_<name>.<8 hex digits>.sock. The kubelet refuses a second
// Register of a path it holds an endpoint for ("device plugin already
// connected"), and keeps an endpoint whose client it lost until it
// restarts; a new name cannot be refused so.

// SocketBase is the fixed part of a pool's socket names: the resource
// name with '/' replaced, as the SR-IOV device plugin names its sockets.
func SocketBase(resource string) string {
	return strings.ReplaceAll(resource, "/", "_")
}

// suffixLen is the length of the part of a socket name after its base.
const suffixLen = len(".0123abcd.sock")

// socketBaseIn is SocketBase cut short when a name in dir would not fit a
// socket path (the kubelet takes any endpoint name). A cut name ends in a
// hash of the whole resource name: two pools whose names share all that
// fits would otherwise share a base, and each take the other's sockets
// for its own stale ones.
func socketBaseIn(dir, resource string) string {
	base := SocketBase(resource)
	if room := socketRoom(dir); len(base) > room && room > 0 {
		h := fnv.New32a()
		h.Write([]byte(resource))
		if tag := fmt.Sprintf("-%08x", h.Sum32()); room > len(tag) {
			return base[:room-len(tag)] + tag
		}
		base = base[:room]
	}
	return base
}

// socketRoom is the longest base a socket name in dir may have.
func socketRoom(dir string) int {
	return grpcapi.MaxSocketPath - len(filepath.Join(dir, "x")) + 1 - suffixLen
}

// newSocketPath returns a fresh socket path for resource in dir.
func newSocketPath(dir, resource string) string {
	return filepath.Join(dir, fmt.Sprintf("%s.%08x.sock", socketBaseIn(dir, resource), rand.Uint32()))
}

// IsSocketName reports whether name, a file name, is one of resource's
// socket names: this build's, or the fixed <base>.sock of earlier builds.
// (A name cut short to fit a deep dir is recognised by isSocketIn.)
func IsSocketName(resource, name string) bool {
	base := SocketBase(resource)
	return name == base+".sock" || hasSuffixOf(name, base)
}

// isSocketIn is IsSocketName for a name in dir, a cut-short one included:
// this build's, or one an older build cut with no hash (a killed daemon
// left it; nothing else would remove it from plugins_registry/).
func isSocketIn(dir, resource, name string) bool {
	if IsSocketName(resource, name) || hasSuffixOf(name, socketBaseIn(dir, resource)) {
		return true
	}
	base, room := SocketBase(resource), socketRoom(dir)
	return len(base) > room && room > 0 && hasSuffixOf(name, base[:room])
}

// hasSuffixOf says whether name is base followed by a socket suffix.
func hasSuffixOf(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base+".")
	return ok && socketSuffix.MatchString(rest)
}

var socketSuffix = regexp.MustCompile(`^[0-9a-f]{8}\.sock$`)

// CleanStaleSockets removes resource's stale sockets in dir and logs what
// it did: a pool as it starts, and its parent for a pool that does not
// serve (it has no devices) at the daemon's start.
func CleanStaleSockets(dir, resource string, log zerolog.Logger) {
	stale, live, err := removeStaleSockets(dir, resource)
	if err != nil {
		log.Warn().Err(err).Str("pool", resource).Msg("cannot remove stale sockets")
	}
	if len(stale) > 0 {
		log.Info().Str("pool", resource).Strs("sockets", stale).Msg("removed stale sockets of the pool")
	}
	if len(live) > 0 {
		log.Warn().Str("pool", resource).Strs("sockets", live).Msg("another process serves a socket by the pool's name: two plugins for one resource")
	}
}

// removeStaleSockets removes resource's sockets in dir that nobody answers
// on, left by a killed daemon or an earlier incarnation (the plugin watcher
// deregisters each it sees go). It returns those removed and those live: a
// live <base>.sock may be another plugin's for the same resource, a
// mistake for the log, not one to fix by deleting its socket.
func removeStaleSockets(dir, resource string) (removed, live []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list %s for stale sockets: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.Type() != os.ModeSocket || !isSocketIn(dir, resource, e.Name()) {
			continue
		}
		if c, err := net.DialTimeout("unix", path, 100*time.Millisecond); err == nil {
			c.Close()
			live = append(live, path)
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, live, fmt.Errorf("remove stale socket: %w", err)
		}
		removed = append(removed, path)
	}
	return removed, live, nil
}
