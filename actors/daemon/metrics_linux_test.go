package daemon

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A client that asks for /metrics again and again on one connection and
// reads none of the answers is cut off once the write timeout passes:
// else the server's write waits for good once the client's window is
// full, holding the connection, its goroutine and a send buffer for each
// such client on the host network. The server's close, with requests it
// has not read, resets the connection, which the client's socket shows.
func TestMetricsServerCutsOffAClientThatDoesNotRead(t *testing.T) {
	defer func(was time.Duration) { metricsWriteTimeout = was }(metricsWriteTimeout)
	metricsWriteTimeout = 200 * time.Millisecond
	d, ctx, _ := readyWithMetrics(t, sriovConfig)
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := dialer.DialContext(ctx, "tcp", d.metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Far more than a few answers fill, and than the server reads ahead.
	req := strings.Repeat("GET /metrics HTTP/1.1\r\nHost: devledger\r\n\r\n", 1000)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	state := func() uint8 {
		var info *unix.TCPInfo
		var ierr error
		if err := raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
			t.Fatal(err)
		}
		if ierr != nil {
			t.Fatal(ierr)
		}
		return info.State
	}
	const established = 1 // TCP_ESTABLISHED, linux/tcp_states.h
	for state() == established {
		select {
		case <-ctx.Done():
			t.Fatal("the server still holds the connection of a client that reads nothing")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
