package scanner

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// FactsOf is what the ledger keeps of a discovered function.
func FactsOf(d sysfs.Device) events.DeviceFacts {
	f := events.DeviceFacts{
		Address:         d.Address,
		Vendor:          d.Vendor,
		Device:          d.Device,
		SubsystemVendor: d.SubsystemVendor,
		SubsystemDevice: d.SubsystemDevice,
		Class:           d.Class,
		VendorName:      d.VendorName,
		DeviceName:      d.DeviceName,
		Driver:          d.Driver,
		NUMANode:        d.NUMANode,
		IOMMUGroup:      d.IOMMUGroup,
		VFIODevice:      d.VFIODevice,
		PF:              d.PF,
		VFIndex:         d.VFIndex,
		PFInterface:     d.PFInterface,
		RDMADevices:     slices.Clone(d.RDMADevices),
	}
	for _, ifc := range d.Interfaces {
		f.Interfaces = append(f.Interfaces, ifc.Name)
	}
	return f
}

// ChangedFields names (by their JSON names) the facts that differ between a
// and b, in field order; empty when they are the same.
func ChangedFields(a, b events.DeviceFacts) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	var changed []string
	for i := range t.NumField() {
		fa, fb := va.Field(i), vb.Field(i)
		same := false
		if fa.Kind() == reflect.Slice {
			same = fa.Len() == fb.Len() && (fa.Len() == 0 || reflect.DeepEqual(fa.Interface(), fb.Interface()))
		} else {
			same = fa.Interface() == fb.Interface()
		}
		if !same {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			changed = append(changed, name)
		}
	}
	return changed
}

// Diff compares a fresh scan with what the ledger knows and returns the
// events that bring the ledger up to date: discovered, changed, and removed
// devices (a known, present device missing from the scan): discovered and
// changed devices in scan order, then removals sorted by address. A known
// device in the scan that the kernel said it removed since the last scan
// (removed) went and came back, VFs made anew: its removal and discovery.
func Diff(known map[string]events.Device, scanned []sysfs.Device, removed []string) []events.Payload {
	var out []events.Payload
	seen := make(map[string]bool, len(scanned))
	for _, d := range scanned {
		seen[d.Address] = true
		facts := FactsOf(d)
		if k, ok := known[d.Address]; !ok || !k.Present {
			out = append(out, events.DeviceDiscovered{Device: facts})
		} else if slices.Contains(removed, d.Address) {
			out = append(out, events.DeviceRemoved{Address: d.Address, Reason: "the kernel removed it, and it was back by the next scan"},
				events.DeviceDiscovered{Device: facts})
		} else if other := anotherDevice(k.Facts, d); other != "" {
			out = append(out, events.DeviceRemoved{Address: d.Address, Reason: other}, events.DeviceDiscovered{Device: facts})
		} else if ch := ChangedFields(k.Facts, facts); len(ch) > 0 {
			out = append(out, events.DeviceChanged{Device: facts, Changed: ch})
		}
	}
	var gone []string
	for addr, k := range known {
		if k.Present && !seen[addr] {
			gone = append(gone, addr)
		}
	}
	slices.Sort(gone)
	for _, addr := range gone {
		out = append(out, events.DeviceRemoved{Address: addr, Reason: "gone from sysfs"})
	}
	return out
}

// anotherDevice says why d, scanned at the address of the device known as
// k, is another device, "" when it may be the same one. A function's
// vendor and device IDs are read from its config space as the kernel
// enumerates it, so IDs that differ mean the function at the address went
// and another came (a card moved or swapped across a reboot, a slot
// renumbered by a firmware change): its history, health and holders are
// not the old one's. IDs a read missed say nothing.
func anotherDevice(k events.DeviceFacts, d sysfs.Device) string {
	if d.Incomplete || k.Vendor == "" || k.Device == "" || d.Vendor == "" || d.Device == "" {
		return ""
	}
	if k.Vendor == d.Vendor && k.Device == d.Device {
		return ""
	}
	return fmt.Sprintf("another device took its address: %s:%s where %s:%s was", d.Vendor, d.Device, k.Vendor, k.Device)
}
