#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, starts a
# private containerd (hack/containerd.sh) for the exec and CRI tests, checks
# formatting and lints, then runs every test. Stops the containerd it started.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/install-deps.sh

started_cri=no
if ! hack/containerd.sh status >/dev/null 2>&1; then
  hack/containerd.sh up
  started_cri=yes
fi
cleanup() {
  if [ "$started_cri" = yes ]; then hack/containerd.sh down || true; fi
}
trap cleanup EXIT
eval "$(hack/containerd.sh env)"
export PODPROBE_CRI_ENDPOINT

cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked --no-fail-fast
