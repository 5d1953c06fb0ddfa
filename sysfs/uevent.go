package sysfs

import (
	"bytes"
	"errors"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Kinds of KernelEvent.
const (
	// KindUevent is a kernel uevent (NETLINK_KOBJECT_UEVENT) of the pci or
	// net subsystem.
	KindUevent = "uevent"
	// KindLink is an rtnetlink link notification (RTM_NEWLINK or
	// RTM_DELLINK).
	KindLink = "link"
	// KindOverflow says that events were lost: a socket's receive buffer
	// overflowed (ENOBUFS), a message did not fit, or Coalesce dropped
	// events past its batch cap. Whoever gets it must re-read everything.
	KindOverflow = "overflow"
)

// KernelEvent is one change the kernel announced. The events are hints:
// they say where to look, and the receiver reads sysfs again to learn the
// state (a level-triggered reader never misses a change because a hint
// was lost or merged).
type KernelEvent struct {
	// Kind is KindUevent, KindLink or KindOverflow.
	Kind string
	// Action is, for a uevent, the kernel's action: "add", "remove",
	// "bind", "unbind", "change", "move", "online" or "offline". For a
	// link it is "up" (operstate up or unknown, with carrier), "down" or
	// "remove" (the interface went). For an overflow it says what
	// overflowed ("uevent socket", "link socket", "batch").
	Action string
	// DevPath is the uevent's DEVPATH, relative to the sysfs root
	// ("/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"); "" for links.
	DevPath string
	// Subsystem is the uevent's SUBSYSTEM: "pci" or "net".
	Subsystem string
	// Driver is the uevent's DRIVER, the driver bound or unbound; "" when
	// the event does not name one.
	Driver string
	// PCIAddress is the PCI function the event concerns: PCI_SLOT_NAME,
	// or else the last PCI address in DevPath (the function a net
	// interface sits on); "" when neither gives one, and for links.
	PCIAddress string
	// Interface is the network interface: the uevent's INTERFACE or the
	// link's name.
	Interface string
	// OperState is, for a link, its operational state as sysfs words it
	// ("up", "down", "lowerlayerdown", "dormant", ...), "" when the
	// message did not carry one.
	OperState string
}

// ErrWatchNotSupported is wrapped by WatchKernel's error where the kernel
// offers no netlink notifications (any system but Linux).
var ErrWatchNotSupported = errors.New("kernel change notifications not supported")

// WatchOptions configure WatchKernel. The zero value watches both uevents
// and links.
type WatchOptions struct {
	// NoUevents leaves out the uevent socket, NoLinks the rtnetlink one.
	NoUevents, NoLinks bool
	// Buffer is the capacity of the returned channel; 0 means 1024.
	Buffer int
	// ReceiveBuffer is each socket's receive buffer in bytes; 0 means
	// 4 MiB, enough for a burst of VF creation while the reader is busy.
	// It is forced past the system's limit where the process may
	// (CAP_NET_ADMIN).
	ReceiveBuffer int
	// Logger gets one line per socket opened and per receive error; the
	// zero Logger discards.
	Logger zerolog.Logger
}

const (
	defaultWatchBuffer   = 1024
	defaultReceiveBuffer = 4 << 20
)

// relevant reports whether a uevent can concern a pooled device: only
// the pci and net subsystems can.
func relevant(ev *KernelEvent) bool {
	return ev.Subsystem == "pci" || ev.Subsystem == "net"
}

// parseUevent parses one kernel uevent message:
//
//	ACTION@DEVPATH \0 KEY=VALUE \0 KEY=VALUE \0 ...
//
// (ACTION, DEVPATH, SUBSYSTEM, SEQNUM, then subsystem keys such as DRIVER,
// PCI_SLOT_NAME, INTERFACE). The ACTION and DEVPATH keys, when present,
// win over the header. It reports false for anything else, udev's own
// re-broadcasts ("libudev" header) included, and for a message without an
// action, a devpath starting with '/' or a subsystem.
func parseUevent(msg []byte) (KernelEvent, bool) {
	head, rest, _ := bytes.Cut(msg, []byte{0})
	action, devpath, ok := bytes.Cut(head, []byte{'@'})
	if !ok {
		return KernelEvent{}, false
	}
	ev := KernelEvent{Kind: KindUevent, Action: string(action), DevPath: string(devpath)}
	slot := ""
	for len(rest) > 0 {
		var kv []byte
		kv, rest, _ = bytes.Cut(rest, []byte{0})
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "ACTION":
			ev.Action = string(v)
		case "DEVPATH":
			ev.DevPath = string(v)
		case "SUBSYSTEM":
			ev.Subsystem = string(v)
		case "DRIVER":
			ev.Driver = string(v)
		case "PCI_SLOT_NAME":
			slot = string(v)
		case "INTERFACE":
			ev.Interface = string(v)
		}
	}
	if !isWord(ev.Action) || !strings.HasPrefix(ev.DevPath, "/") || !isWord(ev.Subsystem) {
		return KernelEvent{}, false
	}
	if a, err := NormalizeAddress(slot); err == nil {
		ev.PCIAddress = a
	} else {
		ev.PCIAddress = lastPCIAddress(ev.DevPath)
	}
	return ev, true
}

