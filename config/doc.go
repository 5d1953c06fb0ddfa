// Package config parses and validates devledger's configuration and decides
// which device joins which pool.
//
// # Schema
//
// The file is the SR-IOV network device plugin's config.json, unchanged: a
// resourceList of resources with resourceName, resourcePrefix (default
// "intel.com"), deviceType (netDevice by default, accelerator,
// auxNetDevice), excludeTopology, additionalInfo and selectors, one
// selector object or an ordered list of them. devledger adds, per
// resource, allocatePolicy (none by default, packed, spread), health
// (link, holdDown, debounce, probeInterval), cdi (enabled, kind),
// advertiseEmpty (serve the pool while it has no devices) and the
// genericPCI device type, which takes PCI functions of any class. The same
// schema is read from JSON or YAML (by extension, else by content); both
// give one model, Config.
//
// # Validation
//
// Parse reports every problem at once as an ErrorList, each line naming the
// file and the path of the field at fault:
//
//	config.json: resourceList[1].selectors.pfNames[0]: "eth0#5-2": range end before start
//
// Unknown fields, wrong JSON types, names that Kubernetes would refuse as
// extended resources, duplicate names within a prefix, missing or empty
// selector sets, malformed PCI addresses and VF ranges, unknown enum values
// and bad durations are errors. A file over MaxSize, or nested deeper than
// MaxDepth, is refused before decoding. Findings that the SR-IOV plugin
// would accept silently (a field name in another case, a selector field the
// device type ignores, a DDP profile, which cannot be read here) load with
// a warning in Config.Warnings; the keys the plugin's own types write, as
// the sriov-network-operator's configs hold them ("IsRdma",
// "NeedVhostNet", "SelectorObj": null), load without one.
//
// # Selection
//
// Config.Select applies the SR-IOV plugin's rules, read from its source:
// fields of a selector object are ANDed, values of a field ORed, selector
// objects ORed, and a device joins only the first pool, in file order,
// that accepts it. netDevice takes class 0x02, accelerator class 0x12,
// genericPCI any class, auxNetDevice the auxiliary devices of class 0x02
// functions. A function with no driver, one whose interface carries the
// default route, and (for netDevice and genericPCI) a PF with VFs enabled
// are never pooled. pfNames and rootDevices match VFs by their PF's
// interface name or PCI address, "#0,2-7" limiting the VF indexes. Every
// decision is kept, so that `devledger scan --explain` can say for each
// pool which rule or selector field decided (Selection.Placement). Env
// carries what selection needs from outside sysfs; NewEnv reads the
// default-route interfaces from net/route under a proc root and looks for
// vhost-net under a dev root. EnvVarName gives the PCIDEVICE_<PREFIX>_<NAME>
// variable the SR-IOV plugin sets in containers, KubeVirtEnvVarName the
// PCI_RESOURCE_<PREFIX>_<NAME> one KubeVirt's virt-launcher reads.
//
// Where devledger departs from the plugin, it says so where it happens:
// all pfNames/rootDevices entries for one PF are honoured (the plugin
// honours the first), partition keys compare as numbers, and PCI addresses
// compare without regard to case.
package config
