package grpcapi

import (
	"fmt"

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

// listEncoder encodes the lists of one ListAndWatch stream. A pool's lists
// follow each other with most entries shared (a health change replaces one
// Device, the rest are the same pointers at the same places), and the
// backend never modifies a Device it published. So each entry is marshalled
// once, when it first appears at its place, and a list's message is its
// entries' bytes, copied: a 500-device list costs a copy of about 15 KB
// instead of 500 marshals.
type listEncoder struct {
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
	fields := make([][]byte, len(list))
	size := 0
	for i, d := range list {
		if i < len(e.prev) && e.prev[i] == d {
			fields[i] = e.fields[i]
		} else {
			b, err := proto.Marshal(d)
			if err != nil {
				return nil, fmt.Errorf("encode device %q: %w", d.GetID(), err)
			}
			f := protowire.AppendTag(make([]byte, 0, len(b)+8), devicesField, protowire.BytesType)
			fields[i] = append(protowire.AppendVarint(f, uint64(len(b))), b...)
		}
		size += len(fields[i])
	}
	out := make([]byte, 0, size)
	for _, f := range fields {
		out = append(out, f...)
	}
	e.prev, e.fields = list, fields
	return out, nil
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
