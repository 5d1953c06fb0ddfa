package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devledger/devledger/events"
)

// SalvageReport says what Salvage found in a damaged ledger and wrote to
// the new one.
type SalvageReport struct {
	// Events is how many intact event records were copied; FirstSeq and
	// LastSeq bound the new ledger (lost events included).
	Events            uint64
	FirstSeq, LastSeq uint64
	// FromTree is how many of them were read the way bbolt reads the file;
	// the others were found on its pages (a page the tree no longer
	// reaches, past the damage).
	FromTree uint64
	// Lost are the sequences with no intact record, in ranges; each holds
	// an events.EventLost in the new ledger.
	Lost []LostRange
	// Snapshot is the sequence of the snapshot copied: the one retention
	// kept when it dropped the oldest events, which the state starts from.
	// SnapshotLost is its sequence when no intact copy of it was found:
	// the state before FirstSeq is then not in the new ledger.
	Snapshot, SnapshotLost uint64
	// Conflicts are sequences with two different intact records (two
	// histories written over one another, after a torn meta page): the one
	// bbolt's tree holds, else the later, was kept.
	Conflicts []uint64
}

// LostRange is a run of lost sequences, From to To. Types has the
// sequences of which a damaged record was found, with the type it still
// says ("" when not even that reads).
type LostRange struct {
	From, To uint64
	Types    map[uint64]events.Type
}

// Salvage copies every intact event of the ledger file at path, damaged as
// it may be, into a new ledger at out (which must not exist), each under
// its own sequence. It reads the file twice: the way bbolt does, as far as
// that goes, and then page by page, so that events past a damaged page are
// found too. Every record is verified (checksum, decoding, sequence); one
// of a type or schema version this build does not know (a newer
// devledger's, after a rollback) is intact, and copied as it is. A
// sequence with no intact record gets an events.EventLost in its place,
// from the first event found (from #1 when no snapshot found stands for the
// events before it) to the last the ledger says it reached, so that the new
// ledger is whole and the loss is in it. Of the snapshots, only the one
// retention kept before the first event is copied: the daemon takes new
// ones. The new ledger appears at out only once it is complete: it is
// built in a temporary directory beside out (".NAME.salvage-*", left
// behind only by a salvage killed while it ran), and on error nothing is
// at out.
func Salvage(path, out string) (SalvageReport, error) {
	var rep SalvageReport
	if _, err := os.Lstat(out); err == nil {
		return rep, fmt.Errorf("salvage into %s: it exists", out)
	}
	// The file is mapped, not read into memory, and each record is kept
	// once: reading it in and keeping a copy of each record from the
	// tree and another from the pages took seven times the file's size.
	data, unmap, err := mapFile(path)
	if err != nil {
		return rep, fmt.Errorf("salvage %s: %w", path, err)
	}
	defer unmap()
	// The new ledger is built under a temporary name beside out and
	// linked into place only once complete: one cut short (a full disk,
	// a kill) must not be left under out, where it would verify as a
	// sound ledger holding only part of what was salvaged.
	tmpDir, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".salvage-*")
	if err != nil {
		return rep, fmt.Errorf("salvage into %s: %w", out, err)
	}
	defer os.RemoveAll(tmpDir)
	building := filepath.Join(tmpDir, filepath.Base(out))
	err = whileMapped(path, func() (err error) {
		rep, err = salvage(data, path, building)
		if err != nil && !errors.Is(err, ErrNotLedger) && !errors.Is(err, ErrNewerFormat) {
			// Named after out: the temporary name is gone on return.
			err = fmt.Errorf("salvage into %s: %w", out, unnamed(err))
		}
		return err
	})
	if err != nil {
		return rep, err
	}
	if err := placeNew(building, out); err != nil {
		return rep, fmt.Errorf("salvage into %s: %w", out, err)
	}
	return rep, nil
}

// whileMapped runs fn, which reads the file at path mapped: should the
// file be cut short meanwhile, the read faults, and that is fn's error.
func whileMapped(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if !isFault(p) {
				panic(p)
			}
			err = fmt.Errorf("salvage %s: the file changed while it was read (%v)", path, p)
		}
	}()
	return fn()
}

