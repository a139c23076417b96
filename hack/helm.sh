#!/usr/bin/env bash
# Builds helm from its Go module at the pinned version (cached under
# ${PODPROBE_CACHE:-~/.cache/podprobe}/tools) and prints the binary's path.
# Idempotent. tests/chart.rs runs it through PODPROBE_HELM:
#
#   export PODPROBE_HELM="$(hack/helm.sh)"
set -euo pipefail
HELM_VERSION=v3.22.0
# shellcheck source=hack/go-tool.sh
. "$(dirname "$0")/go-tool.sh"
# The link flags of helm's Makefile: its version, and the Kubernetes version
# that `helm template` and `helm lint` assume without a cluster (its
# client-go's: v0.37 is Kubernetes 1.37, as in helm's own release builds;
# a plain `go install` assumes 1.20 and refuses the chart's kubeVersion).
go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37"
