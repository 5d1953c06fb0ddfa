package pool

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/devledger/devledger/grpcapi/kubelettest"
)

func TestSocketNames(t *testing.T) {
	const res = "intel.com/sriov_net"
	tests := []struct {
		name string
		file string
		want bool
	}{
		{"this build's", "intel.com_sriov_net.0badcafe.sock", true},
		{"an older build's fixed name", "intel.com_sriov_net.sock", true},
		{"another pool whose name starts alike", "intel.com_sriov_net_x.0badcafe.sock", false},
		{"another pool's older name", "intel.com_sriov_net2.sock", false},
		{"not hex", "intel.com_sriov_net.0badcafz.sock", false},
		{"too short", "intel.com_sriov_net.0badcaf.sock", false},
		{"the kubelet's", "kubelet.sock", false},
		{"the private directory", ".devledger-0123456789abcdef", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsSocketName(res, tc.file); got != tc.want {
				t.Errorf("IsSocketName(%q, %q) = %v, want %v", res, tc.file, got, tc.want)
			}
		})
	}
	a, b := newSocketPath("dir", res), newSocketPath("dir", res)
	if a == b || filepath.Dir(a) != "dir" || !IsSocketName(res, filepath.Base(a)) || !IsSocketName(res, filepath.Base(b)) {
		t.Errorf("newSocketPath gave %s and %s: want two names of the pool in dir", a, b)
	}
}

func TestRemoveStaleSockets(t *testing.T) {
	const res = "intel.com/sriov_net"
	dir := kubelettest.ShortTempDir(t)
	socket := func(name string) string {
		path := filepath.Join(dir, name)
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
		return path
	}
	old := socket("intel.com_sriov_net.sock")
	killed := socket("intel.com_sriov_net.0badcafe.sock")
	keep := socket("intel.com_sriov_net.12345678.sock")
	other := socket("intel.com_sriov_vfio.0badcafe.sock")
	kubelet := socket("kubelet.sock")
	notSocket := filepath.Join(dir, "intel.com_sriov_net.87654321.sock")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := removeStaleSockets(dir, res, keep)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{killed, old}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, path := range []string{keep, other, kubelet, notSocket} {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s: %v, want it left alone", path, err)
		}
	}
	if removed, err := removeStaleSockets(filepath.Join(dir, "missing"), res, ""); err != nil || len(removed) != 0 {
		t.Errorf("a missing dir: removed %v, %v; want nothing, no error", removed, err)
	}
}
