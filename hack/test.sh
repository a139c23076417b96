#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, starts a
# private containerd (hack/containerd.sh) for the exec and CRI tests, builds
# Kubernetes (hack/k8s-build.sh, cached) and brings up the local cluster
# (hack/local-cluster.sh) for the tests that run `podprobe run` against it,
# checks formatting and lints, runs every test, then the fault suite
# (tests/faults.rs) on its own; then brings up the agent node
# (hack/agent-node.sh: a CRI node agent with podprobe in authority mode) and
# runs tests/e2e_authority.rs against it. Last, with the local cluster down,
# a kind cluster of three nodes (hack/kind-e2e.sh: the offline node image of
# hack/kind-node-image.sh, containerd 2, podprobe installed by its Helm
# chart) for the end-to-end suites tests/e2e_gate.rs, tests/e2e_upstream.rs
# and tests/e2e_kind.rs. The end-to-end suites are #[ignore]d in a plain
# `cargo test`.
#
# Every phase runs even when an earlier one failed (every `cargo test` with
# --no-fail-fast); the exit status is non-zero if any failed, and the run
# ends with a summary: each phase's status and time, each test binary's
# passed/failed/ignored counts and time. Full logs stay in $PODPROBE_TEST_LOGS
# (default: a new directory under /tmp, printed at the start and the end).
#
# Caches, used when present and never required: the Kubernetes binaries,
# the Go tools (helm, promtool, containerd 2, kind), the node image's Debian
# root filesystem and the cargo target directory live under
# ${PODPROBE_CACHE:-~/.cache/podprobe}, outside the checkout, so a fresh
# clone on the same machine rebuilds only podprobe itself. The release
# binary is built once, for the images and the agent node. The Go builds
# (one core, niced) run side by side with the Rust builds.
#
# Stops what it started (the containerd, the clusters, the agent node); a
# cluster or agent node that was already up is left running.
set -euo pipefail
cd "$(dirname "$0")/.."

cache_root="${PODPROBE_CACHE:-$HOME/.cache/podprobe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache_root/target}"
# A run builds each source once: incremental compilation's state would only
# be written, never read, and it fills the disk over many runs.
export CARGO_INCREMENTAL=0
logs="${PODPROBE_TEST_LOGS:-$(mktemp -d /tmp/podprobe-test.XXXXXX)}"
# hack/kind-e2e.sh keeps podprobe's logs there when a kind suite fails.
export PODPROBE_TEST_LOGS="$logs"
mkdir -p "$logs"
echo "test.sh: logs in $logs, cargo target $CARGO_TARGET_DIR" >&2
run_start=$SECONDS

# "name|status|seconds" per phase, in order; the last phase's status.
phases=()
status=0
last_rc=0

# Runs "$@" as phase $1 (its output also to $logs/$1.log); records its
# status and time; never stops the run.
phase() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "=== test.sh: $name" >&2
  set +e
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  record "$name" "$rc" $((SECONDS - start))
  last_rc=$rc
  return 0
}

record() {
  phases+=("$1|$2|$3")
  if [ "$2" != 0 ]; then status=1; fi
}

# suites PREFIX LOG: one line per test binary of a cargo test log.
# shellcheck source=hack/cargo-suites.sh
. hack/cargo-suites.sh

summary() {
  local entry name rc secs
  echo
  echo "==================== test.sh summary ===================="
  printf '%-24s %-7s %8s\n' phase status time
  for entry in "${phases[@]}"; do
    IFS='|' read -r name rc secs <<<"$entry"
    printf '%-24s %-7s %7ss\n' "$name" "$([ "$rc" = 0 ] && echo ok || echo "FAIL($rc)")" "$secs"
  done
  echo
  if [ -f "$logs/tests.log" ]; then
    printf '%-36s %7s %7s %8s %10s\n' suite passed failed ignored time
    {
      suites "" "$logs/tests.log"
      if [ -f "$logs/faults.log" ]; then suites "faults:" "$logs/faults.log"; fi
      if [ -f "$logs/e2e-authority.log" ]; then suites "e2e:" "$logs/e2e-authority.log"; fi
      if [ -f "$logs/e2e-kind.log" ]; then suites "kind:" "$logs/e2e-kind.log"; fi
    } | awk '
      { printf "%-36s %7s %7s %8s %10s\n", $1, $2, $3, $4, $5
        if ($2 != "-") passed += $2
        if ($3 == "?") crashed++; else failed += $3 }
      END {
        if (crashed) printf "%d test binaries printed no result (see the logs)\n", crashed
        printf "total: %d passed, %d failed\n", passed, failed + crashed
      }'
  fi
  echo "wall time $((SECONDS - run_start)) s; logs in $logs; exit $status"
}

