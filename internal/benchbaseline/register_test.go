package benchbaseline

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/grpcapi/kubelettest"
)

func TestRegisterAllThenReregisterAfterKubeletRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := kubelettest.Start(t, "", kubelettest.Options{NoPodResources: true})
	answer := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"PCIDEVICE_EXAMPLE_COM_A": "0000:3b:02.0"}}
	var pools []Pool
	for _, res := range []string{"example.com/a", "example.com/b"} {
		srv, err := Serve(filepath.Join(k.DevicePluginDir(), filepath.Base(res)+".sock"), &DevicePlugin{Answer: answer})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		pools = append(pools, Pool{Resource: res, Server: srv})
	}
	if err := RegisterAll(ctx, k.RegistrationSocket(), pools); err != nil {
		t.Fatal(err)
	}
	outcomes := make(chan error, 1)
	rr, err := WatchAndReregister(k.RegistrationSocket(), pools, func(err error) { outcomes <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.RegisteredAfter(ctx, []string{"example.com/a", "example.com/b"}, k.BootedAt()); err != nil {
		t.Fatal(err)
	}
	if err := <-outcomes; err != nil {
		t.Fatalf("re-registration: %v", err)
	}
	resp, err := k.Allocate(ctx, "example.com/a", []string{"0000:3b:02.0"}, []string{"0000:3b:02.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 || resp.ContainerResponses[1].Envs["PCIDEVICE_EXAMPLE_COM_A"] != "0000:3b:02.0" {
		t.Errorf("Allocate answered %v, want the fixed answer for each container", resp)
	}
}
