package daemon

import (
	"reflect"
	"testing"

	"github.com/devledger/devledger/actors/node"
	"github.com/devledger/devledger/sysfs"
)

// A burst of kernel events asks for at most one rescan and one probe
// round: of what it names, or of everything when events were lost. Events
// about no PCI function (a pod's veth coming and going) ask for nothing.
func TestPlanKernelBatch(t *testing.T) {
	vfAdd := sysfs.KernelEvent{Kind: sysfs.KindUevent, Action: "add", Subsystem: "pci", PCIAddress: "0000:3b:02.1",
		DevPath: "/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1"}
	vfNet := sysfs.KernelEvent{Kind: sysfs.KindUevent, Action: "add", Subsystem: "net", PCIAddress: "0000:3b:02.1", Interface: "ens785f0v1",
		DevPath: "/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1/net/ens785f0v1"}
	unbind := sysfs.KernelEvent{Kind: sysfs.KindUevent, Action: "unbind", Subsystem: "pci", PCIAddress: "0000:3b:02.0", Driver: "vfio-pci"}
	veth := sysfs.KernelEvent{Kind: sysfs.KindUevent, Action: "add", Subsystem: "net", Interface: "veth3f2a", DevPath: "/devices/virtual/net/veth3f2a"}
	pfDown := sysfs.KernelEvent{Kind: sysfs.KindLink, Action: "down", Interface: "ens785f0"}
	pfUp := sysfs.KernelEvent{Kind: sysfs.KindLink, Action: "up", Interface: "ens785f0"}
	ownNetAdd := sysfs.KernelEvent{Kind: sysfs.KindUevent, Action: "add", Subsystem: "net", PCIAddress: "0000:3b:00.1", Interface: "ens785f1",
		DevPath: "/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/net/ens785f1"}
	ownNetRemove := ownNetAdd
	ownNetRemove.Action = "remove"
	ownDown := sysfs.KernelEvent{Kind: sysfs.KindLink, Action: "down", Interface: "ens785f1"}
	ownUp, ownGone := ownDown, ownDown
	ownUp.Action, ownGone.Action = "up", "remove"
	ownRenamed := ownNetAdd
	ownRenamed.Action = "move"
	lost := sysfs.KernelEvent{Kind: sysfs.KindOverflow, Action: "uevent socket"}
	vfRemove, vfNetRemove := vfAdd, vfNet
	vfRemove.Action, vfNetRemove.Action = "remove", "remove"

	for _, tc := range []struct {
		name    string
		batch   []sysfs.KernelEvent
		rescan  string
		probe   *node.ProbeHealth
		removed []string
	}{
		{"VFs created", []sysfs.KernelEvent{vfAdd, vfNet, unbind, vfAdd}, "kernel: 4 device events",
			&node.ProbeHealth{Addresses: []string{"0000:3b:02.0", "0000:3b:02.1"}, Interfaces: []string{"ens785f0v1"}}, nil},
		{"a VF made anew", []sysfs.KernelEvent{vfNetRemove, vfRemove, vfRemove, vfAdd, vfNet}, "kernel: 5 device events",
			&node.ProbeHealth{Addresses: []string{"0000:3b:02.1"}, Interfaces: []string{"ens785f0v1"}}, []string{"0000:3b:02.1"}},
		{"a PF's link down", []sysfs.KernelEvent{pfDown, pfDown}, "", &node.ProbeHealth{Interfaces: []string{"ens785f0"}, Down: []string{"ens785f0"}}, nil},
		// Up again by the probe: the drop is passed on for the link
		// checks to count.
		{"a PF's link flaps", []sysfs.KernelEvent{pfDown, pfUp}, "", &node.ProbeHealth{Interfaces: []string{"ens785f0"}, Down: []string{"ens785f0"}}, nil},
		{"a PF's link up", []sysfs.KernelEvent{pfUp}, "", &node.ProbeHealth{Interfaces: []string{"ens785f0"}}, nil},
		// The host-device CNI moves a function's own interface into a
		// pod (the kernel closes it first), and back again: no drop.
		{"an interface into a pod", []sysfs.KernelEvent{ownDown, ownGone, ownNetRemove}, "kernel: 1 device events",
			&node.ProbeHealth{Addresses: []string{"0000:3b:00.1"}, Interfaces: []string{"ens785f1"}}, nil},
		{"an interface back from a pod", []sysfs.KernelEvent{ownNetAdd, ownDown, ownUp}, "kernel: 1 device events",
			&node.ProbeHealth{Addresses: []string{"0000:3b:00.1"}, Interfaces: []string{"ens785f1"}}, nil},
		// The link notification alone tells of the move (its uevent
		// comes in another batch).
		{"an interface into a pod, its link only", []sysfs.KernelEvent{ownDown, ownGone}, "",
			&node.ProbeHealth{Interfaces: []string{"ens785f1"}}, nil},
		// A rename closes the interface too.
		{"an interface renamed", []sysfs.KernelEvent{ownDown, ownRenamed}, "kernel: 1 device events",
			&node.ProbeHealth{Addresses: []string{"0000:3b:00.1"}, Interfaces: []string{"ens785f1"}}, nil},
		{"pods' veths only", []sysfs.KernelEvent{veth, veth}, "", nil, nil},
		{"veths and a link", []sysfs.KernelEvent{veth, pfDown}, "", &node.ProbeHealth{Interfaces: []string{"ens785f0"}, Down: []string{"ens785f0"}}, nil},
		{"events lost", []sysfs.KernelEvent{vfAdd, lost, pfDown}, "kernel: events lost, 1 device events", &node.ProbeHealth{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planKernelBatch(tc.batch)
			if p.rescan != tc.rescan {
				t.Errorf("rescan %q, want %q", p.rescan, tc.rescan)
			}
			if !reflect.DeepEqual(p.probe, tc.probe) {
				t.Errorf("probe %+v, want %+v", p.probe, tc.probe)
			}
			if !reflect.DeepEqual(p.removed, tc.removed) {
				t.Errorf("removed %q, want %q", p.removed, tc.removed)
			}
		})
	}
}
