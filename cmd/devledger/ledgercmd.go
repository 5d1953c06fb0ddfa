package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
)

// ledgerCommands are the commands of `devledger ledger`.
var ledgerCommands = map[string]func([]string, io.Writer, io.Writer) error{
	"backup":      runLedgerBackup,
	"compact":     runLedgerCompact,
	"salvage":     runLedgerSalvage,
	"acknowledge": runLedgerAcknowledge,
}

// runLedger is `devledger ledger`: what an operator does to the ledger file
// itself (backup, compact, salvage, acknowledge).
func runLedger(args []string, stdout, stderr io.Writer) error {
	const usage = "usage: devledger ledger backup [--state-dir DIR | --db FILE] --out FILE\n" +
		"       devledger ledger compact [--state-dir DIR | --db FILE] --out FILE\n" +
		"       devledger ledger salvage --db FILE --out FILE\n" +
		"       devledger ledger acknowledge [--state-dir DIR | --db FILE] [--note TEXT]\n"
	switch {
	case len(args) == 0:
		return usageErrf("a ledger command is required: backup, compact, salvage or acknowledge")
	case args[0] == "-h" || args[0] == "--help":
		io.WriteString(stdout, usage)
		return flag.ErrHelp
	case ledgerCommands[args[0]] == nil:
		return usageErrf("unknown ledger command %q: want backup, compact, salvage or acknowledge", args[0])
	}
	return ledgerCommands[args[0]](args[1:], stdout, stderr)
}

