package pool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store"
)

// A netDevice pool keeps a device-info file for every member: written at
// start (the files are not synced, and a reboot or a crash may have lost
// them), for a member that joins or whose facts change, and for every
// member when a reload makes the pool a netDevice pool. A device that
// leaves keeps its file (a container may still hold it). An Allocate then
// only checks its devices' files, and writes one again that is missing.
func TestDeviceInfoFollowsTheMembers(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	res := &config.Resource{Prefix: "example.com", Name: "net", DeviceType: config.GenericPCI}
	st := events.NewState()
	devinfo := t.TempDir()
	sockets := kubelettest.ShortTempDir(t)
	f := actortest.Spawn(t, Props(Config{
		Resource: res, Members: []allocation.Member{member(x), member(y)}, Recorder: ledger.NewRecorder(l, "boot-1", nil),
		Replayed: &st, SocketDir: sockets, Mode: grpcapi.ModeLegacy, DevinfoDir: devinfo, Log: zerolog.Nop(),
	}))
	serving := actortest.Next[*Serving](t, f)
	path := func(addr string) string { return allocation.DeviceInfoPath(devinfo, res.FullName(), addr) }
	if _, err := os.Stat(path(x)); !os.IsNotExist(err) {
		t.Fatalf("a genericPCI pool wrote a device-info file: %v", err)
	}
	net := *res
	net.DeviceType = config.NetDevice
	f.Sys.Root.Send(f.Child, &SetResource{Resource: &net})
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	content := func(addr string) string {
		t.Helper()
		b, err := os.ReadFile(path(addr))
		if err != nil {
			t.Fatalf("the device-info file of %s: %v", addr, err)
		}
		return string(b)
	}
	for _, addr := range []string{x, y} {
		if !strings.Contains(content(addr), `"pci-address":"`+addr+`"`) {
			t.Errorf("%s: device-info file %s does not name it", addr, content(addr))
		}
	}

	// y leaves; x is seen as a VF of a PF now, and gains an RDMA device,
	// which this pool does not ask for (isRdma): its containers get no
	// RDMA device nodes, and the file names none.
	changed := member(x)
	changed.Device.PF, changed.Device.RDMADevices = "0000:3b:00.0", []string{"mlx5_3"}
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{changed}, Reason: "test", Gen: 2})
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path(y)); err != nil {
		t.Errorf("the device-info file of a device that left: %v, want it kept", err)
	}
	if c := content(x); !strings.Contains(c, `"pf-pci-address":"0000:3b:00.0"`) || strings.Contains(c, "rdma") {
		t.Errorf("x's device-info file after its facts changed: %s", c)
	}

	// A file lost since is written again by the Allocate that needs it.
	if err := os.Remove(path(x)); err != nil {
		t.Fatal(err)
	}
	allocateOver(t, serving.Socket, x)
	if c := content(x); !strings.Contains(c, `"pf-pci-address":"0000:3b:00.0"`) || strings.Contains(c, "rdma") {
		t.Errorf("x's device-info file after an Allocate: %s", c)
	}
}

