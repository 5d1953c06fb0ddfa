// Command sysfsgen writes one of sysfsgen's fake nodes to a directory, so
// that an operator can try devledger on it without the hardware:
//
//	go run ./testdata/sysfsgen/cmd/sysfsgen -scenario sriov -out DIR
//	devledger scan --sysfs-root DIR/sys --dev-root DIR/dev ...
//
// The generated trees are not committed: their file names hold colons (PCI
// addresses), which Go module zips do not allow.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit: 0 on success, 1 when the tree cannot be
// written, 2 for bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sysfsgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "", "scenario to write: "+strings.Join(sysfsgen.Scenarios(), ", "))
	out := fs.String("out", "", "directory to write sys/, dev/ and proc/ into")
	list := fs.Bool("list", false, "list the scenarios and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, s := range sysfsgen.Scenarios() {
			fmt.Fprintln(stdout, s)
		}
		return 0
	}
	if *scenario == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: sysfsgen -scenario NAME -out DIR (or -list)")
		return 2
	}
	roots, err := sysfsgen.BuildScenario(*out, *scenario)
	if errors.Is(err, sysfsgen.ErrUnknownScenario) {
		fmt.Fprintln(stderr, "sysfsgen:", err)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "sysfsgen:", err)
		return 1
	}
	fmt.Fprintf(stdout, "sysfs root: %s\ndev root:   %s\nproc root:  %s\n", roots.Sysfs, roots.Dev, roots.Proc)
	return 0
}
