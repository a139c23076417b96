#!/usr/bin/env bash
# Kubernetes' own end-to-end specs for probes, run by upstream's e2e.test of a
# pinned release against the agent node (hack/agent-node.sh), where podprobe
# `run --mode authority` is the prober of every pod:
#
#   test/e2e/common/node/container_probe.go  "[sig-node] Probing container ..."
#                                            "[sig-node] Probing restartable init container ..."
#   test/e2e/common/node/pods.go             "[sig-node] Pods should support pod readiness gates"
#
#   hack/upstream-e2e.sh [VERSION]          build e2e.test if needed, run the specs, print a summary
#   hack/upstream-e2e.sh VERSION --build    only build (or find cached) e2e.test and ginkgo; print the dir
#
# VERSION names a wrapper module hack/upstream-e2e/<VERSION>/go.mod (default:
# the newest). e2e.test (`go test -c k8s.io/kubernetes/test/e2e`) and the
# ginkgo CLI (for parallel runs) are cached under
# ${PODPROBE_CACHE:-$HOME/.cache/podprobe}/upstream-e2e/<VERSION>/ and reused
# while go.mod/go.sum are unchanged (a sha256 of both in `stamp`, as
# hack/k8s-build.sh does). A build takes 1 to 15 minutes here, depending on
# Go's build cache.
#
# The run needs root and uses the local cluster and the agent node as they are
# when both are up; when either is not (`status` fails: also when only
# podprobe is stopped), it runs `hack/local-cluster.sh up` and
# `hack/agent-node.sh up`, which builds the node agent and podprobe from this
# checkout and restarts whichever changed. They are left running. For the run
# only:
#   - every other schedulable node is cordoned and the agent node's NoSchedule
#     taint (podprobe.io/agent-node) removed, so the specs' pods (which name no
#     node) are scheduled there; both are restored on exit (trap), only what
#     this script changed;
#   - the images the release's specs use (test/utils/image/manifest.go:
#     agnhost and busybox under registry.k8s.io/e2e-test-images) are tagged in
#     the agent's containerd from what it has (hack/image.sh's agnhost,
#     containerd.sh's docker.io/local/busybox); pods use IfNotPresent and the
#     agent never pulls.
#
# No spec is skipped by default (UPSTREAM_E2E_SKIP empty): the alpha specs
# run too, since the local cluster's API server turns their gates on from
# v1.37 (GRPCContainerProbeTLS and H2CContainerProbe; the `httpGet.protocol:
# HTTP2` specs pass now that podprobe probes h2c, H23 in
# docs/kubelet-semantics.md). Earlier releases have no alpha probe specs.
#
# The cluster runs the release under test: VERSION is also the Kubernetes
# release of the local cluster (PODPROBE_K8S_VERSION, when hack/k8s-build.sh
# pins it), and a local cluster already up with another release is refused
# (take it down first: hack/agent-node.sh down; hack/local-cluster.sh down).
#
# Settings (environment): UPSTREAM_E2E_NODES (ginkgo processes, default 8),
# UPSTREAM_E2E_FOCUS, UPSTREAM_E2E_SKIP (ginkgo regexps), UPSTREAM_E2E_OUT
# (report directory, default /tmp/podprobe-upstream-e2e/<VERSION>-<time>),
# UPSTREAM_E2E_TIMEOUT (ginkgo --timeout, default 90m). Extra arguments after
# `--` go to e2e.test.
#
# Exit status: 0 when every selected spec passed. The report directory holds
# ginkgo's output (run.log), report.json and junit.xml.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
AGENT_NODE=podprobe-agent
AGENT_TAINT_KEY=podprobe.io/agent-node
NODES=${UPSTREAM_E2E_NODES:-8}
FOCUS=${UPSTREAM_E2E_FOCUS:-'Probing container|Probing restartable init container|readiness gates'}
SKIP=${UPSTREAM_E2E_SKIP:-}
TIMEOUT=${UPSTREAM_E2E_TIMEOUT:-90m}

log() { echo "upstream-e2e: $*" >&2; }
die() {
    log "$*"
    exit 1
}

versions() {
    find "$HACK/upstream-e2e" -mindepth 2 -maxdepth 2 -name go.mod -printf '%h\n' | xargs -n1 basename | sort -V
}

# ---------------------------------------------------------------- build

