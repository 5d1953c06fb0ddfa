package pool

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/actors/internal/actortest"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/store"
)

// Device-info files are not synced: a pool that starts writes the file of
// every member a live allocation in the ledger holds, and only those.
func TestStartWritesTheDeviceInfoOfLiveAllocations(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "ledger.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	res := &config.Resource{Prefix: "example.com", Name: "net", DeviceType: config.NetDevice}
	st := events.NewState()
	st.Allocations[7] = events.Allocation{Seq: 7, Pool: res.FullName(), DeviceIDs: []string{x}}
	st.Allocations[8] = events.Allocation{Seq: 8, Pool: "example.com/other", DeviceIDs: []string{y}}
	devinfo := t.TempDir()
	f := actortest.Spawn(t, Props(Config{
		Resource: res, Members: []allocation.Member{member(x), member(y)}, Recorder: ledger.NewRecorder(l, "boot-1", nil),
		Replayed: &st, SocketDir: kubelettest.ShortTempDir(t), Mode: grpcapi.ModeLegacy, DevinfoDir: devinfo, Log: zerolog.Nop(),
	}))
	actortest.Next[*Serving](t, f)
	if _, err := os.Stat(allocation.DeviceInfoPath(devinfo, res.FullName(), x)); err != nil {
		t.Errorf("the held member's device-info file: %v", err)
	}
	if _, err := os.Stat(allocation.DeviceInfoPath(devinfo, res.FullName(), y)); !os.IsNotExist(err) {
		t.Errorf("a member no allocation of the pool holds has a device-info file: %v", err)
	}
}
