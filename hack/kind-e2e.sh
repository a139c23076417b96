#!/usr/bin/env bash
# podprobe's end-to-end tests on a kind cluster of three nodes (a control
# plane and two workers), with podprobe installed by its Helm chart on each:
#
#   hack/kind-e2e.sh [test]   up, then the end-to-end suites against it
#   hack/kind-e2e.sh up       create the cluster when missing, load the images,
#                             install the chart; print the kubeconfig's path
#   hack/kind-e2e.sh run [filter...]
#                             only the end-to-end suites, against the cluster as
#                             it is (the filters as for cargo test, e.g. one test);
#                             podprobe's logs kept when a suite fails
#   hack/kind-e2e.sh status   print "up" when the cluster exists, else "down" (exit 1)
#   hack/kind-e2e.sh env      print KUBECONFIG=... for eval
#   hack/kind-e2e.sh down     delete the cluster
#
#   KIND_CLUSTER_NAME      the cluster (default podprobe-e2e)
#   KIND_NODE_IMAGE        a node image to use as it is (e.g. kindest/node:v1.35.1);
#                          default: hack/kind-node-image.sh builds one offline
#                          for PODPROBE_K8S_VERSION (default: the newest pinned)
#
# The provider is Docker when an engine answers, else rootful podman
# (hack/kind-provider.sh). kind comes from PATH, else hack/kind.sh builds
# it. Images are built here and loaded with `kind load image-archive`
# (podprobe, agnhost, busybox; hack/image.sh): nothing is pulled.
#
# A node image of this project's own (hack/kind-node-image.sh) has no
# CoreDNS, no kube-proxy and no default CNI: the kind config skips those
# addons, each node's pod network comes from its podCIDR, and podprobe (on
# the host network) reaches the API server at the control plane's address
# instead of the `kubernetes` Service; the API server runs with
# --enable-aggregator-routing=true to reach podprobe's status API. An
# official image keeps kind's defaults (kindnet, kube-proxy, CoreDNS).
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
# shellcheck source=hack/oci-image.sh
. "$HACK/oci-image.sh"
# shellcheck source=hack/kind-provider.sh
. "$HACK/kind-provider.sh"

CLUSTER=${KIND_CLUSTER_NAME:-podprobe-e2e}
STATE="${PODPROBE_CACHE:-$HOME/.cache/podprobe}/kind"
KUBECONFIG_PATH="$STATE/$CLUSTER.kubeconfig"
NAMESPACE=podprobe-system
RELEASE=podprobe

