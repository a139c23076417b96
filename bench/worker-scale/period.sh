#!/usr/bin/env bash
# Sub-second periods (#14): 1,000 podprobe workers (PODS pods x 1 container
# x readiness + liveness) on `podprobe.periodMilliseconds` = PERIOD_MS,
# probing for real through podprobe's prober (TCP, then HTTP) against the
# loopback servers of ../kubelet-probes, on the real clock; first with
# instant probes (no I/O) as the baseline. Each JSON line has the schedule
# (lateness percentiles, workers off schedule), failures, and the node's
# TIME-WAIT sockets and conntrack entries at their highest over the run
# (`sockets`); `ss -s` before and after each run is kept in $OUT. A
# measurement, not a test: CI does not run it.
#
# Knobs (environment): PROBES ("instant tcp http"), PODS (500), PERIOD_MS
# (100), DURATION_S (30), THREADS (2), OUT (bench/worker-scale/out/<time>),
# SERVER (go: `kubelet-probes serve`; c: ../floor/acceptor.c, a one-thread
# epoll acceptor for TCP only, so that the server's CPU leaves the prober
# room at 10,000 connections/s).
# Bounded: every run is under `timeout`. Only loopback is probed; only the
# server this script started is stopped, by PID.
set -euo pipefail

PROBES=${PROBES:-"instant tcp http"}
PODS=${PODS:-500}
PERIOD_MS=${PERIOD_MS:-100}
DURATION_S=${DURATION_S:-30}
THREADS=${THREADS:-2}
SERVER=${SERVER:-go}

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out/$(date -u +%Y%m%dT%H%M%SZ)}
BIN=$OUT/bin
RESULTS=$OUT/results.jsonl
mkdir -p "$BIN"
: >"$RESULTS"

log() { echo "period.sh: $*" >&2; }
# User + system CPU of a process so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

log "building (release)"
cargo build --quiet --release --manifest-path "$HERE/Cargo.toml"
target_dir=${CARGO_TARGET_DIR:-$HERE/target}
cp "$target_dir/release/worker-scale" "$BIN/worker-scale"
case $SERVER in
go)
    (cd "$HERE/../kubelet-probes" && go build -trimpath -o "$BIN/kubelet-probes" .)
    "$BIN/kubelet-probes" serve >"$OUT/ports.json" 2>"$OUT/serve.log" &
    ;;
c)
    cc -O2 -Wall -Wextra -o "$BIN/acceptor" "$HERE/../floor/acceptor.c"
    "$BIN/acceptor" >"$OUT/ports.json" 2>"$OUT/serve.log" &
    ;;
*) log "SERVER must be go or c"; exit 2 ;;
esac
SERVE_PID=$!
trap 'kill "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    [[ -s $OUT/ports.json ]] && break
    sleep 0.1
done
[[ -s $OUT/ports.json ]] || { log "servers did not start (see $OUT/serve.log)"; exit 1; }
log "servers (pid $SERVE_PID): $(cat "$OUT/ports.json")"

for probe in $PROBES; do
    port=$(jq -r ".$probe // 0" "$OUT/ports.json")
    load=$(cut -d' ' -f1 /proc/loadavg)
    tw_before=$(awk '/^TCP:/ { for (i = 1; i < NF; i++) if ($i == "tw") print $(i + 1) }' /proc/net/sockstat)
    ss -s >"$OUT/ss-before-$probe.txt"
    log "$probe: $((PODS * 2)) workers every ${PERIOD_MS} ms for ${DURATION_S} s"
    # Mid-run, which side holds the TIME-WAIT sockets: the prober's (its
    # ephemeral ports) or the server's.
    (sleep $((DURATION_S / 2)); ss -Htan state time-wait >"$OUT/time-wait-mid-$probe.txt") &
    SAMPLE_PID=$!
    server_ticks_before=$(cpu_ticks "$SERVE_PID")
    line=$(timeout $((DURATION_S + 120)) "$BIN/worker-scale" real --pods "$PODS" --containers 1 \
        --period-ms "$PERIOD_MS" --duration-s "$DURATION_S" --threads "$THREADS" \
        --probe "$probe" --port "$port")
    server_cpu_s=$(awk -v a="$server_ticks_before" -v b="$(cpu_ticks "$SERVE_PID")" \
        -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
    wait "$SAMPLE_PID"
    ss -s >"$OUT/ss-after-$probe.txt"
    side() { awk -v port=":$port" -v col="$1" '$col ~ port"$"' "$OUT/time-wait-mid-$probe.txt" | wc -l; }
    jq -c --argjson load "$load" --argjson tw "$tw_before" \
        --argjson prober_side "$(side 4)" --argjson server_side "$(side 3)" \
        --arg server "$SERVER" --argjson server_cpu_s "$server_cpu_s" \
        '. + {loadavg_1m_before: $load, time_wait_before: $tw, server: $server,
              server_cpu_s: $server_cpu_s,
              time_wait_mid: {prober_side: $prober_side, server_side: $server_side}}' \
        <<<"$line" | tee -a "$RESULTS" >&2
done
log "results: $RESULTS"
