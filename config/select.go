package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/devledger/devledger/sysfs"
)

// Env is what selection needs to know about the node beyond its PCI
// functions. NewEnv reads it from a proc and a dev root.
type Env struct {
	// DefaultRouteInterfaces are the interfaces that carry a default
	// route; a function with one of them is never pooled.
	DefaultRouteInterfaces []string
	// HasVhostNet tells whether /dev/vhost-net exists. It only changes
	// what explain says about needVhostNet: like the SR-IOV plugin,
	// selection pools the device either way.
	HasVhostNet bool
}

// Selection is the outcome of matching a node's devices against a config.
type Selection struct {
	// Pools has one entry per resource, in config order, even when empty.
	Pools []PoolMembers
	// Devices has one entry per PCI function given to Select, in the
	// same order.
	Devices []Placement
}

// PoolMembers is one pool and the devices it took.
type PoolMembers struct {
	// Name is the resource's full name ("intel.com/intel_sriov_netdevice").
	Name string
	// Resource points at the pool's resource in the Config selected with.
	Resource *Resource
	// Members are the PCI addresses of the functions the pool took, or
	// for an auxNetDevice pool the names of the auxiliary devices, in the
	// order the devices were given.
	Members []string
}

// Placement says where one PCI function went and why.
type Placement struct {
	// Address is the function's PCI address.
	Address string
	// Outcome's Verdicts has one entry per pool, in config order. For an
	// auxNetDevice pool it only says whether the function has auxiliary
	// devices; their own verdicts are in Aux.
	Outcome
	// Aux has one entry per auxiliary device of the function when the
	// config has an auxNetDevice pool.
	Aux []AuxPlacement
}

// AuxPlacement says where one auxiliary device went and why. Its
// Verdicts has one entry per auxNetDevice pool, in config order.
type AuxPlacement struct {
	// Name and Type identify the auxiliary device ("mlx5_core.sf.2", "sf").
	Name, Type string
	Outcome
}

// Outcome is where a device went, and every pool's verdict on it.
type Outcome struct {
	// Pool is the full name of the pool the device joined, "" when none;
	// Selector is then the path of the selector object that accepted it.
	Pool     string
	Selector string
	// Reason says, when Pool is "", which rule kept the device out: "not
	// pooled: no driver bound", "not pooled: carries the default route
	// (eth0)", "not pooled: PF has 8 VFs enabled", the one pool's verdict,
	// or "matches none of 3 pools".
	Reason string
	// Verdicts are the pools' verdicts, in config order.
	Verdicts []PoolVerdict
}

// record adds pool p's verdict v (when keep); the device, named id in p's
// member list, joins p when p accepted it and no earlier pool did.
func (o *Outcome) record(v PoolVerdict, matched string, p *PoolMembers, id string, keep bool) {
	if v.Accepted {
		if o.Pool != "" {
			v.Rule = "taken by earlier pool " + o.Pool
		} else {
			o.Pool, o.Selector = v.Pool, matched
			v.Joined = true
			p.Members = append(p.Members, id)
		}
	}
	if keep {
		o.Verdicts = append(o.Verdicts, v)
	}
}

// PoolVerdict is one pool's judgement of one device.
type PoolVerdict struct {
	// Pool is the pool's full name.
	Pool string
	// Accepted is true when the pool's rules and selectors accept the
	// device; Joined when it also was not taken by an earlier pool.
	Accepted, Joined bool
	// Rule is the one rule that decided, for example "joined:
	// selectors[1] matched", "taken by earlier pool intel.com/a", "not
	// pooled: no driver bound", "drivers: device has iavf, pool wants
	// vfio-pci".
	Rule string
	// Selectors has the verdict of every selector object, in order,
	// evaluated even when a rule before them decided.
	Selectors []SelectorVerdict
}

// SelectorVerdict is one selector object's judgement of one device.
type SelectorVerdict struct {
	// Path locates the selector object in the file.
	Path string
	// Matched is true when every check passed.
	Matched bool
	// Checks has one entry per field the object sets, in the order the
	// SR-IOV plugin applies them.
	Checks []Check
}

// Check is one selector field's judgement of one device.
type Check struct {
	// Field is the selector field ("drivers").
	Field string
	// Passed tells whether the device satisfies the field.
	Passed bool
	// Reason is a line for an operator, starting with the field:
	// "drivers: device has iavf, pool wants vfio-pci".
	Reason string
}

