#!/usr/bin/env bash
# podprobe on a real single-node cluster in one command: installs what the
# build needs (hack/install-deps.sh, as hack/test.sh does), brings up the local
# cluster (hack/local-cluster.sh up), builds and imports the images and
# deploys the DaemonSet (hack/deploy.sh deploy/local), applies the example pods
# (deploy/examples) and says how to watch them. Idempotent; needs root.
# `hack/local-cluster.sh down` removes it all.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")

"$HACK/install-deps.sh"
"$HACK/local-cluster.sh" up >/dev/null
"$HACK/deploy.sh" "$ROOT/deploy/local"
eval "$("$HACK/local-cluster.sh" env)"
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
    http://10.88.78.1:9440/metrics | grep ^prober_
EOF
