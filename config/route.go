package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// rtfUp is the RTF_UP route flag: the route is usable.
const rtfUp = 0x1

// DefaultRouteInterfaces returns the interfaces that carry an IPv4 default
// route, read from net/route under procRoot ("/proc" on a real node), in
// the order the kernel lists them and without repeats. A route counts when
// its destination and mask are both 0.0.0.0 and it is up. IPv6 is not
// consulted, like the SR-IOV plugin, which looks at IPv4 routes only: an
// IPv6 default route learnt from router advertisements on a VF would
// otherwise drop that VF from its pool. Lines that do not parse are
// skipped; an unreadable file is an error.
func DefaultRouteInterfaces(procRoot string) ([]string, error) {
	path := filepath.Join(procRoot, "net", "route")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read default routes: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	header := true
	for sc.Scan() {
		if header {
			header = false
			continue
		}
		f := strings.Fields(sc.Text())
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		if len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err != nil || flags&rtfUp == 0 {
			continue
		}
		if !slices.Contains(out, f[0]) {
			out = append(out, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read default routes %s: %w", path, err)
	}
	return out, nil
}

// NewEnv reads the selection environment of a node: the default-route
// interfaces from net/route under procRoot and whether vhost-net exists
// under devRoot ("/proc" and "/dev" on a real node).
func NewEnv(procRoot, devRoot string) (Env, error) {
	ifs, err := DefaultRouteInterfaces(procRoot)
	if err != nil {
		return Env{}, err
	}
	_, statErr := os.Stat(filepath.Join(devRoot, "vhost-net"))
	return Env{DefaultRouteInterfaces: ifs, HasVhostNet: statErr == nil}, nil
}
