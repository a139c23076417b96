#!/usr/bin/env bash
# A second node for the local cluster (hack/local-cluster.sh), run by the test
# node agent (tests/node_agent, `cargo build --features testing --example
# node-agent`) instead of a kubelet, with podprobe in authority mode as its
# prober:
#
#   hack/agent-node.sh up        private containerd + agnhost image, build, start the
#                                agent (Node podprobe-agent Ready), start podprobe
#   hack/agent-node.sh down      stop podprobe and the agent, delete the Node, remove
#                                the containerd and its state
#   hack/agent-node.sh status    one line per part; exit 1 unless all are up
#   hack/agent-node.sh env       PODPROBE_AGENT_NODE=..., PODPROBE_AGENT_CRI_ENDPOINT=...,
#                                PODPROBE_AGENT_LOG=..., PODPROBE_AUTHORITY_LOG=...,
#                                PODPROBE_AUTHORITY_LISTEN=...
#   hack/agent-node.sh podprobe start|stop|restart
#                                only the authority-mode podprobe (tests restart it
#                                mid-scenario); stop waits for it to exit
#
# The agent has no prober: it runs the pods bound to the node (tests set
# spec.nodeName: podprobe-agent; the node's NoSchedule taint keeps others off)
# through its own containerd (socket, root and state under
# /tmp/podprobe-agent/containerd, bridge podprobea0, pods in 10.88.79.0/24) and
# reports phase, IPs and container states, while podprobe owns container
# ready/started and the Ready/ContainersReady conditions.
#
# Both run as host processes in their own sessions, from copies of the built
# binaries in /tmp/podprobe-agent/bin (the shared cargo target directory may be
# rebuilt meanwhile); PID files and logs are in /tmp/podprobe-agent. They are
# stopped by PID only. Needs root and a running local cluster.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
DIR=/tmp/podprobe-agent
NODE_NAME=podprobe-agent
CRI_DIR=$DIR/containerd
CRI_BRIDGE=podprobea0
CRI_SUBNET=10.88.79.0/24
# The bridge's gateway address, as the local cluster's node uses its own.
NODE_IP=10.88.79.1
CRI_ENDPOINT=unix://$CRI_DIR/containerd.sock
LISTEN=127.0.0.1:9441
BIN=$DIR/bin
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
AGENT_LOG=$DIR/node-agent.log
PODPROBE_LOG=$DIR/podprobe.log
PODPROBE_KUBECONFIG=$DIR/podprobe.kubeconfig
AGENT_READY_TIMEOUT=60
PODPROBE_READY_TIMEOUT=60
STOP_TIMEOUT=30

log() { echo "agent-node: $*" >&2; }
die() {
    log "$*"
    exit 1
}

require_root() {
    [ "$(id -u)" = 0 ] || die "must run as root (containerd and runc need it)"
}

containerd_() {
    PODPROBE_CRI_DIR=$CRI_DIR PODPROBE_CRI_BRIDGE=$CRI_BRIDGE PODPROBE_CRI_SUBNET=$CRI_SUBNET \
        "$HACK/containerd.sh" "$@"
}

# Sets KUBECONFIG and KUBECTL from the running local cluster, or fails saying so.
load_cluster() {
    local status
    if ! status=$("$HACK/local-cluster.sh" status 2>&1); then
        echo "$status" >&2
        die "the local cluster is not up: run hack/local-cluster.sh up first"
    fi
    eval "$("$HACK/local-cluster.sh" env)"
    export KUBECONFIG
    KUBECTL=$("$HACK/k8s-build.sh" --bin-dir)/kubectl
}

kubectl_() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

# ---------------------------------------------------------------- processes

