package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devledger/devledger/sysfs"
)

// FuzzParse feeds arbitrary bytes to Parse, as JSON and as YAML, and
// selects with whatever parses. Nothing may panic; a failure must be an
// ErrorList of lines naming the file; the same input must give the same
// answer twice.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtures, "*"))
	if err != nil {
		f.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(fixtures, "*", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range append(files, more...) {
		if fi, err := os.Stat(file); err != nil || fi.IsDir() ||
			strings.HasSuffix(file, ".golden") || strings.HasSuffix(file, ".md") {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, strings.HasSuffix(file, ".yaml"))
	}
	f.Add([]byte(`{"resourceList":[{"resourceName":"a","selectors":{"pfNames":["eth0#0-1,3"],"rootDevices":["0000:3b:00.0#2"]}}]}`), false)
	f.Add([]byte("resourceList:\n- resourceName: a\n  deviceType: auxNetDevice\n  selectors: [{auxTypes: [sf]}]\n"), true)
	f.Add([]byte(`{"a":`), false)
	f.Add([]byte("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["), true)

	devs := append(pfWithVFs("0000:3b:00.0", "eth0", 3, "0000:3b:02", "iavf"),
		fn("0000:af:00.0", func(d *sysfs.Device) { d.Class = "030000"; d.Driver = "vfio-pci" }),
		fn("0000:03:00.0", func(d *sysfs.Device) {
			d.Interfaces = []sysfs.NetInterface{{Name: "p0", LinkType: "infiniband", PKeys: []string{"0x7fff"}}}
			d.AuxDevices = []sysfs.AuxDevice{{Name: "mlx5_core.sf.2", Type: "sf"}}
			d.RDMADevices = []string{"mlx5_0"}
		}),
	)
	f.Fuzz(func(t *testing.T, data []byte, asYAML bool) {
		name := "fuzz.json"
		if asYAML {
			name = "fuzz.yaml"
		}
		cfg, err := Parse(name, data)
		again, err2 := Parse(name, data)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two parses differ: %v / %v", err, err2)
		}
		if err != nil {
			if cfg != nil {
				t.Fatal("config returned with an error")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %T %v", err, err)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error matches no sentinel: %v", err)
			}
			for _, e := range list {
				if !strings.HasPrefix(e.Error(), name) {
					t.Fatalf("error line does not start with the file: %q", e.Error())
				}
			}
			return
		}
		if len(cfg.Resources) == 0 || len(again.Resources) != len(cfg.Resources) {
			t.Fatalf("config without resources: %+v", cfg)
		}
		for _, r := range cfg.Resources {
			if len(r.Selectors) == 0 || r.Name == "" || r.Prefix == "" {
				t.Fatalf("incomplete resource %+v", r)
			}
		}
		sel := selectBoth(t, cfg, devs, Env{DefaultRouteInterfaces: []string{"eth0"}})
		if len(sel.Devices) != len(devs) || len(sel.Pools) != len(cfg.Resources) {
			t.Fatalf("selection lost devices or pools")
		}
	})
}
