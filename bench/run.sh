#!/usr/bin/env bash
# Benchmark of podprobe's network probe handlers against the kubelet's own
# probe packages: builds both harnesses (release), starts the loopback servers
# once, runs Go and Rust alternately for each (kind, N) and prints a markdown
# table with the Rust/Go ratios. A measurement, not a test: CI does not run it.
#
# With FLOOR=1, the C floor (bench/floor/floor.c: the least a prober can do per
# probe) runs too, for every kind, in the same rotation. RUST_THREADS lists
# the Rust harness's tokio worker threads, one side each ("1 0": one thread,
# as the chart's 1-CPU limit gives podprobe, and one per core); 0 is one per
# core, as Go's GOMAXPROCS.
#
# Knobs (environment): KINDS ("http tcp grpc"), NS ("100 500"), PERIOD_MS (100),
# DURATION_S (15), TIMEOUT_MS (1000), ROUNDS (2), RUST_THREADS ("0"), FLOOR (0),
# OUT (bench/out/<time>).
# Bounded: every run is under `timeout`, there are |KINDS|*|NS|*ROUNDS*|sides| runs.
# Only loopback (127.0.0.1) is used; only processes this script started are
# stopped, by PID.
set -euo pipefail

KINDS=${KINDS:-"http tcp grpc"}
NS=${NS:-"100 500"}
PERIOD_MS=${PERIOD_MS:-100}
DURATION_S=${DURATION_S:-15}
TIMEOUT_MS=${TIMEOUT_MS:-1000}
ROUNDS=${ROUNDS:-2}
FLOOR=${FLOOR:-0}
RUST_THREADS=${RUST_THREADS:-0}

BENCH=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$BENCH/out/$(date -u +%Y%m%dT%H%M%SZ)}
BIN=$OUT/bin
RESULTS=$OUT/results.jsonl
mkdir -p "$BIN"
: >"$RESULTS"

log() { echo "run.sh: $*" >&2; }

# --- build -----------------------------------------------------------------
log "building the Go harness"
(
    cd "$BENCH/kubelet-probes"
    # gitMajor/gitMinor give the gRPC prober its real User-Agent
    # (kube-probe/1.35), as a kubelet built by the release tooling has.
    go build -trimpath \
        -ldflags "-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=35" \
        -o "$BIN/kubelet-probes" .
)
log "building the Rust harness"
cargo build --quiet --release --manifest-path "$BENCH/probe-load/Cargo.toml"
target_dir=${CARGO_TARGET_DIR:-$BENCH/probe-load/target}
# A private copy, so that another build into a shared target dir cannot swap
# the binary mid-run.
cp "$target_dir/release/probe-load" "$BIN/probe-load"
if ((FLOOR)); then
    log "building the C floor"
    cc -O2 -Wall -Wextra -o "$BIN/floor" "$BENCH/floor/floor.c"
fi

# --- servers ---------------------------------------------------------------
"$BIN/kubelet-probes" serve >"$OUT/ports.json" 2>"$OUT/serve.log" &
SERVE_PID=$!
echo "$SERVE_PID" >"$OUT/serve.pid"
trap 'kill "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true' EXIT

for _ in $(seq 50); do
    [[ -s $OUT/ports.json ]] && break
    sleep 0.1
done
[[ -s $OUT/ports.json ]] || { log "servers did not start (see $OUT/serve.log)"; exit 1; }
log "servers (pid $SERVE_PID): $(cat "$OUT/ports.json")"

# --- runs ------------------------------------------------------------------
# One harness run of side `impl` (go, floor, rust or rust-<threads>t);
# appends its JSON line, with the side, the machine's 1-minute load average
# and the round number added, to $RESULTS.
run_one() {
    local impl=$1 kind=$2 n=$3 round=$4 port line load threads=0
    port=$(jq -r ".$kind" "$OUT/ports.json")
    load=$(cut -d' ' -f1 /proc/loadavg)
    case $impl in
    go)
        line=$(timeout $((DURATION_S + 30)) "$BIN/kubelet-probes" load -kind "$kind" -n "$n" \
            -period "${PERIOD_MS}ms" -duration "${DURATION_S}s" -timeout "${TIMEOUT_MS}ms" -port "$port")
        ;;
    rust*)
        [[ $impl == rust-*t ]] && threads=${impl#rust-} && threads=${threads%t}
        line=$(timeout $((DURATION_S + 30)) "$BIN/probe-load" --kind "$kind" --n "$n" \
            --period-ms "$PERIOD_MS" --duration-s "$DURATION_S" --timeout-ms "$TIMEOUT_MS" --port "$port" \
            --threads "$threads")
        ;;
    floor)
        line=$(timeout $((DURATION_S + 30)) "$BIN/floor" "$kind" "$n" "$PERIOD_MS" "$DURATION_S" "$port")
        ;;
    esac
    jq -c --argjson load "$load" --argjson round "$round" --arg side "$impl" \
        '. + {loadavg_1m_before: $load, round: $round, side: $side}' <<<"$line" | tee -a "$RESULTS" >&2
}

sides=()
((FLOOR)) && sides+=(floor)
sides+=(go)
for threads in $RUST_THREADS; do
    if ((threads == 0)); then sides+=(rust); else sides+=("rust-${threads}t"); fi
done

i=0
for kind in $KINDS; do
    for n in $NS; do
        for round in $(seq "$ROUNDS"); do
            # Rotate which side goes first, so none always runs on the
            # machine another has just warmed or loaded.
            k=$((i % ${#sides[@]}))
            order=("${sides[@]:k}" "${sides[@]:0:k}")
            i=$((i + 1))
            for impl in "${order[@]}"; do
                log "$kind n=$n round=$round $impl"
                run_one "$impl" "$kind" "$n" "$round"
            done
        done
    done
done

log "raw results: $RESULTS"
python3 "$BENCH/table.py" "$RESULTS"
