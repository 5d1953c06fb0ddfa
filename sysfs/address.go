package sysfs

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidAddress is wrapped by the error for a string that is not a PCI
// address.
var ErrInvalidAddress = errors.New("not a PCI address")

// NormalizeAddress returns the canonical form of a PCI address, the one
// sysfs names functions by: lower-case, with the domain ("0000:3b:02.1").
// It accepts the short form without a domain ("3b:02.1", domain 0000) and
// upper-case hex; domains of 4 to 8 hex digits are kept as given (VMD
// controllers use 5). Anything else returns an error wrapping
// ErrInvalidAddress.
func NormalizeAddress(s string) (string, error) {
	a := strings.ToLower(strings.TrimSpace(s))
	if strings.Count(a, ":") == 1 {
		a = "0000:" + a
	}
	if !isPCIAddress(a) {
		return "", fmt.Errorf("%w: %q (want 0000:00:00.0)", ErrInvalidAddress, s)
	}
	return a, nil
}

// isPCIAddress reports whether s is a canonical PCI address: a domain of 4
// to 8 lower-case hex digits, then ":bb:dd.f" with a device up to 1f and a
// function up to 7.
func isPCIAddress(s string) bool {
	n := len(s)
	if n < 12 || n > 16 {
		return false
	}
	dom := s[:n-8]
	rest := s[n-8:] // ":bb:dd.f"
	if rest[0] != ':' || rest[3] != ':' || rest[6] != '.' {
		return false
	}
	if !isLowerHex(dom) || !isLowerHex(rest[1:3]) || !isLowerHex(rest[4:6]) {
		return false
	}
	if rest[4] > '1' || rest[7] < '0' || rest[7] > '7' {
		return false
	}
	return true
}

func isLowerHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
