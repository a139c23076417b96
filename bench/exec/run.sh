#!/usr/bin/env bash
# Exec probe overhead (#15, item 4), against the private containerd of
# hack/containerd.sh (started here if it does not run, and then stopped here
# at the end). Three measurements, one JSON line each run:
#
#   overhead  OVERHEAD_PODS containers, each probed once every PERIOD_MS
#             (20 exec probes/s by default), the calls rotating between a
#             bare tonic ExecSync, a bare ContainerStatus + ExecSync, and
#             podprobe's exec path with and without the identity check.
#   fake      the same sides, closed loop, against a fake runtime in the
#             bench process that answers at once: podprobe's own time to the
#             microsecond, and CPU per call.
#   cap       CAP_PODS containers' exec probes due at the same instant every
#             CAP_PERIOD_MS, through podprobe with --max-concurrent-execs of
#             each of CAPS: containerd's and its shims' CPU, peak ExecSyncs
#             in flight, latency, failures.
#
# Knobs (environment): MODES ("overhead fake cap"), OVERHEAD_PODS (20),
# PERIOD_MS (1000), DURATION_S (180), FAKE_CALLS (3000), FAKE_ROUNDS (3),
# CAP_PODS (100), CAPS ("2 32 1000"), CAP_ROUNDS (6), CAP_PERIOD_MS (10000),
# CMD ("true"), LABEL (a tag for the lines, e.g. the commit), BIN (a built
# exec-bench to use instead of building), LOCK (/tmp/podprobe-bench.lock;
# empty: no lock), TEARDOWN (0; 1: remove the bench pods at the end), OUT
# (bench/exec/out/<time>). The bench pods (label podprobe.io/bench=exec)
# are created once and kept between runs. Needs root (containerd).
# Bounded: every run is under `timeout`; this script stops nothing but the
# containerd it started itself (hack/containerd.sh down, by its PID file).
# A measurement, not a test: CI does not run it.
set -euo pipefail

MODES=${MODES:-"overhead fake cap"}
OVERHEAD_PODS=${OVERHEAD_PODS:-20}
PERIOD_MS=${PERIOD_MS:-1000}
DURATION_S=${DURATION_S:-180}
FAKE_CALLS=${FAKE_CALLS:-3000}
FAKE_ROUNDS=${FAKE_ROUNDS:-3}
CAP_PODS=${CAP_PODS:-100}
CAPS=${CAPS:-"2 32 1000"}
CAP_ROUNDS=${CAP_ROUNDS:-6}
CAP_PERIOD_MS=${CAP_PERIOD_MS:-10000}
CMD=${CMD:-true}
LOCK=${LOCK-/tmp/podprobe-bench.lock}
TEARDOWN=${TEARDOWN:-0}

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$HERE/out/$(date -u +%Y%m%dT%H%M%SZ)}
RESULTS=$OUT/results.jsonl
LABEL=${LABEL:-$(git -C "$REPO" rev-parse --short HEAD)}
mkdir -p "$OUT"

log() { echo "exec/run.sh: $*" >&2; }

if [[ -z ${BIN:-} ]]; then
    log "building (release)"
    cargo build --quiet --release --manifest-path "$HERE/Cargo.toml"
    BIN=$OUT/exec-bench
    cp "${CARGO_TARGET_DIR:-$HERE/target}/release/exec-bench" "$BIN"
fi

started_containerd=0
if ! bash "$REPO/hack/containerd.sh" status >/dev/null 2>&1; then
    log "starting the private containerd (hack/containerd.sh up)"
    bash "$REPO/hack/containerd.sh" up
    started_containerd=1
fi
finish() {
    if [[ $TEARDOWN == 1 || $started_containerd == 1 ]]; then
        timeout 300 "$BIN" teardown >&2 || true
    fi
    if [[ $started_containerd == 1 ]]; then
        bash "$REPO/hack/containerd.sh" down || true
    fi
}
trap finish EXIT
ENDPOINT=$(bash "$REPO/hack/containerd.sh" env | sed 's/^PODPROBE_CRI_ENDPOINT=//')

pods=$OVERHEAD_PODS
[[ $MODES == *cap* && $CAP_PODS -gt $pods ]] && pods=$CAP_PODS
timeout 900 "$BIN" --endpoint "$ENDPOINT" setup --pods "$pods" >&2

machine=$(jq -nc --arg cpu "$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg containerd "$(containerd --version | awk '{ print $3 }')" \
    --arg runc "$(runc --version | awk 'NR == 1 { print $3 }')" \
    '{cpu: $cpu, cores: $cores, kernel: $kernel, containerd: $containerd, runc: $runc}')

# Runs one bench invocation (under the lock) and appends its line.
run() {
    local limit=$1
    shift
    local date line
    date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    log "$*"
    if [[ -n $LOCK ]]; then
        line=$(flock "$LOCK" timeout "$limit" "$BIN" --endpoint "$ENDPOINT" "$@")
    else
        line=$(timeout "$limit" "$BIN" --endpoint "$ENDPOINT" "$@")
    fi
    echo "$line" >>"$OUT/raw.jsonl"
    jq -c --arg tag "$LABEL" --arg date "$date" --arg command "exec-bench $*" \
        --argjson machine "$machine" \
        '. + {"label": $tag, "date": $date, "command": $command, "machine": $machine}' \
        <<<"$line" | tee -a "$RESULTS" >&2
}

for mode in $MODES; do
    case $mode in
    overhead)
        run $((DURATION_S + 300)) overhead --pods "$OVERHEAD_PODS" --period-ms "$PERIOD_MS" \
            --duration-s "$DURATION_S" --cmd "$CMD"
        ;;
    fake)
        run 600 fake --calls "$FAKE_CALLS" --rounds "$FAKE_ROUNDS"
        ;;
    cap)
        for cap in $CAPS; do
            run $((CAP_ROUNDS * CAP_PERIOD_MS / 1000 + 300)) cap --pods "$CAP_PODS" --cap "$cap" \
                --rounds "$CAP_ROUNDS" --period-ms "$CAP_PERIOD_MS" --cmd "$CMD"
        done
        ;;
    *) log "unknown mode $mode" && exit 2 ;;
    esac
done
log "results: $RESULTS"
