// Package grpcapi is devledger's thin gRPC edge: the DevicePlugin v1beta1
// server, the plugin-registration server, the kubelet Registration and
// PodResources clients and the admin socket. It translates calls into requests
// to the actors and holds no logic of its own.
package grpcapi
