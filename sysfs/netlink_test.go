package sysfs

import (
	"encoding/binary"
	"testing"
)

// rtattr is one attribute of a hand-built link message.
type rtattr struct {
	typ uint16
	val []byte
}

func ifname(name string) rtattr { return rtattr{iflaIfname, append([]byte(name), 0)} }
func operstate(v byte) rtattr   { return rtattr{iflaOperstate, []byte{v}} }
func carrierAttr(v byte) rtattr { return rtattr{iflaCarrier, []byte{v}} }
func mtu(v uint32) rtattr       { return rtattr{4 /* IFLA_MTU */, binary.NativeEndian.AppendUint32(nil, v)} }
func nested(typ uint16) rtattr  { return rtattr{typ | 0x8000 /* NLA_F_NESTED */, make([]byte, 8)} }
func linkMsg(typ uint16, index int32, flags uint32, attrs ...rtattr) []byte {
	ne := binary.NativeEndian
	body := make([]byte, ifInfoMsgLen)
	body[0] = 0                // AF_UNSPEC
	ne.PutUint16(body[2:4], 1) // ARPHRD_ETHER
	ne.PutUint32(body[4:8], uint32(index))
	ne.PutUint32(body[8:12], flags)
	ne.PutUint32(body[12:16], 0xffffffff)
	for _, a := range attrs {
		hdr := make([]byte, rtAttrHdrLen)
		ne.PutUint16(hdr[0:2], uint16(rtAttrHdrLen+len(a.val)))
		ne.PutUint16(hdr[2:4], a.typ)
		body = append(body, hdr...)
		body = append(body, a.val...)
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
	}
	msg := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	ne.PutUint32(msg[0:4], uint32(nlmsgHdrLen+len(body)))
	ne.PutUint16(msg[4:6], typ)
	ne.PutUint32(msg[8:12], 0) // seq: notifications carry 0
	ne.PutUint32(msg[12:16], 0)
	return append(msg, body...)
}

// IF_OPER_* values.
const (
	operUnknown        = 0
	operDown           = 2
	operLowerLayerDown = 3
	operUp             = 6
)

