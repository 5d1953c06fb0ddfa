package grpcapi

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/grpcapi/kubelettest"
)

// A kubelet back after being away answers the first List asked of it: no
// error left over from the calls that failed while it was gone, nor a
// reconnect backoff grown meanwhile, stands between the two. The caller
// keeps its own backoff, and a List it makes when told that the kubelet is
// back must reach it.
func TestPodResourcesListReachesAKubeletBack(t *testing.T) {
	k := kubelettest.Start(t, "", kubelettest.Options{})
	k.SetPods([]*podresourcesapi.PodResources{kubelettest.PodHolding("ml", "trainer-0", "main", "example.com/nic", "0000:3b:01.2")})
	c := NewPodResourcesClient(k.PodResourcesSocket())
	if _, err := c.List(testCtx(t)); err != nil {
		t.Fatalf("List with the kubelet up: %v", err)
	}
	for round := range 3 {
		if err := k.Stop(); err != nil {
			t.Fatal(err)
		}
		for range 2 { // each fails: the kubelet is away
			if _, err := c.List(testCtx(t)); err == nil {
				t.Fatalf("round %d: List with the kubelet stopped answered", round)
			}
		}
		if err := k.Boot(); err != nil {
			t.Fatal(err)
		}
		resp, err := c.List(testCtx(t))
		if err != nil {
			t.Fatalf("round %d: the first List after the kubelet came back: %v", round, err)
		}
		if len(resp.PodResources) != 1 || resp.PodResources[0].Name != "trainer-0" {
			t.Fatalf("round %d: List answered %v", round, resp.PodResources)
		}
	}
}

// refusingLister answers every List with err.
type refusingLister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	err error
}

func (l refusingLister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return nil, l.err
}

// Whatever answers on the PodResources socket puts no more than MaxReason
// bytes of its own text into List's error, which the reconciler records
// (AttributionChanged) and logs; the answer's code is kept.
func TestPodResourcesListCutsALongAnswer(t *testing.T) {
	sock := filepath.Join(shortDir(t), "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	huge := strings.Repeat("x", 1<<20)
	podresourcesapi.RegisterPodResourcesListerServer(srv, refusingLister{err: status.Error(codes.Unavailable, huge)})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	_, err = NewPodResourcesClient(sock).List(testCtx(t))
	want := huge[:MaxReason] + fmt.Sprintf("… (%d bytes)", len(huge))
	if msg := fmt.Sprint(err); status.Code(err) != codes.Unavailable || !strings.Contains(msg, want) || len(msg) > 2*MaxReason {
		t.Errorf("List answered a %d-byte error: code %v, %d-byte error %.200q; want Unavailable, the answer cut to %d bytes", len(huge), status.Code(err), len(msg), msg, MaxReason)
	}
}
