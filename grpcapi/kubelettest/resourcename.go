package kubelettest

import (
	"regexp"
	"strings"
)

var (
	qualifiedNamePart = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dns1123Subdomain  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// IsExtendedResourceName is the kubelet's test of a device plugin's resource
// name (v1helper.IsExtendedResourceName): it has a domain that is not
// kubernetes.io (nor a subdomain of it), does not start with "requests.", and
// "requests.<name>" is a qualified name: a DNS-1123 subdomain of at most 253
// bytes, a slash, and a name of at most 63 bytes of [A-Za-z0-9_.-] that
// starts and ends alphanumeric.
func IsExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") {
		return false
	}
	if strings.HasPrefix(name, "requests.") {
		return false
	}
	return isQualifiedName("requests." + name)
}

func isQualifiedName(v string) bool {
	parts := strings.Split(v, "/")
	var name string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		prefix := parts[0]
		if prefix == "" || len(prefix) > 253 || !dns1123Subdomain.MatchString(prefix) {
			return false
		}
		name = parts[1]
	default:
		return false
	}
	return name != "" && len(name) <= 63 && qualifiedNamePart.MatchString(name)
}