// Placement returns the placement of the function at addr. An address
// without a domain ("3b:02.1") is looked up in domain 0000.
func (s *Selection) Placement(addr string) (*Placement, bool) {
	if strings.Count(addr, ":") == 1 {
		addr = "0000:" + addr
	}
	for i := range s.Devices {
		if strings.EqualFold(s.Devices[i].Address, addr) {
			return &s.Devices[i], true
		}
	}
	return nil, false
}

// Select matches devs against the config's pools with the SR-IOV plugin's
// rules:
//
//   - pools are tried in config order and a device joins only the first
//     that accepts it; an auxiliary device likewise joins only the first
//     auxNetDevice pool that accepts it, independently of its function;
//   - a pool accepts a device when any of its selector objects matches;
//     an object matches when every field it sets is satisfied, and a
//     field is satisfied by any of its values;
//   - netDevice takes class 0x02 only, accelerator class 0x12 only,
//     genericPCI any class, auxNetDevice the auxiliary devices of class
//     0x02 functions;
//   - a function bound to no driver is never pooled, nor one whose
//     interface carries the default route (auxiliary devices excepted, as
//     in the plugin), nor a PF with VFs enabled in a netDevice or
//     genericPCI pool.
//
// devs is not modified. The result lists every device and every pool.
func (c *Config) Select(devs []sysfs.Device, env Env) *Selection {
	return c.selectDevices(devs, env, true)
}

// Members is each pool's members, as Select gives them, without the
// verdicts that explain them: the daemon places every scan and explains
// none, and building the verdicts' lines costs most of a Select.
func (c *Config) Members(devs []sysfs.Device, env Env) []PoolMembers {
	return c.selectDevices(devs, env, false).Pools
}

// selectDevices is Select; with explain false it leaves out Devices and
// fills in no verdict's lines.
func (c *Config) selectDevices(devs []sysfs.Device, env Env, explain bool) *Selection {
	m := newMatcher(devs, env)
	m.explain = explain
	sel := &Selection{Pools: make([]PoolMembers, len(c.Resources))}
	for i := range c.Resources {
		sel.Pools[i] = PoolMembers{Name: c.Resources[i].FullName(), Resource: &c.Resources[i]}
	}
	hasAux := slices.ContainsFunc(c.Resources, func(r Resource) bool { return r.DeviceType == AuxNetDevice })
	if explain {
		sel.Devices = make([]Placement, len(devs))
	}
	for di := range devs {
		d := &devs[di]
		pl := Placement{Address: d.Address}
		for ri := range c.Resources {
			r := &c.Resources[ri]
			if r.DeviceType == AuxNetDevice {
				if explain {
					pl.Verdicts = append(pl.Verdicts, auxSummary(r, d))
				}
				continue
			}
			v, matched := m.judge(r, sel.Pools[ri].Name, d, nil)
			pl.record(v, matched, &sel.Pools[ri], d.Address, explain)
		}
		if pl.Pool == "" && explain {
			pl.Reason = reason(pl.Verdicts, d, c)
		}
		if hasAux {
			for ai := range d.AuxDevices {
				a := &d.AuxDevices[ai]
				ap := AuxPlacement{Name: a.Name, Type: a.Type}
				for ri := range c.Resources {
					r := &c.Resources[ri]
					if r.DeviceType != AuxNetDevice {
						continue
					}
					v, matched := m.judge(r, sel.Pools[ri].Name, d, a)
					ap.record(v, matched, &sel.Pools[ri], a.Name, explain)
				}
				if explain {
					if ap.Pool == "" {
						ap.Reason = auxReason(ap.Verdicts)
					}
					pl.Aux = append(pl.Aux, ap)
				}
			}
		}
		if explain {
			sel.Devices[di] = pl
		}
	}
	return sel
}

// auxSummary is a function's verdict for an auxNetDevice pool: such a
// pool takes auxiliary devices, never the function itself.
func auxSummary(r *Resource, d *sysfs.Device) PoolVerdict {
	v := PoolVerdict{Pool: r.FullName()}
	if len(d.AuxDevices) == 0 {
		v.Rule = "auxNetDevice pool: takes auxiliary devices; this function has none"
	} else {
		v.Rule = "auxNetDevice pool: takes auxiliary devices; see their placements"
	}
	return v
}

