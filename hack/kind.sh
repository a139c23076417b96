#!/usr/bin/env bash
# Builds kind from its Go module at the pinned version (cached under
# ${PODPROBE_CACHE:-~/.cache/podprobe}/tools) and prints the binary's path.
# Idempotent. hack/kind-e2e.sh uses a kind already on PATH when there is one,
# else this build.
set -euo pipefail
KIND_VERSION=v0.33.0
# shellcheck source=hack/go-tool.sh
. "$(dirname "$0")/go-tool.sh"
go_tool kind sigs.k8s.io/kind "$KIND_VERSION"
