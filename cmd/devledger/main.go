// Command devledger is the devledger node daemon and its operator tools:
// run (the daemon), dump (the history), replay (the state at a point in the
// history), scan (discovery and pool selection as a dry run), ledger (the
// file itself: backup, compact, salvage, acknowledge), demo and version.
//
// Exit codes: 0 ok, 1 runtime failure, 2 bad usage, bad input or bad config.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/devledger/devledger/store"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"demo":    {"the whole daemon on a bundled sample node, with a kubelet stand-in", runDemo},
		"dump":    {"print the ledger's history of events", runDump},
		"ledger":  {"the ledger file itself: backup (also of a running daemon's), compact (return the space retention freed), salvage (of a damaged one), acknowledge (damage the daemon found)", runLedger},
		"replay":  {"fold the ledger up to a point and print the state then", runReplay},
		"run":     {"the daemon: serve the node's devices to the kubelet and record everything", runRun},
		"scan":    {"discovery and pool selection as a dry run", runScan},
		"version": {"print the version", runVersion},
	}
}

// run executes one command line and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	switch {
	case len(args) == 0:
		usage(stderr, cmds)
		return exitUsage
	case args[0] == "help" && len(args) > 1:
		// `devledger help dump` is `devledger dump -h`; `help ledger
		// backup`, `ledger backup -h`. Only the names: a flag after them
		// (`help ledger acknowledge --note`) would take -h for its value,
		// and the command would run.
		if _, ok := cmds[args[1]]; !ok {
			fmt.Fprintf(stderr, "devledger help: unknown command %q\n", args[1])
			usage(stderr, cmds)
			return exitUsage
		}
		names := args[1:2]
		if len(args) > 2 && !strings.HasPrefix(args[2], "-") {
			names = args[1:3]
		}
		return run(append(slices.Clone(names), "-h"), stdout, stderr)
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		usage(stdout, cmds)
		return exitOK
	case args[0] == "--version" || args[0] == "-version":
		args[0] = "version"
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "devledger: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return exitUsage
	}
	err := cmd.run(args[1:], stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitFailure
	var ce *codeError
	if errors.As(err, &ce) {
		code = ce.code
	}
	if !errors.As(err, new(loggedError)) {
		name := args[0]
		if name == "ledger" && len(args) > 1 && ledgerCommands[args[1]] != nil {
			name += " " + args[1]
		}
		fmt.Fprintf(stderr, "devledger %s: %v\n", name, err)
		if hint := salvageHint(name, err); hint != "" {
			fmt.Fprintln(stderr, hint)
		}
	}
	return code
}

// salvageHint is the way out of damage a reading tool (dump, replay,
// scan) met in a ledger file: salvage copies every intact event into a
// new one. "" for anything else: damage a running daemon served (the
// error names its socket; the daemon records and names it itself),
// errors that are no damage (events a newer devledger wrote), and
// commands that give their own way out.
func salvageHint(name string, err error) string {
	var bad *store.CorruptError
	if name != "dump" && name != "replay" && name != "scan" || !errors.As(err, &bad) {
		return ""
	}
	if fi, serr := os.Stat(bad.Path); serr != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return "  to copy every intact event: devledger ledger salvage --db " + bad.Path + " --out FILE"
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: devledger <command> [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-8s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nRun 'devledger <command> -h' for the flags of a command.\n")
	io.WriteString(w, b.String())
}

// codeError carries the exit code an error should end the process with.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// usageErr marks err as bad usage or bad input: exit 2.
func usageErr(err error) error { return &codeError{code: exitUsage, err: err} }

// usageErrf is usageErr with formatting.
func usageErrf(format string, args ...any) error {
	return usageErr(fmt.Errorf(format, args...))
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stdout)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionLine is the version stamped at build time, then what the Go
// toolchain recorded of the build: the module's version, the VCS revision
// and its time (and whether the tree had changes), and the Go version.
func versionLine() string {
	line := "devledger " + version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return line
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	parts := []string{"module " + bi.Main.Version}
	if rev := vcs["vcs.revision"]; rev != "" {
		commit := "commit " + rev[:min(len(rev), 12)]
		if t := vcs["vcs.time"]; t != "" {
			commit += " " + t
		}
		if vcs["vcs.modified"] == "true" {
			commit += ", modified"
		}
		parts = append(parts, commit)
	}
	parts = append(parts, bi.GoVersion)
	return line + " (" + strings.Join(parts, ", ") + ")"
}

// newFlagSet returns a flag set that neither exits nor prints on its own:
// parseFlags prints the usage to out (stdout, so that `devledger run -h |
// less` shows it) when help is asked for, and returns any other error for
// main to print, once.
func newFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimSpace("usage: devledger "+name+" "+synopsis))
		some := false
		fs.VisitAll(func(*flag.Flag) { some = true })
		if some {
			fmt.Fprint(fs.Output(), "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args and turns a flag error into a usage error; extra
// positional arguments are refused.
func parseFlags(fs *flag.FlagSet, args []string) error {
	// The flag package prints its errors, and the usage after them, to
	// the output: silenced while parsing, so that main says it once.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		return usageErrf("%v (devledger %s -h lists its flags)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usageErrf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// refuseEmpty refuses each flag of without given on the command line with
// an empty value (a script's unset variable), which the flag would take as
// left out: the tool would answer another question, the one without says,
// and exit 0.
func refuseEmpty(fs *flag.FlagSet, without map[string]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if what, ok := without[f.Name]; ok && err == nil && f.Value.String() == "" {
			err = usageErrf("--%s \"\": names nothing (without it, %s)", f.Name, what)
		}
	})
	return err
}
