package allocation

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devledger/devledger/config"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// Device nodes as the container and the node's runtime see them.
const (
	vfioContainerNode = "/dev/vfio/vfio"
	vfioDir           = "/dev/vfio"
	vhostNetNode      = "/dev/vhost-net"
	tunNode           = "/dev/net/tun"
	infinibandDir     = "/dev/infiniband"
	rdmaCMNode        = "/dev/infiniband/rdma_cm"
	permissionsRW     = "rw"
)

// Env is what Respond needs to know about the node beyond its devices.
type Env struct {
	// DevRoot is where device nodes are checked for: "/dev" on a node, a
	// temporary tree in tests; responses always name the real /dev paths.
	// "" skips every check: nodes the SR-IOV plugin passes only when they
	// exist (rdma_cm, /dev/net/tun) are assumed present, and a vfio group
	// is never taken for a noiommu one.
	DevRoot string
	// HasVhostNet tells whether /dev/vhost-net exists: as in the SR-IOV
	// plugin, needVhostNet pools hand it out only then.
	HasVhostNet bool
}

// Respond is the answer for one container request of the pool res. devs
// are the requested devices in the kubelet's order, each a PCI function of
// the pool, listed once. The response holds:
//
//   - env res.EnvVarName() = the addresses comma-joined in request order,
//     and that name + "_INFO" = a JSON object mapping each address to its
//     providers' fields, keys sorted (equal input, equal bytes): "generic"
//     {"deviceID"}; "vfio" {"mount", "dev-mount"} if vfio-bound; "uio"
//     {"mount"} if bound to uio or igb_uio (the SR-IOV plugin's two); "extra"
//     (res.AdditionalInfo, "*" overlaid with the address's own entry) if
//     the pool has additionalInfo; "vdpa" {"mount"} or else "rdma"
//     {"issm", "umad", "uverbs", "rdma_cm", "rdma_dev"} when a selector
//     asks and the function has it; "vhost" {"net-mount", "tun-mount"}
//     when a selector sets needVhostNet and the node has /dev/vhost-net;
//   - if any device is vfio-bound, env res.KubeVirtEnvVarName() = the
//     vfio-bound addresses comma-joined in request order: KubeVirt's
//     virt-launcher finds a VM's host devices and GPUs of an external
//     device plugin there alone (KubeVirt's own PCI plugin sets it), and
//     does not start the VM without it. Only a vfio-bound function can go
//     to a VM, so others are left out of it, and an answer with none has
//     no such variable;
//   - device nodes, permissions "rw", each host path once in first-seen
//     order: /dev/vfio/vfio and /dev/vfio/<group> if vfio-bound (host
//     noiommu-<group> when only that exists), /dev/uio<N>, each RDMA device's
//     /dev/infiniband nodes then rdma_cm, the vhost-vdpa node,
//     /dev/vhost-net and /dev/net/tun;
//   - with CDI enabled, no device nodes but one CDI device name per
//     function, "<kind>=<address>", in request order.
//
// Unlike the SR-IOV plugin, which decides RDMA, vDPA and vhost-net per
// device from the selector object that took it, Respond decides per pool
// (any selector asking is enough); it treats vfio-pci variant drivers as
// vfio-bound (see sysfs.IsVFIODriver); and it sets KubeVirt's variable,
// which the plugin does not.
//
// Errors wrap ErrInvalidRequest (no devices, a device twice or without an
// address), ErrNoIOMMUGroup or ErrUnsupported.
func Respond(res *config.Resource, devs []sysfs.Device, env Env) (events.ContainerAllocation, error) {
	var out events.ContainerAllocation
	if res.DeviceType == config.AuxNetDevice {
		return out, fmt.Errorf("respond for %s: auxNetDevice members are auxiliary devices, not PCI functions: %w", res.FullName(), ErrUnsupported)
	}
	if len(devs) == 0 {
		return out, fmt.Errorf("respond for %s: no devices requested: %w", res.FullName(), ErrInvalidRequest)
	}
	w := wantsOf(res)
	info := make(map[string]map[string]map[string]string, len(devs))
	addrs := make([]string, 0, len(devs))
	var vfioAddrs []string
	var nodes nodeList
	for i := range devs {
		d := &devs[i]
		if d.Address == "" {
			return out, fmt.Errorf("respond for %s: device %d has no PCI address: %w", res.FullName(), i, ErrInvalidRequest)
		}
		if _, dup := info[d.Address]; dup {
			return out, fmt.Errorf("respond for %s: device %s requested twice: %w", res.FullName(), d.Address, ErrInvalidRequest)
		}
		providers, err := describe(res, d, w, env, &nodes)
		if err != nil {
			return out, fmt.Errorf("respond for %s: %w", res.FullName(), err)
		}
		info[d.Address] = providers
		addrs = append(addrs, d.Address)
		if sysfs.IsVFIODriver(d.Driver) {
			vfioAddrs = append(vfioAddrs, d.Address)
		}
	}
	name := res.EnvVarName()
	out.Envs = map[string]string{
		name:           strings.Join(addrs, ","),
		name + "_INFO": string(appendInfoJSON(nil, info)),
	}
	if len(vfioAddrs) > 0 {
		out.Envs[res.KubeVirtEnvVarName()] = strings.Join(vfioAddrs, ",")
	}
	if !res.CDI.Enabled {
		out.Devices = nodes
		return out, nil
	}
	if err := validCDIKind(res.CDI.Kind); err != nil {
		return out, fmt.Errorf("respond for %s: %w: %w", res.FullName(), err, ErrUnsupported)
	}
	out.CDIDevices = make([]string, 0, len(addrs))
	for _, a := range addrs {
		if err := validCDIDeviceName(a); err != nil {
			return out, fmt.Errorf("respond for %s: %w: %w", res.FullName(), err, ErrInvalidRequest)
		}
		out.CDIDevices = append(out.CDIDevices, res.CDI.Kind+"="+a)
	}
	return out, nil
}

