#!/usr/bin/env bash
# Node-level benchmark (#15 item 1): the whole podprobe daemon against the
# kubelet on the same node, in the same run. For each workload, side A (the
# probes in the pods' spec, run by the kubelet; podprobe's DaemonSet runs but
# has nothing to probe) and side B (the same probes in the podprobe.io/probes
# annotation with the podprobe.io/ready gate and no spec probes, run by
# podprobe) alternate, ROUNDS times (A B, then B A, ...). Each run creates the
# pods, waits for them to be Ready, settles, measures a steady window (CPU,
# RSS, API requests, probes run), then a flip window (HTTP readiness flipped
# FLIPS times each way by removing and restoring a file the pod's httpd
# serves; time to `Ready` and to `podprobe.io/ready` in the API), and deletes
# the pods: bench/node/node.py does one run and prints one JSON line. A
# measurement, not a test: CI does not run it.
#
# Workloads: mixed = MIXED_PODS (100) pods x (readiness HTTP + liveness TCP
# on one container, readiness exec on a second), http = HTTP_PODS (300) pods
# x readiness HTTP, tcp = HTTP_PODS pods x readiness TCP; every probe at
# periodSeconds 1. http and tcp have a third side, C: the pods without
# probes, and the C floor prober (bench/floor/floor.c, built here) probing
# their IPs at the same rate for the steady window: the node's floor.
#
# Needs the local cluster sized for the pods and podprobe deployed with this
# directory's values (a plain metrics listener on 127.0.0.1:9441):
#   PODPROBE_CLUSTER_POD_SUBNET=10.88.80.0/22 PODPROBE_CLUSTER_MAX_PODS=400 hack/local-cluster.sh up
#   hack/deploy.sh --helm bench/node
# (DEPLOY=1 runs the second itself.) Afterwards bring the cluster down and up
# again with the defaults, which the test suites expect.
#
# After the flips, BURSTS times BURST_PODS pods flip at one instant (down, and
# HOLD_S later up: the latency when many pods change at once), and with
# EVENTS_TAIL_S the flip window stays open that long after the last flip, so
# that writes made later (podprobe's Event series counts, written when a
# series ends six idle minutes later) are counted too.
#
# Knobs (environment): WORKLOADS ("mixed http tcp"), SIDES (every side the
# workload has: "A B" or "A B C"), ROUNDS (2), MIXED_PODS (100),
# HTTP_PODS (300), SETTLE_S (20), STEADY_S (60), FLIPS (200 per direction),
# FLIP_INTERVAL_S (0.25), HOLD_S (5), BURSTS (0), BURST_PODS (100),
# EVENTS_TAIL_S (0), DEPLOY (0), OUT (bench/node/out/<time>).
# Bounded: every run is under `timeout`. Starts no long-lived process; the
# pods it creates live in namespace podprobe-bench and are deleted after each
# run. Network traffic stays on loopback and the cluster's bridge.
set -euo pipefail

WORKLOADS=${WORKLOADS:-"mixed http tcp"}
ROUNDS=${ROUNDS:-2}
MIXED_PODS=${MIXED_PODS:-100}
HTTP_PODS=${HTTP_PODS:-300}
SETTLE_S=${SETTLE_S:-20}
STEADY_S=${STEADY_S:-60}
FLIPS=${FLIPS:-200}
FLIP_INTERVAL_S=${FLIP_INTERVAL_S:-0.25}
HOLD_S=${HOLD_S:-5}
BURSTS=${BURSTS:-0}
BURST_PODS=${BURST_PODS:-100}
EVENTS_TAIL_S=${EVENTS_TAIL_S:-0}
SIDES=${SIDES:-}
DEPLOY=${DEPLOY:-0}

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$HERE/out/$(date -u +%Y%m%dT%H%M%SZ)}
RESULTS=$OUT/results.jsonl
mkdir -p "$OUT"
: >"$RESULTS"

log() { echo "node/run.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

eval "$("$ROOT/hack/local-cluster.sh" env)"
export KUBECONFIG
KUBECTL=$("$ROOT/hack/k8s-build.sh" --bin-dir)/kubectl
"$ROOT/hack/local-cluster.sh" status >/dev/null || die "the local cluster is not up (see the header)"

if [ "$DEPLOY" = 1 ]; then
    bash "$ROOT/hack/deploy.sh" --helm "$HERE"
fi
curl -fsS --max-time 5 http://127.0.0.1:9441/metrics >/dev/null ||
    die "no podprobe metrics on 127.0.0.1:9441: deploy with hack/deploy.sh --helm bench/node"

max_pods=0
for workload in $WORKLOADS; do
    case $workload in
    mixed) pods=$MIXED_PODS ;;
    http | tcp) pods=$HTTP_PODS ;;
    *) die "unknown workload $workload (mixed, http, tcp)" ;;
    esac
    ((pods > max_pods)) && max_pods=$pods
done
allocatable=$("$KUBECTL" get node podprobe-node -o jsonpath='{.status.allocatable.pods}')
# The DaemonSet's pod and a margin besides the benchmark's.
((allocatable >= max_pods + 5)) ||
    die "the node takes $allocatable pods, the benchmark needs $((max_pods + 5)): set PODPROBE_CLUSTER_MAX_PODS (see the header)"

machine=$(jq -cn \
    --arg cpu "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    --argjson cores "$(nproc)" \
    --argjson mem_kib "$(awk '/^MemTotal/ { print $2 }' /proc/meminfo)" \
    --arg kernel "$(uname -r)" \
    --arg kubelet "$("$(dirname "$KUBECTL")/kubelet" --version 2>/dev/null || echo unknown)" \
    --arg podprobe "$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src || echo +dirty)" \
    '{cpu: $cpu, cores: $cores, mem_kib: $mem_kib, kernel: $kernel, kubelet: $kubelet, podprobe: $podprobe}')
echo "$machine" >"$OUT/machine.json"
cc -O2 -Wall -Wextra -o "$OUT/floor" "$ROOT/bench/floor/floor.c"
log "machine: $machine"

for workload in $WORKLOADS; do
    case $workload in
    mixed) pods=$MIXED_PODS order="A B" ;;
    http | tcp) pods=$HTTP_PODS order="A B C" ;;
    esac
    [ -z "$SIDES" ] || order=$SIDES
    for round in $(seq "$ROUNDS"); do
        sides=$order
        ((round % 2 == 1)) || sides=$(tr ' ' '\n' <<<"$order" | tac | xargs)
        for side in $sides; do
            log "$workload round $round side $side ($pods pods)"
            line=$(timeout $((1200 + ${SETTLE_S%.*} + ${STEADY_S%.*} + (2 + 2 * BURSTS) * ${HOLD_S%.*} + ${EVENTS_TAIL_S%.*})) \
                python3 "$HERE/node.py" run \
                --workload "$workload" --side "$side" --round "$round" --pods "$pods" \
                --settle-s "$SETTLE_S" --steady-s "$STEADY_S" --flips "$FLIPS" \
                --flip-interval-s "$FLIP_INTERVAL_S" --hold-s "$HOLD_S" --bursts "$BURSTS" \
                --burst-pods "$BURST_PODS" --events-tail-s "$EVENTS_TAIL_S" --floor "$OUT/floor")
            jq -c --argjson machine "$machine" '. + {machine: $machine}' <<<"$line" >>"$RESULTS"
        done
    done
done
log "results: $RESULTS"
python3 "$HERE/node.py" table "$RESULTS" | tee "$OUT/tables.md"