# Sets E2E_TEST and GINKGO, building both unless cached for this go.mod/go.sum.
build() {
    local version=$1 mod_dir=$HACK/upstream-e2e/$1
    [ -f "$mod_dir/go.mod" ] || die "no wrapper module $mod_dir/go.mod; pinned: $(versions | xargs)"
    local dir stamp
    dir="${PODPROBE_CACHE:-$HOME/.cache/podprobe}/upstream-e2e/$version"
    stamp="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" | sha256sum | cut -d' ' -f1)"
    E2E_TEST=$dir/e2e.test
    GINKGO=$dir/ginkgo
    cached() {
        [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ] && [ -x "$E2E_TEST" ] && [ -x "$GINKGO" ]
    }
    cached && return 0
    mkdir -p "$dir"
    # One build at a time; a caller that waited finds the other's binaries.
    exec 8>"$dir/build.lock"
    flock 8
    if ! cached; then
        command -v go >/dev/null 2>&1 || die "needs a Go toolchain on PATH"
        log "building e2e.test and ginkgo for $version into $dir (a cold build takes about 15 minutes)"
        local start=$SECONDS
        rm -f "$dir/stamp"
        (
            cd "$mod_dir"
            # -mod=readonly: the build never rewrites the pinned go.mod/go.sum.
            CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 19 \
                go test -c -trimpath -ldflags "-s -w" -o "$E2E_TEST.new" k8s.io/kubernetes/test/e2e 8>&-
            # The ginkgo CLI at the version e2e.test links (go.mod), for --nodes.
            CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 19 \
                go build -trimpath -ldflags "-s -w" -o "$GINKGO.new" github.com/onsi/ginkgo/v2/ginkgo 8>&-
        )
        mv -f "$E2E_TEST.new" "$E2E_TEST"
        mv -f "$GINKGO.new" "$GINKGO"
        echo "$stamp" >"$dir/stamp"
        log "built in $((SECONDS - start)) s"
    fi
    exec 8>&-
}

# ---------------------------------------------------------------- cluster

kubectl_() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

ensure_cluster() {
    [ "$(id -u)" = 0 ] || die "must run as root (the local cluster and the agent node need it)"
    if ! "$HACK/local-cluster.sh" status >/dev/null 2>&1; then
        log "the local cluster is not up: hack/local-cluster.sh up"
        "$HACK/local-cluster.sh" up >/dev/null
    fi
    eval "$("$HACK/local-cluster.sh" env)"
    export KUBECONFIG
    KUBECTL=$("$HACK/k8s-build.sh" --bin-dir)/kubectl
    if ! "$HACK/agent-node.sh" status >/dev/null 2>&1; then
        log "the agent node is not up: hack/agent-node.sh up"
        "$HACK/agent-node.sh" up
    fi
    eval "$("$HACK/agent-node.sh" env)"
}

# Prints "<registry>/<name>:<tag>" of image $1 (manifest.go's constant, e.g.
# Agnhost) in the release's test/utils/image/manifest.go.
e2e_image() {
    local manifest=$1 const=$2 line
    line=$(grep -E "^\s*configs\[$const\] = Config\{list\.PromoterE2eRegistry, " "$manifest") ||
        die "no configs[$const] in $manifest"
    # configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.66.1"}
    sed -E 's#.*"([^"]+)", "([^"]+)"\}.*#registry.k8s.io/e2e-test-images/\1:\2#' <<<"$line"
}

ctr_agent() {
    ctr --address "${PODPROBE_AGENT_CRI_ENDPOINT#unix://}" --namespace k8s.io "$@"
}

# Tags the agent containerd's agnhost and busybox under the names the
# release's e2e.test uses.
tag_images() {
    local version=$1 mod_dir=$HACK/upstream-e2e/$1 k8s_dir manifest images agnhost busybox
    k8s_dir=$(cd "$mod_dir" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubernetes)
    manifest=$k8s_dir/test/utils/image/manifest.go
    [ -f "$manifest" ] || die "no $manifest"
    images=$(ctr_agent images ls -q)
    # hack/image.sh's agnhost, whatever its tag; containerd.sh's busybox.
    agnhost=$(grep -E '^registry\.k8s\.io/e2e-test-images/agnhost:' <<<"$images" | head -n 1) ||
        die "no agnhost image in the agent's containerd (hack/agent-node.sh up imports it)"
    busybox=docker.io/local/busybox:latest
    grep -qxF "$busybox" <<<"$images" || die "no $busybox in the agent's containerd"
    local src dst
    for pair in "$agnhost $(e2e_image "$manifest" Agnhost)" "$busybox $(e2e_image "$manifest" BusyBox)"; do
        read -r src dst <<<"$pair"
        [ "$src" = "$dst" ] && continue
        log "tagging $src as $dst in the agent's containerd"
        ctr_agent images tag --force "$src" "$dst" >/dev/null
    done
}

# What this script changed, undone on exit.
CORDONED=()
UNTAINTED=no
GINKGO_PID=

restore() {
    local status=$? node
    trap - EXIT INT TERM
    if [ -n "$GINKGO_PID" ] && kill -0 "$GINKGO_PID" 2>/dev/null; then
        log "stopping ginkgo (pid $GINKGO_PID)"
        kill -TERM "$GINKGO_PID" 2>/dev/null || true
        wait "$GINKGO_PID" 2>/dev/null || true
    fi
    for node in "${CORDONED[@]}"; do
        log "uncordoning $node"
        kubectl_ uncordon "$node" >/dev/null || log "could not uncordon $node"
    done
    if [ $UNTAINTED = yes ]; then
        log "restoring the taint $AGENT_TAINT_KEY=true:NoSchedule on $AGENT_NODE"
        kubectl_ taint node "$AGENT_NODE" "$AGENT_TAINT_KEY=true:NoSchedule" --overwrite >/dev/null ||
            log "could not restore the taint on $AGENT_NODE"
    fi
    exit "$status"
}

