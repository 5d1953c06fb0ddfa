// Package kubelettest is a test double for the kubelet's side of the
// device-plugin API: a kubelet stand-in that other packages' tests, the
// end-to-end suite and the `demo` command drive devledger against. It is not
// used by the daemon itself.
//
// It owns a fake kubelet directory given by the caller and speaks real gRPC over
// real unix sockets in it, as the kubelet does:
//
//   - device-plugins/kubelet.sock serves the v1beta1 Registration service. A
//     Register call is validated (API version, extended resource name), then
//     the stand-in dials the plugin's endpoint, asks GetDevicePluginOptions and
//     only then answers; ListAndWatch runs afterwards and the latest device
//     list per resource is kept. This is the order of today's kubelet
//     (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go); kubelets before
//     1.25 answered first and connected later, which Options.AsyncRegister
//     mirrors.
//   - With Options.PluginWatcher, plugins_registry/ is watched with fsnotify
//     (watch first, then list) and every socket in it is registered through
//     pluginregistration.v1 GetInfo / NotifyRegistrationStatus, as the
//     kubelet's plugin manager does; a removed socket deregisters its plugin.
//   - pod-resources/kubelet.sock serves the v1 PodResourcesLister with the pods
//     the test sets (SetPods), unless Options.NoPodResources.
//   - device-plugins/kubelet_internal_checkpoint is rewritten on every device
//     list, in the kubelet's device-manager layout, with the containers'
//     devices and pod UIDs the test sets (SetCheckpointEntries).
//
// Restart behaves as a kubelet restart: connections to plugins are closed, the
// registration server stops, every socket in device-plugins/ is deleted (the
// checkpoint file kubelet_internal_checkpoint and other non-socket files
// stay), and a new kubelet.sock appears. Queries (WaitRegistered, WaitDevices,
// RegisteredAfter, ...) take a context and wait on state changes, never on
// timers.
//
// Unix socket paths are limited to 107 bytes and t.TempDir() paths can be
// long: ShortTempDir (and Start with an empty dir) makes the kubelet dir with
// os.MkdirTemp("", "kt") under the system temp dir instead.
//
// The stand-in keeps one endpoint per resource, as kubelets before
// kubernetes#135437 did (1.37 keeps one per socket): a registration
// replaces the resource's endpoint and ends the old one's ListAndWatch. A
// removed socket deregisters the endpoint only if it is that socket's,
// where those kubelets dropped the resource's endpoint whatever the socket.
//
// Where the stand-in departs from the kubelet it says so on the name
// concerned. It reads nothing the kubelet reads from the node (no pods, no
// checkpoint restore): the test is the node.
package kubelettest
