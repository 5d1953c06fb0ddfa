package sysfs

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// uevent writes a kernel uevent message the way the kernel's
// kobject_uevent_net_broadcast does: "ACTION@DEVPATH", then the
// environment, each entry NUL-terminated.
func uevent(action, devpath string, env ...string) []byte {
	var b strings.Builder
	b.WriteString(action + "@" + devpath + "\x00")
	for _, kv := range env {
		b.WriteString(kv + "\x00")
	}
	return []byte(b.String())
}

// Messages as a node sends them; the environments follow the kernel's
// pci_uevent, netdev_uevent and the driver core's bind/unbind events.
var (
	vfDevpath   = "/devices/pci0000:3a/0000:3a:00.0/0000:3b:01.2"
	netDevpath  = "/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/net/ens785f0"
	ueventVFAdd = uevent("add", vfDevpath,
		"ACTION=add", "DEVPATH="+vfDevpath, "SUBSYSTEM=pci",
		"PCI_CLASS=20000", "PCI_ID=8086:1889", "PCI_SUBSYS_ID=8086:0000",
		"PCI_SLOT_NAME=0000:3b:01.2", "MODALIAS=pci:v00008086d00001889sv00008086sd00000000bc02sc00i00",
		"SEQNUM=4711")
	ueventVFBind = uevent("bind", vfDevpath,
		"ACTION=bind", "DEVPATH="+vfDevpath, "SUBSYSTEM=pci", "DRIVER=vfio-pci",
		"PCI_CLASS=20000", "PCI_ID=8086:1889", "PCI_SLOT_NAME=0000:3b:01.2", "SEQNUM=4712")
	ueventVFUnbind = uevent("unbind", vfDevpath,
		"ACTION=unbind", "DEVPATH="+vfDevpath, "SUBSYSTEM=pci",
		"PCI_CLASS=20000", "PCI_ID=8086:1889", "PCI_SLOT_NAME=0000:3b:01.2", "SEQNUM=4713")
	ueventNetAdd = uevent("add", netDevpath,
		"ACTION=add", "DEVPATH="+netDevpath, "SUBSYSTEM=net", "INTERFACE=ens785f0", "IFINDEX=4", "SEQNUM=4714")
	ueventVirtioNet = uevent("move", "/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0",
		"ACTION=move", "DEVPATH=/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0", "SUBSYSTEM=net",
		"INTERFACE=eth0", "IFINDEX=2", "DEVPATH_OLD=/devices/pci0000:00/0000:00:03.0/virtio0/net/ens3", "SEQNUM=12")
	ueventVFIO = uevent("add", "/devices/virtual/vfio/102",
		"ACTION=add", "DEVPATH=/devices/virtual/vfio/102", "SUBSYSTEM=vfio", "MAJOR=240", "MINOR=2",
		"DEVNAME=vfio/102", "SEQNUM=4715")
)

