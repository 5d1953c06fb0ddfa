package allocation

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/sysfs"
)

const netdevice = "intel.com/intel_sriov_netdevice"

func TestDeviceInfoPath(t *testing.T) {
	for _, tc := range []struct {
		dir, resource, addr, want string
	}{
		{DefaultDeviceInfoDir, netdevice, "0000:af:06.0",
			"/var/run/k8s.cni.cncf.io/devinfo/dp/intel.com-intel_sriov_netdevice-0000:af:06.0-device.json"},
		{"d", "nvidia.com/mlnx_sriov_rdma", "0000:3b:0a.2", "d/nvidia.com-mlnx_sriov_rdma-0000:3b:0a.2-device.json"},
		// '/' never leaves the directory, in the resource or the ID.
		{"d", "a/b/c", "x/y", "d/a-b-c-x-y-device.json"},
	} {
		if got := DeviceInfoPath(tc.dir, tc.resource, tc.addr); got != tc.want {
			t.Errorf("DeviceInfoPath(%q, %q, %q) = %q, want %q", tc.dir, tc.resource, tc.addr, got, tc.want)
		}
	}
}

// A pool with the longest name the config takes for a netDevice pool
// (see config's checkFileNames) gets its device-info files: the file
// written first, then renamed into place, has a short name of its own.
func TestWriteDeviceInfoOfTheLongestName(t *testing.T) {
	label := strings.Repeat("p", 60)
	prefix := label + "." + label + "." + label + ".com" // 186
	const addr = "0000:3b:02.0"
	resource := prefix + "/" + strings.Repeat("n", 255-len("-00000000:00:00.0-device.json")-len(prefix)-1)
	dir := t.TempDir()
	if err := WriteDeviceInfo(dir, resource, sysfs.Device{Address: addr}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DeviceInfoPath(dir, resource, addr)); err != nil {
		t.Error(err)
	}
}

func TestWriteDeviceInfoGolden(t *testing.T) {
	rdma := vf("0000:3b:0a.2", pfB, 2, "mlx5_core", "", 0)
	rdma.RDMADevices = []string{"mlx5_2"}
	vhost := vf("0000:3b:0a.4", pfB, 4, "mlx5_core", "", 0)
	vhost.VDPAType, vhost.VDPADevice, vhost.VhostVDPA = "vhost", "vdpa0", "vhost-vdpa-0"
	virtio := vf("0000:3b:0a.5", pfB, 5, "mlx5_core", "", 0)
	virtio.VDPAType, virtio.VDPADevice = "virtio", "vdpa1"
	for _, tc := range []struct {
		name string
		dev  sysfs.Device
	}{
		{"vf", vf("0000:3b:02.1", pfA, 1, "iavf", "61", 0)},
		{"vf-rdma", rdma},
		{"vf-vdpa-vhost", vhost},
		{"vf-vdpa-virtio", virtio},
		{"pf", sysfs.Device{Address: "0000:65:00.0", VFIndex: -1, NUMANode: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The directory does not exist yet: WriteDeviceInfo creates it.
			dir := filepath.Join(t.TempDir(), "devinfo", "dp")
			if err := WriteDeviceInfo(dir, netdevice, tc.dev); err != nil {
				t.Fatal(err)
			}
			path := DeviceInfoPath(dir, netdevice, tc.dev.Address)
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "deviceinfo/"+tc.name+".json", append(got, '\n'))
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o444 {
				t.Errorf("file mode %v, want 0444", st.Mode().Perm())
			}
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				t.Fatalf("dir: %v", err)
			}
			onlyFile(t, dir, filepath.Base(path))
		})
	}
}

// onlyFile fails unless dir holds exactly the file name: no temporary
// file is left behind.
func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != name {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %q, want only %q", names, name)
	}
}

// TestWriteDeviceInfoConcurrent writes the same device's file from 16
// goroutines at once, over an existing read-only file of other content,
// while readers watch it: every write succeeds, no reader sees a partial
// file, and one file with the new content remains.
func TestWriteDeviceInfoConcurrent(t *testing.T) {
	dir := t.TempDir()
	before := vf("0000:3b:02.1", pfA, 1, "iavf", "61", 0)
	before.RDMADevices = []string{"mlx5_2"}
	if err := WriteDeviceInfo(dir, netdevice, before); err != nil {
		t.Fatal(err)
	}
	path := DeviceInfoPath(dir, netdevice, before.Address)
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dev := vf("0000:3b:02.1", pfA, 1, "iavf", "61", 0)
	want, err := json.Marshal(NewDeviceInfo(&dev))
	if err != nil {
		t.Fatal(err)
	}
	if string(want) == string(old) {
		t.Fatal("the test needs two contents")
	}

	const writers = 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		done    = make(chan struct{})
		errs    = make(chan error, writers)
		readErr = make(chan error, 1)
	)
	go func() {
		defer close(readErr)
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil {
				readErr <- err
				return
			}
			if string(got) != string(want) && string(got) != string(old) {
				readErr <- errors.New("reader saw " + string(got))
				return
			}
		}
	}()
	for range writers {
		wg.Go(func() {
			<-start
			errs <- WriteDeviceInfo(dir, netdevice, dev)
		})
	}
	close(start)
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if err := <-readErr; err != nil {
		t.Error(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("content %s, want %s", got, want)
	}
	onlyFile(t, dir, filepath.Base(path))
}

