#!/usr/bin/env bash
# Builds Prometheus' promtool from its Go module at the pinned version (cached
# under ${PODPROBE_CACHE:-~/.cache/podprobe}/tools) and prints the binary's
# path. Idempotent. tests/monitoring.rs runs it through PODPROBE_PROMTOOL:
#
#   export PODPROBE_PROMTOOL="$(hack/promtool.sh)"
set -euo pipefail
PROMETHEUS_VERSION=v0.316.0
# shellcheck source=hack/go-tool.sh
. "$(dirname "$0")/go-tool.sh"
# Only rule checks and rule tests are run: `remove_all_sd` leaves out every
# service-discovery SDK (AWS, Azure, GCE, Kubernetes, ...), most of a cold
# build's time.
go_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_VERSION" -tags remove_all_sd