// runLedgerBackup copies the ledger to --out: from the file when no daemon
// holds it, else through the running daemon's admin socket. The copy is
// consistent (one read transaction). To a file it is written under a
// temporary name, synced, verified, and put in place only if --out does
// not exist and it verifies, or holds what only a newer devledger can
// verify; to stdout ("-") it is not verified (the receiving end does).
func runLedgerBackup(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ledger backup", "[--state-dir DIR | --db FILE] --out FILE", stdout)
	var lf ledgerFlags
	lf.register(fs)
	out := fs.String("out", "", "write the copy to `FILE`, which must not exist; \"-\" writes it to stdout (kubectl exec ... > FILE)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := lf.oneLedger(fs); err != nil {
		return err
	}
	if *out == "" {
		return usageErrf("--out is required: where to write the copy")
	}
	src := lf.path()
	backup := func(w io.Writer) (int64, error) {
		l, err := openLedgerWaiting(&lf, time.Millisecond)
		if err == nil {
			defer l.Close()
			n, err := l.Backup(w)
			if errors.Is(err, store.ErrCorrupt) {
				err = fmt.Errorf("%w\n  to copy every intact event: devledger ledger salvage --db %s --out FILE", err, src)
			}
			return n, err
		}
		if !errors.Is(err, store.ErrLocked) {
			return 0, err
		}
		sock := grpcapi.AdminSocketPath(filepath.Dir(src))
		if serr := lockedWithoutDaemon(err, sock); serr != nil {
			return 0, serr
		}
		src = "the daemon (" + sock + ")"
		return grpcapi.BackupFromAdmin(context.Background(), sock, w)
	}
	if *out == "-" {
		// Nothing to verify here: the receiving end checks the copy
		// (replay --verify).
		n, err := backup(stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "backed up %s to stdout: %d bytes; check it with devledger replay --verify --db FILE\n", src, n)
		return nil
	}
	var rep store.CheckReport
	n, err := writeNew(*out, func(f *os.File) (int64, error) { return backup(f) }, func(tmp string) (bool, error) {
		// Checked before it takes --out's name: a copy that does not
		// verify must not stand where a backup job looks for a sound one.
		var err error
		rep, err = verifyCopy(tmp, *out)
		if errors.Is(err, events.ErrUnknownType) || errors.Is(err, events.ErrUnknownVersion) || errors.Is(err, store.ErrNewerFormat) {
			// After a rollback, or from a newer daemon: events, or a
			// file, a newer devledger wrote, which this release cannot
			// check. No damage: the copy is kept.
			return true, fmt.Errorf("back up %s: %w; %s holds the copy: check it with that newer devledger (replay --verify)", src, err, *out)
		}
		var bad *store.CorruptError
		if !errors.As(err, &bad) {
			if err != nil {
				return false, fmt.Errorf("back up %s: %w; %s was not written", src, err, *out)
			}
			return false, nil
		}
		// The copy holds the ledger's pages as they are: the damage is
		// the ledger's, and is named so.
		bad.Path = lf.path()
		again := "devledger ledger salvage --db " + lf.path() + " --out FILE"
		if src != lf.path() {
			// The daemon holds the file, which salvage cannot open.
			again = "devledger ledger backup --state-dir " + filepath.Dir(lf.path()) + " --out - > COPY, then devledger ledger salvage --db COPY --out FILE"
		}
		return false, fmt.Errorf("back up %s: %w; %s was not written\n  to copy every intact event: %s", src, bad, *out, again)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s: %d bytes, %d events (#%d-#%d), %s; verified\n",
		src, *out, n, rep.Events, rep.FirstSeq, rep.LastSeq, snapshotsChecked(rep))
	return nil
}

// runLedgerCompact writes a compacted copy of a ledger no daemon holds to
// --out (store.Log.CompactTo): the same events, snapshots and meta, byte
// for byte, without the pages retention freed, verified before it takes
// --out's name. A running daemon's ledger is refused: a copy can take
// its place only while no daemon writes to it (docs/operations.md says
// how to put it in place). So are damage, with the salvage that copies
// every intact event, and events of a newer devledger, which this
// release cannot verify.
func runLedgerCompact(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ledger compact", "[--state-dir DIR | --db FILE] --out FILE", stdout)
	var lf ledgerFlags
	lf.register(fs)
	out := fs.String("out", "", "write the compacted ledger to `FILE`, which must not exist")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := lf.oneLedger(fs); err != nil {
		return err
	}
	switch {
	case *out == "":
		return usageErrf("--out is required: where to write the compacted ledger")
	case *out == "-":
		return usageErrf("--out -: a compacted ledger is written to a file, to be put in place of the ledger")
	}
	if _, err := os.Lstat(*out); err == nil {
		return usageErrf("%s exists: name a new file", *out)
	}
	if _, err := os.Stat(filepath.Dir(*out)); errors.Is(err, os.ErrNotExist) {
		return usageErrf("cannot create %s: %w (no directory %s)", *out, errnoOf(err), filepath.Dir(*out))
	}
	src := lf.path()
	salvage := "\n  to copy every intact event: devledger ledger salvage --db " + src + " --out FILE"
	l, err := openLedgerWaiting(&lf, time.Millisecond)
	if errors.Is(err, store.ErrLocked) {
		sock := grpcapi.AdminSocketPath(filepath.Dir(src))
		if serr := lockedWithoutDaemon(err, sock); serr != nil {
			return serr
		}
		return fmt.Errorf("compact %s: the daemon (%s) holds it: stop it first; a compacted copy can take the ledger's place only while no daemon writes to it (docs/operations.md, \"Compacting it\")", src, sock)
	}
	if errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("%w; %s was not written%s", err, *out, salvage)
	}
	if err != nil {
		return err
	}
	defer l.Close()
	rep, err := l.CompactTo(context.Background(), *out)
	switch {
	case errors.Is(err, events.ErrUnknownType) || errors.Is(err, events.ErrUnknownVersion):
		return fmt.Errorf("compact %s: %w; %s was not written: compact it with that newer devledger", src, err, *out)
	case errors.Is(err, store.ErrCorrupt):
		return fmt.Errorf("compact %s: %w; %s was not written%s", src, err, *out, salvage)
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "compacted %s into %s: %d bytes of the ledger's %d (%d%%); %d events (#%d-#%d), %s; verified\n",
		src, *out, rep.After, rep.Before, percentOf(rep.After, rep.Before), rep.Check.Events, rep.Check.FirstSeq, rep.Check.LastSeq, snapshotsChecked(rep.Check))
	return nil
}

// percentOf is part as a whole percentage of whole, rounded up: a copy
// of a few bytes is not 0% of the ledger.
func percentOf(part, whole int64) int64 {
	if whole <= 0 {
		return 100
	}
	return (part*100 + whole - 1) / whole
}

// runLedgerAcknowledge records that an operator took note of the damage
// the daemon recorded in its ledger (LedgerDamaged), which makes the daemon
// ready again: through the running daemon's admin socket, or in the file
// when no daemon holds it.
func runLedgerAcknowledge(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ledger acknowledge", "[--state-dir DIR | --db FILE] [--note TEXT]", stdout)
	var lf ledgerFlags
	lf.register(fs)
	// Unlike the other tools', acknowledge's --db is written to.
	fs.Lookup("db").Usage = "record the acknowledgement in this ledger `FILE` instead of the state dir's"
	note := fs.String("note", "", "what was done about the damage (`TEXT`), kept in the ledger with the acknowledgement")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := lf.oneLedger(fs); err != nil {
		return err
	}
	if err := lf.misnamed(); err != nil {
		return err
	}
	path := lf.path()
	where := path
	problems, err := acknowledgeInFile(path, *note)
	if errors.Is(err, store.ErrLocked) {
		sock := grpcapi.AdminSocketPath(filepath.Dir(path))
		if serr := lockedWithoutDaemon(err, sock); serr != nil {
			return serr
		}
		where = "the daemon (" + sock + ")"
		problems, err = grpcapi.AcknowledgeDamageThroughAdmin(context.Background(), sock, *note)
	}
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		fmt.Fprintf(stdout, "%s: no damage waits for an acknowledgement\n", where)
		return nil
	}
	fmt.Fprintf(stdout, "%s: acknowledged %d %s:\n", where, len(problems), plural(len(problems), "damage", "damages"))
	for _, p := range problems {
		fmt.Fprintf(stdout, "  %s\n", p)
	}
	return nil
}

