package config

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// MaxSize is the largest config accepted, in bytes (1 MiB). A bigger file,
// or a YAML file whose JSON form is bigger, is refused with ErrTooLarge
// before it is parsed.
const MaxSize = 1 << 20

// MaxDepth is the deepest nesting of objects and lists accepted. A real
// config needs six levels; anything past this bound is refused by a linear
// scan before any decoding.
const MaxDepth = 32

// Options change how a file is read: what the daemon's flags say beside it.
type Options struct {
	// ResourcePrefix is the prefix of a pool whose resourcePrefix is empty
	// or absent (DefaultResourcePrefix when ""): the SR-IOV plugin's
	// --resource-prefix.
	ResourcePrefix string
	// UseCDI answers every pool's Allocate with CDI device names, as if
	// each set cdi.enabled: the SR-IOV plugin's --use-cdi.
	UseCDI bool
}

// Check says what is wrong with o, naming the flag.
func (o Options) Check() error {
	if o.ResourcePrefix == "" {
		return nil
	}
	if msg := checkResourcePrefix(o.ResourcePrefix); msg != "" {
		return fmt.Errorf("--resource-prefix %q: %s", o.ResourcePrefix, msg)
	}
	return nil
}

// Load reads and parses the config file at path; see Parse. A file that
// cannot be read gives an error naming it that does not match ErrInvalid.
func Load(path string, opts Options) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	return ParseWith(path, data, opts)
}

// Parse parses and validates a config. name is used in messages and to pick
// the format: ".json" means JSON, ".yaml" and ".yml" mean YAML, and any
// other name is JSON when the first non-blank byte is '{' and YAML
// otherwise. Both forms take the same schema.
//
// On failure the error is an ErrorList holding every problem found, each
// matching ErrInvalid, or ErrTooLarge for an oversized file; the Config is
// then nil. Findings that do not stop the config are in Config.Warnings.
func Parse(name string, data []byte) (*Config, error) {
	return ParseWith(name, data, Options{})
}

// ParseWith is Parse with opts.
func ParseWith(name string, data []byte, opts Options) (*Config, error) {
	d := &decoder{file: name, prefix: opts.ResourcePrefix, useCDI: opts.UseCDI}
	if d.prefix == "" {
		d.prefix = DefaultResourcePrefix
	}
	if len(data) > MaxSize {
		return nil, d.tooLarge("larger than 1 MiB; refused")
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, d.fileError("empty config: want an object with a resourceList")
	}
	if isYAML(name, data) {
		d.yaml = true
		converted, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
			// "yaml: unmarshal errors:" heads one indented line per
			// problem: each is an error of its own, naming the file.
			if lines, ok := strings.CutPrefix(msg, "yaml: unmarshal errors:\n"); ok {
				var list ErrorList
				for _, line := range strings.Split(lines, "\n") {
					if line = strings.TrimSpace(line); line != "" {
						list = append(list, d.fileError("yaml: "+line)...)
					}
				}
				if len(list) > 0 {
					return nil, list
				}
			}
			return nil, d.fileError(msg)
		}
		if len(converted) > MaxSize {
			return nil, d.tooLarge("expands past 1 MiB when read as YAML; refused")
		}
		data = converted
	}
	if off := checkDepth(data, MaxDepth); off >= 0 {
		e := &Error{File: name, Msg: fmt.Sprintf("nested deeper than %d levels; refused", MaxDepth), Err: ErrInvalid}
		if !d.yaml {
			e.Line, e.Column = lineCol(data, int64(off))
		}
		return nil, ErrorList{e}
	}
	if se := checkSyntax(data); se != nil {
		e := &Error{File: name, Msg: se.msg, Err: ErrInvalid}
		if !d.yaml {
			e.Line, e.Column = lineCol(data, se.offset)
		}
		return nil, ErrorList{e}
	}
	root, err := parseTree(data, func(path string, offset int64) {
		d.pos = offset
		d.fail(path, "", "duplicate key")
	})
	if err != nil {
		se := err.(*syntaxError)
		e := &Error{File: name, Msg: se.msg, Err: ErrInvalid}
		if !d.yaml {
			e.Line, e.Column = lineCol(data, se.offset)
		}
		return nil, ErrorList{e}
	}
	cfg := &Config{Source: name, Resources: d.config(root)}
	if len(d.errs) > 0 {
		return nil, d.sortedErrors()
	}
	cfg.Warnings = d.sortedWarnings()
	return cfg, nil
}