// reason picks the line that says why a function joined no pool.
func reason(verdicts []PoolVerdict, d *sysfs.Device, c *Config) string {
	var candidates []PoolVerdict
	for i, v := range verdicts {
		if c.Resources[i].DeviceType == AuxNetDevice || strings.HasPrefix(v.Rule, "class: ") {
			continue
		}
		candidates = append(candidates, v)
	}
	switch {
	case len(candidates) == 0 && len(verdicts) == 0:
		return "no pools configured"
	case len(candidates) == 0:
		return "no pool takes " + classText(d)
	case strings.HasPrefix(candidates[0].Rule, "not pooled: "):
		// A device-wide rule: every pool of this class gives the same.
		return candidates[0].Rule
	case len(candidates) == 1:
		return candidates[0].Pool + ": " + candidates[0].Rule
	}
	return fmt.Sprintf("matches none of %d pools", len(candidates))
}

func auxReason(verdicts []PoolVerdict) string {
	switch len(verdicts) {
	case 0:
		return "no auxNetDevice pools configured"
	case 1:
		return verdicts[0].Pool + ": " + verdicts[0].Rule
	}
	return fmt.Sprintf("matches none of %d pools", len(verdicts))
}

// matcher holds what judging a device needs besides the device.
type matcher struct {
	explain      bool // fill in the lines of verdicts and checks
	env          Env
	byAddr       map[string]*sysfs.Device
	defaultRoute map[string]bool
}

func newMatcher(devs []sysfs.Device, env Env) *matcher {
	m := &matcher{env: env, byAddr: make(map[string]*sysfs.Device, len(devs)), defaultRoute: map[string]bool{}}
	for i := range devs {
		m.byAddr[strings.ToLower(devs[i].Address)] = &devs[i]
	}
	for _, ifname := range env.DefaultRouteInterfaces {
		m.defaultRoute[ifname] = true
	}
	return m
}

// judge gives pool r's verdict (pool is its full name) on function d, or
// on its auxiliary device a when a is not nil. matched is the path of the
// first matching selector object.
func (m *matcher) judge(r *Resource, pool string, d *sysfs.Device, a *sysfs.AuxDevice) (v PoolVerdict, matched string) {
	v = PoolVerdict{Pool: pool}
	if !m.explain {
		// The same outcome; the rules first, as nothing is explained.
		if m.gate(r, d, a) != "" {
			return v, ""
		}
		for i := range r.Selectors {
			if sv := m.evaluate(r, &r.Selectors[i], d, a); sv.Matched {
				v.Accepted = true
				return v, sv.Path
			}
		}
		return v, ""
	}
	found := false
	for i := range r.Selectors {
		sv := m.evaluate(r, &r.Selectors[i], d, a)
		if sv.Matched && !found {
			found, matched = true, sv.Path
		}
		v.Selectors = append(v.Selectors, sv)
	}
	if rule := m.gate(r, d, a); rule != "" {
		v.Rule = rule
		return v, ""
	}
	if !found {
		v.Rule = "no selector object matched"
		if len(v.Selectors) == 1 {
			for _, ch := range v.Selectors[0].Checks {
				if !ch.Passed {
					v.Rule = ch.Reason
					break
				}
			}
		}
		return v, ""
	}
	v.Accepted = true
	v.Rule = "joined: " + relPath(r, matched) + " matched"
	return v, matched
}

// relPath strips the resource's path from a selector path:
// "resourceList[0].selectors[1]" becomes "selectors[1]".
func relPath(r *Resource, path string) string {
	return strings.TrimPrefix(path, r.Path+".")
}

// gate applies the rules that come before selectors: device class, a
// bound driver, the default route and the PF-with-VFs exclusion. It
// returns the rule that rejects the device, or "".
func (m *matcher) gate(r *Resource, d *sysfs.Device, a *sysfs.AuxDevice) string {
	switch r.DeviceType {
	case NetDevice, AuxNetDevice:
		if baseClass(d) != "02" {
			return "class: device is " + classText(d) + ", " + string(r.DeviceType) + " pools take network controllers (0x02)"
		}
	case Accelerator:
		if baseClass(d) != "12" {
			return "class: device is " + classText(d) + ", accelerator pools take processing accelerators (0x12)"
		}
	}
	if d.Driver == "" {
		return "not pooled: no driver bound"
	}
	if a != nil {
		return ""
	}
	for _, ifc := range d.Interfaces {
		if m.defaultRoute[ifc.Name] {
			return "not pooled: carries the default route (" + ifc.Name + ")"
		}
	}
	if (r.DeviceType == NetDevice || r.DeviceType == GenericPCI) && d.IsPFWithVFs() {
		return "not pooled: PF has " + strconv.Itoa(d.NumVFs) + " VFs enabled"
	}
	return ""
}

