#!/usr/bin/env bash
# A Kubernetes upgrade from one pinned minor to the next with podprobe
# running (issue #42): a kind cluster of hack/kind-e2e.sh on FROM, its nodes
# moved to TO one at a time while tests/e2e_upgrade.rs watches gated pods,
# with podprobe upgraded by `helm upgrade` in the middle.
#
#   hack/kind-upgrade.sh [test]     up on FROM (when the cluster is missing),
#                                   then the upgrade test, which calls `node`
#                                   below for each node; the cluster is left
#                                   as it is (down deletes it)
#   hack/kind-upgrade.sh up         only the cluster on FROM with podprobe
#                                   (hack/kind-e2e.sh up); print its kubeconfig
#   hack/kind-upgrade.sh node NODE  upgrade one node to TO, in kubeadm's
#                                   order: kubeadm TO (`upgrade apply` on the
#                                   control plane, `upgrade node` on a
#                                   worker), drain it (every pod but those
#                                   labelled podprobe.io/upgrade-stays and
#                                   DaemonSets'), the kubelet TO, restarted,
#                                   wait until the node is Ready on TO, uncordon
#   hack/kind-upgrade.sh nodes      print each node with its kubelet's version
#   hack/kind-upgrade.sh down       delete the cluster
#
#   UPGRADE_FROM       the release the cluster starts on (default: the pinned
#                      release before the newest, hack/k8s-build.sh --versions)
#   UPGRADE_TO         the release it moves to (default: the newest pinned)
#   KIND_CLUSTER_NAME  the cluster (default podprobe-upgrade)
#
# kind has no command that upgrades a node, and a node container made anew
# from another image would be another machine (a new kubeadm join, its pods
# gone). So each node is upgraded in place, the way kubeadm upgrades a real
# machine: kubeadm of TO is copied into it, `kubeadm upgrade apply TO` on the
# control plane (the static pods of the API server, controller manager,
# scheduler and etcd move to TO; the cluster's kubeadm and kubelet
# configuration too), `kubeadm upgrade node` on each worker, then the
# kubelet binary of TO replaces the old one and the kubelet restarts; the
# containers keep running through it (containerd holds them). The binaries
# come from hack/k8s-build.sh and the control plane's images from
# hack/kind-node-image.sh --control-plane-images, loaded into the node's
# containerd as the node image loads its own: nothing is pulled, so only
# this project's own node images (not KIND_NODE_IMAGE) can be upgraded.
# kubeadm's preflight is skipped (ignored) as kind's own `kubeadm init` skips
# it, and so are the CoreDNS and kube-proxy addons, which the node image
# does not have.
#
# The test's pods are pinned to their nodes (spec.nodeName) and labelled
# podprobe.io/upgrade-stays: the drain leaves them, so that they live
# through their node's kubelet upgrade, which is where podprobe could make
# one lose Ready or kill it. Any other pod is evicted as `kubectl drain`
# evicts it.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
# shellcheck source=hack/kind-provider.sh
. "$HACK/kind-provider.sh"

export KIND_CLUSTER_NAME=${KIND_CLUSTER_NAME:-podprobe-upgrade}
CLUSTER=$KIND_CLUSTER_NAME
versions=$("$HACK/k8s-build.sh" --versions)
TO=${UPGRADE_TO:-$(tail -n 1 <<<"$versions")}
FROM=${UPGRADE_FROM:-$(grep -B1 -xF "$TO" <<<"$versions" | head -n 1)}
STAYS_LABEL=podprobe.io/upgrade-stays

log() { echo "kind-upgrade.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

[ "$FROM" != "$TO" ] || die "nothing to upgrade: FROM and TO are both $TO (UPGRADE_FROM, UPGRADE_TO)"

# kubectl of TO (built when missing): within the skew of both releases.
kubectl_() {
    [ -n "${KUBECTL:-}" ] || KUBECTL=$(PODPROBE_K8S_VERSION=$TO "$HACK/k8s-build.sh")/kubectl
    "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"
}

# Runs a command in node $1.
on_node() {
    local node=$1
    shift
    "$ENGINE" exec "$node" "$@"
}

# Copies host file $2 to $3 in node $1 by way of a new name and a rename:
# a running binary (the kubelet) cannot be written over.
install_on_node() {
    local node=$1 src=$2 dst=$3
    "$ENGINE" cp "$src" "$node:$dst.new"
    on_node "$node" sh -c "chmod 0755 '$dst.new' && mv -f '$dst.new' '$dst'"
}

# Runs a command until it succeeds, for at most $1 seconds: the control
# plane's API server restarts once more after its node's kubelet restarts
# (the kubelet of TO starts the static pods again).
retry() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 2
    done
}

