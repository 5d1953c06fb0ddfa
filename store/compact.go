package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactTxBytes bounds what one write transaction of a compaction
// copies: bbolt holds a transaction's dirty pages in memory until it
// commits, and a ledger can be gigabytes.
const compactTxBytes = 32 << 20

// CompactReport says what CompactTo wrote.
type CompactReport struct {
	// Before is the size of the ledger file, After that of the copy, in
	// bytes.
	Before, After int64
	// Check is what Check found in the copy, which is what it found in
	// the ledger: the same events, bounds and snapshots.
	Check CheckReport
}

// CompactTo writes a copy of the ledger into a new file at out (which must
// not exist) that takes only the pages its data needs: the pages
// retention freed, which bbolt reuses but never gives back to the file
// system, are left behind. Everything the file holds is copied as it is:
// every bucket, key and value byte for byte (events, snapshots, meta: its
// node, format version and creation time, and any key this build does
// not know of), and each bucket's sequence counter, packed into full
// pages of the ledger's page size (bbolt.Compact).
//
// l must be open read-only, so that no writer changes it meanwhile: a
// daemon holds the file exclusively, and a compacted copy can take the
// place of a ledger only while no daemon writes to it anyway.
//
// A ledger that is not sound is refused before anything is written:
// damage Open read past (Damage), and any problem Check finds, as a
// *CorruptError (Salvage copies what is intact); events of a newer
// devledger, which Check cannot verify, wrap events.ErrUnknownType or
// events.ErrUnknownVersion. The copy is verified before it appears at out:
// the same meta and bounds, every bucket and counter equal byte for byte,
// and a Check that finds what it found in the ledger. It is built in a
// temporary directory beside out (".NAME.compact-*", left behind only by
// a compaction killed while it ran); on error nothing is at out.
func (l *Log) CompactTo(ctx context.Context, out string) (CompactReport, error) {
	var rep CompactReport
	if !l.readOnly {
		return rep, fmt.Errorf("compact ledger %s: it is open for writing; compaction reads a ledger opened read-only, which no writer changes meanwhile", l.path)
	}
	if _, err := os.Lstat(out); err == nil {
		return rep, fmt.Errorf("compact into %s: it exists", out)
	}
	if err := l.Damage(); err != nil {
		return rep, err
	}
	check, err := l.Check(ctx)
	if err != nil {
		return rep, err
	}
	// Check notes what it reads past (an unreadable snapshot): a ledger
	// with any of that is not copied as sound.
	if err := l.Damage(); err != nil {
		return rep, err
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".compact-*")
	if err != nil {
		return rep, fmt.Errorf("compact into %s: %w", out, unnamed(err))
	}
	defer os.RemoveAll(tmpDir)
	building := filepath.Join(tmpDir, filepath.Base(out))
	if err := l.compactInto(building); err != nil {
		return rep, fmt.Errorf("compact into %s: %w", out, unnamed(err))
	}
	if rep.Check, err = l.verifyCompacted(ctx, building, check); err != nil {
		return rep, fmt.Errorf("compact into %s: the copy does not verify: %w", out, err)
	}
	if err := placeNew(building, out); err != nil {
		return rep, fmt.Errorf("compact into %s: %w", out, err)
	}
	rep.Before = l.SizeBytes()
	if fi, err := os.Stat(out); err == nil {
		rep.After = fi.Size()
	}
	l.log.Info().Str("path", l.path).Str("out", out).Int64("size_before", rep.Before).
		Int64("size_after", rep.After).Msg("ledger compacted")
	return rep, nil
}

// compactInto copies the ledger into a new bbolt file at path, of the
// ledger's page size.
func (l *Log) compactInto(path string) (err error) {
	dst, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, PageSize: l.db.Info().PageSize})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}()
	// As viewRecover: bbolt panics on a damaged page, which Check found
	// none of, but a file can change under a shared lock all the same.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptError{Path: l.path, Reason: boltProblem(p)}
		}
	}()
	return bolt.Compact(dst, l.db, compactTxBytes)
}