# Prints the PID of part $1 (node-agent or podprobe) if its PID file names a
# live process running our copy of its binary (a recycled PID is not ours).
pid_of() {
    local pid
    pid=$(cat "$DIR/$1.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1 | grep -qxF "$BIN/$1" || return 1
    echo "$pid"
}

# Starts part $1 as `$BIN/$1 ARGS...` in its own session (it outlives this
# script), appending to log $2.
start_part() {
    local name=$1 logfile=$2
    shift 2
    log "starting $name (log: $logfile)"
    echo "---- $(date -u +%FT%TZ) start" >>"$logfile"
    # fd 9 holds the lock; the part must not keep it.
    setsid "$BIN/$name" "$@" >>"$logfile" 2>&1 </dev/null 9>&- &
    echo $! >"$DIR/$name.pid"
}

# Sends SIGTERM to part $1 and waits for it to exit (SIGKILL after
# $STOP_TIMEOUT s).
stop_part() {
    local name=$1 pid i
    if pid=$(pid_of "$name"); then
        log "stopping $name (pid $pid)"
        kill -TERM "$pid"
        for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name (pid $pid) did not exit within ${STOP_TIMEOUT}s: killing it"
            kill -KILL "$pid"
        fi
    fi
    rm -f "$DIR/$name.pid"
}

# Waits up to $3 seconds for "${@:4}" to succeed while part $1 (logging to
# $2) lives; fails with the log's tail otherwise.
wait_for() {
    local name=$1 logfile=$2 timeout=$3
    shift 3
    local deadline=$((SECONDS + timeout))
    while [ $SECONDS -lt $deadline ]; do
        "$@" >/dev/null 2>&1 && return 0
        # The PID alone, not pid_of: until the forked shell has exec'd the
        # binary its command line is not the binary's yet.
        if ! kill -0 "$(cat "$DIR/$name.pid" 2>/dev/null)" 2>/dev/null; then
            tail -n 30 "$logfile" >&2 || true
            die "$name exited; see $logfile"
        fi
        sleep 0.5
    done
    tail -n 30 "$logfile" >&2 || true
    die "timed out after ${timeout}s waiting for $name: $*"
}

node_ready() {
    [ "$(kubectl_ get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

podprobe_ready() {
    curl -fsS --max-time 2 "http://$LISTEN/readyz"
}

# ---------------------------------------------------------------- parts

ensure_containerd() {
    containerd_ up
    local agnhost tarball
    # Only agnhost: podprobe runs on the host here, not from its image.
    agnhost=$("$HACK/image.sh" --no-import agnhost)
    tarball=${agnhost##* }
    log "importing ${agnhost%% *}"
    containerd_ import "$tarball"
}

# Parts whose binary `build` replaced: running, they are restarted.
CHANGED=()

# Builds the agent (test support: debug) and podprobe (release, the binary
# its image ships; hack/test.sh has built it already) and copies to $BIN what
# changed.
build() {
    log "cargo build --features testing --example node-agent; cargo build --release --bin podprobe"
    (cd "$ROOT" && cargo build --locked --features testing --example node-agent >&2 &&
        cargo build --locked --release --bin podprobe >&2)
    mkdir -p "$BIN"
    local name built
    for name in node-agent podprobe; do
        built=$TARGET/release/$name
        [ $name = node-agent ] && built=$TARGET/debug/examples/$name
        cmp -s "$built" "$BIN/$name" && continue
        # Copy, then rename: a running binary is never written over.
        install -m 0755 "$built" "$BIN/$name.new"
        mv -f "$BIN/$name.new" "$BIN/$name"
        CHANGED+=("$name")
    done
}

# Stops part $1 if it runs an older build.
stop_if_changed() {
    local name
    for name in "${CHANGED[@]}"; do
        if [ "$name" = "$1" ] && pid_of "$1" >/dev/null; then
            log "$1 was rebuilt: restarting it"
            stop_part "$1"
        fi
    done
}

start_agent() {
    stop_if_changed node-agent
    if ! pid_of node-agent >/dev/null; then
        start_part node-agent "$AGENT_LOG" \
            --node-name "$NODE_NAME" \
            --kubeconfig "$KUBECONFIG" \
            --cri-endpoint "$CRI_ENDPOINT" \
            --node-ip "$NODE_IP" \
            --state-dir "$DIR/state"
    fi
    log "waiting for node $NODE_NAME to be Ready"
    wait_for node-agent "$AGENT_LOG" "$AGENT_READY_TIMEOUT" node_ready
}

# Writes $PODPROBE_KUBECONFIG: the cluster's address and CA with a token of
# authority mode's ServiceAccount bound to this node, the credentials an
# authority-mode DaemonSet pod on it would have. The admission policy
# (deploy/base/admission-policy.yaml, applied here with the RBAC it names)
# then holds podprobe to this node's pods and to the readiness fields.
write_podprobe_kubeconfig() {
    local token
    kubectl_ apply -f "$ROOT/deploy/base/namespace.yaml" -f "$ROOT/deploy/base/rbac.yaml" \
        -f "$ROOT/deploy/base/admission-policy.yaml" >/dev/null
    token=$(kubectl_ -n podprobe-system create token podprobe-authority \
        --bound-object-kind Node --bound-object-name "$NODE_NAME" --duration 48h)
    kubectl_ config view --raw --minify --flatten >"$PODPROBE_KUBECONFIG.new"
    KUBECONFIG="$PODPROBE_KUBECONFIG.new" "$KUBECTL" config set-credentials podprobe-authority \
        --token "$token" >/dev/null
    KUBECONFIG="$PODPROBE_KUBECONFIG.new" "$KUBECTL" config set-context --current \
        --user podprobe-authority >/dev/null
    chmod 0600 "$PODPROBE_KUBECONFIG.new"
    mv -f "$PODPROBE_KUBECONFIG.new" "$PODPROBE_KUBECONFIG"
}

start_podprobe() {
    [ -x "$BIN/podprobe" ] || die "no $BIN/podprobe: run '$0 up' first"
    stop_if_changed podprobe
    if ! pid_of podprobe >/dev/null; then
        write_podprobe_kubeconfig
        start_part podprobe "$PODPROBE_LOG" run \
            --mode authority \
            --node-name "$NODE_NAME" \
            --cri-endpoint "$CRI_ENDPOINT" \
            --kubeconfig "$PODPROBE_KUBECONFIG" \
            --listen "$LISTEN"
    fi
    log "waiting for podprobe at http://$LISTEN/readyz"
    wait_for podprobe "$PODPROBE_LOG" "$PODPROBE_READY_TIMEOUT" podprobe_ready
}

# ---------------------------------------------------------------- verbs

cmd_up() {
    require_root
    load_cluster
    mkdir -p "$DIR" "$DIR/state"
    ensure_containerd
    build
    start_agent
    start_podprobe
    log "ready: node $NODE_NAME, podprobe --mode authority at http://$LISTEN"
}

cmd_down() {
    require_root
    stop_part podprobe
    stop_part node-agent
    # The cluster may be gone already; then so is the Node.
    if "$HACK/local-cluster.sh" status >/dev/null 2>&1; then
        load_cluster
        kubectl_ delete node "$NODE_NAME" --ignore-not-found >/dev/null
    fi
    containerd_ down
    rm -rf "$BIN" "$DIR/state"
    log "down (logs kept in $DIR)"
}

cmd_status() {
    local ok=0 pid
    if pid=$(pid_of node-agent); then
        if "$HACK/local-cluster.sh" status >/dev/null 2>&1 && load_cluster && node_ready; then
            echo "node-agent: running (pid $pid), node $NODE_NAME Ready"
        else
            echo "node-agent: running (pid $pid), node $NODE_NAME not Ready"
            ok=1
        fi
    else
        echo "node-agent: not running"
        ok=1
    fi
    if pid=$(pid_of podprobe); then
        if podprobe_ready >/dev/null 2>&1; then
            echo "podprobe: running (pid $pid), ready at http://$LISTEN"
        else
            echo "podprobe: running (pid $pid), not ready at http://$LISTEN"
            ok=1
        fi
    else
        echo "podprobe: not running"
        ok=1
    fi
    local cri
    cri=$(containerd_ status 2>&1) || ok=1
    echo "containerd: $cri"
    return $ok
}

cmd_env() {
    echo "PODPROBE_AGENT_NODE=$NODE_NAME"
    echo "PODPROBE_AGENT_CRI_ENDPOINT=$CRI_ENDPOINT"
    echo "PODPROBE_AGENT_LOG=$AGENT_LOG"
    echo "PODPROBE_AUTHORITY_LOG=$PODPROBE_LOG"
    echo "PODPROBE_AUTHORITY_LISTEN=$LISTEN"
}

cmd_podprobe() {
    require_root
    case ${1:-} in
    start)
        load_cluster
        start_podprobe
        ;;
    stop) stop_part podprobe ;;
    restart)
        load_cluster
        stop_part podprobe
        start_podprobe
        ;;
    *) die "usage: $0 podprobe start|stop|restart" ;;
    esac
}

main() {
    local verb=${1:-}
    case $verb in
    up | down | podprobe)
        shift
        # One caller at a time.
        mkdir -p "$DIR"
        exec 9>"$DIR.lock"
        flock 9
        "cmd_$verb" "$@"
        ;;
    status | env) "cmd_$verb" ;;
    *) die "usage: $0 up|down|status|env|podprobe start|stop|restart" ;;
    esac
}

main "$@"
