#!/usr/bin/env bash
# The compatibility matrix (issue #42): for each pinned Kubernetes release,
# podprobe's kind suites on a kind cluster of that release and upstream's
# own e2e.test of that release against authority mode; each run's counts
# and wall time go to a results file, from which the compatibility table of
# docs/development.md is printed. For a nightly run by hand, not CI (CI
# runs the newest release only, through hack/test.sh).
#
#   hack/compat-matrix.sh [run] [VERSION...]
#                       run both for each VERSION (default: every release
#                       `hack/k8s-build.sh --versions` pins, oldest first),
#                       then print the table
#   hack/compat-matrix.sh table [--write DOC]
#                       print the table from the results file; with --write,
#                       put it into DOC (docs/development.md) between the
#                       lines <!-- compat-matrix:begin --> and <!-- compat-matrix:end -->
#   hack/compat-matrix.sh record DATE VERSION HARNESS SUITE PASSED FAILED SKIPPED SECONDS RUNTIME NOTE
#                       add one result of a run made otherwise (its NOTE says
#                       which, and shows in the table)
#
#   COMPAT_RESULTS  the results file (default docs/compat-results.tsv, in
#                   the repository: the table's source is versioned with it
#                   and survives a new machine); kept across runs: the table
#                   shows each release's newest run of each harness, so a
#                   second run of one release replaces its rows and the
#                   others stay
#   COMPAT_LOGS     where each run's log goes (default
#                   ${PODPROBE_CACHE:-~/.cache/podprobe}/compat/logs)
#
# Each release, in turn (never two clusters at once: the machine is small):
#   kind      KIND_CLUSTER_NAME=podprobe-compat-<minor> PODPROBE_K8S_VERSION=VERSION
#             hack/kind-e2e.sh (up, then e2e_gate, e2e_upstream's gate-mode
#             scenarios and e2e_kind), then that cluster's down, whatever
#             the result
#   upstream  the local cluster and agent node taken down (they may run
#             another release), then hack/upstream-e2e.sh VERSION (which
#             brings them up on VERSION), then both down again
# A run that fails is recorded (its failed count, or "?" when it printed no
# result) and the matrix goes on; the exit status is 1 when any run failed.
#
# Results file: tab-separated, one line per suite of a run:
#   date version harness suite passed failed skipped seconds runtime note
# (harness: kind or upstream; seconds: the wall time of the whole run, the
# kind cluster's bring-up included, on each of its suites' lines).
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
# shellcheck source=hack/cargo-suites.sh
. "$HACK/cargo-suites.sh"
# shellcheck source=hack/kind-provider.sh
. "$HACK/kind-provider.sh"

RESULTS=${COMPAT_RESULTS:-$ROOT/docs/compat-results.tsv}
LOGS=${COMPAT_LOGS:-${PODPROBE_CACHE:-$HOME/.cache/podprobe}/compat/logs}

