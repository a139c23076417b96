#!/usr/bin/env bash
# Builds containerd 2 (containerd, containerd-shim-runc-v2, ctr) from its Go
# module at the pinned version into
# ${PODPROBE_CACHE:-~/.cache/podprobe}/tools/containerd-<version>/ and prints
# that directory. Idempotent: a complete directory is reused. The kind node
# image of the newest Kubernetes (hack/kind-node-image.sh) runs it; Debian
# bookworm ships only containerd 1.6.
#
# Static binaries without cgo, as containerd's release builds: the btrfs
# snapshotter needs cgo and is left out (the node uses overlayfs).
set -euo pipefail
CONTAINERD_VERSION=v2.4.2
module=github.com/containerd/containerd/v2
dir="${PODPROBE_CACHE:-$HOME/.cache/podprobe}/tools/containerd-$CONTAINERD_VERSION"
binaries=(containerd containerd-shim-runc-v2 ctr)

complete() {
  local b
  for b in "${binaries[@]}"; do [ -x "$dir/$b" ] || return 1; done
}
if complete; then
  echo "$dir"
  exit 0
fi
command -v go >/dev/null 2>&1 || {
  echo "containerd-build: go is not installed; it builds $module@$CONTAINERD_VERSION" >&2
  exit 1
}
echo "containerd-build: building $module@$CONTAINERD_VERSION into $dir (a few minutes cold)" >&2
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The version stamp containerd's Makefile sets: the CRI Version call (and so
# the node's containerRuntimeVersion) reports it.
ldflags="-s -w -X $module/version.Version=$CONTAINERD_VERSION -X $module/version.Package=$module"
GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" nice -n 10 \
  go install -tags "urfave_cli_no_docs osusergo netgo static_build no_btrfs" -ldflags "$ldflags" \
  "$module/cmd/containerd@$CONTAINERD_VERSION" \
  "$module/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
  "$module/cmd/ctr@$CONTAINERD_VERSION" >&2
for b in "${binaries[@]}"; do mv "$tmp/$b" "$dir/$b"; done
echo "$dir"
