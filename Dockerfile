# devledger's container image: the static binary and Debian's PCI ID
# database on an empty base, nothing else.
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/devledger/devledger:$(cat deploy/VERSION) .
#
# `task image` builds the same image without a container engine
# (internal/image); its tests parse this file and check that the final stage
# copies the same files with the same entrypoint, user, environment and
# labels. VERSION defaults to deploy/VERSION (a test keeps them equal).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-trixie AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=0.1.0
# Static (no cgo, so no libc in the image), with the version stamped in.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/devledger ./cmd/devledger

FROM debian:trixie-slim AS pciids
RUN apt-get update \
 && apt-get install -y --no-install-recommends pci.ids \
 && rm -rf /var/lib/apt/lists/*

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
COPY --from=build /out/devledger /devledger
COPY --from=pciids /usr/share/misc/pci.ids /usr/share/misc/pci.ids
# No shell in the image: PATH=/ lets `kubectl exec ... -- devledger dump`
# find the binary.
ENV PATH=/
LABEL org.opencontainers.image.title="devledger" \
      org.opencontainers.image.description="Kubernetes device plugin for PCI devices with a durable, replayable ledger of every allocation" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/devledger/devledger" \
      org.opencontainers.image.licenses="NOASSERTION"
# Root, and only because the kubelet's socket dirs (device-plugins,
# plugins_registry, pod-resources) are root-owned 0750/0700: the daemon
# creates its sockets there and connects to the kubelet's. Being their
# owner is enough, so the DaemonSet drops every capability, forbids
# privilege escalation and keeps the root filesystem read-only.
USER 0
# No --config: run reads /etc/devledger/config.json, else the SR-IOV device
# plugin's /etc/pcidp/config.json, so that a DaemonSet written for that
# plugin (its args, a --config-file among them) runs this image unchanged.
ENTRYPOINT ["/devledger", "run"]