kubelet_version() {
    kubectl_ get node "$1" -o 'jsonpath={.status.nodeInfo.kubeletVersion}'
}

upgrade_node() {
    local node=$1 bin work control_plane=no
    [ "$node" = "$CLUSTER-control-plane" ] && control_plane=yes
    bin=$(PODPROBE_K8S_VERSION=$TO "$HACK/k8s-build.sh")
    log "$node: $(kubelet_version "$node") -> $TO"
    local start=$SECONDS
    install_on_node "$node" "$bin/kubeadm" /usr/bin/kubeadm
    install_on_node "$node" "$bin/kubectl" /usr/bin/kubectl
    if [ $control_plane = yes ]; then
        work=$(mktemp -d)
        "$HACK/kind-node-image.sh" --control-plane-images "$TO" "$work" >/dev/null
        local tarball
        for tarball in "$work"/*.tar; do
            # Over the node image's own tarballs of FROM: a node restarted
            # later imports TO's (podprobe-kind-images.service).
            "$ENGINE" cp "$tarball" "$node:/kind/images/$(basename "$tarball")"
        done
        rm -rf "$work"
        on_node "$node" systemctl restart podprobe-kind-images.service
        on_node "$node" kubeadm upgrade apply "$TO" --yes \
            --ignore-preflight-errors=all \
            --skip-phases=addon/coredns,addon/kube-proxy >&2
    else
        on_node "$node" kubeadm upgrade node --ignore-preflight-errors=all \
            --skip-phases=addon/coredns,addon/kube-proxy >&2
    fi
    # kubeadm's order: kubeadm first, then drain, the kubelet, uncordon.
    kubectl_ drain "$node" --ignore-daemonsets --delete-emptydir-data \
        --pod-selector "!$STAYS_LABEL" --timeout=300s >&2
    install_on_node "$node" "$bin/kubelet" /usr/bin/kubelet
    on_node "$node" systemctl daemon-reload
    on_node "$node" systemctl restart kubelet
    local deadline=$((SECONDS + 300))
    until [ "$(kubelet_version "$node" 2>/dev/null)" = "$TO" ] &&
        kubectl_ wait --for=condition=Ready "node/$node" --timeout=5s >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || die "$node is not Ready on $TO after 300 s"
        sleep 2
    done
    retry 120 kubectl_ uncordon "$node" >&2
    log "$node: on $TO in $((SECONDS - start)) s"
}

up() {
    PODPROBE_K8S_VERSION=$FROM "$HACK/kind-e2e.sh" up
}

run_test() {
    cd "$ROOT"
    KUBECONFIG=$(up)
    export KUBECONFIG
    kind_provider_setup
    local node
    while read -r node; do
        [ "$(kubelet_version "$node")" = "$FROM" ] ||
            die "node $node runs $(kubelet_version "$node"), not $FROM: take the cluster down first (hack/kind-upgrade.sh down)"
    done < <(kubectl_ get nodes -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}')
    log "upgrading $CLUSTER from $FROM to $TO under tests/e2e_upgrade.rs"
    PODPROBE_E2E_DEPLOYED=1 PODPROBE_KIND_ENGINE="$ENGINE" \
        PODPROBE_UPGRADE_SCRIPT="$HACK/kind-upgrade.sh" PODPROBE_UPGRADE_TO="$TO" \
        cargo test --locked --features testing --test e2e_upgrade -- --ignored --nocapture "$@"
}

case ${1:-test} in
test)
    shift || true
    run_test "$@"
    ;;
up) up ;;
node)
    [ $# = 2 ] || die "usage: $0 node NODE"
    kind_provider_setup
    KUBECONFIG=$("$HACK/kind-e2e.sh" env | sed 's/^KUBECONFIG=//')
    upgrade_node "$2"
    ;;
nodes)
    KUBECONFIG=$("$HACK/kind-e2e.sh" env | sed 's/^KUBECONFIG=//')
    kubectl_ get nodes -o 'jsonpath={range .items[*]}{.metadata.name} {.status.nodeInfo.kubeletVersion}{"\n"}{end}'
    ;;
down) "$HACK/kind-e2e.sh" down ;;
*) die "usage: $0 [test|up|node NODE|nodes|down]" ;;
esac