// A device-info file that cannot be written refuses the Allocate before
// anything is recorded: the kubelet gets Unavailable naming the device,
// the ledger and the pool's holds are as they were, and the parent hears
// of no allocation (a recorded one that no pod claims would turn into a
// false leak suspect).
func TestAnUnwritableDeviceInfoRefusesTheAllocate(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// A file where the directory should be: no device-info file can go in.
	devinfo := filepath.Join(t.TempDir(), "devinfo")
	if err := os.WriteFile(devinfo, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := actortest.Spawn(t, Props(Config{
		Resource: &config.Resource{Prefix: "example.com", Name: "net", DeviceType: config.NetDevice},
		Members:  []allocation.Member{member(x)}, Recorder: ledger.NewRecorder(l, "boot-1", nil), Replayed: &events.State{},
		SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, DevinfoDir: devinfo, Log: zerolog.Nop(),
	}))
	actortest.Next[*Serving](t, f)
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := l.LastSeq()

	r := awaitReply(t, allocateVia(f, context.Background(), x))
	if !errors.Is(r.err, grpcapi.ErrUnavailable) || !strings.Contains(r.err.Error(), "device-info for "+x) {
		t.Fatalf("Allocate answered %v, %v; want Unavailable naming the device-info file of %s", r.resp, r.err, x)
	}
	res, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if held := res.(*Status).Held; len(held[x]) > 0 {
		t.Errorf("%s held by %v after a refused Allocate, want none", x, held[x])
	}
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.ReadRaw(before+1, func(seq uint64, rec []byte) error {
		if e, err := events.Unmarshal(rec); err == nil && e.Type == events.TypeDevicesAllocated {
			t.Errorf("the refused Allocate was recorded as #%d", seq)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.Silent(t)
}

// A held device keeps the device-info file its Allocate wrote, whatever
// its facts become: in RDMA exclusive mode the RDMA device leaves the
// host's sysfs for the pod's network namespace, and a CNI that sets the
// pod's sandbox up again must still read it there. A device no one holds
// follows its facts. A held device that has lost its file gets one again
// when the pool starts.
func TestAHeldDeviceKeepsItsDeviceInfo(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	res := &config.Resource{Prefix: "example.com", Name: "rdma", DeviceType: config.NetDevice,
		Selectors: []config.Selector{{IsRDMA: true}}}
	st := events.NewState()
	devinfo := t.TempDir()
	withRDMA := func(addr, rdma string) allocation.Member {
		m := member(addr)
		m.Device.PF = "0000:3b:00.0"
		if rdma != "" {
			m.Device.RDMADevices = []string{rdma}
		}
		return m
	}
	f := actortest.Spawn(t, Props(Config{
		Resource: res, Members: []allocation.Member{withRDMA(x, "mlx5_3"), withRDMA(y, "mlx5_4")},
		Recorder: ledger.NewRecorder(l, "boot-1", nil), Replayed: &st, SocketDir: kubelettest.ShortTempDir(t),
		Mode: grpcapi.ModeLegacy, DevinfoDir: devinfo, Log: zerolog.Nop(),
	}))
	serving := actortest.Next[*Serving](t, f)
	content := func(addr string) string {
		t.Helper()
		b, err := os.ReadFile(allocation.DeviceInfoPath(devinfo, res.FullName(), addr))
		if err != nil {
			t.Fatalf("the device-info file of %s: %v", addr, err)
		}
		return string(b)
	}
	allocateOver(t, serving.Socket, x)
	if c := content(x); !strings.Contains(c, `"rdma-device":"mlx5_3"`) {
		t.Fatalf("x's device-info file after its Allocate: %s", c)
	}

	// The pod's namespace takes both RDMA devices; only y is free.
	f.Sys.Root.Send(f.Child, &SetMembers{Members: []allocation.Member{withRDMA(x, ""), withRDMA(y, "")}, Reason: "test", Gen: 2})
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if c := content(x); !strings.Contains(c, `"rdma-device":"mlx5_3"`) {
		t.Errorf("held x's device-info file after its RDMA device left the host: %s", c)
	}
	if c := content(y); strings.Contains(c, "rdma-device") {
		t.Errorf("free y's device-info file after its RDMA device left: %s", c)
	}

	// A held device whose file is gone gets one again as the pool starts
	// again: without it, the CNI cannot set the pod's sandbox up.
	if err := os.Remove(allocation.DeviceInfoPath(devinfo, res.FullName(), x)); err != nil {
		t.Fatal(err)
	}
	f.Sys.Root.Send(f.Child, &Crash{Reason: "test"})
	if _, err := f.Sys.Root.RequestFuture(f.Child, &Query{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if c := content(x); !strings.Contains(c, `"pci-address":"`+x+`"`) {
		t.Errorf("held x's device-info file written again at the restart: %s", c)
	}
}

// allocateOver makes one Allocate of ids over the pool's socket, as the
// kubelet does, and fails the test if it fails.
func allocateOver(t *testing.T, socket string, ids ...string) {
	t.Helper()
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
	if _, err := dial(t, socket).Allocate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}
