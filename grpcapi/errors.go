package grpcapi

import "errors"

// ErrInvalidRequest marks a kubelet request that names devices the pool does
// not have, or is otherwise malformed; it becomes InvalidArgument.
var ErrInvalidRequest = errors.New("invalid request")

// ErrUnavailable marks a request the pool cannot answer now (the ledger is
// not writable, the pool is stopping); it becomes Unavailable and the
// kubelet retries.
var ErrUnavailable = errors.New("unavailable")
