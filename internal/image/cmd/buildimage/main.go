// Command buildimage builds devledger's container image from a prebuilt
// static binary and a pci.ids file, without a container engine, and
// writes it as an OCI image layout and as a tarball for `docker load` or
// `podman load`. `task image` runs it; see that task for the whole recipe.
//
// Exit codes: 0 ok, 1 the build failed, 2 bad usage or a missing input
// (the pci.ids file included).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/devledger/devledger/deploy"
	"github.com/devledger/devledger/internal/image"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("buildimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var b image.Build
	fs.StringVar(&b.Binary, "binary", "", "the static devledger binary `FILE` (CGO_ENABLED=0, built for -arch)")
	fs.StringVar(&b.PCIIDs, "pci-ids", image.DebianPCIIDs, "the PCI ID database `FILE` (Debian's pci.ids package)")
	fs.StringVar(&b.Version, "version", deploy.Version, "the `VERSION` stamped in the binary; the image's version label and tag")
	fs.StringVar(&b.Revision, "revision", "unknown", "the source `COMMIT` for the revision label")
	fs.StringVar(&b.Architecture, "arch", runtime.GOARCH, "the binary's `GOARCH`")
	repo := fs.String("repository", image.Repository, "the image `NAME`, tagged with the version")
	layoutDir := fs.String("layout", "dist/image", "write the OCI image layout to `DIR` (replacing it)")
	tarFile := fs.String("tarball", "dist/devledger-image.tar", "write the docker/podman-loadable tarball to `FILE` (\"\": none)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "buildimage: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	spec, err := image.Devledger(b)
	if err != nil {
		fmt.Fprintf(stderr, "buildimage: %v\n", err)
		return 2
	}
	img, err := image.NewImage(spec)
	if err != nil {
		fmt.Fprintf(stderr, "buildimage: %v\n", err)
		return 1
	}
	ref := *repo + ":" + b.Version
	if err := image.WriteLayout(*layoutDir, ref, img); err != nil {
		fmt.Fprintf(stderr, "buildimage: %v\n", err)
		return 1
	}
	if *tarFile != "" {
		if err := image.WriteTarball(*tarFile, ref, img); err != nil {
			fmt.Fprintf(stderr, "buildimage: %v\n", err)
			return 1
		}
	}
	digest, err := img.Digest()
	if err != nil {
		fmt.Fprintf(stderr, "buildimage: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s\nlayout: %s\n", ref, digest, *layoutDir)
	if *tarFile != "" {
		fmt.Fprintf(stdout, "tarball: %s\n", *tarFile)
	}
	return 0
}
