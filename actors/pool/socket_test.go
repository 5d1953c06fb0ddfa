package pool

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
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
	other := socket("intel.com_sriov_vfio.0badcafe.sock")
	kubelet := socket("kubelet.sock")
	notSocket := filepath.Join(dir, "intel.com_sriov_net.87654321.sock")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A socket by the pool's name that something answers on is left.
	served := filepath.Join(dir, "intel.com_sriov_net.12345678.sock")
	l, err := net.Listen("unix", served)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	removed, live, err := removeStaleSockets(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{killed, old}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if want := []string{served}; !slices.Equal(live, want) {
		t.Errorf("live %v, want %v", live, want)
	}
	for _, path := range []string{served, other, kubelet, notSocket} {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s: %v, want it left alone", path, err)
		}
	}
	if removed, live, err := removeStaleSockets(filepath.Join(dir, "missing"), res); err != nil || len(removed)+len(live) != 0 {
		t.Errorf("a missing dir: removed %v, live %v, %v; want nothing, no error", removed, live, err)
	}
}

// A resource name too long for a socket path in dir is cut short to fit,
// and such a name is still known as the pool's.
func TestLongResourceNamesFit(t *testing.T) {
	dir := "/var/lib/kubelet/device-plugins"
	long := "example.com/" + strings.Repeat("n", 63)
	path := newSocketPath(dir, long)
	if len(path) > grpcapi.MaxSocketPath {
		t.Fatalf("%s is %d bytes, more than a socket path takes (%d)", path, len(path), grpcapi.MaxSocketPath)
	}
	if len(path) != grpcapi.MaxSocketPath {
		t.Errorf("%s is %d bytes: cut shorter than it needed to be (%d)", path, len(path), grpcapi.MaxSocketPath)
	}
	if !isSocketIn(dir, long, filepath.Base(path)) {
		t.Errorf("%s is not known as a socket of %s", path, long)
	}
	if short := "example.com/" + strings.Repeat("n", 40); isSocketIn(dir, short, filepath.Base(path)) {
		t.Errorf("%s is taken for a socket of the shorter %s", path, short)
	}
	if p := newSocketPath(dir, "intel.com/sriov_net"); !IsSocketName("intel.com/sriov_net", filepath.Base(p)) {
		t.Errorf("a short name was cut: %s", p)
	}
	// A cut name of an older build (no hash; a killed daemon left it) is
	// still the pool's, else nothing would ever remove it.
	base := SocketBase(long)
	if older := base[:len(filepath.Base(path))-suffixLen] + ".0badcafe.sock"; !isSocketIn(dir, long, older) {
		t.Errorf("%s, cut short by an older build, is not known as a socket of %s", older, long)
	}
	// Two long names alike in all that fits keep apart.
	other := long[:len(long)-1] + "m"
	if p := newSocketPath(dir, other); isSocketIn(dir, long, filepath.Base(p)) || isSocketIn(dir, other, filepath.Base(path)) {
		t.Errorf("%s and %s take each other's sockets (%s, %s)", long, other, filepath.Base(path), filepath.Base(p))
	}
}

// Asked to serve anew wherever it serves (a restarted registrar knows no
// socket), a pool moves to a new socket; SocketLost is recorded only when
// its socket file is gone (the kubelet emptied its directory meanwhile).
func TestReserveAnywhereRecordsALostSocket(t *testing.T) {
	f, l, first := servingPool(t, t.TempDir(), member(x))
	f.Sys.Root.Send(f.Child, &Reserve{})
	second := actortest.Next[*Serving](t, f).Socket
	if err := os.Remove(second); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Reserve{})
	third := actortest.Next[*Serving](t, f).Socket
	if first == second || second == third {
		t.Fatalf("served on %s, %s, %s: want a new socket each time", first, second, third)
	}
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lost []string
	if err := l.Read(1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.SocketLost); ok {
			lost = append(lost, p.Socket)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lost, []string{second}) {
		t.Errorf("SocketLost of %v, want of %s alone", lost, second)
	}
}

// A lost socket is news where the kubelet empties the socket's dir at
// each start (device-plugins/, legacy mode), every pool's at once; in
// plugins_registry/ (watcher mode) the kubelet removes nothing, so
// something else did: a warning.
func TestALostSocketWarnsWhereNoKubeletRemovesIt(t *testing.T) {
	for mode, level := range map[grpcapi.RegistrationMode]string{grpcapi.ModeLegacy: "info", grpcapi.ModeWatcher: "warn"} {
		t.Run(string(mode), func(t *testing.T) {
			logs := &actortest.Log{}
			f, _, socket := servingPoolIn(t, t.TempDir(), mode, zerolog.New(logs), member(x))
			if err := os.Remove(socket); err != nil {
				t.Fatal(err)
			}
			f.Sys.Root.Send(f.Child, &Reserve{})
			actortest.Next[*Serving](t, f)
			if n := logs.Count(level, "socket lost; re-creating it"); n != 1 {
				t.Errorf("%d %s lines of the socket lost, want 1:\n%s", n, level, logs)
			}
		})
	}
}

// A Reserve of a socket the pool no longer serves on (one the registrar
// asked about before the pool moved) changes nothing: the pool does not
// move again, so the kubelet is not asked to register it once more.
func TestReserveOfAnOldSocketIsIgnored(t *testing.T) {
	f, _, first := servingPool(t, t.TempDir(), member(x))
	f.Sys.Root.Send(f.Child, &Reserve{Socket: first})
	second := actortest.Next[*Serving](t, f).Socket
	if second == first {
		t.Fatalf("served on %s again, want a new socket", first)
	}
	f.Sys.Root.Send(f.Child, &Reserve{Socket: first})
	f.Silent(t)
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(*Status).Socket; got != second {
		t.Errorf("the pool serves on %s, want %s still", got, second)
	}
}

// A pool withdrawn for want of devices records PluginWithdrawn, naming
// its socket and why: the fold lists it as serving until then.
func TestAWithdrawnPoolRecordsIt(t *testing.T) {
	f, l, socket := servingPool(t, t.TempDir(), member(x))
	f.Sys.Root.Send(f.Child, &Withdraw{Reason: "no devices"})
	f.Drain(t)
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var withdrawn []events.PluginWithdrawn
	if err := l.Read(1, func(e events.Envelope) error {
		if p, ok := e.Payload.(events.PluginWithdrawn); ok {
			withdrawn = append(withdrawn, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := (events.PluginWithdrawn{Pool: "example.com/vf", Socket: socket, Reason: "no devices"}); len(withdrawn) != 1 || !reflect.DeepEqual(withdrawn[0], want) {
		t.Errorf("recorded %+v, want %+v alone", withdrawn, want)
	}
}