# Sends every pod of the run to the agent node.
steer_to_agent() {
    local node unschedulable
    trap restore EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    while read -r node unschedulable; do
        [ "$node" = "$AGENT_NODE" ] && continue
        [ "$unschedulable" = true ] && continue
        log "cordoning $node for the run"
        CORDONED+=("$node")
        kubectl_ cordon "$node" >/dev/null
    done < <(kubectl_ get nodes -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.unschedulable}{"\n"}{end}')
    if kubectl_ get node "$AGENT_NODE" -o 'jsonpath={range .spec.taints[*]}{.key}{"\n"}{end}' |
        grep -qxF "$AGENT_TAINT_KEY"; then
        log "removing the taint $AGENT_TAINT_KEY from $AGENT_NODE for the run"
        UNTAINTED=yes
        kubectl_ taint node "$AGENT_NODE" "$AGENT_TAINT_KEY-" >/dev/null
    fi
}

# ---------------------------------------------------------------- run

run() {
    local out=$1
    shift
    # ginkgo runs a precompiled suite only from a file named *.test.
    local bindir=$out/bin
    mkdir -p "$bindir"
    ln -sf "$E2E_TEST" "$bindir/e2e.test"
    log "running e2e.test on $NODES processes: focus '$FOCUS', skip '${SKIP:-nothing}'; output in $out"
    # An empty --skip would be a regexp that matches every spec.
    local skip=()
    [ -z "$SKIP" ] || skip=(--skip="$SKIP")
    # --disable-log-dump: cluster/log-dump/log-dump.sh is not there (and
    # would only print "fork/exec ... no such file or directory").
    (cd "$out" && exec "$GINKGO" --nodes="$NODES" --no-color --silence-skips --timeout="$TIMEOUT" \
        --output-dir="$out" --json-report=report.json --junit-report=junit.xml \
        --focus="$FOCUS" "${skip[@]}" \
        "$bindir/e2e.test" -- \
        --kubeconfig="$KUBECONFIG" --provider=skeleton --disable-log-dump \
        --report-dir="$out" "$@") >"$out/run.log" 2>&1 &
    GINKGO_PID=$!
    local rc=0
    wait "$GINKGO_PID" || rc=$?
    GINKGO_PID=
    return $rc
}

summary() {
    local out=$1
    [ -f "$out/report.json" ] || {
        tail -n 40 "$out/run.log" >&2
        die "no report.json in $out; see $out/run.log"
    }
    jq -r --arg focus "$FOCUS" --arg skip "$SKIP" '
      [ .[].SpecReports[] | select(.LeafNodeType == "It")
        | . + {name: ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" "))}
        | select(.name | test($focus)) ] as $specs
      | ($specs | map(select(.State == "passed"))) as $passed
      | ($specs | map(select(.State != "passed" and .State != "skipped"
                              and .State != "pending"))) as $failed
      | ($specs | map(select(.State == "skipped"))) as $skipped
      | "passed: \($passed | length), failed: \($failed | length), skipped: \($skipped | length)"
        + " (of \($specs | length) specs matching the focus)",
        ($failed[] | "FAILED [\(.State)] \(.name) (\(.RunTime / 1e9 | floor) s)\n    "
           + ((.Failure.Message // "") | split("\n") | map(select(length > 0)) | .[0:6] | join("\n    "))),
        ($skipped[] | "skipped: \(.name)"
           + (if ($skip != "" and (.name | test($skip))) then " (--skip)" else " (" + ((.Failure.Message // "") | split("\n")[0]) + ")" end))
    ' "$out/report.json"
}

main() {
    local version=""
    if [ $# -gt 0 ] && [ "$1" != -- ] && [ "$1" != --build ]; then
        version=$1
        shift
    fi
    [ -n "$version" ] || version=$(versions | tail -n 1)
    build "$version"
    if [ "${1:-}" = --build ]; then
        dirname "$E2E_TEST"
        return
    fi
    [ "${1:-}" != -- ] || shift
    local out=${UPSTREAM_E2E_OUT:-/tmp/podprobe-upstream-e2e/$version-$(date -u +%Y%m%dT%H%M%SZ)}
    mkdir -p "$out"
    # The cluster of the release under test, when k8s-build.sh pins it.
    if [ -z "${PODPROBE_K8S_VERSION:-}" ] && "$HACK/k8s-build.sh" --versions | grep -qxF "$version"; then
        export PODPROBE_K8S_VERSION=$version
    fi
    ensure_cluster
    local server
    server=$(kubectl_ version -o json | jq -r .serverVersion.gitVersion)
    if [ "$server" != "$version" ] && [ "${PODPROBE_K8S_VERSION:-}" = "$version" ]; then
        die "the local cluster runs $server, not $version: hack/agent-node.sh down; hack/local-cluster.sh down; then run again"
    fi
    tag_images "$version"
    steer_to_agent
    local start=$SECONDS rc=0
    run "$out" "$@" || rc=$?
    log "e2e.test finished in $((SECONDS - start)) s (exit $rc); log: $out/run.log"
    summary "$out"
    return $rc
}

main "$@"
