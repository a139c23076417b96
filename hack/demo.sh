#!/usr/bin/env bash
# podprobe on a real cluster in one command, then how to watch it:
#
#   hack/demo.sh          a kind cluster of three nodes (hack/kind-e2e.sh up:
#                         Docker when an engine answers, else rootful podman;
#                         KIND_NODE_IMAGE to use a node image of your own,
#                         else one built offline), podprobe installed by its
#                         Helm chart on each node
#   hack/demo.sh --local  the single-node local cluster instead
#                         (hack/local-cluster.sh up, hack/deploy.sh deploy/local)
#
# Either way it installs what the build needs (hack/install-deps.sh, as
# hack/test.sh does), applies the example pods (deploy/examples) and says how
# to watch them. Idempotent; needs root. `hack/kind-e2e.sh down` (or
# `hack/local-cluster.sh down`) removes it all.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")

"$HACK/install-deps.sh"
if [ "${1:-}" = --local ]; then
  "$HACK/local-cluster.sh" up >/dev/null
  "$HACK/deploy.sh" "$ROOT/deploy/local"
  eval "$("$HACK/local-cluster.sh" env)"
  metrics_host=10.88.78.1
else
  KUBECONFIG=$("$HACK/kind-e2e.sh" up)
  metrics_host="\$(kubectl get node ${KIND_CLUSTER_NAME:-podprobe-e2e}-worker -o jsonpath='{.status.addresses[0].address}')"
fi
KUBECTL=$("$HACK/k8s-build.sh" --bin-dir)/kubectl
"$KUBECTL" --kubeconfig "$KUBECONFIG" apply -k "$ROOT/deploy/examples"

cat <<EOF

podprobe runs in gate mode; the example pods are in namespace podprobe-examples.
Watch them (READINESS GATES shows podprobe.io/ready, RESTARTS the liveness example):

  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$KUBECTL
  kubectl -n podprobe-examples get pods -o wide -w

Flip a probe:

  kubectl -n podprobe-examples exec exec-ready -- rm /tmp/ready
  kubectl -n podprobe-examples exec grpc-ready -- wget -qO- http://127.0.0.1:8080/make-not-serving

Events and podprobe's logs and metrics:

  kubectl -n podprobe-examples get events --sort-by=.lastTimestamp
  kubectl -n podprobe-system logs daemonset/podprobe

/metrics needs a token allowed to read it (ClusterRole podprobe-metrics-reader):

  kubectl -n podprobe-system create serviceaccount metrics-demo
  kubectl create clusterrolebinding metrics-demo --clusterrole=podprobe-metrics-reader \\
    --serviceaccount=podprobe-system:metrics-demo
  curl -s -H "Authorization: Bearer \$(kubectl -n podprobe-system create token metrics-demo)" \\
    http://$metrics_host:9440/metrics | grep ^prober_
EOF