// salvage is Salvage's work on data, the file at path mapped.
func salvage(data []byte, path, out string) (SalvageReport, error) {
	var rep SalvageReport
	found := map[uint64][][]byte{}
	damaged := map[uint64]events.Type{}
	snaps := map[uint64][]byte{}
	salvagePages(data, found, damaged, snaps)
	tree := map[uint64][]byte{}
	node, treeLast, counted, err := salvageTree(path, tree, found)
	if err != nil {
		return rep, err
	}
	// Events retention dropped stay dropped, though their pages may
	// still hold them: the ledger starts after the newest drop it
	// recorded, from the snapshot that drop kept. A drop's transaction
	// deleted the events up to its ToSeq, so one the tree still holds
	// events of never committed (its record is on pages a crash, or a
	// copy of a live file, caught before the meta page): it drops nothing.
	treeFirst := uint64(math.MaxUint64)
	for seq := range tree {
		treeFirst = min(treeFirst, seq)
	}
	var dropped events.EventsDropped
	newer := func(rec []byte) {
		if typ, _ := events.PeekType(rec); typ != events.TypeEventsDropped {
			return
		}
		if e, err := events.Unmarshal(rec); err == nil {
			if d, ok := e.Payload.(events.EventsDropped); ok && d.ToSeq > dropped.ToSeq && d.ToSeq < treeFirst {
				dropped = d
			}
		}
	}
	for _, rec := range tree {
		newer(rec)
	}
	for seq, cands := range found {
		if counted && seq > treeLast {
			continue // never committed (see below)
		}
		for _, rec := range cands {
			newer(rec)
		}
	}
	var seqs []uint64
	for seq := range tree {
		seqs = append(seqs, seq)
	}
	for seq := range found {
		// Past the counter of a ledger read through its newest meta page,
		// a record is of a transaction that never committed: the ledger
		// never held it, whatever damage lies before it.
		if _, ok := tree[seq]; !ok && !(counted && seq > treeLast) {
			seqs = append(seqs, seq)
		}
	}
	seqs = slices.DeleteFunc(seqs, func(seq uint64) bool { return seq <= dropped.ToSeq })
	if len(seqs) == 0 {
		return rep, newError(ErrNotLedger, "salvage %s: no intact event found: not a devledger ledger, or one with nothing left in it", path)
	}
	slices.Sort(seqs)
	rep.FirstSeq, rep.LastSeq = seqs[0], max(seqs[len(seqs)-1], treeLast)
	if _, ok := snaps[rep.FirstSeq-1]; dropped.ToSeq > 0 {
		rep.FirstSeq = dropped.ToSeq + 1
	} else if !ok {
		// No drop, and no snapshot before the first event found to stand
		// for what came before: the start is lost, and EventLost stands
		// for each event of it.
		rep.FirstSeq = 1
	}

	l, err := Open(out, Options{Node: node, LockTimeout: time.Second})
	if err != nil {
		return rep, err
	}
	if l.LastSeq() != 0 {
		l.Close()
		return rep, fmt.Errorf("salvage into %s: it is not empty", out)
	}
	// The state before the first event: the snapshot the drop kept, or,
	// when the drop's own record is lost, an intact one just before it.
	snapSeq := dropped.SnapshotSeq
	if _, ok := snaps[rep.FirstSeq-1]; dropped.ToSeq == 0 && rep.FirstSeq > 1 && ok {
		snapSeq = rep.FirstSeq - 1
	}
	if snapSeq > 0 {
		snap, ok := snaps[snapSeq]
		if !ok {
			rep.SnapshotLost = snapSeq
		} else if err := l.importSnapshot(snapSeq, snap); err != nil {
			l.Close()
			return rep, err
		} else {
			rep.Snapshot = snapSeq
		}
	}
	// Records go in batches: a transaction per batch, in sequence order.
	const batch = 4096
	var keys, values [][]byte
	var prevTime time.Time
	flush := func() error {
		err := l.importRecords(keys, values)
		keys, values = keys[:0], values[:0]
		return err
	}
	for seq := rep.FirstSeq; seq <= rep.LastSeq; seq++ {
		rec, ok := tree[seq]
		if ok {
			rep.FromTree++
			for _, other := range found[seq] {
				if !bytes.Equal(other, rec) {
					rep.Conflicts = append(rep.Conflicts, seq)
					break
				}
			}
		} else if cands := found[seq]; len(cands) > 0 {
			rec = latest(cands)
			if len(cands) > 1 {
				rep.Conflicts = append(rep.Conflicts, seq)
			}
		}
		if rec != nil {
			rep.Events++
			e, _ := events.Unmarshal(rec)
			prevTime = e.Time
		} else {
			typ, seen := damaged[seq]
			rep.lose(seq, typ, seen)
			lost := events.EventLost{Reason: "no record of it in the damaged ledger"}
			if typ, seen := damaged[seq]; seen {
				lost.Type, lost.Reason = string(typ), "its record in the damaged ledger fails its checksum"
			}
			e := events.New(lost, prevTime, "salvage")
			e.Seq = seq
			if rec, err = events.Marshal(e); err != nil {
				l.Close()
				return rep, err
			}
		}
		keys = append(keys, seqKey(seq))
		values = append(values, appendValue(nil, seq, rec))
		if len(keys) == batch {
			if err := flush(); err != nil {
				l.Close()
				return rep, err
			}
		}
	}
	if err := flush(); err != nil {
		l.Close()
		return rep, err
	}
	return rep, l.Close()
}