// baseClass is the two hex digits of the base class, "" when unknown.
func baseClass(d *sysfs.Device) string {
	if len(d.Class) < 2 {
		return ""
	}
	return strings.ToLower(d.Class[:2])
}

func classText(d *sysfs.Device) string {
	bc := baseClass(d)
	if bc == "" {
		return "of unknown class"
	}
	s := "class 0x" + bc
	if d.ClassName != "" {
		s += " (" + d.ClassName + ")"
	}
	return s
}

// evaluate checks every field one selector object sets, in the order the
// SR-IOV plugin applies them.
func (m *matcher) evaluate(r *Resource, s *Selector, d *sysfs.Device, a *sysfs.AuxDevice) SelectorVerdict {
	sv := SelectorVerdict{Path: s.Path, Matched: true}
	// The line of a check is made only to explain.
	add := func(field string, passed bool, reason func() string) {
		sv.Matched = sv.Matched && passed
		if m.explain {
			sv.Checks = append(sv.Checks, Check{Field: field, Passed: passed, Reason: field + ": " + reason()})
		}
	}
	say := func(reason string) func() string { return func() string { return reason } }
	// among checks that the device's val is one of vals.
	among := func(field string, vals []string, lead, val, unknown string) {
		add(field, slices.Contains(vals, val), func() string { return has(lead, val, unknown) + ", pool wants " + wants(vals) })
	}
	if len(s.Vendors) > 0 {
		among(fieldVendors, s.Vendors, "device has", d.Vendor, "vendor unknown")
	}
	if len(s.Devices) > 0 {
		among(fieldDevices, s.Devices, "device has", d.Device, "device ID unknown")
	}
	if len(s.Drivers) > 0 {
		among(fieldDrivers, s.Drivers, "device has", d.Driver, "device has no driver")
	}
	if len(s.PCIAddresses) > 0 {
		ok := slices.ContainsFunc(s.PCIAddresses, func(p string) bool { return strings.EqualFold(p, d.Address) })
		add(fieldPCIAddresses, ok, func() string { return "device is " + d.Address + ", pool wants " + wants(s.PCIAddresses) })
	}
	if len(s.ACPIIndexes) > 0 {
		among(fieldACPIIndexes, s.ACPIIndexes, "device has", d.ACPIIndex, "device has no acpi_index")
	}
	if len(s.AuxTypes) > 0 && a != nil {
		among(fieldAuxTypes, s.AuxTypes, "device is of type", a.Type, "device type unknown")
	}
	if len(s.PFNames) > 0 {
		passed, why := m.pfCheck(s.PFNames, d, a, false)
		add(fieldPFNames, passed, say(why))
	}
	if len(s.RootDevices) > 0 {
		passed, why := m.pfCheck(s.RootDevices, d, a, true)
		add(fieldRootDevices, passed, say(why))
	}
	linkType := m.linkType(d)
	if len(s.LinkTypes) > 0 {
		among(fieldLinkTypes, s.LinkTypes, "link type is", linkType, "link type unknown")
	}
	if len(s.DDPProfiles) > 0 {
		add(fieldDDPProfiles, false, say("cannot be evaluated on this node"))
	}
	if len(s.PKeys) > 0 {
		passed, why := pkeyCheck(s.PKeys, d, linkType)
		add(fieldPKeys, passed, say(why))
	}
	if s.IsRDMA {
		switch {
		case d.RDMA():
			add(fieldIsRDMA, true, func() string { return "device has RDMA (" + strings.Join(d.RDMADevices, ", ") + ")" })
		case d.RDMAEnabled():
			add(fieldIsRDMA, true, say("device has RDMA enabled (its RDMA device is in a pod's network namespace, or its driver is not loaded)"))
		default:
			add(fieldIsRDMA, false, say("device has no RDMA device"))
		}
	}
	if s.VDPAType != "" {
		add(fieldVDPAType, d.VDPAType == s.VDPAType, func() string {
			return has("device has", d.VDPAType, "device has no vDPA device") + ", pool wants " + s.VDPAType
		})
	}
	if s.NeedVhostNet {
		if m.env.HasVhostNet {
			add(fieldNeedVhostNet, true, say("/dev/vhost-net present"))
		} else {
			add(fieldNeedVhostNet, true, say("/dev/vhost-net missing on this node; pooled without it, as the SR-IOV plugin does"))
		}
	}
	return sv
}