// isYAML picks the format; see Parse.
func isYAML(name string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return false
	case ".yaml", ".yml":
		return true
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return len(trimmed) == 0 || trimmed[0] != '{'
}

// decoder turns the generic tree into the model, collecting every error
// and warning on the way.
type decoder struct {
	file string
	yaml bool
	// prefix is the resourcePrefix of a pool that names none; useCDI
	// enables CDI for every pool (Options).
	prefix string
	useCDI bool
	// pos is the offset of the value being decoded; errors and warnings
	// are sorted by it, so that they come in document order even though
	// fields are decoded in a fixed order.
	pos   int64
	errs  ErrorList
	warns []*Error
	// errPos and warnPos hold the pos of each error and warning.
	errPos, warnPos []int64
	// names maps each full resource name to the path of its first
	// definition, envs each container variable name to the resource whose
	// it is first.
	names, envs map[string]string
}

func (d *decoder) fail(path, value, msg string) {
	d.errs = append(d.errs, &Error{File: d.file, Path: path, Value: value, Msg: msg, Err: ErrInvalid})
	d.errPos = append(d.errPos, d.pos)
}

func (d *decoder) warn(path, value, msg string) {
	d.warns = append(d.warns, &Error{File: d.file, Path: path, Value: value, Msg: msg})
	d.warnPos = append(d.warnPos, d.pos)
}

// at records that the value being decoded is n.
func (d *decoder) at(n *node) { d.pos = n.offset }

// atEnd records the end of object n, where errors about its missing
// fields sort.
func (d *decoder) atEnd(n *node) { d.pos = n.end }

func (d *decoder) sortedErrors() ErrorList {
	order := sortedOrder(d.errPos)
	out := make(ErrorList, len(order))
	for i, j := range order {
		out[i] = d.errs[j]
	}
	return out
}

func (d *decoder) sortedWarnings() []string {
	order := sortedOrder(d.warnPos)
	out := make([]string, len(order))
	for i, j := range order {
		out[i] = d.warns[j].Error()
	}
	return out
}

// sortedOrder returns the indexes of pos in stable ascending order.
func sortedOrder(pos []int64) []int {
	order := make([]int, len(pos))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pos[a], pos[b]) })
	return order
}

func (d *decoder) fileError(msg string) ErrorList {
	return ErrorList{{File: d.file, Msg: msg, Err: ErrInvalid}}
}

func (d *decoder) tooLarge(msg string) ErrorList {
	return ErrorList{{File: d.file, Msg: msg, Err: ErrTooLarge}}
}

// wrongType reports a value of the wrong JSON type.
func (d *decoder) wrongType(n *node, path, want string) {
	d.at(n)
	msg := "want " + want + ", got " + n.kind.describe()
	if d.yaml && (n.kind == kindNumber || n.kind == kindBool) && strings.Contains(want, "string") {
		msg += " (quote it in YAML)"
	}
	d.fail(path, n.literal(), msg)
}

