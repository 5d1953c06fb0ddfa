//go:build unix

package registrar

import (
	"os"
	"path/filepath"
	"testing"
)

// A kubelet that re-creates its socket within one tick of the file
// system's clock leaves the same mtime: the inode still tells the new
// socket from the old one.
func TestAKubeletSocketOfTheSameMtimeIsAnother(t *testing.T) {
	dir := t.TempDir()
	old, renewed := filepath.Join(dir, "kubelet.sock"), filepath.Join(dir, "kubelet.sock.new")
	for _, p := range []string{old, renewed} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(renewed, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	a, b := statKubelet(old), statKubelet(renewed)
	if !a.present() || !b.present() || a == b {
		t.Errorf("two sockets of one mtime read as %+v and %+v, want two identities", a, b)
	}
}