// lose notes seq as lost; typ is what its damaged record said, if one was
// found (seen).
func (r *SalvageReport) lose(seq uint64, typ events.Type, seen bool) {
	if n := len(r.Lost); n == 0 || r.Lost[n-1].To+1 != seq {
		r.Lost = append(r.Lost, LostRange{From: seq, To: seq, Types: map[uint64]events.Type{}})
	}
	last := &r.Lost[len(r.Lost)-1]
	last.To = seq
	if seen {
		last.Types[seq] = typ
	}
}

// readable decodes rec, a record whose checksum holds, as far as salvage
// needs: its header. One of a type or schema version this build does not
// know was written by a newer devledger (a rollback): it is intact, and is
// copied as it is, not taken for lost.
func readable(rec []byte) (events.Envelope, bool) {
	e, err := events.Unmarshal(rec)
	return e, err == nil || errors.Is(err, events.ErrUnknownType) || errors.Is(err, events.ErrUnknownVersion)
}

// latest is the record, of several intact ones for one sequence, stamped
// latest: after a torn meta page bbolt wrote a second history over the
// first, and the later one is what the ledger went on from.
func latest(cands [][]byte) []byte {
	best, bestTime := cands[0], time.Time{}
	for _, c := range cands {
		if e, ok := readable(c); ok && e.Time.After(bestTime) {
			best, bestTime = c, e.Time
		}
	}
	return best
}

// salvageTree reads what bbolt can of the file into tree (record bytes by
// sequence), stopping at the first damage, and returns the ledger's node
// name, the last sequence it says it reached (0 when it cannot say), and
// whether that says where the ledger ends: bbolt opened the file through
// its newest meta page, with no damage there or in the counter (then
// nothing committed lies beyond, though records before it be damaged). A
// record the pages gave already (found) is kept as that one, else copied.
func salvageTree(path string, tree map[uint64][]byte, found map[uint64][][]byte) (node string, last uint64, counted bool, err error) {
	l, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if errors.Is(err, ErrNewerFormat) {
		// No damage, and a layout this build does not know: its pages
		// are not to be read as this format's.
		return "", 0, false, fmt.Errorf("%w: salvage it with a devledger that reads that format", err)
	}
	if err != nil {
		return "", 0, false, nil
	}
	defer l.Close()
	// Damage ends this read; the pages' read finds what lies past it.
	_ = l.ReadRaw(0, func(seq uint64, rec []byte) error {
		if e, ok := readable(rec); ok && e.Seq == seq {
			i := slices.IndexFunc(found[seq], func(c []byte) bool { return bytes.Equal(c, rec) })
			if i >= 0 {
				tree[seq] = found[seq][i]
			} else {
				tree[seq] = bytes.Clone(rec)
			}
		}
		return nil
	})
	return l.Meta().Node, l.LastSeq(), l.Damage() == nil, nil
}

