#!/usr/bin/env bash
# Deploys podprobe to the local cluster (hack/local-cluster.sh): builds and
# imports the images (hack/image.sh), applies the kustomization DIR (default
# deploy/local; the end-to-end tests use tests/e2e), or with --helm installs
# the chart charts/podprobe as release podprobe with DIR/values.yaml, rolls
# the DaemonSet when the image changed, and waits until its pods are ready.
# Idempotent.
#
#   hack/deploy.sh [--helm] [DIR]
#
# PODPROBE_DEPLOY=helm does what --helm does (for callers that cannot pass
# it, like tests/support/cluster.rs's ensure_podprobe). helm comes from
# $PODPROBE_HELM, else hack/helm.sh.
#
# For hack/test.sh's e2e phase to deploy from the chart, its deploy phase
# becomes
#   phase deploy hack/deploy.sh --helm tests/e2e
# (tests/e2e/values.yaml is the chart's equivalent of tests/e2e's
# kustomization). An e2e test binary run on its own deploys through
# tests/support/cluster.rs's ensure_podprobe (`hack/deploy.sh tests/e2e`):
# export PODPROBE_DEPLOY=helm for it to use the chart too.
#
# The image keeps its name across builds, so the DaemonSet's pod template
# carries the image's digest in an annotation: a new build changes the
# template and the DaemonSet controller replaces its pods; an unchanged one
# leaves them alone.
#
# Either way deploys the same objects under the same names (deploy/base is
# rendered from the chart), so one may replace the other: helm takes over
# what kubectl applied (--take-ownership), kubectl apply overwrites what helm
# installed. A DaemonSet from before the chart, whose selector lacks
# app.kubernetes.io/instance, is deleted first: a selector is immutable.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
NAMESPACE=podprobe-system
RELEASE=podprobe

use_helm=no
if [ "${PODPROBE_DEPLOY:-}" = helm ]; then use_helm=yes; fi
if [ "${1:-}" = --helm ]; then
    use_helm=yes
    shift
fi
DIR=${1:-$ROOT/deploy/local}

log() { echo "deploy.sh: $*" >&2; }

main() {
    local bin images digest selector
    bin=$("$HACK/k8s-build.sh" --bin-dir)
    eval "$("$HACK/local-cluster.sh" env)"
    export KUBECONFIG
    kubectl() { "$bin/kubectl" "$@"; }
    images=$("$HACK/image.sh")
    digest=$(awk '$1 ~ /^docker\.io\/local\/podprobe:/ { print $2 }' <<<"$images")

    selector=$(kubectl -n "$NAMESPACE" get daemonset podprobe --ignore-not-found \
        -o 'jsonpath={.spec.selector.matchLabels.app\.kubernetes\.io/name}/{.spec.selector.matchLabels.app\.kubernetes\.io/instance}')
    if [ -n "$selector" ] && [ "${selector#*/}" = "" ]; then
        log "replacing the DaemonSet podprobe from before the chart (its selector is immutable)"
        kubectl -n "$NAMESPACE" delete daemonset podprobe --wait=true >&2
    fi

    if [ "$use_helm" = yes ]; then
        local helm values=$DIR/values.yaml
        helm=${PODPROBE_HELM:-$("$HACK/helm.sh")}
        [ -f "$values" ] || { log "$values: no such file (--helm takes a directory with values.yaml)"; exit 1; }
        # The namespace as deploy/base has it (Pod Security privileged): a
        # release does not own its namespace.
        kubectl apply -f "$ROOT/deploy/base/namespace.yaml" >&2
        log "helm upgrade --install $RELEASE charts/podprobe -f $values"
        "$helm" upgrade --install "$RELEASE" "$ROOT/charts/podprobe" \
            --kubeconfig "$KUBECONFIG" --namespace "$NAMESPACE" --take-ownership \
            --values "$values" \
            --set-string "podAnnotations.podprobe\.io/image-digest=$digest" >&2
    else
        log "applying $DIR"
        kubectl apply -k "$DIR" >&2
        kubectl -n "$NAMESPACE" patch daemonset podprobe --type merge -p \
            "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"podprobe.io/image-digest\":\"$digest\"}}}}}" >&2
    fi
    log "waiting for the podprobe DaemonSet"
    kubectl -n "$NAMESPACE" rollout status daemonset/podprobe --timeout=180s >&2
}

main
