package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// ErrCorrupt is returned (wrapped) when a record cannot be decoded: it is
// truncated, carries impossible lengths, or has trailing bytes.
var ErrCorrupt = errors.New("corrupt event record")

// writer appends the primitive encodings used by every payload. Lengths and
// integers are varints; strings are a length then bytes; maps are written with
// sorted keys so that one value always has one encoding.
type writer struct{ buf []byte }

func (w *writer) uvarint(v uint64) { w.buf = binary.AppendUvarint(w.buf, v) }
func (w *writer) varint(v int64)   { w.buf = binary.AppendVarint(w.buf, v) }
func (w *writer) int(v int)        { w.varint(int64(v)) }

func (w *writer) bool(v bool) {
	if v {
		w.buf = append(w.buf, 1)
		return
	}
	w.buf = append(w.buf, 0)
}

func (w *writer) string(s string) {
	w.uvarint(uint64(len(s)))
	w.buf = append(w.buf, s...)
}

// time writes UTC nanoseconds since the Unix epoch; the zero time is 0.
func (w *writer) time(t time.Time) {
	if t.IsZero() {
		w.varint(0)
		return
	}
	w.varint(t.UnixNano())
}

func (w *writer) duration(d time.Duration) { w.varint(int64(d)) }

func (w *writer) strings(ss []string) {
	w.uvarint(uint64(len(ss)))
	for _, s := range ss {
		w.string(s)
	}
}

func (w *writer) uvarints(vs []uint64) {
	w.uvarint(uint64(len(vs)))
	for _, v := range vs {
		w.uvarint(v)
	}
}

func (w *writer) stringMap(m map[string]string) {
	w.uvarint(uint64(len(m)))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.string(k)
		w.string(m[k])
	}
}

// reader decodes what writer wrote. The first error sticks: after it every
// read returns a zero value, so decoders read all fields and check err once.
// No length is trusted beyond the bytes that remain, so a hostile record can
// neither panic the reader nor make it allocate more than a small multiple
// of its own size.
type reader struct {
	buf []byte
	off int
	err error
	// Once shareText was called, strings are cut from text, a copy of buf
	// from textAt on made at the first string: decoding a record then costs
	// one string allocation, not one per field, and none without strings.
	share  bool
	text   string
	textAt int
	// forFold says only what Apply reads is wanted: decoders may check the
	// other fields without building them (see UnmarshalForFold), and short
	// strings are interned.
	forFold bool
}

// shareText makes the strings read from here on share one copy of the rest
// of the record. They keep the whole copy alive as long as any of them is.
func (r *reader) shareText() {
	r.share = true
	r.textAt = r.off
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) remaining() int { return len(r.buf) - r.off }

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	// Most varints of a record are lengths under 128: one byte.
	if r.off < len(r.buf) && r.buf[r.off] < 0x80 {
		r.off++
		return uint64(r.buf[r.off-1])
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad unsigned varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// int reads what writer.int wrote. Every value of this platform's int reads
// back; only a record written on a 64-bit host with a value beyond 32 bits
// fails on a 32-bit one.
func (r *reader) int() int {
	v := r.varint()
	if int64(int(v)) != v {
		r.fail("integer %d out of range", v)
		return 0
	}
	return int(v)
}

func (r *reader) uint16() uint16 {
	v := r.uvarint()
	if v > math.MaxUint16 {
		r.fail("value %d out of range for uint16", v)
		return 0
	}
	return uint16(v)
}

func (r *reader) bool() bool {
	if r.err != nil {
		return false
	}
	if r.remaining() < 1 {
		r.fail("truncated bool")
		return false
	}
	b := r.buf[r.off]
	r.off++
	switch b {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("bad bool %d", b)
	return false
}

// length reads a count of items that each take at least minSize bytes and
// refuses counts the remaining bytes cannot hold.
func (r *reader) length(minSize int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	// n <= remaining, so n*minSize cannot overflow for any sane minSize.
	if left := uint64(r.remaining()); n > left || n*uint64(max(minSize, 1)) > left {
		r.fail("length %d exceeds the %d bytes left", n, r.remaining())
		return 0
	}
	return int(n)
}

func (r *reader) rawBytes() []byte {
	n := r.length(1)
	if r.err != nil {
		return nil
	}
	b := r.buf[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) string() string {
	b := r.rawBytes()
	switch {
	case len(b) == 0:
		return ""
	case r.forFold && len(b) <= internMax:
		return intern(b)
	case !r.share:
		return string(b)
	case r.text == "":
		r.text = string(r.buf[r.textAt:])
	}
	end := r.off - r.textAt
	return r.text[end-len(b) : end]
}

// internMax is the longest string intern keeps: PCI addresses, pool names,
// drivers, vendor names.
const internMax = 64

// interned is a cache of the strings a fold keeps (pool names and PCI
// addresses, mostly): a node has few of them and a ledger repeats them in
// every event. One slot per hash, the newest string wins.
var interned [4096]atomic.Pointer[string]

var internSeed = maphash.MakeSeed()

// intern returns b as a string, the same string each time if it can.
func intern(b []byte) string {
	slot := &interned[maphash.Bytes(internSeed, b)%uint64(len(interned))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}

// skipStrings reads what strings reads and keeps none of it.
func (r *reader) skipStrings() {
	for range r.length(1) {
		r.rawBytes()
	}
}

// lastBootID holds the boot id most recently decoded. A ledger holds long runs
// of events of one boot, so reusing the string saves an allocation per event.
var lastBootID atomic.Pointer[string]

// bootID reads a string like string does, returning the cached boot id when
// the bytes are the same.
func (r *reader) bootID() string {
	b := r.rawBytes()
	if len(b) == 0 {
		return ""
	}
	if last := lastBootID.Load(); last != nil && *last == string(b) {
		return *last
	}
	s := string(b)
	lastBootID.Store(&s)
	return s
}

func (r *reader) time() time.Time {
	v := r.varint()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

func (r *reader) duration() time.Duration { return time.Duration(r.varint()) }

func (r *reader) strings() []string {
	n := r.length(1)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = r.string()
	}
	return ss
}

func (r *reader) uvarints() []uint64 {
	n := r.length(1)
	if n == 0 {
		return nil
	}
	vs := make([]uint64, n)
	for i := range vs {
		vs[i] = r.uvarint()
	}
	return vs
}

func (r *reader) stringMap() map[string]string {
	n := r.length(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := r.string()
		m[k] = r.string()
	}
	return m
}

// end fails the read when bytes are left over: a record is exactly its fields.
func (r *reader) end() {
	if r.err == nil && r.remaining() != 0 {
		r.fail("%d trailing bytes", r.remaining())
	}
}