// isWord reports whether s is a non-empty run of lower-case letters,
// digits, '_' and '-', as actions and subsystems are.
func isWord(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// lastPCIAddress is the last element of devpath that is a PCI address
// ("0000:3b:00.0" in ".../0000:3b:00.0/net/ens785f0"), "" when none is.
func lastPCIAddress(devpath string) string {
	for devpath != "" {
		i := strings.LastIndexByte(devpath, '/')
		if el := devpath[i+1:]; isPCIAddress(el) {
			return el
		}
		if i < 0 {
			break
		}
		devpath = devpath[:i]
	}
	return ""
}

// maxBatch caps the distinct events of one Coalesce batch: a storm past
// it costs no more memory, and the batch ends with one KindOverflow event.
const maxBatch = 1 << 16

// Default pacing of Coalesce.
const (
	DefaultCoalesceQuiet = 100 * time.Millisecond
	DefaultCoalesceMax   = time.Second
)

// Coalesce turns a stream of events into batches, so that a storm (the
// thousands of uevents per second of VF creation) costs one rescan rather
// than thousands. A batch is delivered once quiet has passed without a new
// event, or maxDelay after its first event, whichever comes first; quiet
// <= 0 means DefaultCoalesceQuiet and maxDelay <= 0 DefaultCoalesceMax.
// While the receiver is busy, new events join the batch waiting for it.
//
// Within a batch an event equal to an earlier one is dropped, so a batch
// lists what changed, not how often, in the order first seen; past
// 65,536 distinct events the rest are dropped and the batch ends with a
// KindOverflow event. Each event costs a channel receive, a clock read
// and a map look-up, whatever the rate.
//
// The returned channel is closed after in is closed and the last batch is
// taken; the receiver must keep receiving until then.
func Coalesce(in <-chan KernelEvent, quiet, maxDelay time.Duration) <-chan []KernelEvent {
	if quiet <= 0 {
		quiet = DefaultCoalesceQuiet
	}
	if maxDelay <= 0 {
		maxDelay = DefaultCoalesceMax
	}
	out := make(chan []KernelEvent)
	go coalesce(in, out, quiet, maxDelay)
	return out
}

func coalesce(in <-chan KernelEvent, out chan<- []KernelEvent, quiet, maxDelay time.Duration) {
	defer close(out)
	var (
		batch       []KernelEvent
		seen        map[KernelEvent]struct{}
		overflowed  bool
		first, last time.Time
		ready       bool // the batch is due and waits for the receiver
	)
	timer := time.NewTimer(quiet)
	timer.Stop()
	defer timer.Stop()
	for {
		var send chan<- []KernelEvent
		var due <-chan time.Time
		switch {
		case ready:
			send = out
		case len(batch) > 0:
			due = timer.C
		}
		select {
		case ev, ok := <-in:
			if !ok {
				if len(batch) > 0 {
					out <- batch
				}
				return
			}
			now := time.Now()
			if len(batch) == 0 {
				first = now
				seen = make(map[KernelEvent]struct{})
				timer.Reset(min(quiet, maxDelay))
			}
			last = now
			if _, dup := seen[ev]; dup {
				continue
			}
			if len(seen) >= maxBatch {
				if !overflowed {
					overflowed = true
					batch = append(batch, KernelEvent{Kind: KindOverflow, Action: "batch"})
				}
				continue
			}
			seen[ev] = struct{}{}
			batch = append(batch, ev)
		case now := <-due:
			at := last.Add(quiet)
			if deadline := first.Add(maxDelay); deadline.Before(at) {
				at = deadline
			}
			if now.Before(at) {
				timer.Reset(at.Sub(now))
			} else {
				ready = true
			}
		case send <- batch:
			batch, seen, overflowed, ready = nil, nil, false, false
		}
	}
}