func TestParseUevent(t *testing.T) {
	tests := []struct {
		name string
		msg  []byte
		want KernelEvent
		ok   bool
	}{
		{name: "VF added", msg: ueventVFAdd, ok: true, want: KernelEvent{Kind: KindUevent, Action: "add",
			DevPath: vfDevpath, Subsystem: "pci", PCIAddress: "0000:3b:01.2"}},
		{name: "VF bound", msg: ueventVFBind, ok: true, want: KernelEvent{Kind: KindUevent, Action: "bind",
			DevPath: vfDevpath, Subsystem: "pci", Driver: "vfio-pci", PCIAddress: "0000:3b:01.2"}},
		{name: "VF unbound", msg: ueventVFUnbind, ok: true, want: KernelEvent{Kind: KindUevent, Action: "unbind",
			DevPath: vfDevpath, Subsystem: "pci", PCIAddress: "0000:3b:01.2"}},
		{name: "interface added", msg: ueventNetAdd, ok: true, want: KernelEvent{Kind: KindUevent, Action: "add",
			DevPath: netDevpath, Subsystem: "net", Interface: "ens785f0", PCIAddress: "0000:3b:00.0"}},
		{name: "virtio interface renamed", msg: ueventVirtioNet, ok: true, want: KernelEvent{Kind: KindUevent,
			Action: "move", DevPath: "/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0", Subsystem: "net",
			Interface: "eth0", PCIAddress: "0000:00:03.0"}},
		{name: "vfio node (another subsystem, parsed, not relevant)", msg: ueventVFIO, ok: true,
			want: KernelEvent{Kind: KindUevent, Action: "add", DevPath: "/devices/virtual/vfio/102", Subsystem: "vfio"}},
		{name: "header only, no subsystem", msg: []byte("add@/devices/x\x00"), ok: false},
		{name: "keys win over the header", ok: true,
			msg: uevent("add", "/devices/a", "ACTION=remove", "DEVPATH=/devices/pci0000:00/0000:00:04.0", "SUBSYSTEM=pci"),
			want: KernelEvent{Kind: KindUevent, Action: "remove", DevPath: "/devices/pci0000:00/0000:00:04.0",
				Subsystem: "pci", PCIAddress: "0000:00:04.0"}},
		{name: "upper-case slot name normalised", ok: true,
			msg:  uevent("add", "/devices/x", "SUBSYSTEM=pci", "PCI_SLOT_NAME=0000:AF:01.0"),
			want: KernelEvent{Kind: KindUevent, Action: "add", DevPath: "/devices/x", Subsystem: "pci", PCIAddress: "0000:af:01.0"}},
		{name: "no trailing NUL", ok: true, msg: []byte("remove@/devices/pci0000:00/0000:00:05.0\x00SUBSYSTEM=pci"),
			want: KernelEvent{Kind: KindUevent, Action: "remove", DevPath: "/devices/pci0000:00/0000:00:05.0",
				Subsystem: "pci", PCIAddress: "0000:00:05.0"}},
		{name: "udev's re-broadcast", msg: append([]byte("libudev\x00\xfe\xed\xca\xfe"), ueventVFAdd...), ok: false},
		{name: "no @", msg: []byte("add /devices/x\x00SUBSYSTEM=pci\x00"), ok: false},
		{name: "relative devpath", msg: uevent("add", "devices/x", "SUBSYSTEM=pci"), ok: false},
		{name: "odd action", msg: uevent("ADD!", "/devices/x", "SUBSYSTEM=pci"), ok: false},
		{name: "empty", msg: nil, ok: false},
		{name: "entries without =", ok: true, msg: uevent("change", "/devices/x", "junk", "SUBSYSTEM=net", "=", "INTERFACE=eth9"),
			want: KernelEvent{Kind: KindUevent, Action: "change", DevPath: "/devices/x", Subsystem: "net", Interface: "eth9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseUevent(tc.msg)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parseUevent(%q)\n = %+v, %v\nwant %+v, %v", tc.msg, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestRelevant(t *testing.T) {
	for _, msg := range [][]byte{ueventVFAdd, ueventVFBind, ueventNetAdd} {
		if ev, _ := parseUevent(msg); !relevant(&ev) {
			t.Errorf("%+v not relevant", ev)
		}
	}
	if ev, _ := parseUevent(ueventVFIO); relevant(&ev) {
		t.Errorf("%+v relevant", ev)
	}
}

func TestLastPCIAddress(t *testing.T) {
	for devpath, want := range map[string]string{
		"/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/net/ens785f0": "0000:3b:00.0",
		"/devices/pci0000:3a/0000:3a:00.0/0000:3b:01.2":              "0000:3b:01.2",
		"/devices/virtual/net/lo":                                    "",
		"0000:3b:01.2":                                               "0000:3b:01.2",
		"":                                                           "",
		"/":                                                          "",
	} {
		if got := lastPCIAddress(devpath); got != want {
			t.Errorf("lastPCIAddress(%q) = %q, want %q", devpath, got, want)
		}
	}
}

func FuzzParseUevent(f *testing.F) {
	for _, msg := range [][]byte{ueventVFAdd, ueventVFBind, ueventVFUnbind, ueventNetAdd, ueventVirtioNet, ueventVFIO,
		[]byte("add@/\x00"), []byte("@\x00=\x00"), []byte("libudev\x00")} {
		f.Add(msg)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, ok := parseUevent(msg)
		if !ok {
			if ev != (KernelEvent{}) {
				t.Fatalf("rejected with %+v", ev)
			}
			return
		}
		if ev.Kind != KindUevent || !isWord(ev.Action) || !isWord(ev.Subsystem) || !strings.HasPrefix(ev.DevPath, "/") {
			t.Fatalf("accepted %+v", ev)
		}
		if ev.PCIAddress != "" && !isPCIAddress(ev.PCIAddress) {
			t.Fatalf("PCIAddress %q", ev.PCIAddress)
		}
		for _, s := range []string{ev.DevPath, ev.Driver, ev.Interface} {
			if strings.ContainsRune(s, 0) {
				t.Fatalf("NUL in a field of %+v", ev)
			}
		}
	})
}

// collect receives batches until out closes or the deadline passes.
func collect(t *testing.T, out <-chan []KernelEvent, deadline time.Duration) [][]KernelEvent {
	t.Helper()
	var batches [][]KernelEvent
	timeout := time.After(deadline)
	for {
		select {
		case b, ok := <-out:
			if !ok {
				return batches
			}
			batches = append(batches, b)
		case <-timeout:
			t.Fatalf("Coalesce did not close within %v (%d batches so far)", deadline, len(batches))
		}
	}
}

// TestCoalesceStorm sends 100,000 events as fast as a channel takes them,
// the way VF creation floods the uevent socket, and checks that they come
// out in a handful of batches holding each distinct event once.
func TestCoalesceStorm(t *testing.T) {
	const (
		events = 100_000
		vfs    = 4096
		// Quiet past max: only max cuts a batch, so a producer stalled
		// by a loaded machine cannot cut more of them than the bound.
		quiet = time.Second
		max   = 100 * time.Millisecond
	)
	actions := []string{"add", "bind", "change"}
	in := make(chan KernelEvent, 1024)
	out := Coalesce(in, quiet, max)
	start := time.Now()
	go func() {
		for i := range events {
			vf := i % vfs
			in <- KernelEvent{Kind: KindUevent, Subsystem: "pci", Action: actions[(i/vfs)%len(actions)],
				PCIAddress: fmt.Sprintf("0000:%02x:%02x.%d", 0x3b+vf/256, (vf/8)%32, vf%8)}
		}
		close(in)
	}()
	batches := collect(t, out, time.Minute)
	elapsed := time.Since(start)

	total := 0
	seen := map[KernelEvent]bool{}
	for _, b := range batches {
		total += len(b)
		for _, ev := range b {
			seen[ev] = true
		}
	}
	// Each (address, action) pair at least once, and never twice in a
	// batch; a pair may recur in a later batch.
	if want := vfs * len(actions); len(seen) != want {
		t.Errorf("%d distinct events delivered, want %d", len(seen), want)
	}
	for i, b := range batches {
		inBatch := map[KernelEvent]bool{}
		for _, ev := range b {
			if inBatch[ev] {
				t.Fatalf("batch %d holds %+v twice", i, ev)
			}
			inBatch[ev] = true
		}
	}
	// Each batch spans max from its first event: at most one per max
	// interval the storm lasted, and one for its tail.
	if limit := int(elapsed/max) + 2; len(batches) > limit {
		t.Errorf("%d batches in %v, want at most %d", len(batches), elapsed, limit)
	}
	t.Logf("%d events in %v: %d batches, %d events delivered", events, elapsed, len(batches), total)
}

// TestCoalesceCap checks that a batch stops growing at maxBatch distinct
// events and says that it dropped the rest.
func TestCoalesceCap(t *testing.T) {
	in := make(chan KernelEvent, 1024)
	out := Coalesce(in, time.Hour, time.Hour)
	go func() {
		for i := range maxBatch + 100 {
			in <- KernelEvent{Kind: KindLink, Action: "up", Interface: fmt.Sprintf("v%d", i)}
		}
		close(in)
	}()
	batches := collect(t, out, time.Minute)
	if len(batches) != 1 {
		t.Fatalf("%d batches, want 1 (sent when the input closed)", len(batches))
	}
	b := batches[0]
	if len(b) != maxBatch+1 || b[len(b)-1].Kind != KindOverflow {
		t.Errorf("batch of %d ending in %+v, want %d events and an overflow", len(b), b[len(b)-1], maxBatch)
	}
}

// TestCoalesceQuietAndMax checks both ends of a batch: a lone event comes
// out after the quiet time, and a steady trickle that never goes quiet is
// still cut at max.
func TestCoalesceQuietAndMax(t *testing.T) {
	t.Run("quiet", func(t *testing.T) {
		in := make(chan KernelEvent)
		out := Coalesce(in, 20*time.Millisecond, time.Hour)
		ev := KernelEvent{Kind: KindUevent, Action: "remove", Subsystem: "pci", PCIAddress: "0000:3b:01.0"}
		in <- ev
		select {
		case b := <-out:
			if len(b) != 1 || b[0] != ev {
				t.Errorf("batch %+v", b)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no batch after the quiet time")
		}
		close(in)
		if b, ok := <-out; ok {
			t.Errorf("after close: batch %+v", b)
		}
	})
	// Quiet counts from the last event, not the first: a trickle that
	// pauses for less than quiet stays one batch. A loaded machine that
	// stalls it for quiet between two sends may cut one there, so each
	// batch but the last needs such a pause.
	t.Run("quiet from the last event", func(t *testing.T) {
		const quiet, n = 100 * time.Millisecond, 30
		in := make(chan KernelEvent)
		out := Coalesce(in, quiet, time.Hour)
		var before, after [n]time.Time // around each send
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for i := range n {
				before[i] = time.Now()
				in <- KernelEvent{Kind: KindLink, Action: "up", Interface: fmt.Sprintf("v%d", i)}
				after[i] = time.Now()
				time.Sleep(quiet / 10) // a trickle three quiet periods long
			}
		}()
		batches := 0
		for got := 0; got < n; batches++ {
			select {
			case b := <-out:
				got += len(b)
			case <-time.After(30 * time.Second):
				t.Fatalf("%d of %d events came out", got, n)
			}
		}
		<-sent
		close(in)
		for range out {
		}
		pauses := 0
		for i := 1; i < n; i++ {
			if after[i].Sub(before[i-1]) >= quiet {
				pauses++
			}
		}
		if batches > pauses+1 {
			t.Errorf("%d batches from a trickle that paused for %v %d times, want at most %d", batches, quiet, pauses, pauses+1)
		}
	})
	t.Run("max", func(t *testing.T) {
		in := make(chan KernelEvent)
		out := Coalesce(in, time.Hour, 50*time.Millisecond)
		stop := make(chan struct{})
		go func() {
			defer close(in)
			for i := 0; ; i++ {
				select {
				case in <- KernelEvent{Kind: KindLink, Action: "down", Interface: fmt.Sprintf("v%d", i%100)}:
				case <-stop:
					return
				}
			}
		}()
		select {
		case b := <-out:
			if len(b) == 0 {
				t.Error("empty batch")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a trickle that never goes quiet was never cut")
		}
		close(stop)
		for range out {
		}
	})
	t.Run("defaults", func(t *testing.T) {
		in := make(chan KernelEvent)
		out := Coalesce(in, 0, -1)
		close(in)
		if _, ok := <-out; ok {
			t.Error("a batch from no events")
		}
	})
}
