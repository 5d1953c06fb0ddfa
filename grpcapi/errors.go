package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrInvalidRequest marks a kubelet request that names devices the pool does
// not have, or is otherwise malformed; it becomes InvalidArgument.
var ErrInvalidRequest = errors.New("invalid request")

// ErrUnavailable marks a request the pool cannot answer now (the ledger is
// not writable, the pool is stopping); it becomes Unavailable. The kubelet
// does not retry: the pod fails admission (UnexpectedAdmissionError), and
// a controller's next pod asks again.
var ErrUnavailable = errors.New("unavailable")

// ErrRegistrationRejected marks a Register call the kubelet answered with an
// error (an unsupported version, an invalid resource name, a socket it could
// not connect to). The wrapped text carries the kubelet's reason. A kubelet
// that could not be reached at all is not a rejection: that error wraps the
// context's error or the transport's instead.
var ErrRegistrationRejected = errors.New("registration rejected by the kubelet")

// backendStatus turns a PoolBackend error into the gRPC status the kubelet
// gets, as PoolBackend's contract says, keeping the error's text as the
// message. context.Canceled becomes Canceled: only a caller that went away
// cancels, and Internal would misreport it.
func backendStatus(err error) error {
	return status.Error(Code(err), err.Error())
}

// Code is the gRPC status code the kubelet gets for a PoolBackend's err
// (OK for nil): what backendStatus answers, for those who count answers.
func Code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrInvalidRequest):
		return codes.InvalidArgument
	case errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// ErrAlreadyConnected marks a Register the kubelet refused because it holds
// an endpoint for the plugin's socket path already: "device plugin already
// connected". The kubelet keys endpoints by socket path and drops such an
// entry only when it sees that path's stream end; a Register of the same
// path that it refused also forgets its live client, after which the entry
// outlives the plugin until the kubelet restarts. It is wrapped together
// with ErrRegistrationRejected.
var ErrAlreadyConnected = errors.New("already connected")

// ErrKubeletUnreachable marks a Register that never reached the kubelet: no
// connection to its socket was made, so the kubelet knows nothing of it
// and the same socket may be registered again.
var ErrKubeletUnreachable = errors.New("kubelet not reachable")