// lockedWithoutDaemon is the error for a ledger whose lock someone holds
// (locked) when no daemon listens on its admin socket sock: a tool still
// reading it, or a daemon starting or stopping. It names the lock first,
// which a bare dial error of the socket would hide. nil when a daemon
// listens there.
func lockedWithoutDaemon(locked error, sock string) error {
	serr := grpcapi.AdminListening(context.Background(), sock)
	if serr == nil {
		return nil
	}
	return fmt.Errorf("%w; and the daemon's admin socket does not answer: %v", locked, serr)
}

// acknowledgeInFile appends the acknowledgement to a ledger no daemon
// holds, if it has damage waiting for one.
func acknowledgeInFile(path, note string) ([]string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		// As the read-only tools say it.
		return nil, usageErr(fmt.Errorf("%w at %s", store.ErrNoLedger, path))
	} else if err != nil {
		return nil, usageErr(fmt.Errorf("ledger %s: %w", path, errnoOf(err)))
	}
	l, err := store.Open(path, store.Options{BootID: "ledger-acknowledge", LockTimeout: time.Millisecond})
	switch {
	case errors.Is(err, store.ErrNotLedger), errors.Is(err, store.ErrNewerFormat):
		return nil, usageErr(err)
	case err != nil:
		return nil, err
	}
	defer l.Close()
	st, err := l.Replay(0)
	if err != nil {
		return nil, err
	}
	if len(st.Ledger.Damage) == 0 {
		return nil, nil
	}
	if _, err := l.Append(context.Background(), events.New(events.DamageAcknowledged{Problems: st.Ledger.Damage, Note: note}, time.Now(), "ledger-acknowledge")); err != nil {
		return nil, err
	}
	return st.Ledger.Damage, nil
}