// A file that holds the content already is left as it is: an Allocate of
// a device given out before costs no write.
func TestWriteDeviceInfoSkipsTheSameContent(t *testing.T) {
	dir := t.TempDir()
	dev := vf("0000:3b:02.1", pfA, 1, "iavf", "61", 0)
	if err := WriteDeviceInfo(dir, netdevice, dev); err != nil {
		t.Fatal(err)
	}
	path := DeviceInfoPath(dir, netdevice, dev.Address)
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDeviceInfo(dir, netdevice, dev); err != nil {
		t.Fatal(err)
	}
	if again, err := os.Stat(path); err != nil || !os.SameFile(first, again) {
		t.Errorf("the same content was written again (a new file): %v", err)
	}
	dev.RDMADevices = []string{"mlx5_2"}
	if err := WriteDeviceInfo(dir, netdevice, dev); err != nil {
		t.Fatal(err)
	}
	if changed, err := os.Stat(path); err != nil || os.SameFile(first, changed) {
		t.Errorf("new content was not written: %v", err)
	}
}

func TestWriteDeviceInfoErrors(t *testing.T) {
	if err := WriteDeviceInfo(t.TempDir(), netdevice, sysfs.Device{}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("no address: %v, want ErrInvalidRequest", err)
	}
	// dir is a file: MkdirAll fails, naming the path.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeviceInfo(file, netdevice, vf("0000:3b:02.1", pfA, 1, "iavf", "", 0)); err == nil {
		t.Error("writing under a file succeeded")
	}
}

// holds is what lets an Allocate skip the write: it must say no to a file
// that holds the content and more, or less, or none at all.
func TestHolds(t *testing.T) {
	dir := t.TempDir()
	data := []byte(`{"type":"pci"}`)
	for _, tc := range []struct {
		name    string
		content []byte // nil: no file
		want    bool
	}{
		{"the same bytes", data, true},
		{"more after them", append(slices.Clone(data), '\n'), false},
		{"fewer", data[:len(data)-1], false},
		{"other bytes of the same length", []byte(`{"type":"usb"}`), false},
		{"an empty file", []byte{}, false},
		{"no file", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.content != nil {
				if err := os.WriteFile(path, tc.content, 0o444); err != nil {
					t.Fatal(err)
				}
			}
			if got := holds(path, data); got != tc.want {
				t.Errorf("holds = %v, want %v", got, tc.want)
			}
		})
	}
}

// A pool names a device's RDMA devices in its device-info file only when
// it asks for them (isRdma, on any selector), as the SR-IOV plugin does;
// other facts pass as they are.
func TestForDeviceInfoNamesRDMAOnlyForIsRdma(t *testing.T) {
	d := vf("0000:3b:0a.2", pfB, 2, "mlx5_core", "", 0)
	d.RDMADevices = []string{"mlx5_2"}
	plain := &config.Resource{Prefix: "example.com", Name: "net", DeviceType: config.NetDevice,
		Selectors: []config.Selector{{Drivers: []string{"mlx5_core"}}}}
	rdma := &config.Resource{Prefix: "example.com", Name: "rdma", DeviceType: config.NetDevice,
		Selectors: []config.Selector{{Drivers: []string{"iavf"}}, {Drivers: []string{"mlx5_core"}, IsRDMA: true}}}
	if got := ForDeviceInfo(plain, d); got.RDMADevices != nil || got.Address != d.Address || got.PF != d.PF {
		t.Errorf("for a pool without isRdma: %+v, want the device without its RDMA devices", got)
	}
	if got := ForDeviceInfo(rdma, d); !slices.Equal(got.RDMADevices, d.RDMADevices) {
		t.Errorf("for an isRdma pool: RDMA devices %v, want %v", got.RDMADevices, d.RDMADevices)
	}
	if d.RDMADevices == nil {
		t.Error("ForDeviceInfo changed the device it was given")
	}
}

func TestForDeviceInfoNamesVDPAOnlyForVDPAType(t *testing.T) {
	d := vf("0000:3b:0a.4", pfB, 4, "mlx5_core", "", 0)
	d.VDPAType, d.VDPADevice, d.VhostVDPA = "vhost", "vdpa0", "vhost-vdpa-0"
	plain := &config.Resource{Prefix: "example.com", Name: "net", DeviceType: config.NetDevice,
		Selectors: []config.Selector{{Drivers: []string{"mlx5_core"}}}}
	vdpa := &config.Resource{Prefix: "example.com", Name: "vdpa", DeviceType: config.NetDevice,
		Selectors: []config.Selector{{Drivers: []string{"mlx5_core"}, VDPAType: "vhost"}}}
	if got := NewDeviceInfo(ptr(ForDeviceInfo(plain, d))); got.Type != "pci" || got.VDPA != nil {
		t.Errorf("for a pool without vdpaType: %+v, want a pci device-info", got)
	}
	got := NewDeviceInfo(ptr(ForDeviceInfo(vdpa, d)))
	want := VDPADeviceInfo{ParentDevice: "vdpa0", Driver: "vhost", Path: "/dev/vhost-vdpa-0", PCIAddress: d.Address, PFPCIAddress: pfB}
	if got.Type != "vdpa" || got.PCI != nil || got.VDPA == nil || *got.VDPA != want {
		t.Errorf("for a vdpaType pool: %+v (vdpa %+v), want type vdpa with %+v", got, got.VDPA, want)
	}
}

func ptr[T any](v T) *T { return &v }
