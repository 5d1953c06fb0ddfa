//go:build linux

package sysfs

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNetlinkConstants checks the parser's own copy of the uapi values
// against golang.org/x/sys/unix (which has no IF_OPER_* values: those are
// checked by hand against linux/if.h in operStates' order).
func TestNetlinkConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, sys int
	}{
		{"NLMSG_HDRLEN", nlmsgHdrLen, unix.NLMSG_HDRLEN},
		{"sizeof(ifinfomsg)", ifInfoMsgLen, unix.SizeofIfInfomsg},
		{"sizeof(rtattr)", rtAttrHdrLen, unix.SizeofRtAttr},
		{"RTM_NEWLINK", rtmNewLink, unix.RTM_NEWLINK},
		{"RTM_DELLINK", rtmDelLink, unix.RTM_DELLINK},
		{"IFLA_IFNAME", iflaIfname, unix.IFLA_IFNAME},
		{"IFLA_OPERSTATE", iflaOperstate, unix.IFLA_OPERSTATE},
		{"IFLA_CARRIER", iflaCarrier, unix.IFLA_CARRIER},
		{"IFF_UP", iffUp, unix.IFF_UP},
		{"IFF_RUNNING", iffRunning, unix.IFF_RUNNING},
		{"IFF_LOWER_UP", iffLowerUp, unix.IFF_LOWER_UP},
		{"NLA_TYPE_MASK", nlaTypeMask, 0xffff &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)},
	} {
		if c.ours != c.sys {
			t.Errorf("%s: ours %d, unix %d", c.name, c.ours, c.sys)
		}
	}
}

// watchOrSkip opens the real sockets, skipping the test where this
// machine does not allow them.
func watchOrSkip(t *testing.T, ctx context.Context) <-chan KernelEvent {
	t.Helper()
	ch, err := WatchKernel(ctx, WatchOptions{})
	if err != nil {
		t.Skipf("netlink sockets cannot be opened here: %v", err)
	}
	return ch
}

// drainUntilClosed fails t unless ch closes within the deadline; events
// the host happens to send meanwhile are ignored.
func drainUntilClosed(t *testing.T, ch <-chan KernelEvent) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the channel was not closed after the context was cancelled")
		}
	}
}

// TestWatchKernelOpensAndCloses opens both real sockets and checks that
// cancelling the context closes the channel. It depends on no event
// happening on the host.
func TestWatchKernelOpensAndCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := watchOrSkip(t, ctx)
	cancel()
	drainUntilClosed(t, ch)
}

// TestWatchKernelSeesLinkUp watches from a network namespace of its own,
// where nothing else happens, and brings its loopback up: the link
// notification must arrive as an "up" event for lo. It is skipped where
// the test may not create a namespace.
func TestWatchKernelSeesLinkUp(t *testing.T) {
	type opened struct {
		ch  <-chan KernelEvent
		err error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan opened, 1)
	skip := make(chan string, 1)
	go func() {
		// The thread stays in the new namespace: never unlocked, it ends
		// with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip <- "cannot create a network namespace here: " + err.Error()
			return
		}
		ch, err := WatchKernel(ctx, WatchOptions{})
		if err != nil {
			skip <- "netlink sockets cannot be opened here: " + err.Error()
			return
		}
		result <- opened{ch: ch, err: setLinkUp("lo")}
	}()
	var o opened
	select {
	case msg := <-skip:
		t.Skip(msg)
	case o = <-result:
	}
	if o.err != nil {
		t.Fatalf("bring lo up: %v", o.err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-o.ch:
			if !ok {
				t.Fatal("channel closed before the link event")
			}
			if ev.Kind == KindLink && ev.Interface == "lo" {
				if ev.Action != "up" {
					t.Errorf("lo: %+v, want action up", ev)
				}
				cancel()
				drainUntilClosed(t, o.ch)
				return
			}
		case <-timeout:
			t.Fatal("no link event for lo")
		}
	}
}

// setLinkUp sets IFF_UP on interface name in the calling thread's network
// namespace.
func setLinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// TestLinkDecoderDropsRepeats checks that a link notification changing
// nothing the health checker looks at (an MTU change, statistics) is
// dropped, and that a loss or a removal forgets what was seen.
func TestLinkDecoderDropsRepeats(t *testing.T) {
	d := links()
	up := uint32(iffUp | iffRunning | iffLowerUp)
	upMsg := linkMsg(rtmNewLink, 4, up, ifname("ens785f0"), operstate(operUp), mtu(1500))
	steps := []struct {
		msg  []byte
		lost bool
		want []string // actions
	}{
		{msg: upMsg, want: []string{"up"}},
		{msg: linkMsg(rtmNewLink, 4, up, ifname("ens785f0"), operstate(operUp), mtu(9000))},
		{msg: linkMsg(rtmNewLink, 4, iffUp, ifname("ens785f0"), operstate(operDown)), want: []string{"down"}},
		{msg: linkMsg(rtmNewLink, 4, iffUp, ifname("ens785f0"), operstate(operDown))},
		{msg: upMsg, want: []string{"up"}},
		{lost: true},
		{msg: upMsg, want: []string{"up"}},
		{msg: linkMsg(rtmDelLink, 4, 0, ifname("ens785f0")), want: []string{"remove"}},
		{msg: upMsg, want: []string{"up"}},
	}
	for i, s := range steps {
		if s.lost {
			d.lost()
			continue
		}
		var got []string
		for _, ev := range d.decode(s.msg) {
			got = append(got, ev.Action)
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("step %d: %q, want %q", i, got, s.want)
		}
	}
	if evs := uevents().decode(ueventVFIO); len(evs) != 0 {
		t.Errorf("vfio uevent kept: %+v", evs)
	}
	if evs := uevents().decode(ueventVFBind); len(evs) != 1 || evs[0].Driver != "vfio-pci" {
		t.Errorf("bind uevent: %+v", evs)
	}
}
