package pool

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/pool/allocation"
	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/sysfs"
)

func testView() *poolView {
	res := &config.Resource{Prefix: "example.com", Name: "vf"}
	members := map[string]allocation.Member{}
	for _, a := range []string{"0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"} {
		members[a] = allocation.Member{Device: sysfs.Device{Address: a}, Healthy: true}
	}
	return &poolView{name: res.FullName(), res: res, members: members}
}

func request(containers ...[]string) *pluginapi.AllocateRequest {
	req := &pluginapi.AllocateRequest{}
	for _, ids := range containers {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
	}
	return req
}

// A grant holds the devices of each container, with their facts; a request
// that names no container, a container with no device, or a device that is
// not a member is refused as invalid, naming what is wrong.
func TestGrantChecksTheRequest(t *testing.T) {
	v := testView()
	g, err := v.grant(request([]string{"0000:3b:02.1"}, []string{"0000:3b:02.0", "0000:3b:02.2"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"0000:3b:02.1"}, {"0000:3b:02.0", "0000:3b:02.2"}}; !slices.EqualFunc(g.devices, want, slices.Equal) {
		t.Errorf("granted %v, want %v", g.devices, want)
	}
	if len(g.devs) != 2 || g.devs[1][1].Address != "0000:3b:02.2" {
		t.Errorf("granted device facts %+v", g.devs)
	}

	for _, tc := range []struct {
		name string
		req  *pluginapi.AllocateRequest
		want string
	}{
		{"no container", request(), "Allocate for example.com/vf has no container requests"},
		{"an empty container", request([]string{"0000:3b:02.0"}, nil), "container request 1 names no device"},
		{"a stranger", request([]string{"0000:3b:02.0", "0000:af:00.1"}), `device "0000:af:00.1" is not in the pool`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.grant(tc.req)
			if !errors.Is(err, grpcapi.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("grant: %v, want an invalid request saying %q", err, tc.want)
			}
		})
	}
}

// A stopping pool waits for the Allocates under way and turns away the
// ones after.
func TestGateWaitsForAllocatesUnderWay(t *testing.T) {
	var g allocGate
	if !g.enter() {
		t.Fatal("an open gate turned a call away")
	}
	closed := make(chan struct{})
	go func() {
		g.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("the gate closed while a call was under way")
	case <-time.After(50 * time.Millisecond):
	}
	g.leave()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the gate did not close once the call was done")
	}
	if g.enter() {
		t.Error("a closed gate let a call in")
	}
}

// An Allocate that comes while the pool restarts waits for the next
// incarnation's gate, and answers from its view; after a stop for good it
// fails at once.
func TestAdmitWaitsOutARestart(t *testing.T) {
	life := newLifetime()
	first, second := &allocGate{}, &allocGate{}
	v1, v2 := testView(), testView()
	life.publish(v1)
	life.open(first)
	g, err := life.admit(context.Background(), "example.com/vf")
	if err != nil || g != first {
		t.Fatalf("admit = %p, %v; want the first gate", g, err)
	}
	if gr, err := life.grant(request([]string{"0000:3b:02.0"})); err != nil || gr.view != v1 {
		t.Fatalf("grant from %p, %v; want the first view", gr.view, err)
	}
	g.leave()

	first.close() // the incarnation stops: a restart
	admitted := make(chan *poolView, 1)
	go func() {
		g, err := life.admit(context.Background(), "example.com/vf")
		if err != nil {
			t.Error(err)
			admitted <- nil
			return
		}
		if g != second {
			t.Errorf("admitted by gate %p, want the second %p", g, second)
		}
		gr, err := life.grant(request([]string{"0000:3b:02.1"}))
		g.leave()
		if err != nil {
			t.Error(err)
			admitted <- nil
			return
		}
		admitted <- gr.view
	}()
	select {
	case <-admitted:
		t.Fatal("admitted while no incarnation was open")
	case <-time.After(50 * time.Millisecond):
	}
	life.publish(v2)
	life.open(second)
	select {
	case v := <-admitted:
		if v != v2 {
			t.Error("answered from the old incarnation's view")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not go on when the next incarnation opened")
	}

	second.close()
	life.stop()
	if _, err := life.admit(context.Background(), "example.com/vf"); !errors.Is(err, grpcapi.ErrUnavailable) {
		t.Errorf("admit after the pool stopped: %v, want Unavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newLifetime().admit(ctx, "example.com/vf"); !errors.Is(err, context.Canceled) {
		t.Errorf("admit with no incarnation and an ended ctx: %v, want it to end", err)
	}
}

// An Allocate takes its devices from the view and counts them in flight in
// one step: once a view without a device is published, either an Allocate
// already counted the device (and the pool does not let it go until that
// one lands) or it finds the device gone. There is no moment between the
// check and the count in which the pool could let the device go.
func TestGrantCountsItsDevicesAgainstPublish(t *testing.T) {
	const a, b = "0000:3b:02.0", "0000:3b:02.1"
	life := newLifetime()
	v1 := testView()
	life.publish(v1)
	g, err := life.grant(request([]string{a}, []string{b}))
	if err != nil {
		t.Fatal(err)
	}
	if f := life.flying(); f[a] != 1 || f[b] != 1 || len(f) != 2 {
		t.Fatalf("in flight after the grant: %v, want %s and %s once", f, a, b)
	}
	v2 := testView()
	delete(v2.members, a)
	life.publish(v2)
	if _, err := life.grant(request([]string{a})); !errors.Is(err, grpcapi.ErrInvalidRequest) {
		t.Errorf("a grant of %s after the view without it: %v, want refused", a, err)
	}
	if f := life.flying(); f[a] != 1 {
		t.Errorf("in flight after the new view: %v; the first Allocate still holds %s", f, a)
	}
	life.land(g.devices)
	if f := life.flying(); len(f) != 0 {
		t.Errorf("in flight after the Allocate landed: %v, want none", f)
	}
}
