package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// MaxSocketPath is the longest path a unix socket can be bound to on Linux
// (sun_path holds 108 bytes, one of them the terminating NUL).
const MaxSocketPath = 107

// privateDirPrefix names the directory a socket is created in, as
// privateSocketName, before it is renamed into place. The leading dots
// matter: the kubelet's plugin watcher ignores a file or directory it sees
// created under a name that starts with '.', and watches nothing in it.
// Its start, though, walks every directory it finds in plugins_registry/
// and watches it, dot or not; each socket made in such a directory would
// reach its handler, which stats it: an error in the kubelet's log when
// the rename wins that race (when it loses, the name's dot has the socket
// ignored). So where the watcher looks (servedSocket.fresh), each socket
// gets the directory made anew, unwatched, and leaves it in place: a
// directory that lives on after its creation is never a race for the
// watcher's stat. Elsewhere (device-plugins/, which the kubelet does not
// watch) the directory is kept while the server lives: a kubelet restart
// renews every pool's socket at once, and a mkdir and an rmdir cost more
// on some disks than the rest of a socket's making. It is removed when the
// server stops. The kubelet's device manager removes sockets, not
// directories, when it starts.
const privateDirPrefix = ".devledger-"

// privateSocketName is a socket's name in its private directory.
const privateSocketName = ".s"

// privateDir is the private directory of the socket at abs: beside it, named
// by a 64-bit hash of key (the socket's file name when key is empty), so
// that it is short, the same across restarts (a daemon killed before it
// could remove it finds it again), and another socket's only by a collision
// no node will see. A server whose socket name changes on every listen
// (a pool's) passes a key that does not, so that it keeps one directory.
// Only one daemon serves a node's sockets at a time (the ledger's lock), so
// the directory's temporary name is never in use by someone else.
func privateDir(abs, key string) string {
	if key == "" {
		key = filepath.Base(abs)
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return filepath.Join(filepath.Dir(abs), fmt.Sprintf("%s%016x", privateDirPrefix, h.Sum64()))
}

// makePrivateDir makes dir a directory of ours that no one else can
// enter. Unless fresh, one that is already ours is kept, emptied of a
// socket left in it by a run that died between bind and rename; anything
// else there goes first (a link is removed, not followed). A dir that is
// not ours after that (someone raced us to the name) is an error.
func makePrivateDir(dir string, fresh bool) error {
	if fi, err := os.Lstat(dir); !fresh && err == nil && isPrivateDir(fi) {
		if err := os.Remove(filepath.Join(dir, privateSocketName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.IsDir() && fi.Mode().Perm() != 0o700 { // a umask took bits away
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
		if fi, err = os.Lstat(dir); err != nil {
			return err
		}
	}
	if !isPrivateDir(fi) {
		return fmt.Errorf("%s changed under us: %v", dir, fi.Mode())
	}
	return nil
}

// isPrivateDir reports whether fi is a directory (not a link) of ours,
// mode 0700.
func isPrivateDir(fi os.FileInfo) bool {
	return fi.IsDir() && fi.Mode().Perm() == 0o700 && ownedByUs(fi)
}

// privateListener is a unix listener whose socket file was made private
// (0600) before it became reachable at its path. id identifies that file, so
// that the socket is removed on close only while it is still ours: the
// kubelet may have deleted it and another server may have bound the path
// since.
type privateListener struct {
	*net.UnixListener
	path string
	id   os.FileInfo
}

// listenPrivate binds a unix socket at path that only its owner can connect
// to, at no moment world-accessible.
//
// A socket file takes its mode from the process umask when bind(2) creates
// it, and syscall.Umask is process-wide, so changing it would race every
// other goroutine that creates files. Instead the socket is bound inside a
// 0700 directory of ours beside path (no one else can reach it there),
// chmodded to 0600, and renamed onto path. rename(2) keeps the bound inode,
// so the listener accepts at the new name, and it atomically replaces a
// stale socket left there by a previous run. Anything at path that is not a
// socket is left alone and reported as an error.
func listenPrivate(path, dirKey string, fresh bool) (*privateListener, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("socket path %s: %w", path, err)
	}
	if len(abs) > MaxSocketPath {
		return nil, fmt.Errorf("socket path %s is %d bytes long; a unix socket path takes at most %d", abs, len(abs), MaxSocketPath)
	}
	if fi, err := os.Lstat(abs); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("socket path %s holds a %v, not a socket: not replacing it", abs, fi.Mode().Type())
	}
	tmpDir := privateDir(abs, dirKey)
	tmp := filepath.Join(tmpDir, privateSocketName)
	if len(tmp) > MaxSocketPath {
		return nil, fmt.Errorf("listen on %s: its temporary name %s is %d bytes long; a unix socket path takes at most %d", abs, tmp, len(tmp), MaxSocketPath)
	}
	var l *net.UnixListener
	for attempt := 0; ; attempt++ {
		if err := makePrivateDir(tmpDir, fresh || attempt > 0); err != nil {
			return nil, fmt.Errorf("listen on %s: private directory %s: %w", abs, tmpDir, err)
		}
		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
		if err == nil {
			break
		}
		if attempt > 0 || !errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("listen on %s: %w", abs, err)
		}
		// The directory went (a kubelet that removes everything): again.
	}
	// The listener would unlink its bind name, which is gone after the
	// rename; removal of the real path is done by close, by identity.
	l.SetUnlinkOnClose(false)
	fail := func(step string, err error) (*privateListener, error) {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %s: %w", abs, step, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail("chmod", err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		return fail("move into place", err)
	}
	id, err := os.Lstat(abs)
	if err != nil {
		return fail("stat", err)
	}
	return &privateListener{UnixListener: l, path: abs, id: id}, nil
}

// Accept waits for the next connection. Its LocalAddr is the socket's path
// (the kernel names it by its bind name, which the rename left behind), so
// that a call can tell which of a server's sockets it came in on.
func (l *privateListener) Accept() (net.Conn, error) {
	c, err := l.UnixListener.Accept()
	if err != nil {
		return nil, err
	}
	return pathConn{Conn: c, local: &net.UnixAddr{Name: l.path, Net: "unix"}}, nil
}

// pathConn is an accepted connection that names its socket by path.
type pathConn struct {
	net.Conn
	local net.Addr
}

func (c pathConn) LocalAddr() net.Addr { return c.local }

// SocketOf is the path of the socket a call to a PoolServer came in on
// (one it served before Reserve, too), or "" when the call's connection
// does not say.
func SocketOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil {
		return ""
	}
	if a, ok := p.LocalAddr.(*net.UnixAddr); ok {
		return a.Name
	}
	return ""
}

