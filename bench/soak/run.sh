#!/usr/bin/env bash
# Churn soak (#27 item 2): podprobe (release, a host process in gate mode,
# optionally under heaptrack) on the local cluster for DURATION_S while
# PODS pods are re-created every CYCLE_S; its RSS every SAMPLE_S into
# OUT/rss.csv and OUT/rss.svg, one JSON line of results (see soak.py).
#
# Needs the local cluster sized for the pods:
#   PODPROBE_CLUSTER_POD_SUBNET=10.88.80.0/22 PODPROBE_CLUSTER_MAX_PODS=400 hack/local-cluster.sh up
# and no podprobe DaemonSet on it (this runs its own). Afterwards bring the
# cluster down and up again with the defaults, which the test suites expect.
#
# Knobs (environment): PODS (300), CYCLE_S (240), DURATION_S (7200),
# HEAPTRACK (0; 1: under heaptrack, OUT/heaptrack-<generation>.zst),
# SINGLE_LIFE (0; 1: no restart halfway, the per-cycle heap verdict of #39),
# SAMPLE_S (10; how often RSS and the heap are read: the shorter, the nearer
# each cycle's sampled peak is to its real one),
# OUT (bench/soak/out/<time>). A measurement, not a test: CI does not run
# it. Starts one podprobe at a time and stops it by PID; its pods live in
# namespace podprobe-bench and are deleted at the end.
set -euo pipefail

PODS=${PODS:-300}
CYCLE_S=${CYCLE_S:-240}
DURATION_S=${DURATION_S:-7200}
HEAPTRACK=${HEAPTRACK:-0}
SINGLE_LIFE=${SINGLE_LIFE:-0}
SAMPLE_S=${SAMPLE_S:-10}

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$HERE/out/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"

log() { echo "soak/run.sh: $*" >&2; }

status=$("$ROOT/hack/local-cluster.sh" status) || {
    log "the local cluster is not up (see the header)"
    exit 1
}
cri=$(tr ' ' '\n' <<<"$status" | grep -m1 '^unix://') || {
    log "hack/local-cluster.sh status names no CRI socket"
    exit 1
}

log "building podprobe (release)"
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" --bin podprobe
target_dir=${CARGO_TARGET_DIR:-$ROOT/target}
# A private copy, so that another build cannot swap the binary mid-soak.
cp "$target_dir/release/podprobe" "$OUT/podprobe"

args=(run --binary "$OUT/podprobe" --cri-endpoint "$cri" --out "$OUT"
    --pods "$PODS" --cycle-s "$CYCLE_S" --duration-s "$DURATION_S" --sample-s "$SAMPLE_S")
((HEAPTRACK)) && args+=(--heaptrack)
((SINGLE_LIFE)) && args+=(--single-life)
echo "{\"podprobe\": \"$(git -C "$ROOT" rev-parse --short HEAD)\", \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >"$OUT/machine.json"
timeout $((${DURATION_S%.*} + 1800)) python3 "$HERE/soak.py" "${args[@]}" | tee "$OUT/result.json"
log "results in $OUT"
