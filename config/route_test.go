package config

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

// procRoot writes a fake proc root holding net/route with the given text.
func procRoot(t *testing.T, route string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "net", "route"), []byte(route), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const routeHeader = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

func TestDefaultRouteInterfaces(t *testing.T) {
	tests := []struct {
		name  string
		route string
		want  []string
	}{
		{
			name: "one default route",
			route: routeHeader +
				"eno1\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
				"eno1\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n" +
				"ens1f0\t0010A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
			want: []string{"eno1"},
		},
		{
			name: "several, repeated, one down",
			route: routeHeader +
				"bond0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
				"eth9\t00000000\t0101A8C0\t0002\t0\t0\t100\t00000000\t0\t0\t0\n" +
				"eno2\t00000000\t0102A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n" +
				"bond0\t00000000\t0103A8C0\t0003\t0\t0\t300\t00000000\t0\t0\t0\n",
			want: []string{"bond0", "eno2"},
		},
		{
			name: "a zero destination with a mask is not default",
			route: routeHeader +
				"eth0\t00000000\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n",
			want: nil,
		},
		{
			name:  "garbage lines skipped",
			route: routeHeader + "short line\n" + "eth0\t00000000\t0\tzz\t0\t0\t0\t00000000\n",
			want:  nil,
		},
		{
			name:  "empty",
			route: "",
			want:  nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DefaultRouteInterfaces(procRoot(t, tc.route))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewEnv(t *testing.T) {
	proc := procRoot(t, routeHeader+"eno1\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n")
	dev := t.TempDir()
	env, err := NewEnv(proc, dev)
	if err != nil {
		t.Fatal(err)
	}
	if env.HasVhostNet || !reflect.DeepEqual(env.DefaultRouteInterfaces, []string{"eno1"}) {
		t.Errorf("env = %+v", env)
	}
	if err := os.WriteFile(filepath.Join(dev, "vhost-net"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if env, err = NewEnv(proc, dev); err != nil || !env.HasVhostNet {
		t.Errorf("env = %+v, %v; want vhost-net found", env, err)
	}
	if _, err := NewEnv(filepath.Join(proc, "missing"), dev); err == nil {
		t.Error("NewEnv with a missing proc root: no error")
	}
}

// TestDefaultRouteOfAFullRoutingTable: a node that holds a full BGP table
// in its main table lists a million routes in net/route, 128 bytes each
// (the kernel pads every line). They are read a line at a time: read
// whole, the file alone would take the daemon's container past its
// memory limit at every start. Here 200,000 routes (25 MB) are read in
// less than 1 MiB.
func TestDefaultRouteOfAFullRoutingTable(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "net", "route"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	line := func(s string) { fmt.Fprintf(w, "%-127s\n", s) }
	line("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT")
	line("eno1\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0")
	const routes = 200_000
	for i := range routes {
		line(fmt.Sprintf("bgp0\t%08X\t0201A8C0\t0003\t0\t0\t20\t00FFFFFF\t0\t0\t0", i<<8))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := DefaultRouteInterfaces(root)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"eno1"}) {
		t.Errorf("got %q, want [eno1]", got)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("reading %d routes allocated %d bytes, want under 1 MiB", routes, n)
	}
}
