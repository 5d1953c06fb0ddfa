package kubelettest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Registration is one registration the kubelet accepted: the plugin was
// dialed and answered GetDevicePluginOptions.
type Registration struct {
	Resource string
	// Endpoint is the DevicePlugin socket dialed: <dir>/device-plugins/<endpoint
	// of the RegisterRequest> in legacy mode, the endpoint GetInfo named (or the
	// registration socket itself) in watcher mode.
	Endpoint string
	Mode     Mode
	// Options is the plugin's GetDevicePluginOptions answer, which is what the
	// kubelet acts on. Read-only.
	Options *pluginapi.DevicePluginOptions
	// RegisterOptions is what the RegisterRequest carried (legacy mode only);
	// the kubelet ignores it, tests may check it. Read-only.
	RegisterOptions *pluginapi.DevicePluginOptions
	// At is when the stand-in made the endpoint current, before the Register
	// answer or NotifyRegistrationStatus went out.
	At time.Time
	// Count numbers the accepted registrations of this resource over the
	// stand-in's life, restarts included: 1 for the first.
	Count int
	// Boot is the kubelet boot that accepted it (see Boots).
	Boot int
}

// Rejection is a registration attempt the kubelet refused or could not
// complete, with the kubelet's reason.
type Rejection struct {
	// Resource is the name the plugin gave; empty when the watcher could not
	// get that far (dial or GetInfo failed).
	Resource string
	// Endpoint is the socket concerned: the DevicePlugin endpoint in legacy
	// mode, the plugins_registry socket or its endpoint in watcher mode.
	Endpoint string
	Mode     Mode
	// Reason is the error text the plugin was given (the Register error, or
	// NotifyRegistrationStatus.Error) or, where the kubelet tells the plugin
	// nothing (dial, GetInfo), the error the kubelet logs.
	Reason string
	At     time.Time
	Boot   int
}

// EventKind names a state change of the stand-in.
type EventKind string

// Event kinds, one per state change; each is also one log line.
const (
	KubeletBooted        EventKind = "KubeletBooted"
	KubeletStopped       EventKind = "KubeletStopped"
	PluginRegistered     EventKind = "PluginRegistered"
	RegistrationRejected EventKind = "RegistrationRejected"
	DevicesListed        EventKind = "DevicesListed"
	PluginDisconnected   EventKind = "PluginDisconnected"
)

// Event is a state change, given to Options.OnEvent. Fields that do not apply
// to the kind are zero.
type Event struct {
	Kind     EventKind
	At       time.Time
	Boot     int
	Resource string
	Endpoint string // kubelet.sock for KubeletBooted
	Mode     Mode
	Count    int // PluginRegistered: Registration.Count
	Devices  int // DevicesListed: devices in the list
	Healthy  int // DevicesListed: healthy ones among them
	// Received (DevicesListed) is when the list's Recv returned, before
	// the stand-in's own work on it (clone, checkpoint, waiters): when the
	// list arrived, as any ListAndWatch client would note it.
	Received time.Time
	Reason   string // RegistrationRejected, PluginDisconnected, KubeletStopped
}

func (k *Kubelet) emit(ev Event) {
	k.emitMu.Lock()
	defer k.emitMu.Unlock()
	l := k.log.Info()
	if ev.Kind == RegistrationRejected {
		l = k.log.Warn()
	}
	l = l.Str("event", string(ev.Kind)).Int("boot", ev.Boot)
	if ev.Resource != "" {
		l = l.Str("resource", ev.Resource)
	}
	if ev.Endpoint != "" {
		l = l.Str("endpoint", ev.Endpoint)
	}
	if ev.Mode != "" {
		l = l.Str("mode", string(ev.Mode))
	}
	switch ev.Kind {
	case PluginRegistered:
		l = l.Int("count", ev.Count)
	case DevicesListed:
		l = l.Int("devices", ev.Devices).Int("healthy", ev.Healthy)
	}
	if ev.Reason != "" {
		l = l.Str("reason", ev.Reason)
	}
	l.Msg(eventMessages[ev.Kind])
	if k.opts.OnEvent != nil {
		k.opts.OnEvent(ev)
	}
}

var eventMessages = map[EventKind]string{
	KubeletBooted:        "kubelet booted",
	KubeletStopped:       "kubelet stopped",
	PluginRegistered:     "plugin registered",
	RegistrationRejected: "registration rejected",
	DevicesListed:        "devices listed",
	PluginDisconnected:   "plugin disconnected",
}

// Registrations is every accepted registration so far, oldest first, across
// restarts.
func (k *Kubelet) Registrations() []Registration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Registration(nil), k.history...)
}

// Rejections is every refused or failed registration attempt so far, oldest
// first.
func (k *Kubelet) Rejections() []Rejection {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Rejection(nil), k.rejections...)
}

