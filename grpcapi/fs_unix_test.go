//go:build unix

package grpcapi

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A private directory of the right mode that another user owns is not
// ours: that user could swap the socket under the kubelet. The server
// makes one of its own in its place. Only root can plant it.
func TestAnotherUsersPrivateDirIsReclaimed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	path := filepath.Join(shortDir(t), "p.sock")
	priv := privateDir(path, "")
	if err := os.Mkdir(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := os.Chown(priv, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	s := NewPoolServer(testResource, newFakeBackend(), PoolServerOptions{})
	if err := s.Serve(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(t, s, 5*time.Second) })
	checkPrivateSocket(t, path)
	fi, err := os.Lstat(priv)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		t.Errorf("private dir %s is owned by uid %d, want ours (%d)", priv, uid, os.Geteuid())
	}
}
