// Package deploy holds what runs devledger on a cluster: the kustomize base
// and overlays under base/ and overlays/ (a DaemonSet, its Namespace,
// ServiceAccount, ResourceQuota and ConfigMap), the components under
// components/ that a kustomization adds to them (k8s-1.30 for Kubernetes
// 1.30 and later, podmonitor for the Prometheus Operator), and VERSION,
// the release they deploy.
//
// VERSION is the one place the release is written. The base's image tag,
// the Dockerfile's default VERSION and the image built by `task image` all
// follow it, and the tests here and in internal/image check that they do.
// The Go code in this folder exists for that: Version for the image
// builder, and tests that resolve each overlay with each set of
// components, decode every manifest strictly against the newest
// Kubernetes API (go.mod's k8s.io/api) and the oldest each output supports
// (field lists in testdata/apifields), and assert the hardening and the
// paths that docs/operations.md promises.
package deploy

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release the manifests deploy ("0.1.0"), from VERSION.
var Version = strings.TrimSpace(versionFile)
