package sysfs

import (
	"math"
	"strconv"
	"strings"
)

// The parsers below turn the raw bytes of one sysfs attribute into a field
// value. They never panic whatever the bytes, accept the trailing newline
// the kernel writes, and report false for anything the kernel would not
// write; the caller then leaves the field unknown and records a warning.

// trimSpace trims ASCII white space (what sysfs pads attributes with) from
// both ends of b.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// parseHex normalises a hex ID attribute ("0x8086\n", "0x020000") into
// exactly digits lower-case hex digits without "0x", written to out (which
// must hold digits bytes). It reports false unless b holds exactly that many
// hex digits, with or without the prefix.
func parseHex(b []byte, digits int, out []byte) ([]byte, bool) {
	b = trimSpace(b)
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	if len(b) != digits || len(out) < digits {
		return nil, false
	}
	out = out[:digits]
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			out[i] = c
		case c >= 'A' && c <= 'F':
			out[i] = c + ('a' - 'A')
		default:
			return nil, false
		}
	}
	return out, true
}

// parseInt reads a decimal integer in [lo, hi] (an optional leading '-',
// then digits). It is what numa_node, sriov_totalvfs and the like hold.
func parseInt(b []byte, lo, hi int) (int, bool) {
	b = trimSpace(b)
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg = true
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	if n < lo || n > hi {
		return 0, false
	}
	return n, true
}

// parseWord accepts one non-empty word of lower-case letters, digits, '_'
// and '-' (an operstate such as "up" or "lowerlayerdown") and returns it
// trimmed.
func parseWord(b []byte) ([]byte, bool) {
	b = trimSpace(b)
	if len(b) == 0 || len(b) > 32 {
		return nil, false
	}
	for _, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return nil, false
		}
	}
	return b, true
}

// parseCarrier reads carrier: 1 or 0.
func parseCarrier(b []byte) (int, bool) {
	return parseInt(b, 0, 1)
}

// ARPHRD types of net/<if>/type that have names in NetInterface.LinkType.
const (
	arphrdEther      = 1
	arphrdInfiniband = 32
)

// parseLinkType reads net/<if>/type (an ARPHRD number) and names it:
// "ether", "infiniband", or the number itself for any other type.
func parseLinkType(b []byte) (string, bool) {
	n, ok := parseInt(b, 0, 0xffff)
	if !ok {
		return "", false
	}
	switch n {
	case arphrdEther:
		return "ether", true
	case arphrdInfiniband:
		return "infiniband", true
	}
	return strconv.Itoa(n), true
}

// parsePKey reads one pkeys/<i> entry ("0xffff") into its canonical form
// "0x" plus four lower-case hex digits. The kernel shows an empty slot as
// 0x0000; that reads as ok with empty true.
func parsePKey(b []byte) (key string, empty, ok bool) {
	b = trimSpace(b)
	if len(b) < 3 || len(b) > 6 || b[0] != '0' || (b[1] != 'x' && b[1] != 'X') {
		return "", false, false
	}
	v := 0
	for _, c := range b[2:] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return "", false, false
		}
		v = v<<4 | int(d)
	}
	if v == 0 {
		return "", true, true
	}
	const hexDigits = "0123456789abcdef"
	out := [6]byte{'0', 'x', hexDigits[v>>12&0xf], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf]}
	return string(out[:]), false, true
}

// parseACPIIndex reads acpi_index: a decimal number that fits in 64 bits.
// The kernel prints (with %llu) the integer the firmware's _DSM returns,
// and ACPI integers are 64 bits wide: nothing keeps it within 32. It is
// kept as text, the way selectors compare it.
func parseACPIIndex(b []byte) ([]byte, bool) {
	b = trimSpace(b)
	if len(b) == 0 || len(b) > 20 {
		return nil, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return nil, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return nil, false
		}
		v = v*10 + d
	}
	return b, true
}

// auxType returns the type of an auxiliary device from its name
// "<driver>.<type>.<id>" ("mlx5_core.sf.2" is of type "sf"): what lies
// between the first and the last dot, the id being decimal. Other names
// report false.
func auxType(name string) (string, bool) {
	first := strings.IndexByte(name, '.')
	last := strings.LastIndexByte(name, '.')
	if first <= 0 || last <= first+1 || last == len(name)-1 {
		return "", false
	}
	if strings.ContainsAny(name, ":/") {
		return "", false
	}
	for i := last + 1; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return "", false
		}
	}
	return name[first+1 : last], true
}

// numberedName reports whether name is prefix followed by a decimal number
// ("virtfn12", "virtio0", "vdpa1") and returns the number.
func numberedName(name, prefix string) (int, bool) {
	if len(name) <= len(prefix) || !strings.HasPrefix(name, prefix) {
		return 0, false
	}
	digits := name[len(prefix):]
	if len(digits) > 6 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// linkBase is the last element of a symlink's target ("ice" for
// "../../../bus/pci/drivers/ice"), "" when there is none.
func linkBase(target string) string {
	target = strings.TrimRight(target, "/")
	if i := strings.LastIndexByte(target, '/'); i >= 0 {
		target = target[i+1:]
	}
	if target == "." || target == ".." {
		return ""
	}
	return target
}

// isDecimal reports whether s is a non-empty run of decimal digits.
func isDecimal(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// vdpaType names the kind of a vdpa device from the base name of its
// driver link.
func vdpaType(driver string) (string, bool) {
	switch driver {
	case "virtio_vdpa":
		return "virtio", true
	case "vhost_vdpa":
		return "vhost", true
	}
	return "", false
}

// quote renders attribute content for a warning, cut short so that a large
// garbage file cannot flood the log.
func quote(b []byte) string {
	const max = 32
	b = trimSpace(b)
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}