// salvagePages reads every leaf page of the file (and the inline pages of
// buckets within them), whatever reaches it, and keeps each intact event
// record it finds in found, by sequence; damaged notes the type a record
// that fails its checksum still says.
func salvagePages(data []byte, found map[uint64][][]byte, damaged map[uint64]events.Type, snaps map[uint64][]byte) {
	var kept slab
	pageSize := salvagePageSize(data)
	for pgid := 2; (pgid+1)*pageSize <= len(data); pgid++ {
		p := data[pgid*pageSize:]
		le := binary.LittleEndian
		if le.Uint64(p) != uint64(pgid) || le.Uint16(p[8:]) != pageLeaf {
			continue
		}
		span := (1 + int(le.Uint32(p[12:]))) * pageSize
		if pgid*pageSize+span > len(data) {
			span = len(data) - pgid*pageSize
		}
		salvageLeaf(p[:span], 0, &kept, found, damaged, snaps)
	}
}

// slab holds copies of records in large blocks: a million records, each
// its own allocation, took 50 MB more at the peak here.
type slab struct{ buf []byte }

// copy returns a copy of b; undo takes back the last one, unkept.
func (s *slab) copy(b []byte) []byte {
	if len(b) > cap(s.buf)-len(s.buf) {
		s.buf = make([]byte, 0, max(1<<20, len(b)))
	}
	n := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[n:len(s.buf):len(s.buf)]
}

func (s *slab) undo(b []byte) { s.buf = s.buf[:len(s.buf)-len(b)] }

// mapFile maps the file at path read-only, or reads it where the OS maps
// no file as unix does (mapRegular); unmap ends the mapping.
// Opened without blocking: a FIFO would wait for a writer before its
// mode could be seen.
func mapFile(path string) (data []byte, unmap func(), err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, unnamed(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, unnamed(err)
	}
	if fi.IsDir() {
		return nil, nil, fmt.Errorf("a directory, not a ledger file: %w", ErrNotLedger)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("not a regular file: %w", ErrNotLedger)
	}
	if fi.Size() == 0 {
		return nil, func() {}, nil
	}
	if int64(int(fi.Size())) != fi.Size() {
		return nil, nil, fmt.Errorf("%d bytes: too large to map", fi.Size())
	}
	return mapRegular(f, int(fi.Size()))
}

// readRegular reads the first size bytes of the regular file f into
// memory: mapRegular where the OS maps no file as unix does (Windows,
// where the tools read a copy of a node's ledger). A file cut short
// meanwhile is an error here, not a fault.
func readRegular(f *os.File, size int) (data []byte, unmap func(), err error) {
	data = make([]byte, size)
	if _, err := io.ReadFull(f, data); errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, nil, errors.New("the file was cut short while it was read")
	} else if err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	return data, func() {}, nil
}