started_cri=no
started_cluster=no
started_agent=no
started_kind=no
go_pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  # Non-zero when a signal or a failing command ended the run early: the
  # summary must not call a run that stopped half-way a success.
  local ended=$? pid
  if [ "$ended" != 0 ] && [ "$status" = 0 ]; then
    echo "test.sh: stopped early (exit $ended); the phases after the last one listed did not run" >&2
    status=$ended
  fi
  for pid in "${go_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ "$started_kind" = yes ]; then hack/kind-e2e.sh down || true; fi
  if [ "$started_agent" = yes ]; then hack/agent-node.sh down || true; fi
  if [ "$started_cluster" = yes ]; then hack/local-cluster.sh down || true; fi
  if [ "$started_cri" = yes ]; then hack/containerd.sh down || true; fi
  summary
  # Last, so that a run whose output is read from its end shows it.
  if [ -s "$logs/cluster-diagnostics.txt" ]; then
    echo
    echo "---- the local cluster when a phase on it failed ($logs/cluster-diagnostics.txt, head)"
    head -n 24 "$logs/cluster-diagnostics.txt"
  fi
  exit $status
}

# What a failed phase on the local cluster needs read first, written once
# (before the cluster goes down) to $logs/cluster-diagnostics.txt: disk,
# nodes, why sandboxes or containers were not created, the kubelet's and
# containerd's last errors. Each line is cut at 240 characters.
cluster_diagnostics() {
  local dir=/tmp/podprobe-cluster out="$logs/cluster-diagnostics.txt"
  [ -e "$out" ] && return 0
  {
    echo "after phase $1; / avail, use%:$(df -h --output=avail,pcent / | tail -n 1 | tr -s ' ')"
    "$PODPROBE_KUBECTL" --kubeconfig "$dir/admin.kubeconfig" get nodes --no-headers 2>&1 | head -n 4
    "$PODPROBE_KUBECTL" --kubeconfig "$dir/admin.kubeconfig" get events -A --no-headers \
      --field-selector type=Warning --sort-by=.lastTimestamp \
      -o custom-columns=REASON:.reason,COUNT:.count,MESSAGE:.message 2>&1 |
      grep -v -E '^(Unhealthy|BackOff|Killing|ProbeTimeoutCapped|MissingClusterDNS) ' | tail -n 6
    echo "kubelet:"
    grep -E '^E[0-9]{4} ' "$dir/logs/kubelet.log" 2>/dev/null | tail -n 4
    echo "containerd:"
    grep -E 'level=error' "$dir/containerd/containerd.log" 2>/dev/null | tail -n 4
  } 2>&1 | cut -c1-240 >"$out"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

phase install-deps hack/install-deps.sh
export PODPROBE_DEPLOY=helm

if ! hack/containerd.sh status >/dev/null 2>&1; then
  started_cri=yes
  phase containerd hack/containerd.sh up
fi
eval "$(hack/containerd.sh env)"
export PODPROBE_CRI_ENDPOINT

# The Go builds in the background, while cargo builds (niced; seconds when
# cached), in two chains side by side: Kubernetes (about 18 minutes cold on
# two cores, one package at a time), and the tools: helm and promtool
# (hack/helm.sh, hack/promtool.sh) for tests/chart.rs, tests/monitoring.rs
# and the Helm installs, containerd 2 and kind (hack/containerd-build.sh,
# hack/kind.sh) for the kind cluster.
# go_chain NAME SCRIPT...: runs the scripts one after the other, logging to
# $logs/NAME.log; writes "status seconds" to $logs/NAME.status.
go_chain() {
  local name=$1 start=$SECONDS rc=0 build
  shift
  for build in "$@"; do
    "$build" >>"$logs/$name.log" 2>&1 || rc=$?
  done
  echo "$rc $((SECONDS - start))" >"$logs/$name.status"
  return "$rc"
}
go_chain k8s-build hack/k8s-build.sh &
go_pids=("$!")
go_chain go-tools hack/helm.sh hack/promtool.sh hack/containerd-build.sh hack/kind.sh &
go_pids+=("$!")

# Every cargo test and clippy here passes `--features testing` (Cargo.toml):
# the CRI lifecycle calls that tests/cri_exec.rs, tests/faults.rs, the CRI
# test of tests/cli_probe.rs and the node-agent example make pods with. The
# same features everywhere, so the targets are built once. Clippy also runs
# without it, as the product is built (Dockerfile, hack/image.sh), which
# skips the targets that need it.
clippy_both() {
  local rc=0
  cargo clippy --locked --workspace --all-targets --features testing -- -D warnings || rc=1
  cargo clippy --locked --workspace --all-targets -- -D warnings || rc=1
  return "$rc"
}
# The pure core (crates/podprobe-core) builds without an API client,
# server, TLS stack or CRI client (issue #26): none of them in its tree.
core_deps() {
  local tree found
  tree=$(cargo tree --locked -p podprobe-core -e normal --prefix none) || return 1
  found=$(awk '{print $1}' <<<"$tree" |
    grep -xE 'kube.*|tonic.*|hyper.*|rustls|tokio-rustls|prost.*|tower.*|h2' | sort -u || true)
  if [ -n "$found" ]; then
    echo "podprobe-core depends on: $found" >&2
    return 1
  fi
  echo "podprobe-core: no kube, tonic, hyper, rustls, prost or tower in its dependency tree"
}
phase fmt cargo fmt --all --check
phase core-deps core_deps
phase clippy clippy_both
phase build-tests cargo test --locked --workspace --features testing --no-fail-fast --no-run
phase build-release cargo build --locked --release --bin podprobe
# The cached target directory keeps only this run's outputs of the
# workspace (hack/target-prune.sh): older test binaries, a whole set per
# change, filled the disk.
phase target-prune hack/target-prune.sh

# Each chain's own time, though they ran beside the phases above.
for chain in k8s-build go-tools; do
  chain_rc=0
  wait "${go_pids[0]}" || chain_rc=$?
  go_pids=("${go_pids[@]:1}")
  read -r _ chain_secs <"$logs/$chain.status" || chain_secs=?
  record "$chain (beside)" "$chain_rc" "$chain_secs"
  if [ "$chain_rc" != 0 ]; then tail -n 40 "$logs/$chain.log" >&2; fi
done
# helm and promtool for the tests; if a build failed, the path is empty and
# those tests fail saying so.
PODPROBE_HELM=$(hack/helm.sh 2>/dev/null || true)
PODPROBE_PROMTOOL=$(hack/promtool.sh 2>/dev/null || true)
export PODPROBE_HELM PODPROBE_PROMTOOL
# The pinned kubectl, for tests/readme.rs's `kubectl apply -k` (rendered).
PODPROBE_KUBECTL="$(hack/k8s-build.sh --bin-dir)/kubectl"
export PODPROBE_KUBECTL

if ! hack/local-cluster.sh status >/dev/null 2>&1; then
  started_cluster=yes
  phase cluster-up hack/local-cluster.sh up
fi

# agnhost (its gRPC health server), imported into the local cluster's
# containerd: tests/hostile_pods.rs's bystander and the authority-mode
# end-to-end suites below run it.
phase images hack/image.sh agnhost

phase tests cargo test --locked --workspace --features testing --no-fail-fast
if [ "$last_rc" != 0 ]; then cluster_diagnostics tests; fi

# The fault suite (tests/faults.rs, #[ignore]d in a plain `cargo test`): API
# server stopped and stalled, containerd and podprobe SIGKILLed, churn,
# outside writes, refused Events. Its scenarios mostly wait out their
# faults, each with its own API server, proxy, containerd or node: side by
# side, in their own phase so that nothing else runs on the cluster then.
phase faults cargo test --locked --features testing --no-fail-fast --test faults -- --ignored --test-threads=8

# Authority mode end to end: the agent node (a CRI node agent without a
# prober, podprobe --mode authority beside it) on the local cluster, its
# pods compared with the kubelet's in every run; the kubelet's copies run
# agnhost (imported above).
if ! hack/agent-node.sh status >/dev/null 2>&1; then
  started_agent=yes
  phase agent-node-up hack/agent-node.sh up
fi
# With upstream's probe scenarios in authority mode (tests/e2e_upstream.rs's
# authority:: tests; its gate-mode ones run on kind below).
e2e_authority() {
  local rc=0
  cargo test --locked --features testing --no-fail-fast --test e2e_authority -- --ignored --test-threads=12 || rc=1
  cargo test --locked --features testing --no-fail-fast --test e2e_upstream -- --ignored authority:: --test-threads=12 || rc=1
  return "$rc"
}
PODPROBE_AGENT_NODE_UP=1 phase e2e-authority e2e_authority
if [ "$last_rc" != 0 ]; then cluster_diagnostics e2e-authority; fi

# The local cluster's part is done: take down what this run started, so the
# kind cluster has the machine's two cores to itself.
if [ "$started_agent" = yes ]; then
  phase agent-node-down hack/agent-node.sh down
  started_agent=no
fi
if [ "$started_cluster" = yes ]; then
  phase cluster-down hack/local-cluster.sh down
  started_cluster=no
fi

# End to end on several nodes, as users run it: a kind cluster of a control
# plane and two workers, podprobe installed by the Helm chart on each
# (hack/kind-e2e.sh). The tests mostly wait on the cluster: side by side.
# hack/kind-e2e.sh run leaves out e2e_upstream's authority:: tests (above)
# and its kubelet:: tests (upstream's scenarios under the kubelet's own
# prober: the reference the port was checked against, see
# tests/UPSTREAM_E2E.md; they test the kubelet, whose readiness probes can
# error out during termination under this load).
if [ "$(hack/kind-e2e.sh status 2>/dev/null)" != up ]; then started_kind=yes; fi
phase kind-up hack/kind-e2e.sh up
# Without a cluster the kind suites could only fail to connect, a screen of
# failures burying the cause: kind-up's own output is the run's last words.
if [ "$last_rc" = 0 ]; then
  phase e2e-kind hack/kind-e2e.sh run
else
  echo "test.sh: e2e-kind not run: kind-up failed (its output above)" >&2
  record "e2e-kind (not run)" 1 0
fi
