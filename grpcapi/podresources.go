package grpcapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResourcesMaxMessage is the largest List answer accepted: the kubelet
// answers with every pod on the node, and 16 MiB is what its own clients
// allow.
const podResourcesMaxMessage = 16 << 20

// PodResourcesClient asks the kubelet's PodResources service which
// containers hold which devices. It connects lazily: a missing socket is an
// error of the call, not of the constructor, so the caller can retry.
type PodResourcesClient struct {
	socket string
	conn   *grpc.ClientConn
	api    podresourcesapi.PodResourcesListerClient
}

// NewPodResourcesClient returns a client of the PodResources socket at path
// (<kubelet-dir>/pod-resources/kubelet.sock).
func NewPodResourcesClient(path string) (*PodResourcesClient, error) {
	conn, err := dialUnix(path, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podResourcesMaxMessage)))
	if err != nil {
		return nil, fmt.Errorf("pod resources at %s: %w", path, err)
	}
	return &PodResourcesClient{socket: path, conn: conn, api: podresourcesapi.NewPodResourcesListerClient(conn)}, nil
}

// List returns every pod's containers and the devices they hold. Give ctx a
// deadline: the call fails fast when the socket is absent.
func (c *PodResourcesClient) List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	// The caller keeps its own backoff; gRPC's, grown while the kubelet
	// was away, would fail this call at once though the kubelet is back.
	if c.conn.GetState() == connectivity.TransientFailure {
		c.conn.ResetConnectBackoff()
	}
	resp, err := c.api.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources at %s: %w", c.socket, err)
	}
	return resp, nil
}

// Close releases the connection.
func (c *PodResourcesClient) Close() error { return c.conn.Close() }