log() { echo "compat-matrix: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# record_line DATE VERSION HARNESS SUITE PASSED FAILED SKIPPED SECONDS RUNTIME NOTE
record_line() {
    mkdir -p "$(dirname "$RESULTS")"
    local IFS=$'\t'
    echo "$*" >>"$RESULTS"
}

today() { date -u +%Y-%m-%d; }

minor_of() {
    local minor=${1#v1.}
    echo "${minor%%.*}"
}

# The container runtime of kind cluster $1's nodes, as their binaries say.
kind_runtime() {
    local node=$1-control-plane containerd runc
    containerd=$("$ENGINE" exec "$node" containerd --version 2>/dev/null | awk '{print $3}') || true
    runc=$("$ENGINE" exec "$node" runc --version 2>/dev/null | awk 'NR == 1 {print $3}') || true
    runtime_name "containerd ${containerd:-?}, runc ${runc:-?}"
}

# $1 without a leading "v" on versions and Debian's "~ds1"/"+ds1" suffixes.
runtime_name() {
    sed -E 's/ v([0-9])/ \1/g; s/[~+]ds[0-9]+//g' <<<"$1"
}

run_kind() {
    local version=$1 cluster log start rc=0 runtime
    cluster=podprobe-compat-$(minor_of "$version")
    log="$LOGS/$version-kind.log"
    log "$version: kind suites on $cluster (log: $log)"
    start=$SECONDS
    KIND_CLUSTER_NAME=$cluster PODPROBE_K8S_VERSION=$version "$HACK/kind-e2e.sh" test >"$log" 2>&1 || rc=$?
    local seconds=$((SECONDS - start))
    runtime=$(kind_runtime "$cluster")
    KIND_CLUSTER_NAME=$cluster "$HACK/kind-e2e.sh" down >>"$log" 2>&1 || log "could not delete $cluster"
    local n=0 suite passed failed ignored
    while read -r suite passed failed ignored _; do
        suite=${suite#tests/}
        suite=${suite%.rs}
        record_line "$(today)" "$version" kind "$suite" "$passed" "$failed" "$ignored" "$seconds" "$runtime" "hack/compat-matrix.sh"
        n=$((n + 1))
    done < <(suites "" "$log")
    if [ "$n" = 0 ]; then
        record_line "$(today)" "$version" kind "(no suite ran)" - "?" - "$seconds" "$runtime" "hack/compat-matrix.sh"
        [ "$rc" != 0 ] || rc=1
    fi
    log "$version: kind suites exit $rc in $seconds s"
    return "$rc"
}

local_down() {
    "$HACK/agent-node.sh" down >/dev/null 2>&1 || true
    "$HACK/local-cluster.sh" down >/dev/null 2>&1 || true
}

run_upstream() {
    local version=$1 log out start rc=0 counts runtime
    log="$LOGS/$version-upstream.log"
    out="$LOGS/$version-upstream"
    rm -rf "$out"
    log "$version: upstream e2e.test against authority mode (log: $log)"
    local_down
    start=$SECONDS
    PODPROBE_K8S_VERSION=$version UPSTREAM_E2E_OUT=$out "$HACK/upstream-e2e.sh" "$version" >"$log" 2>&1 || rc=$?
    local seconds=$((SECONDS - start))
    runtime=$(runtime_name "$(containerd --version 2>/dev/null | awk '{print "containerd " $3}'), $(runc --version 2>/dev/null | awk 'NR == 1 {print "runc " $3}') (agent node)")
    local_down
    # upstream-e2e.sh's summary: "passed: N, failed: N, skipped: N (of N specs ...)".
    counts=$(sed -n 's/^passed: \([0-9]*\), failed: \([0-9]*\), skipped: \([0-9]*\) .*/\1 \2 \3/p' "$log" | tail -n 1)
    local passed=- failed=? skipped=-
    [ -z "$counts" ] || read -r passed failed skipped <<<"$counts"
    record_line "$(today)" "$version" upstream "e2e.test $version" "$passed" "$failed" "$skipped" "$seconds" "$runtime" "hack/compat-matrix.sh"
    log "$version: upstream e2e.test exit $rc in $seconds s ($passed passed, $failed failed)"
    return "$rc"
}

# The markdown table: each release's newest run of each harness (the lines
# of one run share its date, release and harness; of two lines of one suite
# that day, the later counts).
table() {
    [ -f "$RESULTS" ] || die "no results in $RESULTS: run hack/compat-matrix.sh first"
    echo "| Kubernetes | runtime | cluster | what ran | result | wall time | command | run |"
    echo "|---|---|---|---|---|---|---|---|"
    awk -F '\t' '
        # First pass: the newest date of each (release, harness).
        NR == FNR { key = $2 SUBSEP $3; if ($1 > newest[key]) newest[key] = $1; next }
        $1 != newest[$2, $3] { next }
        {
            key = $2 SUBSEP $3
            if (!(key in seen)) { seen[key] = 1; keys[++n] = key }
            if (!((key, $4) in line)) suites[key] = suites[key] SUBSEP $4
            line[key, $4] = $0
        }
        END {
            for (i = 1; i <= n; i++) {
                key = keys[i]; split(key, kv, SUBSEP); version = kv[1]; harness = kv[2]
                split(version, vp, "."); minor = vp[2]
                m = split(suites[key], names, SUBSEP)
                what = ""; ok = 1; uncounted = 0
                for (j = 2; j <= m; j++) {
                    split(line[key, names[j]], f, "\t")
                    if (f[6] != "0") ok = 0
                    secs = f[8]; runtime = f[9]; note = f[10]
                    # "-": a recorded run whose counts were not kept.
                    if (f[5] == "-" && f[6] == "0") { count = ""; uncounted = 1 }
                    else if (f[6] == "0") count = " " f[5] "/" f[5]
                    else count = " " f[5] " passed, " f[6] " failed"
                    if (harness == "upstream") {
                        if (f[7] != "0" && f[7] != "-") count = count ", " f[7] " skipped"
                        what = "upstream'"'"'s own `" f[4] "`, probe specs, against authority mode:" count
                    } else {
                        name = "`" f[4] "`"
                        if (f[4] == "e2e_upstream") name = name " (gate mode)"
                        what = what (what == "" ? "" : ", ") name count
                    }
                }
                if (uncounted) what = what ": all passed"
                if (harness == "kind") {
                    cluster = "kind, three nodes"
                    cmd = "`PODPROBE_K8S_VERSION=" version " KIND_CLUSTER_NAME=podprobe-compat-" minor " hack/kind-e2e.sh`"
                } else {
                    cluster = "local + agent node"
                    cmd = "`hack/upstream-e2e.sh " version "`"
                }
                run = newest[key] (note == "hack/compat-matrix.sh" ? "" : ", " note)
                printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", version, runtime, cluster, what,
                    ok ? "pass" : "**FAIL**", secs ~ /^[0-9]+$/ ? secs " s" : "-", cmd, run
            }
        }' "$RESULTS" <(sort -t $'\t' -k2,2V -k3,3 -s "$RESULTS")
}

write_table() {
    local doc=$1 begin='<!-- compat-matrix:begin -->' end='<!-- compat-matrix:end -->'
    grep -qxF "$begin" "$doc" && grep -qxF "$end" "$doc" || die "$doc has no $begin ... $end lines"
    local tmp
    tmp=$(mktemp)
    table >"$tmp.table"
    awk -v begin="$begin" -v end="$end" -v table="$tmp.table" '
        $0 == begin { print; while ((getline l < table) > 0) print l; skip = 1; next }
        $0 == end { skip = 0 }
        !skip' "$doc" >"$tmp"
    cat "$tmp" >"$doc"
    rm -f "$tmp" "$tmp.table"
    log "wrote the table into $doc"
}

run() {
    [ "$(id -u)" = 0 ] || die "must run as root (kind on podman, the local cluster)"
    local versions=("$@") version status=0
    [ ${#versions[@]} -gt 0 ] || mapfile -t versions < <("$HACK/k8s-build.sh" --versions)
    kind_provider_setup
    mkdir -p "$LOGS"
    for version in "${versions[@]}"; do
        "$HACK/k8s-build.sh" --versions | grep -qxF "$version" || die "$version is not pinned (hack/k8s-build/)"
        [ -f "$HACK/upstream-e2e/$version/go.mod" ] || die "no hack/upstream-e2e/$version/go.mod"
    done
    for version in "${versions[@]}"; do
        run_kind "$version" || status=1
        run_upstream "$version" || status=1
    done
    table
    return "$status"
}

cd "$ROOT"
case ${1:-run} in
run)
    shift || true
    run "$@"
    ;;
table)
    if [ "${2:-}" = --write ]; then
        [ -n "${3:-}" ] || die "usage: $0 table --write DOC"
        write_table "$3"
    else
        table
    fi
    ;;
record)
    [ $# = 11 ] || die "usage: $0 record DATE VERSION HARNESS SUITE PASSED FAILED SKIPPED SECONDS RUNTIME NOTE"
    shift
    record_line "$@"
    ;;
v*) run "$@" ;;
*) die "usage: $0 [run] [VERSION...] | table [--write DOC] | record ..." ;;
esac
