// Package e2e drives the devledger binary with the kubelet's own code: the
// device manager of k8s.io/kubernetes (pkg/kubelet/cm/devicemanager: its
// Registration server on kubelet.sock, endpoint clients, checkpoint,
// Allocate and GetDeviceRunContainerOptions), the plugin manager
// (pkg/kubelet/pluginmanager: the plugins_registry watcher with the device
// manager's handler) and, in the topology tests, the topology manager
// (pkg/kubelet/cm/topologymanager: its policies' admission over the device
// manager's NUMA hints). Our kubelet stand-in (grpcapi/kubelettest) can only
// agree with our reading of the kubelet; this suite asks the kubelet itself.
//
// It is a Go module of its own so that the product's module never depends on
// k8s.io/kubernetes. It depends on the product through the binary only: the
// suite builds cmd/devledger and the fake-node generator
// (testdata/sysfsgen/cmd/sysfsgen) from the repository root with `go build`.
//
// The device manager hard-codes /var/lib/kubelet/device-plugins, so the test
// binary re-executes itself under `unshare --mount --propagation private`
// and mounts a tmpfs over /var/lib/kubelet (over /var/lib when the host has
// no /var/lib/kubelet to mount on) inside that private mount namespace. The
// host's kubelet directories are never touched. Without root or unshare
// every test skips and says why.
//
// Each test logs the figures a user cares about, one line each, prefixed
// "FIGURE" (see logFigure), so a regression shows in the CI log. They are
// reported, never asserted. A failing test prints the tails of the daemon's
// log and of the kubelet code's klog output; DEVLEDGER_E2E_LOGS=1 prints them
// for passing tests too.
package e2e
