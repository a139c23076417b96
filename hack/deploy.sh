#!/usr/bin/env bash
# Deploys podprobe to the local cluster (hack/local-cluster.sh): builds and
# imports the images (hack/image.sh), applies the kustomization $1 (default
# deploy/local; the end-to-end tests use tests/e2e), rolls the DaemonSet when
# the image changed, and waits until its pods are ready. Idempotent.
#
#   hack/deploy.sh [KUSTOMIZE_DIR]
#
# The image keeps its name across builds, so the DaemonSet's pod template
# carries the image's digest in an annotation: a new build changes the
# template and the DaemonSet controller replaces its pods; an unchanged one
# leaves them alone.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
DIR=${1:-$ROOT/deploy/local}

log() { echo "deploy.sh: $*" >&2; }

main() {
    local bin images digest
    bin=$("$HACK/k8s-build.sh" --bin-dir)
    eval "$("$HACK/local-cluster.sh" env)"
    export KUBECONFIG
    kubectl() { "$bin/kubectl" "$@"; }
    images=$("$HACK/image.sh")
    digest=$(awk '$1 ~ /^docker\.io\/local\/podprobe:/ { print $2 }' <<<"$images")
    log "applying $DIR"
    kubectl apply -k "$DIR" >&2
    kubectl -n podprobe-system patch daemonset podprobe --type merge -p \
        "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"podprobe.io/image-digest\":\"$digest\"}}}}}" >&2
    log "waiting for the podprobe DaemonSet"
    kubectl -n podprobe-system rollout status daemonset/podprobe --timeout=180s >&2
}

main
