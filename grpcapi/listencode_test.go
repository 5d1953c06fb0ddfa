package grpcapi

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func testDevice(i int, health string) *pluginapi.Device {
	d := &pluginapi.Device{ID: fmt.Sprintf("0000:3b:%02x.%d", i/8, i%8), Health: health}
	if i%3 != 0 {
		d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % 2)}}}
	}
	return d
}

// The encoder's bytes are proto.Marshal's, list after list, as entries
// are replaced, added, removed and moved; an entry it encoded before is
// reused only at the same place.
func TestListEncoderMatchesProtoMarshal(t *testing.T) {
	base := make([]*pluginapi.Device, 300)
	for i := range base {
		base[i] = testDevice(i, pluginapi.Healthy)
	}
	oneDown := append([]*pluginapi.Device(nil), base...)
	oneDown[150] = testDevice(150, pluginapi.Unhealthy)
	shifted := append([]*pluginapi.Device{testDevice(999, pluginapi.Healthy)}, oneDown...)
	fewer := append([]*pluginapi.Device(nil), shifted[:10]...)
	big := []*pluginapi.Device{{ID: string(bytes.Repeat([]byte("x"), 300)), Health: pluginapi.Healthy}} // a two-byte length

	var enc listEncoder
	for _, tc := range []struct {
		name string
		list []*pluginapi.Device
	}{
		{"first", base}, {"same again", base}, {"one replaced", oneDown}, {"one added in front", shifted},
		{"most removed", fewer}, {"empty", nil}, {"long entry", big}, {"first again", base},
	} {
		got, err := enc.encode(tc.list)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, err := proto.Marshal(&pluginapi.ListAndWatchResponse{Devices: tc.list})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: encoded %d bytes, proto.Marshal %d, not the same", tc.name, len(got), len(want))
		}
	}
}

// Each list gets bytes of its own: gRPC may still be writing the last one.
func TestListEncoderNeverReusesItsOutput(t *testing.T) {
	var enc listEncoder
	list := []*pluginapi.Device{testDevice(1, pluginapi.Healthy)}
	first, _ := enc.encode(list)
	keep := bytes.Clone(first)
	list = []*pluginapi.Device{testDevice(1, pluginapi.Unhealthy)}
	if _, err := enc.encode(list); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, keep) {
		t.Error("the bytes of the first list changed when the second was encoded")
	}
}
