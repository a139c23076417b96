#!/usr/bin/env bash
# podprobe's end-to-end tests on a kind cluster, for machines that have Docker
# and kind (this project's build machines have neither: hack/test.sh runs the
# same tests on hack/local-cluster.sh). Creates the cluster when missing,
# loads the locally built images (podprobe, agnhost, busybox; nothing is
# pulled from a registry), deploys podprobe from tests/e2e-kind and runs the
# end-to-end tests against it.
#
#   hack/kind-e2e.sh        cluster name: KIND_CLUSTER_NAME (default podprobe-e2e)
#
# Needs busybox-static (Debian) for the busybox image, and Go for
# hack/k8s-build.sh, which provides kubectl and agnhost of the pinned release.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
# shellcheck source=hack/oci-image.sh
. "$HACK/oci-image.sh"
CLUSTER=${KIND_CLUSTER_NAME:-podprobe-e2e}

log() { echo "kind-e2e.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

main() {
    local tool bin work name digest tarball
    for tool in docker kind cargo go; do
        command -v "$tool" >/dev/null || die "$tool is required"
    done
    [ -x /bin/busybox ] || die "/bin/busybox is required (Debian: apt-get install busybox-static)"
    bin=$("$HACK/k8s-build.sh" --bin-dir)
    kubectl() { "$bin/kubectl" "$@"; }

    if ! kind get clusters | grep -qxF "$CLUSTER"; then
        log "creating kind cluster $CLUSTER"
        kind create cluster --name "$CLUSTER" --wait 180s
    fi
    KUBECONFIG=$(mktemp)
    work=$(mktemp -d)
    trap 'rm -rf "$work" "$KUBECONFIG"' EXIT
    kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
    export KUBECONFIG

    oci_busybox_rootfs "$work/busybox"
    oci_image_tar "$work/busybox.oci.tar" docker.io/local/busybox:latest '["/bin/sh"]' "" "$work/busybox" >/dev/null
    kind load image-archive --name "$CLUSTER" "$work/busybox.oci.tar"
    while read -r name digest tarball; do
        log "loading $name ($digest)"
        kind load image-archive --name "$CLUSTER" "$tarball"
    done < <("$HACK/image.sh" --no-import)

    kubectl apply -k "$ROOT/tests/e2e-kind"
    kubectl -n podprobe-system rollout restart daemonset/podprobe
    kubectl -n podprobe-system rollout status daemonset/podprobe --timeout=180s

    cd "$ROOT"
    PODPROBE_E2E_DEPLOYED=1 cargo test --locked --test e2e_gate --test e2e_upstream -- --ignored --test-threads=8
}

main "$@"
