#!/usr/bin/env bash
# What podprobe's CRI client and the kubelet's send to containerd per exec
# probe, and what containerd spends on it (#27, item 4), against the private
# containerd of hack/containerd.sh (started here if it does not run, and
# then stopped here at the end). Sides, alternated ROUNDS times (the order
# flips every round, so that the load of the machine falls on both):
#
#   podprobe  exec-calls (src/bin/exec-calls.rs): podprobe's prober and CRI
#             client as the daemon builds them, PODS containers each probed
#             once every PERIOD_MS (20 exec probes/s by default);
#   kubelet   kubelet-exec/: the kubelet's own CRI client (k8s.io/cri-client
#             v0.35.8, NewRemoteRuntimeService + ExecSync(ctx, id, cmd,
#             timeout)), the same containers, command, timeout and rate;
#   idle      nobody calls for IDLE_S: containerd's own background CPU.
#
# Each client talks to containerd through criproxy.py (a transparent
# unix-socket proxy that counts HTTP/2 frames, bytes, socket reads/writes per
# call and decodes the ExecSyncRequest), one proxy per run. Per run, one JSON
# line in $OUT/results.jsonl: the client's line (calls, errors, latency), the
# proxy's per-ExecSync figures, containerd's CPU (utime+stime of the PID in
# its PID file; separately cutime+cstime, its reaped children) and its shims'
# (utime+stime+cutime+cstime of every containerd-shim-runc-v2 of that socket:
# runc exec, runc init and the probe command are their children) per call,
# and the load average before and after. The proxies' full summaries are kept
# in $OUT/proxy-<side>-<round>.json.
#
# Knobs (environment): SIDES ("podprobe kubelet idle"), ROUNDS (3), PODS (20),
# PERIOD_MS (1000), DURATION_S (60), IDLE_S (20), TIMEOUT_S (1), CMD ("test -f
# /www/exec-ok"), LABEL (a tag for the lines, e.g. the commit), BIN (a built
# exec-calls), EXEC_BENCH (a built exec-bench, for `setup`), KUBELET_EXEC (a
# built kubelet-exec), LOCK (/tmp/podprobe-bench.lock; empty: no lock),
# TEARDOWN (0; 1: remove the bench pods at the end), OUT
# (bench/exec/out/calls-<time>). Needs root (containerd), python3, jq, go.
# The Go side builds offline (GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off) from
# the module cache.
# Bounded: every run is under `timeout`; this script stops nothing but what
# it started itself: its proxies (by their PID file) and the containerd it
# started (hack/containerd.sh down, by its PID file).
# A measurement, not a test: CI does not run it.
set -euo pipefail

SIDES=${SIDES:-"podprobe kubelet idle"}
ROUNDS=${ROUNDS:-3}
PODS=${PODS:-20}
PERIOD_MS=${PERIOD_MS:-1000}
DURATION_S=${DURATION_S:-60}
IDLE_S=${IDLE_S:-20}
TIMEOUT_S=${TIMEOUT_S:-1}
CMD=${CMD:-"test -f /www/exec-ok"}
LOCK=${LOCK-/tmp/podprobe-bench.lock}
TEARDOWN=${TEARDOWN:-0}

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$HERE/out/calls-$(date -u +%Y%m%dT%H%M%SZ)}
RESULTS=$OUT/results.jsonl
LABEL=${LABEL:-$(git -C "$REPO" rev-parse --short HEAD)}
mkdir -p "$OUT"

log() { echo "exec/calls.sh: $*" >&2; }

if [[ -z ${BIN:-} || -z ${EXEC_BENCH:-} ]]; then
    log "building exec-calls and exec-bench (release)"
    cargo build --quiet --release --manifest-path "$HERE/Cargo.toml"
    BIN=${BIN:-${CARGO_TARGET_DIR:-$HERE/target}/release/exec-calls}
    EXEC_BENCH=${EXEC_BENCH:-${CARGO_TARGET_DIR:-$HERE/target}/release/exec-bench}
fi
if [[ -z ${KUBELET_EXEC:-} ]]; then
    log "building kubelet-exec (offline, from the module cache)"
    KUBELET_EXEC=$OUT/kubelet-exec
    (cd "$HERE/kubelet-exec" && GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off \
        timeout 900 go build -o "$KUBELET_EXEC" .)
fi

started_containerd=0
if ! bash "$REPO/hack/containerd.sh" status >/dev/null 2>&1; then
    log "starting the private containerd (hack/containerd.sh up)"
    bash "$REPO/hack/containerd.sh" up
    started_containerd=1