// unnamed is err without the path an fs.PathError names: the caller
// names it.
func unnamed(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// salvageLeaf keeps the records of the leaf page p (depth: of inline
// buckets within it).
func salvageLeaf(p []byte, depth int, kept *slab, found map[uint64][][]byte, damaged map[uint64]events.Type, snaps map[uint64][]byte) {
	le := binary.LittleEndian
	if len(p) < pageHeader || depth > 4 {
		return
	}
	count := int(le.Uint16(p[10:]))
	for i := range count {
		e := pageHeader + i*elemSize
		if e+elemSize > len(p) {
			return
		}
		flags, pos, ksize, vsize := le.Uint32(p[e:]), int(le.Uint32(p[e+4:])), int(le.Uint32(p[e+8:])), int(le.Uint32(p[e+12:]))
		if e+pos+ksize+vsize > len(p) {
			continue
		}
		k, v := p[e+pos:e+pos+ksize], p[e+pos+ksize:e+pos+ksize+vsize]
		if flags&bucketLeafFlag != 0 {
			if len(v) > bucketHeader && le.Uint64(v) == 0 && le.Uint16(v[bucketHeader+8:]) == pageLeaf {
				salvageLeaf(v[bucketHeader:], depth+1, kept, found, damaged, snaps)
			}
			continue
		}
		seq, ok := keySeq(k)
		if !ok {
			continue
		}
		// Checked and kept as a copy: the file may have a writer (a live
		// daemon's ledger), which could change the mapped bytes between
		// the check and their use.
		kv := kept.copy(p[e+pos : e+pos+ksize+vsize])
		k, v = kv[:ksize], kv[ksize:]
		keep := false
		rec, err := openValue(k, v)
		if err != nil {
			// What the damaged record still says of itself, if anything
			// ("" when not even its type reads).
			if len(v) > crcSize {
				typ, _ := events.PeekType(v[crcSize:])
				if prev, seen := damaged[seq]; !seen || prev == "" {
					damaged[seq] = typ
				}
			}
			kept.undo(kv)
			continue
		}
		ev, ok := readable(rec)
		switch {
		case !ok || ev.Seq != seq:
			if _, err := decodeSnapshot(k, v); err == nil {
				snaps[seq], keep = v, true
			}
		case !slices.ContainsFunc(found[seq], func(b []byte) bool { return bytes.Equal(b, rec) }):
			found[seq], keep = append(found[seq], rec), true
		}
		if !keep {
			kept.undo(kv)
		}
	}
}

// salvagePageSize is the file's page size: the one a meta page that
// checks says (the first, at 0, or the second, one page in), else the one
// most page headers agree with. Hosts with 16K or 64K pages make ledgers
// of that size, and a scan at another size finds no page at all.
func salvagePageSize(data []byte) int {
	le := binary.LittleEndian
	meta := func(off int) int {
		if off+pageHeader+metaSize > len(data) {
			return 0
		}
		m := data[off+pageHeader : off+pageHeader+metaSize]
		h := fnv.New64a()
		h.Write(m[:metaSize-8])
		ps := int(le.Uint32(m[8:]))
		if le.Uint32(m) != bboltMagic || le.Uint64(m[metaSize-8:]) != h.Sum64() || ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
			return 0
		}
		return ps
	}
	if ps := meta(0); ps != 0 {
		return ps
	}
	for ps := minPageSize; ps <= maxPageSize; ps *= 2 {
		if meta(ps) == ps {
			return ps
		}
	}
	// Both meta pages are damaged: a page begins with its own id, and at
	// a wrong size next to none does.
	best, most := 4096, 0
	for ps := minPageSize; ps <= maxPageSize; ps *= 2 {
		n := 0
		for pgid := 2; (pgid+1)*ps <= len(data); pgid++ {
			if le.Uint64(data[pgid*ps:]) == uint64(pgid) {
				n++
			}
		}
		if n > most {
			best, most = ps, n
		}
	}
	return best
}

// The sizes bbolt takes for a page, and the size of its meta record (magic,
// version, page size, flags, root bucket, freelist, high water, txid,
// checksum: an FNV-64a of what comes before it).
const (
	minPageSize = 512
	maxPageSize = 1 << 16
	metaSize    = 64
)

// importSnapshot writes a stored snapshot (its value as found) into the
// ledger being salvaged into.
func (l *Log) importSnapshot(seq uint64, value []byte) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).Put(seqKey(seq), value)
	})
}

// importRecords writes stored records (key, value) into the events bucket
// of an empty ledger being salvaged into, in one transaction, and moves
// the bucket's sequence to the last.
func (l *Log) importRecords(keys, values [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	last, _ := keySeq(keys[len(keys)-1])
	err := l.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		b.FillPercent = 1
		for i := range keys {
			if err := b.Put(keys[i], values[i]); err != nil {
				return err
			}
		}
		return b.SetSequence(last)
	})
	if err != nil {
		return err
	}
	if l.firstSeq.Load() == 0 {
		first, _ := keySeq(keys[0])
		l.firstSeq.Store(first)
	}
	l.lastSeq.Store(last)
	return nil
}