// verifyCompacted checks the copy at path against the ledger, whose Check
// found want, and returns what Check finds in the copy.
func (l *Log) verifyCompacted(ctx context.Context, path string, want CheckReport) (CheckReport, error) {
	c, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		return CheckReport{}, err
	}
	defer c.Close()
	if err := c.Damage(); err != nil {
		return CheckReport{}, err
	}
	a, b := l.Meta(), c.Meta()
	if a.FormatVersion != b.FormatVersion || a.Node != b.Node || !a.Created.Equal(b.Created) {
		return CheckReport{}, fmt.Errorf("its meta says format %d, node %q, created %s; the ledger's, format %d, node %q, created %s",
			b.FormatVersion, b.Node, b.Created, a.FormatVersion, a.Node, a.Created)
	}
	if c.FirstSeq() != l.FirstSeq() || c.LastSeq() != l.LastSeq() {
		return CheckReport{}, fmt.Errorf("it holds #%d-#%d, the ledger #%d-#%d", c.FirstSeq(), c.LastSeq(), l.FirstSeq(), l.LastSeq())
	}
	if err := sameContents(l, c); err != nil {
		return CheckReport{}, err
	}
	got, err := c.Check(ctx)
	if err != nil {
		return got, err
	}
	if got.Events != want.Events || got.Snapshots != want.Snapshots || got.Newer != want.Newer ||
		got.FirstSeq != want.FirstSeq || got.LastSeq != want.LastSeq {
		return got, fmt.Errorf("its check found %d events (#%d-#%d) and %d snapshots (%d newer), the ledger's %d events (#%d-#%d) and %d snapshots (%d newer)",
			got.Events, got.FirstSeq, got.LastSeq, got.Snapshots, got.Newer, want.Events, want.FirstSeq, want.LastSeq, want.Snapshots, want.Newer)
	}
	return got, nil
}

// sameContents says how the files of a and b differ, nil when they hold
// the same buckets, keys, values and bucket sequence counters.
func sameContents(a, b *Log) error {
	return a.view(func(ta *bolt.Tx) error {
		return b.view(func(tb *bolt.Tx) error {
			return sameIn("", ta, tb)
		})
	})
}

// bucketed is a bucket, or a transaction's top level of buckets.
type bucketed interface {
	Bucket(name []byte) *bolt.Bucket
	Cursor() *bolt.Cursor
}

// sameIn compares a and b, the bucket named where (its path from the
// top, "" for the top), key by key, and the buckets within them.
func sameIn(where string, a, b bucketed) error {
	ca, cb := a.Cursor(), b.Cursor()
	ka, va := ca.First()
	kb, vb := cb.First()
	for ka != nil || kb != nil {
		switch {
		case ka == nil || kb != nil && bytes.Compare(ka, kb) > 0:
			return fmt.Errorf("%s: key %x, which the ledger lacks", bucketPath(where), kb)
		case kb == nil || !bytes.Equal(ka, kb):
			return fmt.Errorf("%s: lacks key %x", bucketPath(where), ka)
		case (va == nil) != (vb == nil):
			return fmt.Errorf("%s: key %x is a bucket in one file and a value in the other", bucketPath(where), ka)
		case va == nil:
			ba, bb := a.Bucket(ka), b.Bucket(kb)
			inner := where + "/" + string(ka)
			if ba.Sequence() != bb.Sequence() {
				return fmt.Errorf("%s: sequence %d, the ledger's %d", bucketPath(inner), bb.Sequence(), ba.Sequence())
			}
			if err := sameIn(inner, ba, bb); err != nil {
				return err
			}
		case !bytes.Equal(va, vb):
			return fmt.Errorf("%s: the value of key %x differs from the ledger's", bucketPath(where), ka)
		}
		ka, va = ca.Next()
		kb, vb = cb.Next()
	}
	return nil
}

func bucketPath(where string) string {
	if where == "" {
		return "the bucket directory"
	}
	return "bucket " + where[1:]
}
