#!/usr/bin/env bash
# Memory per HTTP probe in flight and CPU per HTTP probe, the kubelet's
# prober (`kubelet-probes load`) against one or more builds of podprobe's
# (`probe-load`), interleaved round by round (bench/RESULTS.md, #39).
#
#   bench/probe-load/in_flight.sh KUBELET_PROBES OUT LABEL=PROBE_LOAD...
#
# Starts two loopback servers (slow_server.py: one answering after 900 ms,
# one at once), then per round, for N in 100 and 800, for each server: the
# kubelet's side, then each podprobe build in the order given, one probe a
# second per prober for 8 s. Peak RSS over N shows what a probe in flight
# holds; CPU s per 1,000 probes on the fast server what one costs. One JSON
# line per run in OUT, with the round, the port and the 1-minute load.
# ROUNDS (2), PORT_SLOW (18081), PORT_FAST (18082).
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 KUBELET_PROBES OUT LABEL=PROBE_LOAD..." >&2; exit 2; }
KUBELET=$1 OUT=$2
shift 2
ROUNDS=${ROUNDS:-2}
PORT_SLOW=${PORT_SLOW:-18081}
PORT_FAST=${PORT_FAST:-18082}
HERE=$(cd "$(dirname "$0")" && pwd)

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
python3 "$HERE/slow_server.py" "$PORT_SLOW" 900 & pids+=($!)
python3 "$HERE/slow_server.py" "$PORT_FAST" 0 & pids+=($!)
sleep 1

# run LABEL ROUND PORT COMMAND...: one run, its JSON line annotated.
run() {
  local impl=$1 round=$2 port=$3 load line
  shift 3
  load=$(cut -d' ' -f1 /proc/loadavg)
  line=$("$@")
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(label=sys.argv[2], round=int(sys.argv[3]), port=int(sys.argv[4]), load=float(sys.argv[5])); print(json.dumps(d))' \
    "$line" "$impl" "$round" "$port" "$load" >>"$OUT"
}

for round in $(seq "$ROUNDS"); do
  for n in 100 800; do
    for port in "$PORT_SLOW" "$PORT_FAST"; do
      run kubelet "$round" "$port" "$KUBELET" load -kind http -n "$n" -period 1000ms -duration 8s -timeout 3000ms -port "$port"
      for side in "$@"; do
        run "${side%%=*}" "$round" "$port" "${side#*=}" --kind http --n "$n" --period-ms 1000 --duration-s 8 --timeout-ms 3000 --port "$port"
      done
    done
  done
done

# Per round and side: peak RSS at N=100 and 800 and KiB per prober added,
# on each server; CPU s per 1,000 probes on the fast one.
python3 - "$OUT" "$PORT_SLOW" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
slow = int(sys.argv[2])
key = lambda r: (r["round"], r["label"], r["port"])
by = {}
for r in runs:
    by.setdefault(key(r), {})[r["n"]] = r
print("round side       server  RSS@100  RSS@800  KiB/prober  CPU s/1k @100  @800  load")
for (rnd, label, port), ns in sorted(by.items()):
    if 100 not in ns or 800 not in ns:
        continue
    a, b = ns[100], ns[800]
    per = (b["max_rss_kib"] - a["max_rss_kib"]) / 700
    print(f"{rnd:5} {label:10} {'slow' if port == slow else 'fast':6} {a['max_rss_kib']:8} {b['max_rss_kib']:8} {per:10.1f}"
          f"  {a['cpu_s_per_1k']:13.3f} {b['cpu_s_per_1k']:5.3f}  {a['load']:.1f}/{b['load']:.1f}")
PY
