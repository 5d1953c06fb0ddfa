package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// kind is the JSON type of a decoded value.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindObject
	kindList
)

// describe names the kind with its article, for messages such as
// "want a list of strings, got a string".
func (k kind) describe() string {
	switch k {
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindObject:
		return "an object"
	case kindList:
		return "a list"
	default:
		return "null"
	}
}

// node is one JSON value kept generic, so that the decoder can report every
// wrong type with its path instead of stopping at the first, and can see
// duplicate keys that encoding/json would silently merge.
type node struct {
	kind kind
	// text is a string's value or a number's literal.
	text string
	b    bool
	// keys and items: an object's keys in document order and its values at
	// the same indexes; a list's elements in items.
	keys  []string
	items []*node
	// offset is the byte offset just past the value's first token, and
	// end just past its last; they order errors by position.
	offset, end int64
}

// literal renders a scalar as written, for the Value part of an error.
// Objects and lists are not rendered: their path says enough.
func (n *node) literal() string {
	switch n.kind {
	case kindString:
		return quote(n.text)
	case kindNumber:
		return clip(n.text)
	case kindBool:
		return strconv.FormatBool(n.b)
	case kindNull:
		return "null"
	}
	return ""
}

// maxValueLen bounds how much of an offending value an error repeats.
const maxValueLen = 80

// quote JSON-quotes s for an error, clipping long values.
func quote(s string) string {
	if len(s) > maxValueLen {
		s = s[:maxValueLen] + "..."
	}
	return strconv.Quote(s)
}

func clip(s string) string {
	if len(s) > maxValueLen {
		return s[:maxValueLen] + "..."
	}
	return s
}

// checkDepth scans JSON text for nesting deeper than limit without
// decoding it, so that an absurdly nested document is refused in linear
// time and constant space. It returns the byte offset where the limit was
// exceeded, or -1.
func checkDepth(data []byte, limit int) int {
	depth := 0
	inString, escaped := false, false
	for i, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > limit {
				return i
			}
		case '}', ']':
			depth--
		}
	}
	return -1
}

// lineCol converts a byte offset into a 1-based line and column.
func lineCol(data []byte, offset int64) (int, int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset < 0 {
		offset = 0
	}
	before := data[:offset]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// syntaxError is a JSON syntax problem at a byte offset.
type syntaxError struct {
	offset int64
	msg    string
}

func (e *syntaxError) Error() string { return e.msg }

// checkSyntax validates JSON text with the scanner json.Unmarshal runs
// before decoding, whose error offsets, unlike those of
// json.Decoder.Token, always point just past the offending byte. Decoding
// into a RawMessage only copies the bytes.
func checkSyntax(data []byte) *syntaxError {
	var raw json.RawMessage
	err := json.Unmarshal(data, &raw)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return &syntaxError{offset: 0, msg: "syntax error: " + err.Error()}
	}
	if se.Offset >= int64(len(data)) && strings.HasPrefix(se.Error(), "unexpected end") {
		return &syntaxError{offset: int64(len(data)), msg: "syntax error: unexpected end of input"}
	}
	return &syntaxError{offset: se.Offset - 1, msg: "syntax error: " + se.Error()}
}

// parseTree decodes one JSON document into a node tree. The caller has
// checked the nesting depth, so the recursion is bounded, and the syntax,
// so errors here are not expected. Duplicate keys
// are reported through dup with the path and offset of the repeated key.
func parseTree(data []byte, dup func(path string, offset int64)) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	root, err := readValue(dec, "", dup)
	if err != nil {
		return nil, syntaxFrom(dec, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &syntaxError{offset: dec.InputOffset(), msg: "unexpected data after the top-level value"}
	}
	return root, nil
}

// syntaxFrom turns a decoder error into a syntaxError with an offset.
func syntaxFrom(dec *json.Decoder, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the bad one included.
		return &syntaxError{offset: se.Offset - 1, msg: "syntax error: " + se.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &syntaxError{offset: dec.InputOffset(), msg: "syntax error: unexpected end of input"}
	case errors.Is(err, errClose):
		return &syntaxError{offset: dec.InputOffset(), msg: "syntax error: unexpected closing bracket"}
	default:
		return &syntaxError{offset: dec.InputOffset(), msg: "syntax error: " + err.Error()}
	}
}

var errClose = errors.New("unexpected closing bracket")

func readValue(dec *json.Decoder, path string, dup func(string, int64)) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &node{offset: dec.InputOffset()}
	switch v := tok.(type) {
	case nil:
		n.kind = kindNull
	case bool:
		n.kind, n.b = kindBool, v
	case json.Number:
		n.kind, n.text = kindNumber, v.String()
	case string:
		n.kind, n.text = kindString, v
	case json.Delim:
		switch v {
		case '{':
			n.kind = kindObject
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				child, err := readValue(dec, fieldPath(path, key), dup)
				if err != nil {
					return nil, err
				}
				if seen[key] {
					dup(fieldPath(path, key), child.offset)
					continue
				}
				seen[key] = true
				n.keys = append(n.keys, key)
				n.items = append(n.items, child)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			n.end = dec.InputOffset()
		case '[':
			n.kind = kindList
			for dec.More() {
				child, err := readValue(dec, indexPath(path, len(n.items)), dup)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, child)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			n.end = dec.InputOffset()
		default:
			return nil, errClose
		}
	}
	return n, nil
}

// fieldPath appends an object key to a path: "a.b", or `a["0000:86:00.0"]`
// for keys that are not plain identifiers.
func fieldPath(path, key string) string {
	if !isIdent(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// indexPath appends a list index to a path.
func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
