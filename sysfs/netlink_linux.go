//go:build linux

package sysfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// WatchKernel opens the kernel's change notifications and sends them on
// the returned channel until ctx is done or every socket failed, then
// closes it:
//   - uevents (NETLINK_KOBJECT_UEVENT, the kernel's multicast group 1) of
//     the pci and net subsystems: add, remove, bind, unbind, change, ...;
//     other subsystems are dropped as they arrive;
//   - link notifications (NETLINK_ROUTE, RTMGRP_LINK): an interface going
//     up or down or away. A notification that changes neither a link's
//     name, state nor operstate (statistics, MTU, the PF's VF table) is
//     dropped.
//
// Messages not sent by the kernel are ignored. When a socket's buffer
// overflows, a KindOverflow event says that some were lost. Sends block
// while the channel is full: past the socket buffers the kernel then drops
// messages, which is reported the same way. Feed the channel to Coalesce
// to turn storms into batches.
//
// It fails when a socket cannot be opened (no netlink in a sandbox, a
// seccomp profile): the caller then relies on polling. Uevents of devices
// reach only the initial network namespace: a daemon in a pod needs
// hostNetwork.
func WatchKernel(ctx context.Context, opts WatchOptions) (<-chan KernelEvent, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = defaultWatchBuffer
	}
	if opts.ReceiveBuffer <= 0 {
		opts.ReceiveBuffer = defaultReceiveBuffer
	}
	type source struct {
		name string
		f    *os.File
		d    decoder
	}
	var sources []source
	closeAll := func() {
		for _, s := range sources {
			_ = s.f.Close()
		}
	}
	if !opts.NoUevents {
		f, err := openNetlink(unix.NETLINK_KOBJECT_UEVENT, 1, opts.ReceiveBuffer)
		if err != nil {
			return nil, fmt.Errorf("open uevent socket: %w", err)
		}
		sources = append(sources, source{"uevent socket", f, uevents()})
	}
	if !opts.NoLinks {
		f, err := openNetlink(unix.NETLINK_ROUTE, unix.RTMGRP_LINK, opts.ReceiveBuffer)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("open rtnetlink socket: %w", err)
		}
		sources = append(sources, source{"link socket", f, links()})
	}

	out := make(chan KernelEvent, opts.Buffer)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range sources {
		opts.Logger.Debug().Str("socket", s.name).Msg("watching kernel notifications")
		wg.Go(func() {
			err := pump(s.f, s.name, s.d, out, done)
			_ = s.f.Close()
			select {
			case <-done:
			default:
				opts.Logger.Warn().Err(err).Str("socket", s.name).Msg("kernel notifications stopped; changes are seen by polling only")
			}
		})
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-allDone(&wg):
		}
		close(done)
		// Closing a file wakes a receive blocked in the poller.
		closeAll()
		wg.Wait()
		close(out)
	}()
	return out, nil
}

// allDone is closed once wg's goroutines have all returned.
func allDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	return ch
}

// openNetlink opens a netlink socket of protocol bound to the multicast
// groups, non-blocking, as an *os.File so that receives wait in Go's
// poller and closing the file ends them.
func openNetlink(protocol, groups, rcvbuf int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, protocol)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf); err != nil {
		// Without CAP_NET_ADMIN: as much as net.core.rmem_max allows.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: uint32(groups)}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("bind to group %#x: %w", groups, err)
	}
	return os.NewFile(uintptr(fd), "netlink"), nil
}

// maxNetlinkMessage is the receive buffer: a uevent is at most 2 KiB
// (UEVENT_BUFFER_SIZE) and a link notification, which carries no VF
// table, a few KiB.
const maxNetlinkMessage = 64 << 10

// receive reads one datagram from f into buf. It reports lost messages
// (ENOBUFS) and a datagram larger than buf as overflow, and any other
// error (the file closed included) as err.
func receive(f *os.File, buf []byte) (n int, fromKernel, overflow bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false, false, err
	}
	var rerr error
	var from unix.Sockaddr
	err = rc.Read(func(fd uintptr) bool {
		n, from, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	switch {
	case err != nil:
		return 0, false, false, err
	case errors.Is(rerr, unix.ENOBUFS):
		return 0, false, true, nil
	case errors.Is(rerr, unix.EINTR):
		return 0, false, false, nil
	case rerr != nil:
		return 0, false, false, rerr
	case n > len(buf):
		return 0, false, true, nil
	}
	sa, ok := from.(*unix.SockaddrNetlink)
	return n, ok && sa.Pid == 0, false, nil
}

// send delivers ev unless done is closed first; it reports whether it did.
func send(out chan<- KernelEvent, done <-chan struct{}, ev KernelEvent) bool {
	select {
	case out <- ev:
		return true
	case <-done:
		return false
	}
}

// errStopped is what pump returns when it was told to stop.
var errStopped = errors.New("stopped")

// decoder turns one datagram from the kernel into events; lost is called
// when datagrams were lost, before the overflow event is sent.
type decoder struct {
	decode func(msg []byte) []KernelEvent
	lost   func()
}

// pump receives datagrams from f until a receive fails or done is closed,
// and sends what d makes of each one the kernel sent; lost datagrams are
// sent on as one KindOverflow event whose Action names the socket.
func pump(f *os.File, socket string, d decoder, out chan<- KernelEvent, done <-chan struct{}) error {
	buf := make([]byte, maxNetlinkMessage)
	for {
		n, fromKernel, overflow, err := receive(f, buf)
		var evs []KernelEvent
		switch {
		case err != nil:
			return err
		case overflow:
			d.lost()
			evs = []KernelEvent{{Kind: KindOverflow, Action: socket}}
		case fromKernel:
			evs = d.decode(buf[:n])
		}
		for _, ev := range evs {
			if !send(out, done, ev) {
				return errStopped
			}
		}
	}
}

// uevents keeps the pci and net uevents.
func uevents() decoder {
	return decoder{
		decode: func(msg []byte) []KernelEvent {
			if ev, ok := parseUevent(msg); ok && relevant(&ev) {
				return []KernelEvent{ev}
			}
			return nil
		},
		lost: func() {},
	}
}

// links keeps the link notifications that change a link's name, state or
// operstate.
func links() decoder {
	// last is what was sent per interface index.
	last := map[int32]KernelEvent{}
	var evs []KernelEvent
	return decoder{
		decode: func(msg []byte) []KernelEvent {
			msgs, _ := parseLinkMessages(msg)
			evs = evs[:0]
			for _, m := range msgs {
				if m.event.Action == "remove" {
					delete(last, m.index)
				} else if prev, ok := last[m.index]; ok && prev == m.event {
					continue
				} else {
					last[m.index] = m.event
				}
				evs = append(evs, m.event)
			}
			return evs
		},
		// What follows a loss may differ from what was seen.
		lost: func() { clear(last) },
	}
}