// writeNew creates path, which must not exist, with what write writes:
// under a temporary name beside it, synced, passed by check, then linked
// into place (a link fails rather than replace a file made meanwhile),
// and the directory synced. Nothing is left behind on failure, but for
// a file check fails and keeps (keep): it is linked, and its error
// returned.
func writeNew(path string, write func(*os.File) (int64, error), check func(tmp string) (keep bool, err error)) (int64, error) {
	if _, err := os.Lstat(path); err == nil {
		return 0, usageErrf("%s exists: name a new file", path)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		// Named by the path asked for: the temporary name is ours.
		err = fmt.Errorf("cannot create %s: %w", path, errnoOf(err))
		if errors.Is(err, os.ErrNotExist) {
			return 0, usageErrf("%w (no directory %s)", err, filepath.Dir(path))
		}
		return 0, err
	}
	defer os.Remove(tmp)
	n, err := write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	keep := false
	if err == nil {
		keep, err = check(tmp)
	}
	if err != nil && !keep {
		return n, err
	}
	if err := os.Link(tmp, path); err != nil {
		return n, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return n, err
}

// verifyCopy checks a ledger just written at path, as replay --verify
// does; its errors call it name.
func verifyCopy(path, name string) (store.CheckReport, error) {
	l, err := store.Open(path, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		return store.CheckReport{}, fmt.Errorf("the copy %s does not open: %w", name, renamed(err, path, name))
	}
	defer l.Close()
	rep, err := l.Check(context.Background())
	if err != nil {
		return rep, fmt.Errorf("the copy %s does not verify: %w", name, renamed(err, path, name))
	}
	return rep, nil
}

// renamed is err with the file it names as from named to instead: the
// store names the file it opened, a temporary one that is gone by the
// time the error is read.
func renamed(err error, from, to string) error {
	if from == to {
		return err
	}
	return &renamedError{err: err, from: from, to: to}
}

type renamedError struct {
	err      error
	from, to string
}

func (e *renamedError) Error() string { return strings.ReplaceAll(e.err.Error(), e.from, e.to) }
func (e *renamedError) Unwrap() error { return e.err }

// runLedgerSalvage copies every intact event of a damaged ledger into a
// new one (store.Salvage), verifies the new one, and reports what was lost.
// It exits 0 when nothing was, and 1 when something was: the new ledger is
// whole and usable either way, but the loss is the operator's to know of.
func runLedgerSalvage(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ledger salvage", "--db FILE --out FILE", stdout)
	db := fs.String("db", "", "the damaged ledger `FILE` (read only)")
	out := fs.String("out", "", "write the salvaged ledger to `FILE`, which must not exist")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *db == "" || *out == "" {
		return usageErrf("--db and --out are required: the damaged ledger and where to write what it still holds")
	}
	if _, err := os.Stat(*db); err != nil {
		return usageErr(err)
	}
	if _, err := os.Lstat(*out); err == nil {
		return usageErrf("%s exists: name a new file", *out)
	}
	if _, err := os.Stat(filepath.Dir(*out)); errors.Is(err, os.ErrNotExist) {
		return usageErrf("cannot create %s: %w (no directory %s)", *out, errnoOf(err), filepath.Dir(*out))
	}
	rep, err := store.Salvage(*db, *out)
	if err != nil {
		if errors.Is(err, store.ErrNotLedger) || errors.Is(err, store.ErrNewerFormat) {
			return usageErr(err) // nothing in it to salvage, or not for this build
		}
		return err
	}
	check, err := verifyCopy(*out, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "salvaged %s into %s: %d events of #%d-#%d intact (%d read as bbolt reads it, %d found on its pages); verified, %d events\n",
		*db, *out, rep.Events, rep.FirstSeq, rep.LastSeq, rep.FromTree, rep.Events-rep.FromTree, check.Events)
	if rep.Snapshot > 0 {
		fmt.Fprintf(stdout, "  the snapshot at #%d, which retention kept when it dropped the events before #%d, copied\n", rep.Snapshot, rep.FirstSeq)
	}
	if rep.SnapshotLost > 0 {
		fmt.Fprintf(stdout, "  LOST the snapshot at #%d, which retention kept when it dropped the events before #%d: the state before #%d is not in the new ledger\n", rep.SnapshotLost, rep.FirstSeq, rep.FirstSeq)
	}
	var lost uint64
	for _, r := range rep.Lost {
		n := r.To - r.From + 1
		lost += n
		what := "no record of them found"
		if len(r.Types) > 0 {
			var parts []string
			for _, seq := range slices.Sorted(maps.Keys(r.Types)) {
				parts = append(parts, fmt.Sprintf("#%d %s", seq, cmp.Or(string(r.Types[seq]), "of unreadable type")))
			}
			what = fmt.Sprintf("damaged records of %d: %s", len(r.Types), strings.Join(parts, ", "))
		}
		fmt.Fprintf(stdout, "  lost #%d-#%d (%d %s): %s\n", r.From, r.To, n, plural(int(n), "event", "events"), what)
	}
	for _, seq := range rep.Conflicts {
		fmt.Fprintf(stdout, "  #%d: two different intact records; kept the one bbolt's tree holds, else the later\n", seq)
	}
	if rep.SnapshotLost > 0 && lost == 0 {
		return fmt.Errorf("the state before #%d is lost", rep.FirstSeq)
	}
	if lost > 0 {
		return fmt.Errorf("%d %s lost; each is an EventLost in %s", lost, plural(int(lost), "event", "events"), *out)
	}
	return nil
}