fi
PROXY_PID=$OUT/proxy.pid
finish() {
    if [[ -f $PROXY_PID ]]; then
        kill -TERM "$(cat "$PROXY_PID")" 2>/dev/null || true
        rm -f "$PROXY_PID"
    fi
    if [[ $TEARDOWN == 1 || $started_containerd == 1 ]]; then
        timeout 300 "$EXEC_BENCH" teardown >&2 || true
    fi
    if [[ $started_containerd == 1 ]]; then
        bash "$REPO/hack/containerd.sh" down || true
    fi
}
trap finish EXIT
ENDPOINT=$(bash "$REPO/hack/containerd.sh" env | sed 's/^PODPROBE_CRI_ENDPOINT=//')
SOCK=${ENDPOINT#unix://}
CONTAINERD_PID=$(cat "$(dirname "$SOCK")/containerd.pid")

timeout 900 "$EXEC_BENCH" --endpoint "$ENDPOINT" setup --pods "$PODS" >&2
timeout 60 "$BIN" list --endpoint "$ENDPOINT" --pods "$PODS" >"$OUT/ids.txt"
[[ $(wc -l <"$OUT/ids.txt") -ge $PODS ]] || { log "fewer than $PODS bench containers"; exit 1; }
awk '{ print $1 }' "$OUT/ids.txt" >"$OUT/ids-only.txt"

# utime stime cutime cstime of $1, in clock ticks.
ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13, $14, $15 }' "/proc/$1/stat" 2>/dev/null || echo "0 0 0 0"; }
shim_pids() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q "containerd-shim-runc-v2 .*$SOCK" && echo "${p#/proc/}"
    done
    return 0
}
# containerd utime+stime, containerd cutime+cstime, shims' total.
cpu_now() {
    local c s=0 p
    c=$(ticks "$CONTAINERD_PID")
    for p in $SHIMS; do
        s=$((s + $(ticks "$p" | awk '{ print $1 + $2 + $3 + $4 }')))
    done
    awk -v s="$s" '{ print $1 + $2, $3 + $4, s }' <<<"$c"
}
loadavg() { awk '{ print $1 }' /proc/loadavg; }
TCK=$(getconf CLK_TCK)

run_side() {
    local side=$1 round=$2 proxy_json=$OUT/proxy-$1-$2.json psock=$OUT/proxy.sock
    local client_line cpu0 cpu1 load0 load1 began ended date
    date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    python3 "$HERE/criproxy.py" --listen "$psock" --upstream "$SOCK" --out "$proxy_json" \
        --label "$side/$round" --duration $((DURATION_S + 300)) &
    echo $! >"$PROXY_PID"
    for _ in $(seq 1 300); do [[ -S $psock ]] && break; sleep 0.1; done
    [[ -S $psock ]] || { log "the proxy did not start"; exit 1; }
    SHIMS=$(shim_pids | tr '\n' ' ')
    load0=$(loadavg)
    cpu0=$(cpu_now)
    began=$(date +%s.%N)
    case $side in
    podprobe)
        client_line=$(timeout $((DURATION_S + 120)) "$BIN" probe --endpoint "unix://$psock" \
            --ids "$OUT/ids.txt" --period-ms "$PERIOD_MS" --duration-s "$DURATION_S" \
            --timeout-s "$TIMEOUT_S" --cmd "$CMD")
        ;;
    kubelet)
        client_line=$(timeout $((DURATION_S + 120)) "$KUBELET_EXEC" --endpoint "unix://$psock" \
            --ids "@$OUT/ids-only.txt" --period "${PERIOD_MS}ms" --duration "${DURATION_S}s" \
            --timeout "${TIMEOUT_S}s" --cmd "$CMD")
        ;;
    idle)
        sleep "$IDLE_S"
        client_line='{"side": "idle", "calls": 0}'
        ;;
    *) log "unknown side $side" && exit 2 ;;
    esac
    cpu1=$(cpu_now)
    ended=$(date +%s.%N)
    load1=$(loadavg)
    kill -TERM "$(cat "$PROXY_PID")"
    wait "$(cat "$PROXY_PID")" || true
    rm -f "$PROXY_PID"
    jq -c --argjson client "$client_line" --arg side "$side" --argjson round "$round" \
        --arg tag "$LABEL" --arg date "$date" \
        --argjson load0 "$load0" --argjson load1 "$load1" --argjson tck "$TCK" \
        --arg cpu0 "$cpu0" --arg cpu1 "$cpu1" --argjson wall "$(awk -v a="$began" -v b="$ended" 'BEGIN { print b - a }')" \
        '($cpu0 | split(" ") | map(tonumber)) as $a | ($cpu1 | split(" ") | map(tonumber)) as $b
         | .per_exec_sync_call as $p | ([$p.exec_sync_calls, 1] | max) as $n
         | {side: $side, round: $round, label: $tag, date: $date, wall_s: $wall,
            loadavg_1m_before: $load0, loadavg_1m_after: $load1, client: $client,
            exec_sync_calls: $p.exec_sync_calls,
            containerd_cpu_s: (($b[0] - $a[0]) / $tck),
            containerd_children_cpu_s: (($b[1] - $a[1]) / $tck),
            shims_cpu_s: (($b[2] - $a[2]) / $tck),
            containerd_cpu_us_per_call: (($b[0] - $a[0]) / $tck * 1e6 / $n),
            containerd_children_cpu_us_per_call: (($b[1] - $a[1]) / $tck * 1e6 / $n),
            shims_cpu_us_per_call: (($b[2] - $a[2]) / $tck * 1e6 / $n),
            containerd_cores: (($b[0] - $a[0]) / $tck / $wall),
            proxy: $p,
            exec_timeout_sent: (.methods | to_entries | map(select(.key | endswith("/ExecSync"))) | .[0].value.exec_timeout_s // {}),
            exec_frame_sequences: (.methods | to_entries | map(select(.key | endswith("/ExecSync"))) | .[0].value.frame_sequences // {})}' \
        "$proxy_json" | tee -a "$RESULTS" >&2
}

for round in $(seq 1 "$ROUNDS"); do
    order=$SIDES
    # Every other round the other way round.
    ((round % 2 == 0)) && order=$(tr ' ' '\n' <<<"$SIDES" | tac | tr '\n' ' ')
    for side in $order; do
        log "round $round: $side (load $(loadavg))"
        if [[ -n $LOCK ]]; then
            exec 8>"$LOCK"
            flock 8
            run_side "$side" "$round"
            flock -u 8
        else
            run_side "$side" "$round"
        fi
    done
done
log "results: $RESULTS"
