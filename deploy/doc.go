// Package deploy holds what runs devledger on a cluster: the kustomize base
// and overlays under base/ and overlays/ (a DaemonSet, its Namespace,
// ServiceAccount and ConfigMap), and VERSION, the release they deploy.
//
// VERSION is the one place the release is written. The base's image tag,
// the Dockerfile's default VERSION and the image built by `task image` all
// follow it, and the tests here and in internal/image check that they do.
// The Go code in this folder exists for that: Version for the image
// builder, and tests that decode every manifest strictly into the
// Kubernetes API types, resolve each overlay, and assert the hardening
// that docs/operations.md promises.
package deploy

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release the manifests deploy ("0.1.0"), from VERSION.
var Version = strings.TrimSpace(versionFile)