// fields walks the keys of object n. A key equal to one of known is handed
// to visit. A key equal to one of them but for case is accepted with a
// warning (the SR-IOV plugin decodes with encoding/json, which ignores
// case), but for the plugin's own spellings (pluginSpelling). Keys in
// ignored are accepted with a warning and dropped, quietly when null and
// spelled as the plugin writes them. Any other key is an unknown field.
func (d *decoder) fields(n *node, path string, known, ignored []string, visit func(key string, v *node, path string)) {
	seen := map[string]string{}
	for i, key := range n.keys {
		v, p := n.items[i], fieldPath(path, key)
		d.at(v)
		canon := ""
		for _, k := range known {
			if k == key {
				canon = k
				break
			}
			if canon == "" && strings.EqualFold(k, key) {
				canon = k
			}
		}
		switch {
		case canon != "":
			if first, dup := seen[canon]; dup {
				d.fail(p, "", fmt.Sprintf("duplicate of %s", fieldPath(path, first)))
				continue
			}
			seen[canon] = key
			if canon != key && !pluginSpelling[key] {
				d.warn(p, "", fmt.Sprintf("read as %q: field names are case-sensitive here; the SR-IOV plugin ignores case", canon))
			}
			visit(canon, v, p)
			d.at(v)
		case slices.ContainsFunc(ignored, func(k string) bool { return strings.EqualFold(k, key) }):
			if !pluginSpelling[key] || v.kind != kindNull {
				d.warn(p, "", "ignored: an internal field of the SR-IOV plugin, not configuration")
			}
		default:
			msg := "unknown field"
			if s := suggest(key, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.fail(p, "", msg)
		}
	}
}

// str decodes a string; null counts as absent.
func (d *decoder) str(n *node, path string) (string, bool) {
	switch n.kind {
	case kindString:
		return n.text, true
	case kindNull:
		return "", false
	}
	d.wrongType(n, path, "a string")
	return "", false
}

// boolean decodes a boolean; null counts as false.
func (d *decoder) boolean(n *node, path string) bool {
	switch n.kind {
	case kindBool:
		return n.b
	case kindNull:
		return false
	}
	d.wrongType(n, path, "true or false")
	return false
}

// strings decodes a list of non-empty strings; null counts as an empty
// list. Elements of the wrong type are reported and skipped; idx holds the
// index each kept value had in the list as written.
func (d *decoder) strings(n *node, path string) (vals []string, idx []int) {
	switch n.kind {
	case kindNull:
		return nil, nil
	case kindList:
	default:
		d.wrongType(n, path, "a list of strings")
		return nil, nil
	}
	for i, item := range n.items {
		p := indexPath(path, i)
		d.at(item)
		if item.kind != kindString {
			d.wrongType(item, p, "a string")
			continue
		}
		if item.text == "" {
			d.fail(p, `""`, "empty string")
			continue
		}
		vals = append(vals, item.text)
		idx = append(idx, i)
	}
	return vals, idx
}

// duration decodes a duration string ("10s"); null leaves def. A
// negative one, or one under least, is refused.
func (d *decoder) duration(n *node, path string, def, least time.Duration) time.Duration {
	d.at(n)
	s, ok := d.str(n, path)
	if !ok {
		return def
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.fail(path, quote(s), `malformed duration: want a number with a unit, such as "10s" or "500ms"`)
		return def
	case v < 0:
		d.fail(path, quote(s), "must not be negative")
		return def
	case v < least:
		d.fail(path, quote(s), "want at least "+least.String())
		return def
	}
	return v
}

func (d *decoder) config(root *node) []Resource {
	if root.kind != kindObject {
		value := root.literal()
		if root.kind == kindNull {
			value = ""
		}
		d.fail("", value, "want an object with a resourceList, got "+root.kind.describe())
		return nil
	}
	var list *node
	d.fields(root, "", []string{"resourceList"}, nil, func(_ string, v *node, _ string) { list = v })
	d.atEnd(root)
	if list == nil || list.kind == kindNull {
		d.fail("resourceList", "", "missing: the config needs at least one resource")
		return nil
	}
	if list.kind != kindList {
		d.wrongType(list, "resourceList", "a list of resources")
		return nil
	}
	if len(list.items) == 0 {
		d.fail("resourceList", "", "empty: the config needs at least one resource")
		return nil
	}
	resources := make([]Resource, 0, len(list.items))
	d.names, d.envs = map[string]string{}, map[string]string{}
	for i, item := range list.items {
		if r, ok := d.resource(item, indexPath("resourceList", i)); ok {
			resources = append(resources, r)
		}
	}
	return resources
}

var resourceFields = []string{
	"resourceName", "resourcePrefix", "deviceType", "excludeTopology", "selectors", "additionalInfo",
	"allocatePolicy", "health", "cdi", "advertiseEmpty",
}

// pluginSpelling are keys as the SR-IOV plugin's own Go types write them,
// with no JSON tag: the sriov-network-operator marshals those types, so
// every selector object it writes holds "IsRdma" and "NeedVhostNet", and
// every resource "SelectorObj": null. They are read (or, null, dropped)
// with no warning: nobody wrote them by hand, and nobody can change them.
var pluginSpelling = map[string]bool{"IsRdma": true, "NeedVhostNet": true, "SelectorObj": true}

// resourceIgnored are keys that appear in configs generated from the SR-IOV
// plugin's own ResourceConfig struct (its documentation shows one); the
// plugin ignores them on input.
var resourceIgnored = []string{"SelectorObj", "SelectorObjs"}

// resource decodes one resourceList entry. ok is false when it is not an
// object.
func (d *decoder) resource(n *node, path string) (Resource, bool) {
	if n.kind != kindObject {
		d.wrongType(n, path, "a resource object")
		return Resource{}, false
	}
	r := Resource{
		Path:           path,
		Prefix:         d.prefix,
		DeviceType:     NetDevice,
		AllocatePolicy: PolicyNone,
		Health:         Health{HoldDown: DefaultHoldDown},
	}
	// got holds each field's value and its path as written.
	got, paths := map[string]*node{}, map[string]string{}
	d.fields(n, path, resourceFields, resourceIgnored, func(key string, v *node, p string) { got[key], paths[key] = v, p })
	at := func(key string) string {
		if v := got[key]; v != nil {
			d.at(v)
			return paths[key]
		}
		d.atEnd(n)
		return fieldPath(path, key)
	}

	// named is true when the full name is known, so it can be checked for
	// duplicates.
	named := true
	if v := got["resourceName"]; v == nil || v.kind == kindNull {
		d.fail(at("resourceName"), "", "missing: every resource needs a name")
		named = false
	} else if s, isStr := d.str(v, at("resourceName")); !isStr {
		named = false
	} else if msg := checkResourceName(s); msg != "" {
		d.fail(at("resourceName"), quote(s), msg)
		named = false
	} else {
		r.Name = s
	}
	if v := got["resourcePrefix"]; v != nil {
		if s, isStr := d.str(v, at("resourcePrefix")); isStr && s != "" {
			if msg := checkResourcePrefix(s); msg != "" {
				d.fail(at("resourcePrefix"), quote(s), msg)
				named = false
			} else {
				r.Prefix = s
			}
		} else if v.kind != kindNull && v.kind != kindString {
			named = false
		}
	}
	if named {
		full := r.FullName()
		if first, dup := d.names[full]; dup {
			d.fail(at("resourceName"), quote(r.Name), fmt.Sprintf("duplicate resource %s (first at %s)", full, first))
		} else {
			d.names[full] = path
			env := EnvVarName(r.Prefix, r.Name)
			if other, dup := d.envs[env]; dup {
				d.warn(at("resourceName"), quote(r.Name), fmt.Sprintf("the container variable %s is also %s's: a container given both pools sees one pool's devices in it", env, other))
			} else {
				d.envs[env] = full
			}
		}
	}
	typeKnown := true
	if v := got["deviceType"]; v != nil {
		if s, isStr := d.str(v, at("deviceType")); isStr && s != "" {
			if !slices.Contains(deviceTypes, DeviceType(s)) {
				d.fail(at("deviceType"), quote(s), "unknown device type, want one of "+joinQuoted(deviceTypes))
				typeKnown = false
			} else {
				r.DeviceType = DeviceType(s)
			}
			if r.DeviceType == AuxNetDevice {
				d.warn(at("deviceType"), quote(s), "devledger serves no scalable functions yet: the pool takes none, the kubelet never hears of it and a pod that asks for it stays Pending")
			}
		}
	}
	if v := got["excludeTopology"]; v != nil {
		r.ExcludeTopology = d.boolean(v, at("excludeTopology"))
	}
	if v := got["advertiseEmpty"]; v != nil {
		r.AdvertiseEmpty = d.boolean(v, at("advertiseEmpty"))
	}
	if v := got["selectors"]; v == nil || v.kind == kindNull {
		d.fail(at("selectors"), "", "missing: every resource needs at least one selector object")
	} else {
		r.Selectors, r.SelectorList = d.selectors(v, at("selectors"), r.DeviceType, typeKnown)
	}
	if v := got["additionalInfo"]; v != nil {
		r.AdditionalInfo = d.additionalInfo(v, at("additionalInfo"))
	}
	if v := got["allocatePolicy"]; v != nil {
		if s, isStr := d.str(v, at("allocatePolicy")); isStr && s != "" {
			if !slices.Contains(allocatePolicies, AllocatePolicy(s)) {
				d.fail(at("allocatePolicy"), quote(s), "unknown allocate policy, want one of "+joinQuoted(allocatePolicies))
			} else {
				r.AllocatePolicy = AllocatePolicy(s)
			}
		}
	}
	if v := got["health"]; v != nil {
		d.health(v, at("health"), &r.Health)
	}
	defaultKind := r.Prefix + "/" + cdiClass[r.DeviceType]
	r.CDI.Kind = defaultKind
	if v := got["cdi"]; v != nil {
		d.cdi(v, at("cdi"), &r.CDI)
	}
	r.CDI.Enabled = r.CDI.Enabled || d.useCDI
	// A resource prefix need only be a DNS subdomain ("6wind.com"); a CDI
	// vendor must start with a letter, and runtimes refuse a spec whose
	// kind is not one. Said now, not at every Allocate.
	if msg := checkCDIKind(defaultKind); r.CDI.Enabled && r.CDI.Kind == defaultKind && msg != "" {
		field, value, whose := at("resourcePrefix"), quote(r.Prefix), ""
		if got["resourcePrefix"] == nil {
			// The prefix is not the file's: the default or --resource-prefix.
			field, value, whose = at("resourceName"), quote(r.Name), " (its prefix "+quote(r.Prefix)+" is the default or --resource-prefix)"
		}
		d.fail(field, value, "CDI names this pool's devices by the default kind "+quote(defaultKind)+whose+", which is "+msg+"; set cdi.kind")
	}
	if named {
		if msg := checkFileNames(&r); msg != "" {
			d.fail(at("resourceName"), quote(r.Name), msg)
		}
	}
	return r, true
}

// checkFileNames returns why the names of the files the pool res writes
// would not fit a file name (255 bytes), or "": the device-info files of
// a netDevice pool, "<prefix>-<name>-<PCI address>-device.json" (the name
// CNIs look for), and a CDI spec, "devledger_<prefix>_<name>.json". The
// resource name rules allow longer; every Allocate would then fail.
func checkFileNames(res *Resource) string {
	const maxFileName, longestAddress = 255, len("00000000:00:00.0")
	full := len(res.Prefix) + 1 + len(res.Name)
	switch {
	case res.DeviceType == NetDevice && full+1+longestAddress+len("-device.json") > maxFileName:
		return fmt.Sprintf("with its prefix, %d characters: too long for its device-info files' names (at most %d)", full, maxFileName-1-longestAddress-len("-device.json"))
	case res.CDI.Enabled && len("devledger_")+full+len(".json") > maxFileName:
		return fmt.Sprintf("with its prefix, %d characters: too long for its CDI spec file's name (at most %d)", full, maxFileName-len("devledger_")-len(".json"))
	}
	return ""
}

// cdiClass is the class half of the default CDI kind; the first three are
// the SR-IOV plugin's.
var cdiClass = map[DeviceType]string{
	NetDevice:    "net-pci",
	Accelerator:  "net-accel",
	AuxNetDevice: "net-sf",
	GenericPCI:   "pci",
}

func joinQuoted[T ~string](vals []T) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}

