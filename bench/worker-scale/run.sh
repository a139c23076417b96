#!/usr/bin/env bash
# Scale check of podprobe's prober core (issue 3): 10,000 workers on tokio's
# paused clock and on the real clock, the kubelet's TestCleanupRepeated shape,
# and the Go anchor (goroutines + time.Ticker in the kubelet worker loop's
# shape). A measurement, not a test: CI does not run it.
#
# Knobs (environment): PERIODS ("10 1"), DURATION_S (30), VIRTUAL_S (60),
# PODS (2500), CONTAINERS (2; workers = PODS*CONTAINERS*2), THREADS (2, also
# GOMAXPROCS), OUT (bench/worker-scale/out/<time>). Bounded: every run is
# under `timeout`; about 4 minutes with the defaults.
set -euo pipefail

PERIODS=${PERIODS:-"10 1"}
DURATION_S=${DURATION_S:-30}
VIRTUAL_S=${VIRTUAL_S:-60}
PODS=${PODS:-2500}
CONTAINERS=${CONTAINERS:-2}
THREADS=${THREADS:-2}

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out/$(date -u +%Y%m%dT%H%M%SZ)}
BIN=$OUT/bin
RESULTS=$OUT/results.jsonl
mkdir -p "$BIN"
: >"$RESULTS"

log() { echo "run.sh: $*" >&2; }

log "building (release)"
cargo build --quiet --release --manifest-path "$HERE/Cargo.toml"
target_dir=${CARGO_TARGET_DIR:-$HERE/target}
# Private copies, so that another build into a shared target dir cannot swap
# a binary mid-run.
cp "$target_dir/release/worker-scale" "$BIN/worker-scale"
(cd "$HERE/go" && go build -trimpath -o "$BIN/worker-scale-go" .)

# Runs one harness command; appends its JSON line, with the 1-minute load
# average before it, to $RESULTS.
run_one() {
    local load line
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$(timeout $((DURATION_S + 120)) "$@")
    jq -c --argjson load "$load" '. + {loadavg_1m_before: $load}' <<<"$line" | tee -a "$RESULTS" >&2
}

fleet=(--pods "$PODS" --containers "$CONTAINERS")
for period in $PERIODS; do
    log "paused clock, period ${period}s, ${VIRTUAL_S} virtual s"
    run_one "$BIN/worker-scale" paused "${fleet[@]}" --period-s "$period" --virtual-s "$VIRTUAL_S"
done
for period in $PERIODS; do
    clock=(--period-s "$period" --duration-s "$DURATION_S" --threads "$THREADS")
    log "real clock, period ${period}s: podprobe workers"
    run_one "$BIN/worker-scale" real "${fleet[@]}" "${clock[@]}"
    log "real clock, period ${period}s: bare tokio tasks"
    run_one "$BIN/worker-scale" substrate "${fleet[@]}" "${clock[@]}"
    log "real clock, period ${period}s: goroutines + time.Ticker"
    run_one env GOMAXPROCS="$THREADS" "$BIN/worker-scale-go" \
        -n $((PODS * CONTAINERS * 2)) -period "${period}s" -duration "${DURATION_S}s"
done
log "TestCleanupRepeated shape"
run_one "$BIN/worker-scale" cleanup --threads "$THREADS"

log "raw results: $RESULTS"
