package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
)

// bbolt trusts the page graph of its file: a branch that points back at
// itself sends a cursor round for ever (growing its stack until memory
// runs out), and one that points past the file reads outside the mapping.
// walkPages checks that graph without bbolt, reading the file's pages, so
// that a damaged file is refused before bbolt walks it.

// Page layout of bbolt's file format 2: a 16-byte header (id, flags, count,
// overflow), then 16-byte elements whose key and value offsets are
// relative to the element.
const (
	pageBranch = 0x01
	pageLeaf   = 0x02
	elemSize   = 16
	// A bucket's value: its root page (0: inline, the page follows) and
	// its sequence.
	bucketHeader   = 16
	bucketLeafFlag = 0x01
	// maxDepth bounds the nesting of pages and buckets; a sound ledger
	// uses a handful.
	maxDepth = 64
)

// pageWalk is one walk over the file's page graph.
type pageWalk struct {
	ctx      context.Context
	read     int // pages read, for how often ctx is asked
	f        *os.File
	pageSize int
	// pages is the file's page count by the meta (its high-water mark).
	pages uint64
	seen  []bool
	bufs  [][]byte
	// damage is the first problem that bbolt survives (its assertions on
	// a page that is not what it should be are recovered): reads go on
	// around it.
	damage string
}

// walkPages checks every page reachable from the root bucket of the meta
// page at metaAt: that it lies inside the file, is reached once, and, when
// it is, that it is the page it should be and its elements lie inside it.
// fatal is a problem bbolt cannot survive (a loop, a page outside the
// file); damage the first it can. A walk ctx ended stops with ctx's error
// as fatal: no damage.
func walkPages(ctx context.Context, f *os.File, pageSize int, meta []byte) (fatal error, damage string) {
	le := binary.LittleEndian
	w := &pageWalk{ctx: ctx, f: f, pageSize: pageSize, pages: le.Uint64(meta[pageHeader+40:])}
	if fi, err := f.Stat(); err == nil && uint64(fi.Size()) < w.pages*uint64(pageSize) {
		// Open refuses a truncated file before this; be safe anyway.
		return fmt.Errorf("truncated: the file has %d bytes, its meta page counts %d (%d pages of %d)", fi.Size(), w.pages*uint64(pageSize), w.pages, pageSize), ""
	}
	if w.pages > 1<<40 {
		return fmt.Errorf("the meta page counts %d pages", w.pages), ""
	}
	w.seen = make([]bool, w.pages)
	root := le.Uint64(meta[pageHeader+16:])
	if err := w.tree(root, "", 0); err != nil {
		return err, w.damage
	}
	return nil, w.damage
}

// tree checks the page pgid and what it points to, in bucket.
func (w *pageWalk) tree(pgid uint64, bucket string, depth int) error {
	where := "the bucket directory"
	if bucket != "" {
		where = "bucket " + strconv.Quote(bucket)
	}
	switch {
	case depth > maxDepth:
		return fmt.Errorf("page %d, in %s, is %d levels deep: the page tree loops", pgid, where, depth)
	case pgid < 2 || pgid >= w.pages:
		return fmt.Errorf("%s points to page %d, outside the file's %d pages", where, pgid, w.pages)
	case w.seen[pgid]:
		return fmt.Errorf("%s points to page %d, which another page points to too: the page tree loops or is crossed", where, pgid)
	}
	// One buffer per level: a page's children are read after it is
	// parsed.
	for len(w.bufs) <= depth {
		w.bufs = append(w.bufs, make([]byte, w.pageSize))
	}
	if w.read%4096 == 0 {
		if err := w.ctx.Err(); err != nil {
			return err
		}
	}
	w.read++
	p := w.bufs[depth][:w.pageSize]
	if _, err := w.f.ReadAt(p, int64(pgid)*int64(w.pageSize)); err != nil {
		return fmt.Errorf("page %d, in %s, cannot be read: %v", pgid, where, err)
	}
	le := binary.LittleEndian
	id, overflow := le.Uint64(p), uint64(le.Uint32(p[12:]))
	if id != pgid {
		w.note(fmt.Sprintf("page %d, in %s, is damaged (it says it is page %d)", pgid, where, id))
		w.seen[pgid] = true
		return nil
	}
	if pgid+1+overflow > w.pages {
		return fmt.Errorf("page %d, in %s, says it runs on for %d more pages, past the file's %d", pgid, where, overflow, w.pages)
	}
	for i := pgid; i <= pgid+overflow; i++ {
		if w.seen[i] {
			return fmt.Errorf("page %d, in %s, runs over page %d, which another page holds: the page tree is crossed", pgid, where, i)
		}
		w.seen[i] = true
	}
	if overflow > 0 {
		size := (1 + overflow) * uint64(w.pageSize)
		if uint64(cap(w.bufs[depth])) < size {
			w.bufs[depth] = make([]byte, size)
		}
		p = w.bufs[depth][:size]
		if _, err := w.f.ReadAt(p, int64(pgid)*int64(w.pageSize)); err != nil {
			return fmt.Errorf("page %d, in %s, cannot be read: %v", pgid, where, err)
		}
	}
	return w.node(p, pgid, bucket, where, depth)
}

