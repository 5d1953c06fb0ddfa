package config

import (
	"fmt"
	"slices"
	"strings"
)

// Selector field names as the SR-IOV plugin documents them.
const (
	fieldVendors      = "vendors"
	fieldDevices      = "devices"
	fieldDrivers      = "drivers"
	fieldPCIAddresses = "pciAddresses"
	fieldACPIIndexes  = "acpiIndexes"
	fieldPFNames      = "pfNames"
	fieldRootDevices  = "rootDevices"
	fieldLinkTypes    = "linkTypes"
	fieldDDPProfiles  = "ddpProfiles"
	fieldPKeys        = "pKeys"
	fieldIsRDMA       = "isRdma"
	fieldNeedVhostNet = "needVhostNet"
	fieldVDPAType     = "vdpaType"
	fieldAuxTypes     = "auxTypes"
)

var selectorFields = []string{
	fieldVendors, fieldDevices, fieldDrivers, fieldPCIAddresses, fieldACPIIndexes, fieldPFNames,
	fieldRootDevices, fieldLinkTypes, fieldDDPProfiles, fieldPKeys, fieldIsRDMA, fieldNeedVhostNet,
	fieldVDPAType, fieldAuxTypes,
}

// selectorsFor lists the selector fields each device type evaluates. The
// SR-IOV plugin decodes a selector object into a struct per device type,
// so a field outside its type's struct is silently ignored; we ignore it
// too, with a warning. accelerator takes acpiIndexes because the plugin's
// documentation lists it for that type (its code skips it).
var selectorsFor = map[DeviceType][]string{
	NetDevice: {
		fieldVendors, fieldDevices, fieldDrivers, fieldPCIAddresses, fieldACPIIndexes, fieldPFNames,
		fieldRootDevices, fieldLinkTypes, fieldDDPProfiles, fieldPKeys, fieldIsRDMA, fieldNeedVhostNet,
		fieldVDPAType,
	},
	Accelerator: {fieldVendors, fieldDevices, fieldDrivers, fieldPCIAddresses, fieldACPIIndexes},
	AuxNetDevice: {
		fieldVendors, fieldDevices, fieldDrivers, fieldPFNames, fieldRootDevices, fieldLinkTypes,
		fieldIsRDMA, fieldNeedVhostNet, fieldAuxTypes,
	},
	GenericPCI: {
		fieldVendors, fieldDevices, fieldDrivers, fieldPCIAddresses, fieldACPIIndexes, fieldPFNames,
		fieldRootDevices,
	},
}

// takes describes what a device type's pools take, for messages.
var takes = map[DeviceType]string{
	NetDevice:    "network controller (class 0x02)",
	Accelerator:  "processing accelerator (class 0x12)",
	AuxNetDevice: "auxiliary device of a network controller",
	GenericPCI:   "PCI function",
}

// selectors decodes the selectors field: one object or a list of them.
// typeKnown is false when deviceType was invalid; fields are then checked
// for type only, without applicability warnings.
func (d *decoder) selectors(n *node, path string, dt DeviceType, typeKnown bool) ([]Selector, bool) {
	switch n.kind {
	case kindObject:
		return []Selector{d.selector(n, path, dt, typeKnown)}, false
	case kindList:
		if len(n.items) == 0 {
			d.fail(path, "", "empty selector set: need at least one selector object")
			return nil, true
		}
		out := make([]Selector, 0, len(n.items))
		for i, item := range n.items {
			p := indexPath(path, i)
			if item.kind != kindObject {
				d.wrongType(item, p, "a selector object")
				continue
			}
			out = append(out, d.selector(item, p, dt, typeKnown))
		}
		return out, true
	}
	d.wrongType(n, path, "a selector object or a list of selector objects")
	return nil, false
}

