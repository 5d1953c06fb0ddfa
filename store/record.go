package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/devledger/devledger/events"
)

// On-disk record format (see doc.go): the key is the sequence as 8 bytes
// big-endian, so that bbolt's byte order is sequence order; the value is a
// 4-byte big-endian CRC-32C (Castagnoli) followed by the record. The
// checksum covers the key and then the record, so a record that ends up
// under another key fails it just as a flipped bit does.

const (
	keySize = 8
	crcSize = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, keySize), seq) }

// keySeq decodes a key; ok is false for a key that is not 8 bytes.
func keySeq(k []byte) (uint64, bool) {
	if len(k) != keySize {
		return 0, false
	}
	return binary.BigEndian.Uint64(k), true
}

func checksum(key, rec []byte) uint32 {
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, rec)
}

// appendValue appends the stored value (checksum, then rec) of the record
// rec kept under seq; used for snapshots.
func appendValue(buf []byte, seq uint64, rec []byte) []byte {
	k := seqKey(seq)
	buf = binary.BigEndian.AppendUint32(buf, checksum(k, rec))
	return append(buf, rec...)
}

// openValue verifies a stored value against its key and returns the record
// it holds (aliasing v: valid only as long as v is).
func openValue(k, v []byte) ([]byte, error) {
	if len(v) < crcSize {
		return nil, fmt.Errorf("value of %d bytes is shorter than its checksum", len(v))
	}
	rec := v[crcSize:]
	want := binary.BigEndian.Uint32(v)
	if got := checksum(k, rec); got != want {
		return nil, fmt.Errorf("checksum mismatch (stored %08x, computed %08x over %d bytes)", want, got, len(rec))
	}
	return rec, nil
}

// encodeEvent appends the key and the value of e (whose Seq is set) to buf
// and returns buf and where the value starts. On error buf is returned as it
// was.
func encodeEvent(buf []byte, e events.Envelope) ([]byte, error) {
	start := len(buf)
	buf = binary.BigEndian.AppendUint64(buf, e.Seq)
	buf = append(buf, 0, 0, 0, 0)
	out, err := events.AppendMarshal(buf, e)
	if err != nil {
		return buf[:start], err
	}
	k := out[start : start+keySize]
	rec := out[start+keySize+crcSize:]
	binary.BigEndian.PutUint32(out[start+keySize:], checksum(k, rec))
	return out, nil
}

// decodeEvent verifies and decodes one stored event. Decoding copies every
// string and byte slice out of v (events.Unmarshal never aliases its input),
// so the envelope outlives the transaction that read v.
func decodeEvent(k, v []byte) (events.Envelope, error) {
	seq, _ := keySeq(k)
	rec, err := openValue(k, v)
	if err != nil {
		return events.Envelope{}, err
	}
	e, err := events.Unmarshal(rec)
	if err != nil {
		return e, err
	}
	if e.Seq != seq {
		return e, fmt.Errorf("record says seq %d, stored under seq %d", e.Seq, seq)
	}
	return e, nil
}

// decodeSnapshot verifies and decodes one stored snapshot.
func decodeSnapshot(k, v []byte) (events.State, error) {
	s, _, err := decodeSnapshotFormat(k, v)
	return s, err
}

// decodeSnapshotFormat is decodeSnapshot, with the snapshot's format.
func decodeSnapshotFormat(k, v []byte) (events.State, int, error) {
	seq, _ := keySeq(k)
	rec, err := openValue(k, v)
	if err != nil {
		return events.State{}, 0, err
	}
	s, format, err := events.UnmarshalSnapshot(rec)
	if err != nil {
		return s, 0, err
	}
	if s.Seq != seq {
		return s, 0, fmt.Errorf("snapshot state is at seq %d, stored under seq %d", s.Seq, seq)
	}
	return s, format, nil
}
