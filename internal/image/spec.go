package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Where things lie in the image. PCIIDsPath is also where Debian's pci.ids
// package installs the file, and one of the places the daemon looks by
// default, so no flag is needed to find it.
const (
	BinaryPath = "/devledger"
	PCIIDsPath = "/usr/share/misc/pci.ids"
	// User is root, numerically (the image has no /etc/passwd). The
	// kubelet's socket dirs are root-owned 0750/0700, and root is their
	// owner: with every capability dropped, that is still enough.
	User = "0"
	// PathEnv lets `kubectl exec ... -- devledger dump` find the binary,
	// which lies at the root.
	PathEnv = "PATH=/"
)

// Label values that do not change from build to build.
const (
	Title       = "devledger"
	Description = "Kubernetes device plugin for PCI devices with a durable, replayable ledger of every allocation"
	SourceURL   = "https://github.com/devledger/devledger"
	// Licenses is NOASSERTION: the repository declares no licence yet. The
	// pci.ids file in the image is GPL-2.0-or-later OR BSD-3-Clause.
	Licenses = "NOASSERTION"
)

// Label keys, from the OCI image spec's annotations.
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelLicenses    = "org.opencontainers.image.licenses"
)

// DebianPCIIDs is where Debian's pci.ids package installs the database on
// the build machine (`apt-get install pci.ids`).
const DebianPCIIDs = "/usr/share/misc/pci.ids"

// ErrNoPCIIDs is wrapped by Devledger's error when the pci.ids file is
// missing or empty.
var ErrNoPCIIDs = errors.New("no PCI ID database")

// File is one regular file of an image.
type File struct {
	// Path is the absolute path in the image ("/devledger").
	Path string
	// Source is the file on this machine whose bytes it gets.
	Source string
	// Mode holds the permission bits in the image.
	Mode fs.FileMode
}

// Spec is everything an image is made of. Each file becomes one layer, in
// order, with its parent directories (mode 0755); owners are root and every
// time is Created.
type Spec struct {
	Files      []File
	Entrypoint []string
	User       string
	Env        []string
	Labels     map[string]string
	// OS and Architecture are the platform of the files ("linux",
	// "amd64").
	OS, Architecture string
	// Created is the image's creation time and every file's mtime; the
	// zero time means the Unix epoch, for reproducible digests.
	Created time.Time
}

// Build describes one build of devledger's image.
type Build struct {
	// Binary is the static devledger binary (CGO_ENABLED=0), built for
	// Architecture.
	Binary string
	// PCIIDs is the pci.ids file, normally DebianPCIIDs.
	PCIIDs string
	// Version is stamped in the binary and goes in the version label;
	// Revision is the source commit.
	Version, Revision string
	// Architecture is GOARCH of the binary ("amd64", "arm64").
	Architecture string
	// Created is the creation time; zero means the Unix epoch.
	Created time.Time
}

// Devledger returns the spec of devledger's image for b. It fails, wrapping
// ErrNoPCIIDs with what to install, when b.PCIIDs is missing or empty, and
// fails when the binary is missing or a field is empty.
func Devledger(b Build) (Spec, error) {
	switch {
	case b.Version == "":
		return Spec{}, errors.New("image: no version given")
	case b.Revision == "":
		return Spec{}, errors.New("image: no revision given")
	case b.Architecture == "":
		return Spec{}, errors.New("image: no architecture given")
	}
	if err := regularFile(b.Binary); err != nil {
		return Spec{}, fmt.Errorf("devledger binary: %w (build it with CGO_ENABLED=0 go build ./cmd/devledger)", err)
	}
	if err := regularFile(b.PCIIDs); err != nil {
		return Spec{}, fmt.Errorf("%w: %w: install Debian's pci.ids package (apt-get install pci.ids), which puts it at %s, or name another copy",
			ErrNoPCIIDs, err, DebianPCIIDs)
	}
	return Spec{
		Files: []File{
			{Path: BinaryPath, Source: b.Binary, Mode: 0o755},
			{Path: PCIIDsPath, Source: b.PCIIDs, Mode: 0o644},
		},
		Entrypoint:   Entrypoint(),
		User:         User,
		Env:          []string{PathEnv},
		Labels:       Labels(b.Version, b.Revision),
		OS:           "linux",
		Architecture: b.Architecture,
		Created:      b.Created,
	}, nil
}

// Entrypoint is the image's entrypoint: the daemon, naming no config. Run
// then reads /etc/devledger/config.json, else the SR-IOV device plugin's
// /etc/pcidp/config.json, and takes a --config-file in the args: a
// DaemonSet written for that plugin runs it with its args unchanged. The
// deploy/ manifests give their own command and --config.
func Entrypoint() []string {
	return []string{BinaryPath, "run"}
}

// Labels are the image's org.opencontainers.image.* labels.
func Labels(version, revision string) map[string]string {
	return map[string]string{
		LabelTitle:       Title,
		LabelDescription: Description,
		LabelVersion:     version,
		LabelRevision:    revision,
		LabelSource:      SourceURL,
		LabelLicenses:    Licenses,
	}
}

// regularFile checks that path names a non-empty regular file.
func regularFile(path string) error {
	if path == "" {
		return errors.New("no file given")
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() == 0 {
		return fmt.Errorf("%s: empty", path)
	}
	return nil
}
