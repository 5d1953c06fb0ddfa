package config

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is matched (with errors.Is) by every error that Parse and Load
// return for a config that was read but is not acceptable: bad syntax, a
// wrong type, an unknown field, a value out of its domain.
var ErrInvalid = errors.New("invalid config")

// ErrTooLarge is matched by the error for a config bigger than MaxSize, or
// one that expands past MaxSize when YAML is converted. Such a file is
// refused before it is parsed.
var ErrTooLarge = errors.New("config too large")

// Error is one problem found in a config file, with the path to the field at
// fault. Its text is one line:
//
//	FILE: resourceList[1].selectors.pfNames[0]: "eth0#5-2": range end before start
//
// Parts that do not apply are left out: a syntax error has a line and a
// column instead of a path ("FILE:3:14: ..."), and an error about a whole
// object has no value.
type Error struct {
	// File is the name the config was parsed under (its path for Load).
	File string
	// Path is the field at fault in the config's own terms:
	// "resourceList[1].selectors[0].pfNames[0]". Keys that are not plain
	// identifiers are written ["0000:86:00.0"]. Empty for errors about the
	// file as a whole.
	Path string
	// Value is the offending value as written, JSON-quoted when it is a
	// string; empty when the error is about a field's absence or shape.
	Value string
	// Line and Column locate a syntax error (1-based); zero otherwise.
	Line, Column int
	// Msg says what is wrong and, where it helps, what was expected.
	Msg string
	// Err is the sentinel the error matches: ErrInvalid or ErrTooLarge.
	Err error
}

// Error formats the problem as one line; see the type's documentation.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Column))
	}
	for _, part := range []string{e.Path, e.Value} {
		if part != "" {
			b.WriteString(": ")
			b.WriteString(part)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the sentinel, so errors.Is(err, ErrInvalid) holds.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is every problem found in one config, in the order they occur in
// the file. Parse reports all of them at once rather than stopping at the
// first. It is never returned empty.
type ErrorList []*Error

// Error joins the problems, one per line, without a trailing newline.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes every problem, so errors.Is and errors.As see through the
// list.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}