// wants is what a pool's selectors ask to be handed out beyond the device.
type wants struct {
	rdma, vdpa, vhostNet bool
}

func wantsOf(res *config.Resource) wants {
	var w wants
	for i := range res.Selectors {
		s := &res.Selectors[i]
		w.rdma = w.rdma || s.IsRDMA
		w.vdpa = w.vdpa || s.VDPAType != ""
		w.vhostNet = w.vhostNet || s.NeedVhostNet
	}
	return w
}

// nodeList collects device nodes, each host path once.
type nodeList []events.DeviceNode

func (n *nodeList) add(containerPath, hostPath string) {
	if !slices.ContainsFunc(*n, func(d events.DeviceNode) bool { return d.HostPath == hostPath }) {
		*n = append(*n, events.DeviceNode{ContainerPath: containerPath, HostPath: hostPath, Permissions: permissionsRW})
	}
}

// describe returns d's _INFO providers and adds its device nodes to
// nodes, in the SR-IOV plugin's provider order (see Respond).
func describe(res *config.Resource, d *sysfs.Device, w wants, env Env, nodes *nodeList) (map[string]map[string]string, error) {
	providers := map[string]map[string]string{
		"generic": {"deviceID": d.Address},
	}
	if sysfs.IsVFIODriver(d.Driver) {
		host, container, err := vfioGroupNode(d, env)
		if err != nil {
			return nil, err
		}
		nodes.add(vfioContainerNode, vfioContainerNode)
		nodes.add(container, host)
		providers["vfio"] = map[string]string{"mount": vfioContainerNode, "dev-mount": container}
	}
	if d.Driver == "uio" || d.Driver == "igb_uio" {
		// One with no node found gets an empty entry, as in the SR-IOV
		// plugin.
		uio := map[string]string{}
		if d.UIO != "" {
			if !isFileName(d.UIO) {
				return nil, fmt.Errorf("device %s: uio device %q is not a file name: %w", d.Address, d.UIO, ErrInvalidRequest)
			}
			p := "/dev/" + d.UIO
			nodes.add(p, p)
			uio["mount"] = p
		}
		providers["uio"] = uio
	}
	if res.AdditionalInfo != nil {
		providers["extra"] = extraInfo(res.AdditionalInfo, d.Address)
	}
	switch {
	case w.vdpa && d.VDPAType != "":
		vdpa := map[string]string{}
		// One with no node gets an empty entry, as in the SR-IOV plugin.
		if name := d.VhostVDPA; d.VDPAType == "vhost" && name != "" {
			if !isFileName(name) {
				return nil, fmt.Errorf("device %s: vhost-vdpa device %q is not a file name: %w", d.Address, name, ErrInvalidRequest)
			}
			p := "/dev/" + name
			nodes.add(p, p)
			vdpa["mount"] = p
		}
		providers["vdpa"] = vdpa
	case w.rdma && d.RDMA():
		rdma, err := rdmaNodes(d, env, nodes)
		if err != nil {
			return nil, err
		}
		providers["rdma"] = rdma
	case w.rdma && d.RDMAEnabled():
		// Its RDMA device is in a pod's namespace (exclusive mode) or
		// not made yet: the plugin's entry is empty, and so are its nodes.
		providers["rdma"] = map[string]string{}
	}
	if w.vhostNet && env.HasVhostNet {
		providers["vhost"] = map[string]string{"net-mount": vhostNetNode, "tun-mount": tunNode}
		// The plugin hands out neither node when /dev/net/tun is missing.
		if exists(env, tunNode) {
			nodes.add(vhostNetNode, vhostNetNode)
			nodes.add(tunNode, tunNode)
		}
	}
	return providers, nil
}