func TestParseLinkMessages(t *testing.T) {
	up := uint32(iffUp | iffRunning | iffLowerUp)
	tests := []struct {
		name string
		msg  []byte
		want []linkMessage
		ok   bool
	}{
		{
			name: "link up",
			msg:  linkMsg(rtmNewLink, 4, up, ifname("ens785f0"), mtu(1500), operstate(operUp), carrierAttr(1)),
			want: []linkMessage{{4, KernelEvent{Kind: KindLink, Action: "up", Interface: "ens785f0", OperState: "up"}}},
			ok:   true,
		},
		{
			name: "cable pulled",
			msg:  linkMsg(rtmNewLink, 4, iffUp, ifname("ens785f0"), operstate(operDown), carrierAttr(0)),
			want: []linkMessage{{4, KernelEvent{Kind: KindLink, Action: "down", Interface: "ens785f0", OperState: "down"}}},
			ok:   true,
		},
		{
			name: "VF whose PF went down",
			msg:  linkMsg(rtmNewLink, 9, iffUp, ifname("ens785f0v0"), operstate(operLowerLayerDown)),
			want: []linkMessage{{9, KernelEvent{Kind: KindLink, Action: "down", Interface: "ens785f0v0", OperState: "lowerlayerdown"}}},
			ok:   true,
		},
		{
			name: "operstate unknown, carrier from the flags",
			msg:  linkMsg(rtmNewLink, 1, up, ifname("lo"), operstate(operUnknown), nested(26)),
			want: []linkMessage{{1, KernelEvent{Kind: KindLink, Action: "up", Interface: "lo", OperState: "unknown"}}},
			ok:   true,
		},
		{
			name: "no operstate: the flags decide",
			msg:  linkMsg(rtmNewLink, 5, iffUp, ifname("eth1")),
			want: []linkMessage{{5, KernelEvent{Kind: KindLink, Action: "down", Interface: "eth1"}}},
			ok:   true,
		},
		{
			name: "deleted",
			msg:  linkMsg(rtmDelLink, 7, 0, ifname("ens785f0v3"), operstate(operDown)),
			want: []linkMessage{{7, KernelEvent{Kind: KindLink, Action: "remove", Interface: "ens785f0v3", OperState: "down"}}},
			ok:   true,
		},
		{
			name: "two in one datagram, another type between",
			msg: append(append(linkMsg(rtmNewLink, 4, up, ifname("a"), operstate(operUp)),
				linkMsg(20 /* RTM_NEWADDR */, 4, 0)...),
				linkMsg(rtmNewLink, 5, 0, ifname("b"), operstate(operDown))...),
			want: []linkMessage{
				{4, KernelEvent{Kind: KindLink, Action: "up", Interface: "a", OperState: "up"}},
				{5, KernelEvent{Kind: KindLink, Action: "down", Interface: "b", OperState: "down"}},
			},
			ok: true,
		},
		{
			name: "no name: skipped",
			msg:  linkMsg(rtmNewLink, 4, up, operstate(operUp)),
			ok:   true,
		},
		{
			name: "name climbing out: skipped",
			msg:  linkMsg(rtmNewLink, 4, up, ifname("../x")),
			ok:   true,
		},
		{
			name: "operstate out of range: flags and carrier decide nothing, down",
			msg:  linkMsg(rtmNewLink, 4, up, ifname("x"), operstate(200)),
			want: []linkMessage{{4, KernelEvent{Kind: KindLink, Action: "down", Interface: "x"}}},
			ok:   true,
		},
		{name: "empty", msg: nil, ok: true},
		{name: "short header", msg: make([]byte, 10), ok: false},
		{name: "length past the end", msg: linkMsg(rtmNewLink, 4, up, ifname("x"))[:30], ok: false},
		{
			name: "body shorter than ifinfomsg",
			msg: func() []byte {
				m := linkMsg(rtmNewLink, 4, 0)[:nlmsgHdrLen+8]
				binary.NativeEndian.PutUint32(m[0:4], uint32(len(m)))
				return m
			}(),
			ok: false,
		},
		{
			name: "attribute overrunning",
			msg: func() []byte {
				m := linkMsg(rtmNewLink, 4, up, ifname("x"))
				binary.NativeEndian.PutUint16(m[nlmsgHdrLen+ifInfoMsgLen:], 200)
				return m
			}(),
			ok: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseLinkMessages(tc.msg)
			if ok != tc.ok || len(got) != len(tc.want) {
				t.Fatalf("parseLinkMessages = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("message %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func FuzzParseLinkMessage(f *testing.F) {
	up := uint32(iffUp | iffRunning | iffLowerUp)
	f.Add(linkMsg(rtmNewLink, 4, up, ifname("ens785f0"), operstate(operUp), carrierAttr(1)))
	f.Add(linkMsg(rtmDelLink, 7, 0, ifname("ens785f0v3")))
	f.Add(append(linkMsg(rtmNewLink, 1, up, ifname("lo")), linkMsg(rtmNewLink, 2, 0, ifname("eth0"), operstate(operDown))...))
	f.Add([]byte{})
	f.Add(make([]byte, nlmsgHdrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, _ := parseLinkMessages(b)
		for _, m := range msgs {
			ev := m.event
			if ev.Kind != KindLink || !validIfName(ev.Interface) {
				t.Fatalf("accepted %+v", ev)
			}
			switch ev.Action {
			case "up", "down", "remove":
			default:
				t.Fatalf("action %q", ev.Action)
			}
			if ev.Action == "up" && ev.OperState != "" && ev.OperState != "up" && ev.OperState != "unknown" {
				t.Fatalf("up with operstate %q", ev.OperState)
			}
		}
	})
}
