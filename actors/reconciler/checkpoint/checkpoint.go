// Package checkpoint reads the kubelet device manager's checkpoint,
// kubelet_internal_checkpoint in its device-plugins directory: for each
// container the kubelet gave devices, its pod's UID, the container's
// name, the resource and the device IDs. PodResources names a pod by
// namespace and name only; the checkpoint is where its UID is.
//
// The kubelet (1.20 and later, the "v2" layout) writes the file whole:
// into a temporary file beside it, fsynced, then renamed over it, at
// each Allocate that gives devices out and each device list a plugin
// sends. A reader sees one write or the next, never half of one. The
// file's Checksum is a hash of the kubelet's own debug printing of its
// Go structs, which only the kubelet's code can compute; it is required
// (a file without it is not the layout read here) but not verified.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
)

// FileName is the checkpoint's name in the kubelet's device-plugins
// directory.
const FileName = "kubelet_internal_checkpoint"

// ErrUnknownFormat is returned for a file that is JSON but not laid out
// as the kubelet's device-manager checkpoint (v2) is.
var ErrUnknownFormat = errors.New("not a kubelet device-manager checkpoint (v2)")

// Entry is one container's devices of one resource, as the kubelet
// gave them.
type Entry struct {
	PodUID, Container, Resource string
	// DeviceIDs are sorted, each once: the kubelet files a device under
	// every NUMA node it is on.
	DeviceIDs []string
}

// Read reads the checkpoint at path. A missing file is an error that
// wraps fs.ErrNotExist; one that is not JSON, or not the kubelet's
// layout, wraps ErrUnknownFormat.
func Read(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubelet checkpoint: %w", err)
	}
	entries, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("read kubelet checkpoint %s: %w", path, err)
	}
	return entries, nil
}

// file is the part of the kubelet's checkpoint read here: the
// allocation response each entry carries, and the registered devices,
// are left out.
type file struct {
	Data *struct {
		// PodDeviceEntries is null when no container holds a device.
		PodDeviceEntries json.RawMessage
	}
	Checksum *uint64
}

// entry is one of PodDeviceEntries.
type entry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	// DeviceIDs is keyed by NUMA node (-1: none). Before 1.20 it was a
	// list, which is not this layout.
	DeviceIDs map[string][]string
}

// Parse reads a checkpoint's bytes (see Read).
func Parse(b []byte) ([]Entry, error) {
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownFormat, err)
	}
	if f.Data == nil || f.Data.PodDeviceEntries == nil || f.Checksum == nil {
		return nil, fmt.Errorf("%w: no Data.PodDeviceEntries and Checksum", ErrUnknownFormat)
	}
	var entries []entry
	if err := json.Unmarshal(f.Data.PodDeviceEntries, &entries); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownFormat, err)
	}
	out := make([]Entry, 0, len(entries))
	for i, e := range entries {
		if e.PodUID == "" || e.ContainerName == "" || e.ResourceName == "" {
			return nil, fmt.Errorf("%w: entry %d lacks its pod UID, container or resource", ErrUnknownFormat, i)
		}
		var ids []string
		for node, devs := range e.DeviceIDs {
			if _, err := strconv.ParseInt(node, 10, 64); err != nil {
				return nil, fmt.Errorf("%w: entry %d: NUMA node %q", ErrUnknownFormat, i, node)
			}
			ids = append(ids, devs...)
		}
		slices.Sort(ids)
		out = append(out, Entry{PodUID: e.PodUID, Container: e.ContainerName, Resource: e.ResourceName,
			DeviceIDs: slices.Compact(ids)})
	}
	return out, nil
}