// Devices is the latest device list the resource's plugin sent since the
// kubelet booted (copies), nil if none. After the plugin disconnects the list
// stays with every device Unhealthy, as the kubelet keeps it.
func (k *Kubelet) Devices(resource string) []*pluginapi.Device {
	k.mu.Lock()
	defer k.mu.Unlock()
	devs, ok := k.devices[resource]
	if !ok {
		return nil
	}
	return cloneDevices(devs)
}

// Connected says whether the resource has a connected endpoint now.
func (k *Kubelet) Connected(resource string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.endpoints[resource]
	return e != nil && !e.stopped
}

// WaitRegistered waits until the resource has a connected endpoint and
// returns its registration.
func (k *Kubelet) WaitRegistered(ctx context.Context, resource string) (Registration, error) {
	var reg Registration
	err := k.wait(ctx, resource+" registered", func() bool {
		e := k.endpoints[resource]
		if e == nil || e.stopped {
			return false
		}
		reg = e.reg
		return true
	})
	return reg, err
}

// WaitUnregistered waits until the resource has no connected endpoint: never
// registered, disconnected, deregistered, or the kubelet is down.
func (k *Kubelet) WaitUnregistered(ctx context.Context, resource string) error {
	return k.wait(ctx, resource+" unregistered", func() bool {
		e := k.endpoints[resource]
		return e == nil || e.stopped
	})
}

// RegisteredAfter waits until each resource has an accepted registration at
// or after since, and returns the first such registration of each, in the
// order of resources. With since = BootedAt() after Restart, the latest At
// minus since is the time from the new kubelet.sock to every pool
// re-registered.
func (k *Kubelet) RegisteredAfter(ctx context.Context, resources []string, since time.Time) ([]Registration, error) {
	out := make([]Registration, len(resources))
	err := k.wait(ctx, fmt.Sprintf("%d resources registered after %s", len(resources), since.Format(time.RFC3339Nano)), func() bool {
		for i, res := range resources {
			found := false
			for _, r := range k.history {
				if r.Resource == res && !r.At.Before(since) {
					out[i] = r
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
	return out, err
}

// WaitRejected waits for a rejection of the resource (the name the plugin
// gave; "" matches rejections where no name was learnt) at or after since,
// and returns the first.
func (k *Kubelet) WaitRejected(ctx context.Context, resource string, since time.Time) (Rejection, error) {
	var rej Rejection
	err := k.wait(ctx, resource+" rejected", func() bool {
		for _, r := range k.rejections {
			if r.Resource == resource && !r.At.Before(since) {
				rej = r
				return true
			}
		}
		return false
	})
	return rej, err
}

// WaitDevices waits until the resource's latest device list satisfies ok and
// returns it; ok nil means any list at all. ok gets copies and runs without
// the stand-in's lock held.
func (k *Kubelet) WaitDevices(ctx context.Context, resource string, ok func([]*pluginapi.Device) bool) ([]*pluginapi.Device, error) {
	for {
		k.mu.Lock()
		devs, have := k.devices[resource]
		if have {
			devs = cloneDevices(devs)
		}
		ch, closed := k.changed, k.closed
		k.mu.Unlock()
		if have && (ok == nil || ok(devs)) {
			return devs, nil
		}
		if err := k.block(ctx, ch, closed, "devices of "+resource); err != nil {
			return nil, err
		}
	}
}

// wait blocks until check, run under k.mu, holds.
func (k *Kubelet) wait(ctx context.Context, what string, check func() bool) error {
	for {
		k.mu.Lock()
		done := check()
		ch, closed := k.changed, k.closed
		k.mu.Unlock()
		if done {
			return nil
		}
		if err := k.block(ctx, ch, closed, what); err != nil {
			return err
		}
	}
}

func (k *Kubelet) block(ctx context.Context, ch chan struct{}, closed bool, what string) error {
	if closed {
		return fmt.Errorf("waiting for %s: %w", what, ErrClosed)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w (%s)", what, context.Cause(ctx), k.summary())
	}
}

// summary says what the stand-in knows, for wait errors.
func (k *Kubelet) summary() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var parts []string
	if k.boot == nil {
		parts = append(parts, "kubelet down")
	} else {
		parts = append(parts, fmt.Sprintf("boot %d", k.boot.n))
	}
	res := make([]string, 0, len(k.endpoints))
	for r, e := range k.endpoints {
		state := "connected"
		if e.stopped {
			state = "stopped"
		}
		res = append(res, fmt.Sprintf("%s %s with %d devices", r, state, len(k.devices[r])))
	}
	sort.Strings(res)
	if len(res) == 0 {
		res = append(res, "no endpoints")
	}
	parts = append(parts, strings.Join(res, ", "))
	if n := len(k.rejections); n > 0 {
		last := k.rejections[n-1]
		parts = append(parts, fmt.Sprintf("%d rejections, last %q: %s", n, last.Resource, last.Reason))
	}
	return strings.Join(parts, "; ")
}
