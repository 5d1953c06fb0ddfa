// Command startbaseline is the baseline of devledger's start benchmark
// (BenchmarkStartLarge in cmd/devledger): the least a device plugin does
// before its pools are registered. It scans the PCI functions under a sysfs
// root once, serves an empty DevicePlugin on one socket per pool in the
// kubelet's device-plugins dir, registers every pool (all at once), and then
// waits for SIGTERM or SIGINT, when it removes its sockets and exits. No
// config, no ledger, no actors. It is not part of the devledger binary.
//
// Usage:
//
//	startbaseline --sysfs-root DIR --dev-root DIR --pci-ids FILE --kubelet-dir DIR --resource PREFIX/NAME...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/devledger/devledger/internal/benchbaseline"
	"github.com/devledger/devledger/sysfs"
)

// resources is a repeatable flag.
type resources []string

func (r *resources) String() string     { return strings.Join(*r, ",") }
func (r *resources) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "startbaseline:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("startbaseline", flag.ContinueOnError)
	sysfsRoot := fs.String("sysfs-root", "/sys", "sysfs mount `DIR`")
	devRoot := fs.String("dev-root", "/dev", "devfs mount `DIR`")
	pciIDs := fs.String("pci-ids", "", "PCI ID database `FILE`")
	kubeletDir := fs.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root `DIR`")
	var pools resources
	fs.Var(&pools, "resource", "a pool's resource `NAME` (prefix/name); repeat for each pool")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(pools) == 0 {
		return fmt.Errorf("no --resource given")
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	devs, err := sysfs.New(sysfs.Options{SysfsRoot: *sysfsRoot, DevRoot: *devRoot, PCIIDsPath: *pciIDs}).Scan()
	if err != nil {
		return err
	}
	pluginDir := filepath.Join(*kubeletDir, "device-plugins")
	var served []benchbaseline.Pool
	defer func() {
		for _, p := range served {
			p.Server.Stop()
		}
	}()
	for _, res := range pools {
		srv, err := benchbaseline.Serve(filepath.Join(pluginDir, strings.ReplaceAll(res, "/", "_")+".sock"), &benchbaseline.DevicePlugin{})
		if err != nil {
			return err
		}
		served = append(served, benchbaseline.Pool{Resource: res, Server: srv})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := benchbaseline.RegisterAll(ctx, filepath.Join(pluginDir, "kubelet.sock"), served); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "startbaseline: %d PCI functions scanned, %d pools registered\n", len(devs), len(served))
	<-stop
	return nil
}