// vfioGroupNode returns d's vfio group node on the host and in the
// container. Under no-IOMMU mode the host's /dev/vfio/noiommu-<group> is
// /dev/vfio/<group> in the container, as in the SR-IOV plugin.
func vfioGroupNode(d *sysfs.Device, env Env) (host, container string, err error) {
	g := d.IOMMUGroup
	if g == "" {
		return "", "", fmt.Errorf("device %s is bound to %s: %w", d.Address, d.Driver, ErrNoIOMMUGroup)
	}
	if strings.Trim(g, "0123456789") != "" {
		return "", "", fmt.Errorf("device %s: IOMMU group %q is not a number: %w", d.Address, g, ErrNoIOMMUGroup)
	}
	container = vfioDir + "/" + g
	host = container
	if d.VFIONoIOMMU || !d.VFIODevice && env.DevRoot != "" && exists(env, vfioDir+"/noiommu-"+g) {
		host = vfioDir + "/noiommu-" + g
	}
	return host, container, nil
}

// extraInfo is the "extra" provider (see Respond). It is never nil, so a
// pool with additionalInfo always shows "extra", as in the plugin.
func extraInfo(add map[string]map[string]string, addr string) map[string]string {
	out := map[string]string{}
	maps.Copy(out, add["*"])
	maps.Copy(out, add[addr])
	return out
}

// rdmaNodes adds each of d's RDMA devices' /dev/infiniband nodes, then
// rdma_cm, to nodes and returns the "rdma" provider: as in the plugin,
// "issm", "umad" and "uverbs" name the last such node, "rdma_dev" the
// first RDMA device.
func rdmaNodes(d *sysfs.Device, env Env, nodes *nodeList) (map[string]string, error) {
	info := map[string]string{"rdma_dev": d.RDMADevices[0]}
	haveCM := exists(env, rdmaCMNode)
	for _, rd := range d.RDMADevices {
		names := slices.Clone(d.RDMACharDevices[rd])
		slices.SortStableFunc(names, func(a, b string) int { return rdmaNodeRank(a) - rdmaNodeRank(b) })
		for _, n := range names {
			if !isFileName(n) {
				return nil, fmt.Errorf("device %s: RDMA device %s: character device %q is not a file name: %w", d.Address, rd, n, ErrInvalidRequest)
			}
			p := infinibandDir + "/" + n
			nodes.add(p, p)
			for _, kind := range []string{"uverbs", "umad", "issm"} {
				if strings.HasPrefix(n, kind) {
					info[kind] = p
				}
			}
		}
		if haveCM {
			nodes.add(rdmaCMNode, rdmaCMNode)
		}
	}
	if haveCM {
		info["rdma_cm"] = rdmaCMNode
	}
	return info, nil
}

// rdmaNodeRank orders an RDMA device's nodes as rdmamap lists them: ucm,
// issm, umad, uverbs; anything else last. The sort is stable, so nodes of
// one kind (one per port) keep the caller's order.
func rdmaNodeRank(name string) int {
	for i, kind := range []string{"ucm", "issm", "umad", "uverbs"} {
		if strings.HasPrefix(name, kind) {
			return i
		}
	}
	return 4
}

// exists reports whether /dev path p exists under env.DevRoot (yes if "").
func exists(env Env, p string) bool {
	if env.DevRoot == "" {
		return true
	}
	_, err := os.Stat(filepath.Join(env.DevRoot, strings.TrimPrefix(p, "/dev/")))
	return err == nil
}

// isFileName reports whether s is a plain file name, so that joining it to
// a /dev directory cannot leave that directory.
func isFileName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// validCDIKind checks kind ("vendor/class") by the CDI library's rules,
// the ones a runtime resolving the names applies.
func validCDIKind(kind string) error {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok {
		return fmt.Errorf("CDI kind %q is not vendor/class", kind)
	}
	if err := cmp.Or(parser.ValidateVendorName(vendor), parser.ValidateClassName(class)); err != nil {
		return fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	return nil
}

// validCDIDeviceName checks name by the CDI library's device-name rules.
func validCDIDeviceName(name string) error {
	if err := parser.ValidateDeviceName(name); err != nil {
		return fmt.Errorf("device %s is not a valid CDI device name: %w", name, err)
	}
	return nil
}

// appendInfoJSON appends info as encoding/json encodes it, without its
// reflection, which cost more than the rest of an Allocate.
func appendInfoJSON(buf []byte, info map[string]map[string]map[string]string) []byte {
	return appendJSONObject(buf, info, func(buf []byte, providers map[string]map[string]string) []byte {
		return appendJSONObject(buf, providers, func(buf []byte, fields map[string]string) []byte {
			return appendJSONObject(buf, fields, appendJSONString)
		})
	})
}

// appendJSONObject appends m as encoding/json would: keys sorted, each
// value appended by appendValue, nil as null.
func appendJSONObject[V any](buf []byte, m map[string]V, appendValue func([]byte, V) []byte) []byte {
	if m == nil {
		return append(buf, "null"...)
	}
	buf = append(buf, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, k)
		buf = append(buf, ':')
		buf = appendValue(buf, m[k])
	}
	return append(buf, '}')
}

// appendJSONString appends s quoted. A string with anything encoding/json
// escapes (controls, quotes, backslashes, <, > and &, non-ASCII) is left
// to encoding/json itself.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
