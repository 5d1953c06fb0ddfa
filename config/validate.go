package config

import (
	"regexp"
	"strconv"
	"strings"
)

// Limits of the Kubernetes extended-resource name, from the rules the API
// server and the kubelet's device manager apply: the name part is a
// qualified name (at most 63 characters), the prefix a DNS subdomain, and
// "requests." + prefix must still be a DNS subdomain (at most 253).
const (
	maxNameLen   = 63
	maxPrefixLen = 253 - len("requests.")
)

var (
	qualifiedNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomainRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// pciAddressRE accepts the kernel's form DOMAIN:BUS:DEVICE.FUNCTION.
	// Domains are usually four hex digits, but Intel VMD domains have
	// five or more ("10000:01:00.0").
	pciAddressRE = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[01][0-9a-fA-F]\.[0-7]$`)
	hexIDRE      = regexp.MustCompile(`^[0-9a-f]{4}$`)
	// cdiVendorRE and cdiClassRE follow the CDI specification's rules
	// for the two halves of a kind.
	cdiVendorRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	cdiClassRE  = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
)

// checkResourceName returns why name is not valid as the name part of an
// extended resource, or "".
func checkResourceName(name string) string {
	switch {
	case name == "":
		return "empty: every resource needs a name"
	case len(name) > maxNameLen:
		return "not a valid extended resource name: longer than 63 characters"
	case !qualifiedNameRE.MatchString(name):
		return "not a valid extended resource name: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	}
	return ""
}

// checkResourcePrefix returns why prefix cannot prefix an extended resource
// name, or "".
func checkResourcePrefix(prefix string) string {
	switch {
	case len(prefix) > maxPrefixLen:
		return "not a valid resource prefix: longer than " + strconv.Itoa(maxPrefixLen) + " characters"
	case !dnsSubdomainRE.MatchString(prefix):
		return "not a valid resource prefix: must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)"
	case strings.Contains(prefix+"/", "kubernetes.io/"):
		return "not a valid resource prefix: kubernetes.io is reserved for Kubernetes' own resources"
	case strings.HasPrefix(prefix, "requests."):
		return `not a valid resource prefix: must not start with "requests."`
	}
	return ""
}

// validPCIAddress reports whether s is a full PCI address.
func validPCIAddress(s string) bool { return pciAddressRE.MatchString(s) }

// checkCDIKind returns why kind is not a CDI "vendor/class", or "".
func checkCDIKind(kind string) string {
	vendor, class, ok := strings.Cut(kind, "/")
	switch {
	case !ok:
		return `not a CDI kind: want "vendor/class"`
	case !cdiVendorRE.MatchString(vendor):
		return "not a CDI kind: the vendor must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '-' and '.'"
	case !cdiClassRE.MatchString(class):
		return "not a CDI kind: the class must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '-' and '.'"
	}
	return ""
}

// maxFunctionIndex bounds VF and SF indexes: SR-IOV counts VFs in 16 bits.
const maxFunctionIndex = 65535

// parsePFSelector parses a pfNames (wantAddress false) or rootDevices
// (wantAddress true) entry "PF" or "PF#i,j-k". It returns why the entry is
// malformed, or "".
func parsePFSelector(raw string, wantAddress bool) (PFSelector, string) {
	sel := PFSelector{Raw: raw}
	pf, list, hasIndexes := strings.Cut(raw, "#")
	sel.PF = pf
	switch {
	case pf == "" && wantAddress:
		return sel, "empty PF address before '#'"
	case pf == "":
		return sel, "empty PF interface name before '#'"
	case wantAddress && !validPCIAddress(pf):
		return sel, "malformed PCI address, want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:86:00.0"
	case !wantAddress && strings.ContainsAny(pf, "/ \t\n"):
		return sel, "malformed interface name"
	}
	if !hasIndexes {
		return sel, ""
	}
	if strings.Contains(list, "#") {
		return sel, "more than one '#'"
	}
	if list == "" {
		return sel, "no function indexes after '#'"
	}
	for entry := range strings.SplitSeq(list, ",") {
		first, last, isRange := strings.Cut(entry, "-")
		if entry == "" {
			return sel, "empty function index in the list after '#'"
		}
		lo, msg := parseIndex(first)
		if msg != "" {
			return sel, msg
		}
		hi := lo
		if isRange {
			if hi, msg = parseIndex(last); msg != "" {
				return sel, msg
			}
			if hi < lo {
				return sel, "range end before start"
			}
		}
		sel.Indexes = append(sel.Indexes, IndexRange{First: lo, Last: hi})
	}
	return sel, ""
}

// parseIndex parses one function index.
func parseIndex(s string) (int, string) {
	if s == "" {
		return 0, "malformed function range: missing index"
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, "malformed function index " + strconv.Quote(s) + ": want a number"
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxFunctionIndex {
		return 0, "function index " + s + " out of range (0-65535)"
	}
	return n, ""
}

// parsePKey parses an InfiniBand partition key ("0x7fff", "7fff").
func parsePKey(s string) (uint64, bool) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if t == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(t, 16, 16)
	return n, err == nil
}

// suggest returns the candidate closest to key when it is close enough to
// be a likely typo, or "".
func suggest(key string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(key), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b; both are short
// field names, so the quadratic cost is irrelevant. Long keys are cut off,
// which only makes a suggestion less likely.
func editDistance(a, b string) int {
	const limit = 64
	if len(a) > limit {
		a = a[:limit]
	}
	if len(b) > limit {
		b = b[:limit]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