// selector decodes and checks one selector object.
func (d *decoder) selector(n *node, path string, dt DeviceType, typeKnown bool) Selector {
	s := Selector{Path: path}
	auxGiven := false
	d.fields(n, path, selectorFields, nil, func(key string, v *node, p string) {
		// The plugin skips such a field unread, whatever it holds, so its
		// value is not checked either: a config it loads must load here.
		if typeKnown && !slices.Contains(selectorsFor[dt], key) {
			if setsSomething(v) {
				d.warn(p, "", fmt.Sprintf("ignored: not a selector of deviceType %s (the SR-IOV plugin ignores it too)", dt))
			}
			return
		}
		if key == fieldAuxTypes && v.kind != kindNull && (v.kind != kindList || len(v.items) > 0) {
			auxGiven = true // an empty list names no type: the plugin refuses it too
		}
		var (
			list []string
			pfs  []PFSelector
			flag bool
			text string
		)
		switch key {
		case fieldIsRDMA, fieldNeedVhostNet:
			flag = d.boolean(v, p)
		case fieldVDPAType:
			var ok bool
			if text, ok = d.str(v, p); ok && text != "" && text != "virtio" && text != "vhost" {
				d.fail(p, quote(text), "unknown vDPA type, want virtio or vhost")
				return
			}
		default:
			vals, idx := d.strings(v, p)
			list, pfs = d.checkValues(key, vals, idx, v, p)
		}
		switch key {
		case fieldVendors:
			s.Vendors = list
		case fieldDevices:
			s.Devices = list
		case fieldDrivers:
			s.Drivers = list
		case fieldPCIAddresses:
			s.PCIAddresses = list
		case fieldACPIIndexes:
			s.ACPIIndexes = list
		case fieldPFNames:
			s.PFNames = pfs
		case fieldRootDevices:
			s.RootDevices = pfs
		case fieldLinkTypes:
			s.LinkTypes = list
		case fieldDDPProfiles:
			s.DDPProfiles = list
			if len(list) > 0 {
				d.warn(p, "", "cannot be evaluated on this node: this selector object accepts no device")
			}
		case fieldPKeys:
			s.PKeys = list
		case fieldIsRDMA:
			s.IsRDMA = flag
		case fieldNeedVhostNet:
			s.NeedVhostNet = flag
		case fieldVDPAType:
			s.VDPAType = text
		case fieldAuxTypes:
			s.AuxTypes = list
		}
	})
	d.atEnd(n)
	if s.IsRDMA && s.VDPAType != "" {
		d.fail(path, "", "isRdma and vdpaType cannot be combined")
	}
	if !typeKnown {
		return s
	}
	if dt == AuxNetDevice && !auxGiven {
		d.fail(fieldPath(path, fieldAuxTypes), "", "missing: auxNetDevice selector objects need auxTypes")
	}
	if dt == Accelerator && len(s.ACPIIndexes) > 0 {
		d.warn(fieldPath(path, fieldACPIIndexes), "", "applied here; the SR-IOV plugin documents it for accelerators but ignores it, so this pool takes fewer devices than the plugin's did")
	}
	if s.empty() {
		if dt == GenericPCI {
			d.fail(path, "", "empty selector object: a genericPCI pool would take every PCI function on the node")
		} else {
			d.warn(path, "", "empty selector object: accepts every "+takes[dt])
		}
	}
	return s
}

// setsSomething reports whether a selector field's value would filter
// if the field applied: not null, false, "" or an empty list.
func setsSomething(v *node) bool {
	switch v.kind {
	case kindNull:
		return false
	case kindBool:
		return v.b
	case kindString:
		return v.text != ""
	case kindList:
		return len(v.items) > 0
	}
	return true
}

// checkValues validates the values of a list field. It returns the values
// kept and, for pfNames and rootDevices, their parsed form.
// idx holds each value's index in the list as written, for paths.
func (d *decoder) checkValues(key string, list []string, idx []int, n *node, path string) ([]string, []PFSelector) {
	var pfs []PFSelector
	kept := list[:0:0]
	for i, v := range list {
		p := indexPath(path, idx[i])
		d.at(n.items[idx[i]])
		switch key {
		case fieldVendors, fieldDevices:
			if !hexIDRE.MatchString(v) {
				d.warn(p, quote(v), "never matches: IDs are four lower-case hex digits, as the kernel writes them")
			}
		case fieldPCIAddresses:
			if !validPCIAddress(v) {
				d.fail(p, quote(v), "malformed PCI address, want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:3b:02.1")
				continue
			}
			if v != strings.ToLower(v) {
				d.warn(p, quote(v), "matched without case here; the SR-IOV plugin compares it exactly and so matches no device, as the kernel writes addresses in lower case")
			}
		case fieldPFNames, fieldRootDevices:
			sel, msg := parsePFSelector(v, key == fieldRootDevices)
			if msg != "" {
				d.fail(p, quote(v), msg)
				continue
			}
			for _, earlier := range pfs {
				if strings.EqualFold(earlier.PF, sel.PF) {
					d.warn(p, quote(v), fmt.Sprintf("the SR-IOV plugin honours only the first entry for %s; devledger takes every entry", earlier.PF))
					break
				}
			}
			pfs = append(pfs, sel)
		case fieldPKeys:
			if _, ok := parsePKey(v); !ok {
				d.fail(p, quote(v), "malformed partition key, want up to four hex digits such as 0x7fff")
				continue
			}
		case fieldAuxTypes:
			if v != "sf" {
				d.fail(p, quote(v), `unsupported auxiliary device type, want "sf"`)
				continue
			}
		}
		kept = append(kept, v)
	}
	return kept, pfs
}