// close stops accepting and removes the socket file if it is still the one
// this listener created.
func (l *privateListener) close() error {
	err := l.UnixListener.Close()
	if cur, serr := os.Lstat(l.path); serr == nil && os.SameFile(cur, l.id) {
		if rerr := os.Remove(l.path); rerr != nil && !os.IsNotExist(rerr) && err == nil {
			err = rerr
		}
	}
	return err
}

// dialUnix returns a gRPC client connection to the unix socket at path. The
// passthrough target with a dialer of our own keeps the path out of the
// target's URL parsing (a '%' or '?' in a directory name stays literal).
func dialUnix(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial),
		grpc.WithAuthority("localhost"),
	}
	return grpc.NewClient("passthrough:///localhost", append(base, opts...)...)
}

// servedSocket is the socket side of a server's life: the listener it
// serves on now, and whether it was stopped. Both servers in this package
// share it; the zero value is ready.
type servedSocket struct {
	// dirKey names the private directory sockets are made in (privateDir);
	// empty: the socket's file name. fresh makes it anew for each socket,
	// where the kubelet's plugin watcher looks (privateDirPrefix).
	dirKey  string
	fresh   bool
	mu      sync.Mutex
	lis     *privateListener // nil before the first listen
	stopped bool
}

// listen creates a private socket at path and hands it to serve, which
// must not block. With replace, a listener already in use is returned for
// the caller to close once the new one serves; without, a second listen is
// an error.
func (s *servedSocket) listen(path string, replace bool, serve func(*privateListener)) (old *privateListener, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, fmt.Errorf("serve at %s: server stopped", path)
	}
	if s.lis != nil && !replace {
		return nil, fmt.Errorf("serve at %s: already serving at %s", path, s.lis.path)
	}
	lis, err := listenPrivate(path, s.dirKey, s.fresh)
	if err != nil {
		return nil, err
	}
	old, s.lis = s.lis, lis
	serve(lis)
	return old, nil
}

// socket returns the path being served, or "" before the first listen.
func (s *servedSocket) socket() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return ""
	}
	return s.lis.path
}

// retired says whether lis no longer matters: the server stopped or
// listens elsewhere now. A serve loop ending on a retired listener is
// expected, not a failure.
func (s *servedSocket) retired(lis *privateListener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped || s.lis != lis
}

// stop marks the server stopped and closes its listener, removing the
// socket file if it is still ours. first is false when an earlier stop
// already did so.
func (s *servedSocket) stop() (first bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false, nil
	}
	s.stopped = true
	if s.lis != nil {
		err = s.lis.close()
		os.RemoveAll(privateDir(s.lis.path, s.dirKey))
	}
	return true, err
}
