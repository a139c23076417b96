#!/usr/bin/env bash
# What one hostile pod costs podprobe's parser (#25), for two builds side by
# side: `podprobe lint` runs the daemon's parser on the pods of the issue,
# under /usr/bin/time. Not a test; results go to bench/RESULTS.md.
#
#   bench/fair-share/run.sh OLD_BINARY NEW_BINARY
set -euo pipefail
old=${1:?usage: $0 OLD_BINARY NEW_BINARY}
new=${2:?usage: $0 OLD_BINARY NEW_BINARY}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def pod(name, containers, annotation):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"podprobe.io/probes": json.dumps(annotation, separators=(",", ":"))}},
            "spec": {"readinessGates": [{"conditionType": "podprobe.io/ready"}], "containers": containers}}
def regex_pod(name, pattern, n):
    probe = lambda port: {"httpGet": {"port": port}, "podprobe": {"expect": {"bodyRegex": pattern}}}
    annotation = {f"r{i}": {"startupProbe": probe(1), "readinessProbe": probe(2), "livenessProbe": probe(3)} for i in range(n)}
    return pod(name, [{"name": f"r{i}", "image": "x"} for i in range(n)], annotation)
var = "x" * 20000
expansions = pod("expansions",
                 [{"name": f"e{i}", "image": "x", "env": [{"name": "A", "value": var}]} for i in range(60)],
                 {f"e{i}": {"readinessProbe": {"exec": {"command": ["sh", "-c", "$(A)" * 104]}}} for i in range(60)})
for name, doc in [("regexes", regex_pod("regexes", "(?:a*b*){300}[^ab]", 860)),
                  ("heavy-regexes", regex_pod("heavy-regexes", "(?:a*b*){1500}[^ab]", 800)),
                  ("expansions", expansions)]:
    open(f"{work}/{name}.json", "w").write(json.dumps(doc))
PY
for pod in regexes heavy-regexes expansions; do
    for side in old new; do
        binary=$old
        [ $side = new ] && binary=$new
        /usr/bin/time -f "$pod $side: %e s wall, %U s user, %M KiB max RSS, pod $(stat -c %s "$work/$pod.json") bytes" \
            "$binary" lint "$work/$pod.json" >/dev/null 2>"$work/time" || true
        tail -1 "$work/time"
    done
done
