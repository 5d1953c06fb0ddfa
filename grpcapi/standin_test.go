package grpcapi_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/grpcapi/kubelettest"
)

// These tests drive a PoolServer with the kubelet stand-in, which behaves as
// the kubelet's device manager and plugin watcher do.

const standinResource = "example.com/nic"

// listBackend publishes one fixed device list to every watcher and answers
// Allocate with the IDs it was asked for.
type listBackend struct {
	devices []*pluginapi.Device
}

func (b listBackend) WatchDevices(ctx context.Context) (<-chan []*pluginapi.Device, error) {
	ch := make(chan []*pluginapi.Device, 1)
	ch <- b.devices
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch, nil
}

func (listBackend) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"PCIDEVICE_EXAMPLE_COM_NIC": c.DevicesIds[0]},
		})
	}
	return resp, nil
}

func (listBackend) PreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// statusLog is a RegistrationObserver that passes on each status it hears.
type statusLog struct {
	registered chan bool
}

func (*statusLog) InfoRequested(string, string) {}

func (o *statusLog) RegistrationStatus(_, _ string, registered bool, _ string) {
	o.registered <- registered
}

func standinPool(t *testing.T, opts grpcapi.PoolServerOptions) *grpcapi.PoolServer {
	t.Helper()
	s := grpcapi.NewPoolServer(standinResource, listBackend{devices: []*pluginapi.Device{
		{ID: "0000:3b:02.0", Health: pluginapi.Healthy},
	}}, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func standinCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkServing checks the stand-in got the device list and can allocate.
func checkServing(t *testing.T, k *kubelettest.Kubelet) {
	t.Helper()
	ctx := standinCtx(t)
	if _, err := k.WaitDevices(ctx, standinResource, func(d []*pluginapi.Device) bool { return len(d) == 1 }); err != nil {
		t.Fatalf("device list: %v", err)
	}
	resp, err := k.Allocate(ctx, standinResource, []string{"0000:3b:02.0"})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if got := resp.ContainerResponses[0].Envs["PCIDEVICE_EXAMPLE_COM_NIC"]; got != "0000:3b:02.0" {
		t.Errorf("Allocate env = %q", got)
	}
}

func TestStandinLegacyRegistrationAndRestart(t *testing.T) {
	k := kubelettest.Start(t, "", kubelettest.Options{})
	const name = "example.com_nic.sock"
	sock := filepath.Join(k.DevicePluginDir(), name)
	s := standinPool(t, grpcapi.PoolServerOptions{Mode: grpcapi.ModeLegacy})
	if err := s.Serve(sock); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	register := func() {
		t.Helper()
		opts := &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
		if err := grpcapi.RegisterWithKubelet(standinCtx(t), k.RegistrationSocket(), standinResource, name, opts); err != nil {
			t.Fatalf("RegisterWithKubelet: %v", err)
		}
	}
	register()
	checkServing(t, k)

	// The restarted kubelet deletes the socket; serving again there and
	// registering again brings the pool back.
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(sock); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	register()
	if _, err := k.RegisteredAfter(standinCtx(t), []string{standinResource}, k.BootedAt()); err != nil {
		t.Fatalf("re-registration: %v", err)
	}
	checkServing(t, k)
}

// A second Register of a socket the kubelet is still connected to is
// refused as "already connected", which the registrar tells apart from
// other rejections: it must not retry the same path.
func TestStandinRegisterTwiceIsAlreadyConnected(t *testing.T) {
	k := kubelettest.Start(t, "", kubelettest.Options{})
	const name = "example.com_nic.sock"
	s := standinPool(t, grpcapi.PoolServerOptions{Mode: grpcapi.ModeLegacy})
	if err := s.Serve(filepath.Join(k.DevicePluginDir(), name)); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := grpcapi.RegisterWithKubelet(standinCtx(t), k.RegistrationSocket(), standinResource, name, nil); err != nil {
		t.Fatalf("RegisterWithKubelet: %v", err)
	}
	checkServing(t, k)
	err := grpcapi.RegisterWithKubelet(standinCtx(t), k.RegistrationSocket(), standinResource, name, nil)
	if !errors.Is(err, grpcapi.ErrAlreadyConnected) || !errors.Is(err, grpcapi.ErrRegistrationRejected) {
		t.Fatalf("second RegisterWithKubelet = %v, want ErrAlreadyConnected and ErrRegistrationRejected", err)
	}
}

func TestStandinWatcherRegistration(t *testing.T) {
	k := kubelettest.Start(t, "", kubelettest.Options{PluginWatcher: true})
	obs := &statusLog{registered: make(chan bool, 16)}
	s := standinPool(t, grpcapi.PoolServerOptions{Mode: grpcapi.ModeWatcher, Observer: obs})
	if err := s.Serve(filepath.Join(k.PluginsRegistryDir(), "example.com_nic.sock")); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := k.WaitRegistered(standinCtx(t), standinResource); err != nil {
		t.Fatalf("WaitRegistered: %v", err)
	}
	checkServing(t, k)
	select {
	case ok := <-obs.registered:
		if !ok {
			t.Error("the observer heard a failed registration")
		}
	case <-standinCtx(t).Done():
		t.Fatal("the observer never heard the registration")
	}
	if n := len(k.Rejections()); n != 0 {
		t.Errorf("stand-in rejected %d attempts: %+v", n, k.Rejections())
	}
}
