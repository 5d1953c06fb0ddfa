package sysfs

import (
	"bytes"
	"encoding/binary"
)

// The rtnetlink message layout, from the kernel's uapi headers
// (linux/netlink.h, linux/rtnetlink.h, linux/if_link.h, linux/if.h). They
// are spelled out here, not taken from golang.org/x/sys/unix, so that the
// parser builds and is fuzzed on every system; a Linux test checks them
// against unix.
const (
	nlmsgHdrLen   = 16 // struct nlmsghdr
	ifInfoMsgLen  = 16 // struct ifinfomsg
	rtAttrHdrLen  = 4  // struct rtattr
	rtmNewLink    = 16 // RTM_NEWLINK
	rtmDelLink    = 17 // RTM_DELLINK
	iflaIfname    = 3  // IFLA_IFNAME
	iflaOperstate = 16 // IFLA_OPERSTATE
	iflaCarrier   = 33 // IFLA_CARRIER
	nlaTypeMask   = 0x3fff
	iffUp         = 0x1     // IFF_UP
	iffRunning    = 0x40    // IFF_RUNNING
	iffLowerUp    = 0x10000 // IFF_LOWER_UP
)

// operStates names the IF_OPER_* values of IFLA_OPERSTATE as sysfs's
// operstate file does.
var operStates = [...]string{"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"}

// linkMessage is one link notification: the event and the interface index
// it concerns (names can be reused, indexes are not while the link lives).
type linkMessage struct {
	index int32
	event KernelEvent
}

// nlAlign rounds n up to netlink's 4-byte alignment.
func nlAlign(n int) int { return (n + 3) &^ 3 }

// parseLinkMessages parses the RTM_NEWLINK and RTM_DELLINK messages in one
// datagram of an rtnetlink socket (several may share it) and skips every
// other message type. A message whose lengths do not add up ends the
// parse: what came before it is returned, and ok is false. A link message
// without a valid interface name is skipped.
//
// A new link is "up" when its operational state is up, or unknown (a
// driver that does not track it), and it has carrier (IFLA_CARRIER, or the
// IFF_LOWER_UP flag when that is absent); without IFLA_OPERSTATE, when it
// is IFF_UP and IFF_RUNNING. Otherwise it is "down".
func parseLinkMessages(b []byte) (msgs []linkMessage, ok bool) {
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return msgs, false
		}
		n := int(ne.Uint32(b[0:4]))
		typ := ne.Uint16(b[4:6])
		if n < nlmsgHdrLen || n > len(b) {
			return msgs, false
		}
		body := b[nlmsgHdrLen:n]
		if next := nlAlign(n); next < len(b) {
			b = b[next:]
		} else {
			b = nil
		}
		if typ != rtmNewLink && typ != rtmDelLink {
			continue
		}
		m, valid := parseLinkBody(body, typ == rtmDelLink)
		if !valid {
			return msgs, false
		}
		if m.event.Interface != "" {
			msgs = append(msgs, m)
		}
	}
	return msgs, true
}

// parseLinkBody parses an ifinfomsg and its attributes.
func parseLinkBody(body []byte, deleted bool) (linkMessage, bool) {
	ne := binary.NativeEndian
	if len(body) < ifInfoMsgLen {
		return linkMessage{}, false
	}
	m := linkMessage{index: int32(ne.Uint32(body[4:8])), event: KernelEvent{Kind: KindLink}}
	flags := ne.Uint32(body[8:12])
	operState, carrier := -1, -1
	attrs := body[ifInfoMsgLen:]
	for len(attrs) >= rtAttrHdrLen {
		l := int(ne.Uint16(attrs[0:2]))
		typ := ne.Uint16(attrs[2:4]) & nlaTypeMask
		if l < rtAttrHdrLen || l > len(attrs) {
			return linkMessage{}, false
		}
		val := attrs[rtAttrHdrLen:l]
		switch typ {
		case iflaIfname:
			name, _, _ := bytes.Cut(val, []byte{0})
			if s := string(name); validIfName(s) {
				m.event.Interface = s
			}
		case iflaOperstate:
			if len(val) >= 1 {
				operState = int(val[0])
			}
		case iflaCarrier:
			if len(val) >= 1 {
				carrier = int(val[0])
			}
		}
		if next := nlAlign(l); next < len(attrs) {
			attrs = attrs[next:]
		} else {
			attrs = nil
		}
	}
	if operState >= 0 && operState < len(operStates) {
		m.event.OperState = operStates[operState]
	}
	if carrier < 0 {
		carrier = 0
		if flags&iffLowerUp != 0 {
			carrier = 1
		}
	}
	var up bool
	switch {
	case operState < 0:
		up = flags&(iffUp|iffRunning) == iffUp|iffRunning
	default:
		up = (m.event.OperState == "up" || m.event.OperState == "unknown") && carrier == 1
	}
	switch {
	case deleted:
		m.event.Action = "remove"
	case up:
		m.event.Action = "up"
	default:
		m.event.Action = "down"
	}
	return m, true
}
