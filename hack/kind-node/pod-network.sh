#!/bin/sh
# The pod network of podprobe's kind node image, in place of kind's default
# CNI (its kindnetd image is not built here): once kubeadm has joined this
# node and the controller manager has given it a podCIDR, writes a bridge +
# host-local CNI configuration for that range. Pods reach the pods of their
# own node, the node and the other nodes; there are no routes to the pods of
# other nodes (the node may read only its own Node object), and no Services
# without kube-proxy.
set -eu
conf=/etc/cni/net.d/10-podprobe-kind.conflist
kubeconfig=/etc/kubernetes/kubelet.conf
node=$(hostname)
while :; do
    if [ -s "$kubeconfig" ]; then
        cidr=$(kubectl --kubeconfig "$kubeconfig" get node "$node" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null || true)
        if [ -n "$cidr" ]; then
            mkdir -p /etc/cni/net.d
            cat >"$conf.tmp" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "podprobe-kind",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "podprobe0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CONF
            mv "$conf.tmp" "$conf"
            echo "pod-network: $node's pods get addresses from $cidr"
            exit 0
        fi
    fi
    sleep 2
done