func (d *decoder) additionalInfo(n *node, path string) map[string]map[string]string {
	if n.kind == kindNull {
		return nil
	}
	if n.kind != kindObject {
		d.wrongType(n, path, `an object such as {"*": {"key": "value"}}`)
		return nil
	}
	out := make(map[string]map[string]string, len(n.keys))
	for i, dev := range n.keys {
		inner, p := n.items[i], fieldPath(path, dev)
		if inner.kind != kindObject {
			d.wrongType(inner, p, "an object of strings")
			continue
		}
		vals := make(map[string]string, len(inner.keys))
		for j, k := range inner.keys {
			d.at(inner.items[j])
			if s, ok := d.str(inner.items[j], fieldPath(p, k)); ok {
				vals[k] = s
			} else if inner.items[j].kind == kindNull {
				d.wrongType(inner.items[j], fieldPath(p, k), "a string")
			}
		}
		out[dev] = vals
	}
	return out
}

func (d *decoder) health(n *node, path string, h *Health) {
	if n.kind == kindNull {
		return
	}
	if n.kind != kindObject {
		d.wrongType(n, path, "an object")
		return
	}
	d.fields(n, path, []string{"link", "holdDown", "debounce", "probeInterval"}, nil, func(key string, v *node, p string) {
		switch key {
		case "link":
			h.Link = d.boolean(v, p)
		case "holdDown":
			h.HoldDown = d.durationField(v, p, h.HoldDown, 0)
		case "debounce":
			h.Debounce = d.durationField(v, p, h.Debounce, 0)
		case "probeInterval":
			h.ProbeInterval = d.durationField(v, p, h.ProbeInterval, MinProbeInterval)
		}
	})
}

// durationField is duration with a type message that names the expected
// form.
func (d *decoder) durationField(n *node, path string, def, least time.Duration) time.Duration {
	if n.kind != kindString && n.kind != kindNull {
		d.fail(path, n.literal(), `want a duration string such as "10s", got `+n.kind.describe())
		return def
	}
	return d.duration(n, path, def, least)
}

func (d *decoder) cdi(n *node, path string, c *CDI) {
	if n.kind == kindNull {
		return
	}
	if n.kind != kindObject {
		d.wrongType(n, path, `an object such as {"enabled": true}`)
		return
	}
	d.fields(n, path, []string{"enabled", "kind"}, nil, func(key string, v *node, p string) {
		switch key {
		case "enabled":
			c.Enabled = d.boolean(v, p)
		case "kind":
			if s, ok := d.str(v, p); ok && s != "" {
				if msg := checkCDIKind(s); msg != "" {
					d.fail(p, quote(s), msg)
					return
				}
				c.Kind = s
			}
		}
	})
}
