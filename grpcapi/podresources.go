package grpcapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResourcesMaxMessage is the largest List answer accepted: the kubelet
// answers with every pod on the node, and 16 MiB is what its own clients
// allow.
const podResourcesMaxMessage = 16 << 20

// PodResourcesClient asks the kubelet's PodResources service which
// containers hold which devices. Each List dials the socket afresh: a
// connection kept between calls carries the state of the kubelet that was
// there when it last failed, and gRPC answers from that state (the last
// dial's error) after the kubelet is back. A caller's rounds are seconds
// apart, a dial of a unix socket well under a millisecond.
type PodResourcesClient struct {
	socket string
}

// NewPodResourcesClient returns a client of the PodResources socket at path
// (<kubelet-dir>/pod-resources/kubelet.sock). It dials nothing: a missing
// socket is an error of a List, which the caller retries.
func NewPodResourcesClient(path string) *PodResourcesClient {
	return &PodResourcesClient{socket: path}
}

// List returns every pod's containers and the devices they hold. It fails
// fast when the socket is absent or nothing listens on it; give ctx a
// deadline for a kubelet that accepts and does not answer. An error
// answered keeps its gRPC code, its text cut to MaxReason bytes (its
// length noted): the caller records it, and anything root on the node
// can answer on the socket.
func (c *PodResourcesClient) List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	conn, err := dialUnix(c.socket, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podResourcesMaxMessage)))
	if err != nil {
		return nil, fmt.Errorf("pod resources at %s: %w", c.socket, err)
	}
	defer conn.Close()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources at %s: %w", c.socket, clippedStatus(err).Err())
	}
	return resp, nil
}