// has renders lead and the device's value, or unknown when the value is
// empty.
func has(lead, val, unknown string) string {
	if val == "" {
		return unknown
	}
	return lead + " " + val
}

// wants renders the values a field accepts, clipped when long.
func wants(vals []string) string {
	const show = 6
	if len(vals) == 1 {
		return vals[0]
	}
	if len(vals) > show {
		return "one of " + strings.Join(vals[:show], ", ") + fmt.Sprintf(" (and %d more)", len(vals)-show)
	}
	return "one of " + strings.Join(vals, ", ")
}

// pfCheck evaluates pfNames (byAddress false) or rootDevices entries. For
// a function, they match a VF by its PF's interface name or address and
// its VF index; a function that is not a VF never matches, as in the
// SR-IOV plugin. For an auxiliary device they match its parent function,
// whose SF index sysfs does not give: entries with indexes cannot match.
func (m *matcher) pfCheck(sels []PFSelector, d *sysfs.Device, a *sysfs.AuxDevice, byAddress bool) (bool, string) {
	var pf, what string
	index := -1
	switch {
	case a != nil && byAddress:
		pf, what = d.Address, "parent function is "+d.Address
	case a != nil:
		if len(d.Interfaces) > 0 {
			pf = d.Interfaces[0].Name
		}
		what = "parent interface is " + pf
	case !d.IsVF():
		return false, "device is not a VF"
	case byAddress:
		pf, index, what = d.PF, d.VFIndex, "PF is "+d.PF
	default:
		pf, index, what = d.PFInterface, d.VFIndex, "PF interface is "+d.PFInterface
	}
	if pf == "" {
		if a != nil {
			return false, "parent function has no interface"
		}
		return false, "PF interface unknown"
	}
	var named []string
	for _, s := range sels {
		if !strings.EqualFold(s.PF, pf) {
			continue
		}
		named = append(named, s.Raw)
		switch {
		case s.Indexes == nil:
			return true, what + ", pool wants " + s.Raw
		case a != nil:
			continue
		case index >= 0 && s.Includes(index):
			return true, fmt.Sprintf("VF %d of %s is in %s", index, pf, s.Raw)
		}
	}
	raws := make([]string, len(sels))
	for i, s := range sels {
		raws[i] = s.Raw
	}
	switch {
	case len(named) == 0:
		return false, what + ", pool wants " + wants(raws)
	case a != nil:
		return false, "SF index of " + a.Name + " is unknown, so " + strings.Join(named, ", ") + " cannot match"
	case index < 0:
		return false, "VF index unknown, so " + strings.Join(named, ", ") + " cannot match"
	}
	return false, fmt.Sprintf("VF %d of %s is outside %s", index, pf, strings.Join(named, ", "))
}

// linkType is the link type the SR-IOV plugin compares: the first
// interface's, or for a VF without an interface (bound to vfio-pci, say)
// its PF's.
func (m *matcher) linkType(d *sysfs.Device) string {
	if len(d.Interfaces) > 0 {
		return d.Interfaces[0].LinkType
	}
	if !d.IsVF() {
		return ""
	}
	pf := m.byAddr[strings.ToLower(d.PF)]
	if pf == nil {
		return ""
	}
	for _, ifc := range pf.Interfaces {
		if ifc.Name == d.PFInterface || d.PFInterface == "" {
			return ifc.LinkType
		}
	}
	return ""
}

// pkeyCheck matches the default (index 0) partition key of an InfiniBand
// function, as the SR-IOV plugin does, comparing keys as numbers.
func pkeyCheck(want []string, d *sysfs.Device, linkType string) (bool, string) {
	if linkType != "infiniband" {
		return false, "device is not InfiniBand"
	}
	key := d.PKey
	for _, ifc := range d.Interfaces {
		if len(ifc.PKeys) > 0 {
			key = ifc.PKeys[0]
			break
		}
	}
	if key == "" {
		return false, "device has no partition key"
	}
	k, ok := parsePKey(key)
	passed := ok && slices.ContainsFunc(want, func(w string) bool {
		n, ok := parsePKey(w)
		return ok && n == k
	})
	return passed, "default partition key is " + key + ", pool wants " + wants(want)
}
