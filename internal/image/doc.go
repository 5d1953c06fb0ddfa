// Package image builds devledger's container image without a container
// engine: an OCI image whose layers are the static devledger binary and the
// PCI ID database, written as an OCI image layout (a directory) and as a
// tarball that `docker load` and `podman load` accept.
//
// The image is the one the repository's Dockerfile describes in its final
// stage, built from the same facts: Devledger gives the files, entrypoint,
// user, environment and labels, and the tests parse the Dockerfile and
// check that its final stage says the same. Builds are reproducible: file
// times, owners and the image's creation time are fixed, so the same inputs
// give the same digest.
//
// The command in cmd/buildimage (`task image`) is the way to use it.
package image