// node checks the elements of a branch or leaf page p (pgid 0: a bucket's
// inline page) and walks what they point to, as bbolt's cursor does: a
// page without the leaf flag is read as a branch.
func (w *pageWalk) node(p []byte, pgid uint64, bucket, where string, depth int) error {
	le := binary.LittleEndian
	name := "the inline page"
	if pgid != 0 {
		name = "page " + strconv.FormatUint(pgid, 10)
	}
	if len(p) < pageHeader {
		return fmt.Errorf("%s, in %s, is shorter than a page header", name, where)
	}
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	if flags != pageBranch && flags != pageLeaf {
		w.note(fmt.Sprintf("%s, in %s, is damaged (flags %#x: not a branch or a leaf)", name, where, flags))
	}
	if pageHeader+count*elemSize > len(p) {
		return fmt.Errorf("%s, in %s, is damaged (%d elements do not fit in it)", name, where, count)
	}
	// A cursor reads a branch's first and last element whatever its count,
	// and an inline page's "children" are the inline page again.
	if flags&pageLeaf == 0 && pgid == 0 {
		return fmt.Errorf("%s, in %s, is damaged (flags %#x: an inline page is a leaf)", name, where, flags)
	}
	if flags&pageLeaf == 0 && count == 0 {
		return fmt.Errorf("%s, in %s, is damaged (a branch with no elements)", name, where)
	}
	type child struct {
		pgid   uint64
		inline []byte
		bucket string
	}
	var children []child
	for i := range count {
		e := pageHeader + i*elemSize
		if flags&pageLeaf == 0 {
			pos, ksize := int(le.Uint32(p[e:])), int(le.Uint32(p[e+4:]))
			if e+pos+ksize > len(p) {
				w.note(fmt.Sprintf("%s, in %s, is damaged (the key of element %d lies outside it)", name, where, i))
			}
			children = append(children, child{pgid: le.Uint64(p[e+8:]), bucket: bucket})
			continue
		}
		eflags, pos, ksize, vsize := le.Uint32(p[e:]), int(le.Uint32(p[e+4:])), int(le.Uint32(p[e+8:])), int(le.Uint32(p[e+12:]))
		inside := e+pos+ksize+vsize <= len(p)
		if eflags&bucketLeafFlag == 0 {
			if !inside {
				w.note(fmt.Sprintf("%s, in %s, is damaged (element %d lies outside it)", name, where, i))
			}
			continue
		}
		if !inside || vsize < bucketHeader {
			return fmt.Errorf("%s, in %s, is damaged (the bucket header of element %d lies outside it)", name, where, i)
		}
		key, value := p[e+pos:e+pos+ksize], p[e+pos+ksize:e+pos+ksize+vsize]
		nested := string(key)
		if bucket != "" {
			nested = bucket + "/" + nested
		}
		c := child{pgid: le.Uint64(value), bucket: nested}
		if c.pgid == 0 {
			c.inline = value[bucketHeader:]
		}
		children = append(children, c)
	}
	for _, c := range children {
		var err error
		if c.inline != nil {
			err = w.node(c.inline, 0, c.bucket, "bucket "+strconv.Quote(c.bucket), depth+1)
		} else {
			err = w.tree(c.pgid, c.bucket, depth+1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// note keeps the first damage bbolt survives.
func (w *pageWalk) note(problem string) {
	if w.damage == "" {
		w.damage = problem
	}
}
