package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// skipped; an unreadable file is an error. The file is read a line at a
// time, allocating nothing for a route that is not a default one: a node
// with a full BGP table lists a million routes there, 128 MB.
func DefaultRouteInterfaces(procRoot string) ([]string, error) {
	path := filepath.Join(procRoot, "net", "route")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read default routes: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	header := true
	for sc.Scan() {
		if header {
			header = false
			continue
		}
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		var fields [8][]byte
		n, rest := 0, sc.Bytes()
		for ; n < len(fields); n++ {
			rest = bytes.TrimLeft(rest, " \t")
			if len(rest) == 0 {
				break
			}
			end := bytes.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			fields[n], rest = rest[:end], rest[end:]
		}
		if n < len(fields) || string(fields[1]) != "00000000" || string(fields[7]) != "00000000" {
			continue
		}
		flags, err := strconv.ParseUint(string(fields[3]), 16, 32)
		if err != nil || flags&rtfUp == 0 {
			continue
		}
		if name := string(fields[0]); !slices.Contains(out, name) {
			out = append(out, name)
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
