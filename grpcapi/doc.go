// Package grpcapi is devledger's thin edge toward the kubelet and local
// tools. It translates calls into requests to the actors and holds no logic
// of its own: it bounds every call with a deadline and maps errors to status
// codes, and cuts what a client's text would put into a message, a log line
// or the ledger (quote.go).
//
// What it owns:
//   - PoolServer: one pool's DevicePlugin v1beta1 server on a unix socket,
//     with the pluginregistration v1 Registration service on the same socket
//     in watcher mode, answered by a PoolBackend (the pool allocator actor);
//   - RegisterWithKubelet: the legacy-mode Register call to kubelet.sock;
//   - AdminServer and its clients ReadRecordsFromAdmin and
//     ReadStatusFromAdmin: the admin socket in the state dir, through which
//     `devledger dump` reads a ledger the running daemon holds locked (the
//     wire format is described beside AdminSocketName);
//   - the kubelet PodResources client (to come).
//
// Every socket it creates is 0600 from the moment it can be reached: it is
// bound in a private directory and renamed into place (see listenPrivate),
// never created under a changed process umask.
package grpcapi
