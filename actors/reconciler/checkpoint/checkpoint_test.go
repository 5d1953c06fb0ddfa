package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// testdata/kubelet_internal_checkpoint and testdata/no_entries were
// written by kubelet 1.37.2's own checkpoint manager (CreateCheckpoint
// with the device manager's checkpoint.New), Checksum included: the
// first from three containers' devices (one device on two NUMA nodes,
// one on none), the second from none.
func TestReadsTheKubeletsCheckpoint(t *testing.T) {
	got, err := Read(filepath.Join("testdata", FileName))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{PodUID: "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00", Container: "main", Resource: "intel.com/sriov_vfio",
			DeviceIDs: []string{"0000:3b:02.1", "0000:3b:02.2"}},
		{PodUID: "6f0c1b9e-3d2a-4c55-9a51-2b7e8c1d4f00", Container: "init", Resource: "intel.com/sriov_vfio",
			DeviceIDs: []string{"0000:3b:02.1"}},
		{PodUID: "0d3e7a42-81b6-4f0e-b3c9-5e6f7a8b9c01", Container: "main", Resource: "example.com/fpga",
			DeviceIDs: []string{"0000:af:00.0"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Read = %+v\nwant %+v", got, want)
	}

	none, err := Read(filepath.Join("testdata", "no_entries"))
	if err != nil || len(none) != 0 {
		t.Errorf("a checkpoint with no entries (PodDeviceEntries null) reads as %v, %v; want none and no error", none, err)
	}
}

func TestAFileThatIsNotTheKubeletsCheckpointIsAnUnknownFormat(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"empty", ``},
		{"torn", `{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c"`},
		{"not JSON", "\x00\x01binary"},
		{"another object", `{"policyName":"static","defaultCpuSet":"0-3","checksum":1}`},
		{"no checksum", `{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}}}`},
		{"no entries field", `{"Data":{"RegisteredDevices":{}},"Checksum":1}`},
		{"v1 device list", `{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":["a"]}],"RegisteredDevices":{}},"Checksum":1}`},
		{"NUMA node not a number", `{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":{"x":["a"]}}]},"Checksum":1}`},
		{"entry without pod UID", `{"Data":{"PodDeviceEntries":[{"ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["a"]}}]},"Checksum":1}`},
		{"entry without container", `{"Data":{"PodDeviceEntries":[{"PodUID":"u","ResourceName":"r","DeviceIDs":{"0":["a"]}}]},"Checksum":1}`},
		{"entry without resource", `{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","DeviceIDs":{"0":["a"]}}]},"Checksum":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Read(path)
			if !errors.Is(err, ErrUnknownFormat) {
				t.Errorf("Read = %v, %v; want ErrUnknownFormat", got, err)
			}
		})
	}
}

func TestAMissingCheckpointIsNotExist(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), FileName))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrUnknownFormat) {
		t.Errorf("Read of a missing file = %v; want fs.ErrNotExist", err)
	}
}

// FuzzParse: whatever the file holds, Parse returns entries or an error
// and never panics; every entry it returns names a pod, a container and
// a resource, and its devices sorted, each once.
func FuzzParse(f *testing.F) {
	for _, name := range []string{FileName, "no_entries"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["b","a"],"1":["a"]}}]},"Checksum":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := Parse(b)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.PodUID == "" || e.Container == "" || e.Resource == "" {
				t.Errorf("entry %+v lacks a pod, container or resource", e)
			}
			if !slices.IsSorted(e.DeviceIDs) || len(slices.Compact(slices.Clone(e.DeviceIDs))) != len(e.DeviceIDs) {
				t.Errorf("entry %+v: devices not sorted, each once", e)
			}
		}
	})
}
