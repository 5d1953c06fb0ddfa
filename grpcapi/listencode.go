package grpcapi

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec this one wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// encodedList is a ListAndWatchResponse already in its wire form; the pool
// server's codec sends its bytes as they are.
type encodedList []byte

// listEncoder encodes a pool's ListAndWatch lists. A pool's lists follow
// each other with most entries shared (a health change replaces one
// Device, the rest are the same pointers at the same places), and the
// backend never modifies a Device it published. So each entry is
// marshalled once, when it first appears at its place, and a list's
// message is its entries' bytes, copied: a 500-device list costs a copy of
// about 15 KB instead of 500 marshals. The server keeps one encoder for
// all its streams, so the stream a restarted kubelet opens reuses what the
// last one sent. Safe for concurrent use.
type listEncoder struct {
	mu   sync.Mutex
	prev []*pluginapi.Device
	// fields holds, for each place of prev, the entry as field 1 of
	// ListAndWatchResponse: its tag, its length, its bytes.
	fields [][]byte
}

// devicesField is ListAndWatchResponse's field 1, repeated Device devices.
const devicesField protowire.Number = 1

// encode returns list as a ListAndWatchResponse on the wire, byte for byte
// what proto.Marshal makes of it. The bytes are new each time: gRPC may
// still be writing the last message when the next is encoded.
func (e *listEncoder) encode(list []*pluginapi.Device) (encodedList, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fields := make([][]byte, len(list))
	var fresh []int
	for i, d := range list {
		if i < len(e.prev) && e.prev[i] == d {
			fields[i] = e.fields[i]
		} else {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) > 0 {
		// The entries not encoded before are marshalled together, as a
		// list of their own (one call is much cheaper than one per
		// entry), then cut into their fields.
		devs := make([]*pluginapi.Device, len(fresh))
		for k, i := range fresh {
			devs[k] = list[i]
		}
		b, err := proto.Marshal(&pluginapi.ListAndWatchResponse{Devices: devs})
		if err != nil {
			return nil, fmt.Errorf("encode the device list: %w", err)
		}
		whole := b
		for _, i := range fresh {
			n := fieldLen(b)
			if n <= 0 {
				return nil, fmt.Errorf("encode the device list: cannot find device %q in the marshalled list", list[i].GetID())
			}
			fields[i], b = b[:n:n], b[n:]
		}
		if len(fresh) == len(list) {
			// Nothing reused: the message is what was just marshalled
			// (never written to, like every message sent).
			e.prev, e.fields = list, fields
			return whole, nil
		}
	}
	size := 0
	for _, f := range fields {
		size += len(f)
	}
	out := make([]byte, 0, size)
	for _, f := range fields {
		out = append(out, f...)
	}
	e.prev, e.fields = list, fields
	return out, nil
}

// fieldLen is the length of the devices field at the start of b, tag
// included, or -1 when b does not start with one.
func fieldLen(b []byte) int {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != devicesField || typ != protowire.BytesType {
		return -1
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return -1
	}
	return n + m
}

// poolCodec is the pool server's codec: protobuf, as the kubelet expects,
// except that an encodedList goes out as it is.
type poolCodec struct{ encoding.CodecV2 }

func newPoolCodec() poolCodec { return poolCodec{encoding.GetCodecV2("proto")} }

// Marshal implements encoding.CodecV2.
func (c poolCodec) Marshal(v any) (mem.BufferSlice, error) {
	if l, ok := v.(encodedList); ok {
		return mem.BufferSlice{mem.SliceBuffer(l)}, nil
	}
	return c.CodecV2.Marshal(v)
}