log() { echo "kind-e2e.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

kind_bin() {
    if command -v kind >/dev/null; then command -v kind; else "$HACK/kind.sh"; fi
}

# The kind config: three nodes; on this project's node image, no default
# CNI, no kube-proxy, no CoreDNS.
kind_config() {
    local own_image=$1
    cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
    if [ "$own_image" = yes ]; then
        cat <<EOF
networking:
  disableDefaultCNI: true
  kubeProxyMode: none
EOF
    fi
    # Kubernetes >= 1.35 refuses cgroup v1 unless told otherwise
    # (KEP-5573); a cgroup v2 host ignores it.
    cat <<EOF
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
EOF
    if [ "$own_image" = yes ]; then
        # The list replaces kind's: keep its preflight.
        #
        # No kube-proxy routes the Service ClusterIP of podprobe's status
        # API (the APIService v1alpha1.status.podprobe.io), so the API
        # server dials its endpoints directly. kind generates kubeadm
        # v1beta4 for Kubernetes >= 1.36 (extraArgs a list, merged by name
        # with kind's own) and v1beta3 before (a map); each patch matches
        # only its apiVersion.
        cat <<EOF
  - |
    kind: InitConfiguration
    skipPhases: ["preflight", "addon/coredns", "addon/kube-proxy"]
  - |
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: ClusterConfiguration
    apiServer:
      extraArgs:
        - name: enable-aggregator-routing
          value: "true"
  - |
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: ClusterConfiguration
    apiServer:
      extraArgs:
        enable-aggregator-routing: "true"
EOF
    fi
}

# kind's known issue "Pod errors due to too many open files": each node's
# systemd, containerd and kubelet hold inotify instances and watches, and at
# the kernel's defaults (128 instances per user) a node of a multi-node
# cluster can fail to start. kind's documented values, when the host's are
# lower and this user may raise them; else a warning.
inotify_limits() {
    local entry key want have file
    for entry in max_user_instances=512 max_user_watches=524288; do
        key=${entry%=*} want=${entry#*=}
        file=/proc/sys/fs/inotify/$key
        have=$(cat "$file")
        [ "$have" -lt "$want" ] || continue
        if echo "$want" 2>/dev/null >"$file"; then
            log "raised fs.inotify.$key from $have to $want (kind's known issue: too many open files)"
        else
            log "warning: fs.inotify.$key is $have, below kind's $want, and cannot be raised here: a node may fail to start"
        fi
    done
}

# What the engine knows of this cluster's node containers: state, exit
# code, error, OOM kill, and the last lines each logged (its systemd), with
# the host's free memory: why a node stopped during `kind create`.
node_diagnostics() {
    local node
    for node in $("$ENGINE" ps -a --filter "label=io.x-k8s.kind.cluster=$CLUSTER" --format '{{.Names}}'); do
        log "node $node: $("$ENGINE" inspect --format \
            'status={{.State.Status}} exit={{.State.ExitCode}} oom-killed={{.State.OOMKilled}} error={{.State.Error}}' "$node")"
        "$ENGINE" logs --tail 40 "$node" 2>&1 | sed "s/^/  $node| /" >&2
    done
    log "host: $(awk '/^MemAvailable/ {print int($2 / 1024) " MiB available"}' /proc/meminfo)," \
        "inotify instances per user $(cat /proc/sys/fs/inotify/max_user_instances)"
}

# kind create, with the nodes kept on failure (--retain) so that their
# state and logs can be printed; then the cluster is deleted and created
# once more. A second failure ends the run. Node containers have stopped
# during `kind create` on a loaded CI machine ("cannot exec in a stopped
# container"); the diagnostics say why the next time.
create_cluster() {
    local kind=$1 image=$2 attempt
    for attempt in 1 2; do
        log "creating kind cluster $CLUSTER from $image (attempt $attempt)"
        if "$kind" create cluster --name "$CLUSTER" --image "$image" --retain \
            --config "$STATE/$CLUSTER.kind.yaml" --kubeconfig "$KUBECONFIG_PATH" --wait 0s >&2; then
            return 0
        fi
        log "kind create cluster failed; its nodes as $ENGINE sees them:"
        node_diagnostics
        "$kind" delete cluster --name "$CLUSTER" >&2 || true
    done
    die "kind create cluster failed twice (the nodes' state and logs are above)"
}

up() {
    local kind bin image own_image=no work name digest tarball
    command -v cargo >/dev/null || die "cargo is required (podprobe's image is built here)"
    [ -x /bin/busybox ] || die "/bin/busybox is required (Debian: apt-get install busybox-static)"
    kind_provider_setup
    kind=$(kind_bin)
    bin=$("$HACK/k8s-build.sh")
    kubectl() { "$bin/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
    mkdir -p "$STATE"

    if ! "$kind" get clusters 2>/dev/null | grep -qxF "$CLUSTER"; then
        if [ -n "${KIND_NODE_IMAGE:-}" ]; then
            image=$KIND_NODE_IMAGE
        else
            image=$("$HACK/kind-node-image.sh" "${PODPROBE_K8S_VERSION:-$("$HACK/k8s-build.sh" --version)}")
            own_image=yes
        fi
        if [ ! -d /lib/modules ]; then
            # kind mounts it into every node (for modprobe); a host without
            # kernel modules has none.
            log "creating an empty /lib/modules: kind mounts it into each node"
            mkdir -p /lib/modules
        fi
        inotify_limits
        kind_config "$own_image" >"$STATE/$CLUSTER.kind.yaml"
        echo "$own_image" >"$STATE/$CLUSTER.own-image"
        create_cluster "$kind" "$image"
    fi
    "$kind" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_PATH"
    own_image=$(cat "$STATE/$CLUSTER.own-image" 2>/dev/null || echo no)
    kubectl wait --for=condition=Ready node --all --timeout=300s >&2

    work=$(mktemp -d)
    # shellcheck disable=SC2064 # expand now: work is local
    trap "rm -rf '$work'" EXIT
    oci_busybox_rootfs "$work/busybox"
    oci_image_tar "$work/busybox.oci.tar" docker.io/local/busybox:latest '["/bin/sh"]' "" "$work/busybox" >/dev/null
    "$kind" load image-archive --name "$CLUSTER" "$work/busybox.oci.tar" >&2
    while read -r name digest tarball; do
        log "loading $name ($digest)"
        "$kind" load image-archive --name "$CLUSTER" "$tarball" >&2
        if [[ $name == docker.io/local/podprobe:* ]]; then podprobe_digest=$digest; fi
    done < <("$HACK/image.sh" --no-import)

    local helm args=()
    helm=${PODPROBE_HELM:-$("$HACK/helm.sh")}
    if [ "$own_image" = yes ]; then
        # No kube-proxy: the API server at the control plane's own address.
        local api
        api=$(kubectl get node "$CLUSTER-control-plane" \
            -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}')
        args+=(--set "extraEnv[0].name=KUBERNETES_SERVICE_HOST" --set-string "extraEnv[0].value=$api"
            --set "extraEnv[1].name=KUBERNETES_SERVICE_PORT" --set-string "extraEnv[1].value=6443")
    fi
    kubectl apply -f "$ROOT/deploy/base/namespace.yaml" >&2
    log "helm upgrade --install $RELEASE charts/podprobe -f tests/e2e-kind/values.yaml"
    "$helm" upgrade --install "$RELEASE" "$ROOT/charts/podprobe" \
        --kubeconfig "$KUBECONFIG_PATH" --namespace "$NAMESPACE" \
        --values "$ROOT/tests/e2e-kind/values.yaml" "${args[@]}" \
        --set-string "podAnnotations.podprobe\.io/image-digest=$podprobe_digest" >&2
    kubectl -n "$NAMESPACE" rollout status daemonset/podprobe --timeout=300s >&2
    echo "$KUBECONFIG_PATH"
}

# The gate-mode end-to-end suites: e2e_upstream's authority:: scenarios need
# the local cluster's agent node (hack/test.sh runs them there), its
# kubelet:: ones test the kubelet itself (tests/UPSTREAM_E2E.md). With
# hack/test.sh's `--features testing`, so that its test build is reused.
run_tests() {
    cd "$ROOT"
    # tests/e2e_kind.rs runs `kubectl podprobe` from beside its own binary.
    cargo build --locked -p kubectl-podprobe >&2
    local rc=0
    KUBECONFIG="$KUBECONFIG_PATH" PODPROBE_E2E_DEPLOYED=1 PODPROBE_KIND_ENGINE="$ENGINE" \
        cargo test --locked --features testing --no-fail-fast \
        --test e2e_gate --test e2e_upstream --test e2e_kind \
        -- --ignored --skip kubelet:: --skip authority:: --test-threads=12 "$@" || rc=$?
    if [ "$rc" != 0 ]; then save_podprobe_logs; fi
    return "$rc"
}

# What every podprobe pod logged (and its previous container, when it
# restarted), kept after a failed run for the failure's cause:
# $PODPROBE_TEST_LOGS/kind-podprobe/ (hack/test.sh's log directory), else
# beside the cluster's kubeconfig.
save_podprobe_logs() {
    local dir="${PODPROBE_TEST_LOGS:-$STATE}/kind-podprobe" pod
    mkdir -p "$dir"
    for pod in $(KUBECONFIG="$KUBECONFIG_PATH" kubectl -n "$NAMESPACE" get pods \
        -l app.kubernetes.io/name=podprobe -o name 2>/dev/null); do
        pod=${pod#pod/}
        KUBECONFIG="$KUBECONFIG_PATH" kubectl -n "$NAMESPACE" logs "$pod" >"$dir/$pod.log" 2>&1 || true
        KUBECONFIG="$KUBECONFIG_PATH" kubectl -n "$NAMESPACE" logs --previous "$pod" \
            >"$dir/$pod.previous.log" 2>/dev/null || rm -f "$dir/$pod.previous.log"
    done
    log "a suite failed: podprobe's logs are in $dir"
}

case ${1:-test} in
up) up ;;
test)
    up >/dev/null
    run_tests
    ;;
run)
    kind_provider_setup
    shift
    run_tests "$@"
    ;;
status)
    if kind_provider_setup 2>/dev/null && "$(kind_bin)" get clusters 2>/dev/null | grep -qxF "$CLUSTER"; then
        echo up
    else
        echo down
        exit 1
    fi
    ;;
env) echo "KUBECONFIG=$KUBECONFIG_PATH" ;;
down)
    kind_provider_setup
    "$(kind_bin)" delete cluster --name "$CLUSTER" >&2
    rm -f "$KUBECONFIG_PATH" "$STATE/$CLUSTER".*
    ;;
*) die "usage: $0 [test|up|run|status|env|down]" ;;
esac
