#!/usr/bin/env bash
# A real single-node Kubernetes cluster from upstream parts, without Docker or
# a registry: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# a kubelet (built by hack/k8s-build.sh from the pinned release), on a private
# containerd with runc and a CNI bridge (hack/containerd.sh).
#
#   hack/local-cluster.sh up      build/start what is missing, wait for a Ready node,
#                                 print the admin kubeconfig's path
#   hack/local-cluster.sh api-up  control plane only: start etcd and kube-apiserver if
#                                 they are not running, wait for /readyz, print the admin
#                                 kubeconfig's path (also restarts the API server after
#                                 api-stop; etcd's data is kept)
#   hack/local-cluster.sh api-stop
#                                 stop only kube-apiserver; etcd keeps running
#   hack/local-cluster.sh down    stop what `up`/`api-up` started, remove its state (keeps logs/)
#   hack/local-cluster.sh status  one line per part; exit 1 unless all are up (for an
#                                 instance only ever brought up by api-up: etcd and
#                                 kube-apiserver)
#   hack/local-cluster.sh env     print KUBECONFIG=... for eval
#   hack/local-cluster.sh import TARBALL...
#                                 import OCI image tarballs (hack/oci-image.sh) into
#                                 the kubelet's containerd
#   hack/local-cluster.sh check   prove it works: a busybox pod runs, `kubectl exec`
#                                 and `kubectl logs` work, an exec readiness probe
#                                 turns the pod Ready
#
# Everything lives under ${PODPROBE_CLUSTER_DIR:-/tmp/podprobe-cluster}: pki/,
# kubeconfigs, run/<part>.pid, logs/<part>.log, the kubelet's root and pod
# logs, and the cluster's own containerd (containerd/). `down` stops only the
# processes named in those PID files. Every server listens on 127.0.0.1,
# except the kubelet's API, which listens on the node address: the gateway
# address of the cluster's own bridge, reachable only from this machine.
#
# A second, control-plane-only instance can run beside the main cluster (tests
# that stop a real API server, tests/support/control_plane.rs): give it its own
# PODPROBE_CLUSTER_DIR, PODPROBE_CLUSTER_APISERVER_PORT,
# PODPROBE_CLUSTER_ETCD_PORT and PODPROBE_CLUSTER_ETCD_PEER_PORT (defaults
# 6443, 2379, 2380) and use only api-up, api-stop, status and down. Its PKI
# (service-account keys included), kubeconfigs, etcd data, PID files and lock
# ($PODPROBE_CLUSTER_DIR.lock) are its own; `down` leaves the host's bridge,
# containerd, cgroups, sysctls and kubelet paths alone when the instance never
# ran a node (containerd, bridge, kubelet), so the main cluster is untouched.
# PODPROBE_CLUSTER_POD_SUBNET (default 10.88.78.0/24) and
# PODPROBE_CLUSTER_MAX_PODS (the kubelet's maxPods; default: the kubelet's 110)
# size the node for more pods (bench/node/run.sh runs 300); take the cluster
# down and up again with the defaults afterwards.
# Images come from hack/containerd.sh (docker.io/local/busybox:latest, the
# sandbox image docker.io/local/pause:latest); pods must not pull, so give them
# `imagePullPolicy: Never` or `IfNotPresent`. Needs root.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
DIR=${PODPROBE_CLUSTER_DIR:-/tmp/podprobe-cluster}
NODE_NAME=${PODPROBE_NODE_NAME:-podprobe-node}
# The pod network is a /24 on the cluster's own bridge; its first address is
# the bridge's (the CNI gateway) and doubles as the node's InternalIP.
BRIDGE=${PODPROBE_CLUSTER_BRIDGE:-podprobek0}
POD_SUBNET=${PODPROBE_CLUSTER_POD_SUBNET:-10.88.78.0/24}
# The kubelet's maxPods; empty keeps its default (110). bench/node sets both
# this and a larger POD_SUBNET for its 300 pods.
MAX_PODS=${PODPROBE_CLUSTER_MAX_PODS:-}
NODE_IP="${POD_SUBNET%.*}.1"
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
APISERVER_PORT=${PODPROBE_CLUSTER_APISERVER_PORT:-6443}
ETCD_CLIENT_PORT=${PODPROBE_CLUSTER_ETCD_PORT:-2379}
ETCD_PEER_PORT=${PODPROBE_CLUSTER_ETCD_PEER_PORT:-2380}
KCM_PORT=10257
SCHEDULER_PORT=10259
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248

PKI=$DIR/pki
RUN=$DIR/run
LOGS=$DIR/logs
CRI_DIR=$DIR/containerd
CRI_SOCK=$CRI_DIR/containerd.sock
ADMIN_KUBECONFIG=$DIR/admin.kubeconfig
SYSCTL_SAVE=$DIR/sysctl.saved
# The parts this script starts itself, in start order; containerd is
# hack/containerd.sh's.
PARTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
# The parts `api-up` starts.
API_PARTS=(etcd kube-apiserver)
# Present while the instance has only ever been brought up by `api-up`.
API_ONLY_MARK=$DIR/api-only
# Kernel settings the kubelet's container manager overwrites at start; `up`
# records their values first and `down` puts them back.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { echo "local-cluster: $*" >&2; }
die() {
    log "$*"
    exit 1
}

require_root() {
    [ "$(id -u)" = 0 ] || die "must run as root (the kubelet, containerd and runc need it)"
}

ensure_packages() {
    local missing=()
    command -v openssl >/dev/null || missing+=(openssl)
    command -v curl >/dev/null || missing+=(curl)
    command -v ip >/dev/null || missing+=(iproute2)
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# ---------------------------------------------------------------- processes

# Prints the PID of part $1 if its PID file names a live process started by
# this script for this state directory (a recycled PID is not ours): the
# program $BIN/$1, or with $2 = any-release, $1 of any release's bin
# directory (`down` stops a cluster another PODPROBE_K8S_VERSION brought
# up: the compatibility matrix's releases left it running otherwise).
pid_of() {
    local pidfile=$RUN/$1.pid pid program
    [ -f "$pidfile" ] || return 1
    pid=$(cat "$pidfile")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    program=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1)
    if [ "${2:-}" = any-release ]; then
        [ "${program##*/}" = "$1" ] || return 1
    else
        [ "$program" = "$BIN/$1" ] || return 1
    fi
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR/" || return 1
    echo "$pid"
}

# Starts part $1 as `$BIN/$1 ARGS...` in its own session, logging to logs/$1.log.
start_part() {
    local name=$1
    shift
    log "starting $name (log: $LOGS/$name.log)"
    echo "---- $(date -u +%FT%TZ) start" >>"$LOGS/$name.log"
    # fd 9 holds the lock; the part must not keep it.
    setsid "$BIN/$name" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
    echo $! >"$RUN/$name.pid"
}

stop_part() {
    local name=$1 pid i
    if pid=$(pid_of "$name" any-release); then
        log "stopping $name (pid $pid)"
        kill -TERM "$pid"
        for i in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$RUN/$name.pid"
}

# Waits up to $2 seconds for the command "${@:3}" to succeed while part $1 lives.
wait_for() {
    local name=$1 timeout=$2
    shift 2
    local deadline=$((SECONDS + timeout))
    while [ $SECONDS -lt $deadline ]; do
        "$@" >/dev/null 2>&1 && return 0
        # The PID alone, not pid_of: until the forked shell has exec'd the
        # part, its command line is not the part's yet (late on a busy machine).
        if [ -n "$name" ] && ! kill -0 "$(cat "$RUN/$name.pid" 2>/dev/null)" 2>/dev/null; then
            tail -n 30 "$LOGS/$name.log" >&2 || true
            die "$name exited; see $LOGS/$name.log"
        fi
        sleep 0.5
    done
    [ -n "$name" ] && { tail -n 30 "$LOGS/$name.log" >&2 || true; }
    die "timed out after ${timeout}s waiting for: $*"
}

port_is_free() {
    ! ss -Hltn "sport = :$1" | grep -q .
}

# Refuses to start part $1 when another process holds one of its ports.
check_ports() {
    local name=$1 port
    shift
    for port in "$@"; do
        port_is_free "$port" || die "port $port (for $name) is in use by another process: $(ss -Hltnp "sport = :$port")"
    done
}

# ---------------------------------------------------------------- PKI

# Writes a self-signed ECDSA P-256 CA $PKI/$1.{key,crt} with common name $2.
make_ca() {
    local name=$1 cn=$2
    [ -s "$PKI/$name.crt" ] && return 0
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/$name.key" -subj "/CN=$cn" -days 3650 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$PKI/$name.crt"
}

# Writes an ECDSA P-256 key pair $PKI/$2.{key,crt} signed by CA $1 for subject
# $3 with X.509 extended key usage $4 and subjectAltName $5 (optional).
issue_cert() {
    local ca=$1 name=$2 subject=$3 usage=$4 san=${5:-}
    [ -s "$PKI/$name.crt" ] && return 0
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr"
    {
        echo "basicConstraints = critical, CA:FALSE"
        echo "keyUsage = critical, digitalSignature, keyEncipherment"
        echo "extendedKeyUsage = $usage"
        [ -n "$san" ] && echo "subjectAltName = $san"
    } >"$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
        -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

ensure_pki() {
    if [ ! -s "$PKI/ca.crt" ]; then
        # Certificates of an earlier CA would not verify: start over.
        rm -rf "$PKI"
        log "generating the cluster CA and certificates in $PKI"
    fi
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    make_ca ca podprobe-local-ca
    issue_cert ca apiserver "/CN=kube-apiserver" serverAuth \
        "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP"
    issue_cert ca apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    issue_cert ca admin "/O=system:masters/CN=kubernetes-admin" clientAuth
    issue_cert ca kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
    issue_cert ca kube-scheduler "/CN=system:kube-scheduler" clientAuth
    # The Node authorizer and NodeRestriction know the kubelet by this name.
    issue_cert ca kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    issue_cert ca kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" serverAuth \
        "DNS:$NODE_NAME,IP:$NODE_IP,IP:127.0.0.1"
    # The API server publishes the front proxy's CA in
    # kube-system/extension-apiserver-authentication; the controller manager
    # and scheduler read it for delegated authentication and log errors
    # every few seconds while it is missing.
    make_ca front-proxy-ca podprobe-local-front-proxy-ca
    issue_cert front-proxy-ca front-proxy-client "/CN=front-proxy-client" clientAuth
    if [ ! -s "$PKI/sa.pub" ]; then
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    fi
}

b64() { base64 -w0 <"$1"; }

# Writes $DIR/$1.kubeconfig for the client certificate $PKI/$2.
write_kubeconfig() {
    local name=$1 cert=$2
    cat >"$DIR/$name.kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: podprobe-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(b64 "$PKI/$cert.crt")
    client-key-data: $(b64 "$PKI/$cert.key")
contexts:
- name: $name@podprobe-local
  context:
    cluster: podprobe-local
    user: $name
current-context: $name@podprobe-local
EOF
    chmod 600 "$DIR/$name.kubeconfig.tmp"
    mv "$DIR/$name.kubeconfig.tmp" "$DIR/$name.kubeconfig"
}

ensure_kubeconfigs() {
    write_kubeconfig admin admin
    write_kubeconfig kube-controller-manager kube-controller-manager
    write_kubeconfig kube-scheduler kube-scheduler
    write_kubeconfig kubelet kubelet
}

kubectl_() { "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# ---------------------------------------------------------------- parts

ensure_etcd() {
    pid_of etcd >/dev/null && return 0
    check_ports etcd "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT"
    mkdir -p "$DIR/etcd"
    chmod 700 "$DIR/etcd"
    start_part etcd \
        --name podprobe-local \
        --data-dir "$DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "podprobe-local=http://127.0.0.1:$ETCD_PEER_PORT" \
        --log-level warn
    wait_for etcd 60 etcd_healthy
}

etcd_healthy() {
    curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'
}

# From Kubernetes 1.37: the alpha gates of the probe fields httpGet.protocol
# and grpc.mode, so that pods keep them (the API server drops a field whose
# gate is off) and podprobe's handling of them is tested (V10, G8). An older
# API server does not know these gates and would not start with them.
apiserver_feature_gates() {
    local version minor
    version=$("$HACK/k8s-build.sh" --version)
    minor=${version#v1.}
    minor=${minor%%.*}
    if [ "$minor" -ge 37 ]; then
        echo "--feature-gates=H2CContainerProbe=true,GRPCContainerProbeTLS=true"
    fi
}

ensure_apiserver() {
    if ! pid_of kube-apiserver >/dev/null; then
        check_ports kube-apiserver "$APISERVER_PORT"
        local gates
        gates=$(apiserver_feature_gates)
        # Bound to loopback and advertised there too; loopback addresses may
        # not be Endpoints, so the `kubernetes` Service is left without any
        # (there is no kube-proxy either): in-cluster clients on the host
        # network use https://127.0.0.1:$APISERVER_PORT.
        start_part kube-apiserver \
            --bind-address 127.0.0.1 \
            --advertise-address 127.0.0.1 \
            --secure-port "$APISERVER_PORT" \
            --endpoint-reconciler-type none \
            --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
            --authorization-mode Node,RBAC \
            --enable-admission-plugins NodeRestriction \
            --allow-privileged=true \
            --client-ca-file "$PKI/ca.crt" \
            --tls-cert-file "$PKI/apiserver.crt" \
            --tls-private-key-file "$PKI/apiserver.key" \
            --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
            --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
            --kubelet-certificate-authority "$PKI/ca.crt" \
            --kubelet-preferred-address-types InternalIP \
            --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
            --requestheader-allowed-names front-proxy-client \
            --requestheader-username-headers X-Remote-User \
            --requestheader-group-headers X-Remote-Group \
            --requestheader-extra-headers-prefix X-Remote-Extra- \
            --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
            --proxy-client-key-file "$PKI/front-proxy-client.key" \
            --service-account-issuer https://kubernetes.default.svc.cluster.local \
            --service-account-key-file "$PKI/sa.pub" \
            --service-account-signing-key-file "$PKI/sa.key" \
            --service-cluster-ip-range "$SERVICE_CIDR" \
            ${gates:+"$gates"} \
            --profiling=false
    fi
    wait_for kube-apiserver 120 kubectl_ get --raw /readyz
}

ensure_controller_manager() {
    if ! pid_of kube-controller-manager >/dev/null; then
        check_ports kube-controller-manager "$KCM_PORT"
        # Its service-account controllers create each namespace's `default`
        # ServiceAccount and `kube-root-ca.crt`; with its own token per
        # controller the DaemonSet and node lifecycle controllers act under
        # their RBAC roles, as in any cluster.
        start_part kube-controller-manager \
            --kubeconfig "$DIR/kube-controller-manager.kubeconfig" \
            --authentication-kubeconfig "$DIR/kube-controller-manager.kubeconfig" \
            --authorization-kubeconfig "$DIR/kube-controller-manager.kubeconfig" \
            --bind-address 127.0.0.1 \
            --secure-port "$KCM_PORT" \
            --leader-elect=false \
            --use-service-account-credentials \
            --service-account-private-key-file "$PKI/sa.key" \
            --root-ca-file "$PKI/ca.crt" \
            --cluster-signing-cert-file "$PKI/ca.crt" \
            --cluster-signing-key-file "$PKI/ca.key" \
            --service-cluster-ip-range "$SERVICE_CIDR" \
            --profiling=false
    fi
    wait_for kube-controller-manager 60 curl -fsSk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz"
}

ensure_scheduler() {
    if ! pid_of kube-scheduler >/dev/null; then
        check_ports kube-scheduler "$SCHEDULER_PORT"
        start_part kube-scheduler \
            --kubeconfig "$DIR/kube-scheduler.kubeconfig" \
            --authentication-kubeconfig "$DIR/kube-scheduler.kubeconfig" \
            --authorization-kubeconfig "$DIR/kube-scheduler.kubeconfig" \
            --bind-address 127.0.0.1 \
            --secure-port "$SCHEDULER_PORT" \
            --leader-elect=false \
            --profiling=false
    fi
    wait_for kube-scheduler 60 curl -fsSk --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz"
}

containerd_() {
    PODPROBE_CRI_DIR=$CRI_DIR PODPROBE_CRI_BRIDGE=$BRIDGE PODPROBE_CRI_SUBNET=$POD_SUBNET \
        "$HACK/containerd.sh" "$@"
}

ensure_containerd() {
    [ -x "$HACK/containerd.sh" ] || die "needs $HACK/containerd.sh (the private containerd)"
    containerd_ up
}

# The node address must exist before the kubelet starts, but the CNI bridge
# plugin creates the bridge only with the first pod: create it now with the
# gateway address the plugin would give it (it adopts an existing bridge).
ensure_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add name "$BRIDGE" type bridge
    fi
    if ! ip -4 -o addr show dev "$BRIDGE" | grep -qF " $NODE_IP/"; then
        ip addr add "$NODE_IP/${POD_SUBNET#*/}" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
}

save_sysctls() {
    [ -s "$SYSCTL_SAVE" ] && return 0
    local key
    for key in "${KUBELET_SYSCTLS[@]}"; do
        echo "$key=$(sysctl -n "$key")"
    done >"$SYSCTL_SAVE.tmp"
    mv "$SYSCTL_SAVE.tmp" "$SYSCTL_SAVE"
}

restore_sysctls() {
    [ -s "$SYSCTL_SAVE" ] || return 0
    local line
    while read -r line; do
        sysctl -q -w "$line" >/dev/null || log "could not restore $line"
    done <"$SYSCTL_SAVE"
    rm -f "$SYSCTL_SAVE"
}

write_kubelet_config() {
    # failCgroupV1: this machine has cgroup v1 hierarchies, which kubelet
    # v1.35 refuses by default. cgroupfs matches containerd's runc default.
    # Image garbage collection is off: the local images cannot be pulled
    # back. Eviction thresholds are low so a busy shared disk does not
    # evict test pods. iptables is left alone (no kube-proxy here).
    cat >"$DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CRI_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
podLogsDir: $DIR/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
EOF
    if [ -n "$MAX_PODS" ]; then echo "maxPods: $MAX_PODS" >>"$DIR/kubelet-config.yaml"; fi
}

ensure_kubelet() {
    if ! pid_of kubelet >/dev/null; then
        check_ports kubelet "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"
        mkdir -p "$DIR/kubelet" "$DIR/pod-logs"
        write_kubelet_config
        save_sysctls
        start_part kubelet \
            --config "$DIR/kubelet-config.yaml" \
            --kubeconfig "$DIR/kubelet.kubeconfig" \
            --root-dir "$DIR/kubelet" \
            --hostname-override "$NODE_NAME" \
            --node-ip "$NODE_IP" \
            --v 2
    fi
    wait_for kubelet 60 curl -fsS --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
}

node_ready() {
    local out
    out=$(kubectl_ get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints}' 2>/dev/null) || return 1
    # Ready, and the node lifecycle controller has lifted its not-ready taint.
    [ "$out" = "True " ]
}

# Pods in `default` need its ServiceAccount and root CA ConfigMap.
default_namespace_ready() {
    kubectl_ -n default get serviceaccount default && kubectl_ -n default get configmap kube-root-ca.crt
}

# Whether this instance ever ran its node: `up` starts containerd (which
# creates $CRI_DIR) before it creates the bridge and starts the kubelet (in
# $DIR/kubelet). An instance that never did owns no bridge, containerd,
# pod cgroups, sysctls or kubelet paths on the host.
node_started() { [ -d "$CRI_DIR" ] || [ -d "$DIR/kubelet" ]; }

is_api_part() { [[ " ${API_PARTS[*]} " == *" $1 "* ]]; }

# ---------------------------------------------------------------- verbs

cmd_up() {
    require_root
    ensure_packages
    BIN=$("$HACK/k8s-build.sh")
    mkdir -p "$DIR" "$RUN" "$LOGS"
    rm -f "$API_ONLY_MARK"
    ensure_pki
    ensure_kubeconfigs
    ensure_etcd
    ensure_apiserver
    ensure_controller_manager
    ensure_scheduler
    ensure_containerd
    ensure_bridge
    ensure_kubelet
    log "waiting for node $NODE_NAME to be Ready"
    wait_for kubelet 180 node_ready
    wait_for kube-controller-manager 60 default_namespace_ready
    log "ready: kubectl --kubeconfig $ADMIN_KUBECONFIG (or: eval \"\$($0 env)\")"
    echo "$ADMIN_KUBECONFIG"
}

# The control plane alone, for tests that stop and restart a real API server
# beside the main cluster (see the header). Needs no root unless packages are
# missing.
cmd_api_up() {
    ensure_packages
    BIN=$("$HACK/k8s-build.sh")
    mkdir -p "$DIR" "$RUN" "$LOGS"
    node_started || touch "$API_ONLY_MARK"
    ensure_pki
    write_kubeconfig admin admin
    ensure_etcd
    ensure_apiserver
    log "ready: kubectl --kubeconfig $ADMIN_KUBECONFIG (API server only, at https://127.0.0.1:$APISERVER_PORT)"
    echo "$ADMIN_KUBECONFIG"
}

cmd_api_stop() {
    BIN=$("$HACK/k8s-build.sh" --bin-dir)
    stop_part kube-apiserver
}

# Unmounts everything mounted under $DIR (the kubelet's rshared root, pod
# volumes), deepest first.
unmount_all() {
    local mnt
    awk -v dir="$DIR/" 'index($2, dir) == 1 { print $2 }' /proc/self/mounts | sort -r |
        while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; done
}

# Removes the kubelet's pod cgroups (empty once containerd has stopped every
# container), deepest first; rmdir leaves anything still in use alone.
remove_pod_cgroups() {
    local hierarchy
    for hierarchy in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
        [ -d "$hierarchy" ] || continue
        find "$hierarchy" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
}

# Two kubelet paths are fixed whatever its root directory: it links container
# logs into /var/log/containers and serves device plugin registration at
# /var/lib/kubelet/device-plugins/kubelet.sock. Remove what points into this
# cluster, and the directories if that left them empty.
remove_host_leftovers() {
    local link
    for link in /var/log/containers/*.log; do
        [ -L "$link" ] || continue
        case "$(readlink "$link")" in "$DIR"/*) rm -f "$link" ;; esac
    done
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    rmdir /var/log/containers /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
}

cmd_down() {
    require_root
    BIN=$("$HACK/k8s-build.sh" --bin-dir)
    # Asked first: containerd's `down` removes $CRI_DIR. Without a node of its
    # own, the bridge named $BRIDGE, the kubepods cgroups and the kubelet's
    # host paths may be another instance's (the main cluster's): leave them.
    local node=0
    node_started && node=1
    # The kubelet first, so it does not restart what containerd's `down` stops.
    stop_part kubelet
    if [ $node = 1 ] && [ -x "$HACK/containerd.sh" ]; then containerd_ down; fi
    local i
    for ((i = ${#PARTS[@]} - 1; i >= 0; i--)); do
        stop_part "${PARTS[$i]}"
    done
    [ -d "$DIR" ] || return 0
    restore_sysctls
    unmount_all
    if [ $node = 1 ]; then
        remove_pod_cgroups
        remove_host_leftovers
        if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; fi
    fi
    find "$DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
    log "down (logs kept in $LOGS)"
}

cmd_status() {
    BIN=$("$HACK/k8s-build.sh" --bin-dir)
    local ok=0 name pid health api_only=0
    [ -e "$API_ONLY_MARK" ] && api_only=1
    for name in "${PARTS[@]}"; do
        if pid=$(pid_of "$name"); then
            health=$(part_health "$name")
            echo "$name: running (pid $pid)${health:+, $health}"
            case $health in *unhealthy* | *"not "*) ok=1 ;; esac
        elif [ $api_only = 1 ] && ! is_api_part "$name"; then
            echo "$name: not running (control-plane-only instance)"
        else
            echo "$name: not running"
            ok=1
        fi
    done
    local cri
    if [ $api_only = 1 ]; then
        echo "containerd: not running (control-plane-only instance)"
    else
        cri=$(containerd_ status 2>&1) || ok=1
        echo "containerd: $cri"
    fi
    [ $ok = 0 ] && echo "kubeconfig: $ADMIN_KUBECONFIG"
    return $ok
}

# A short health word for a running part.
part_health() {
    case $1 in
    etcd) etcd_healthy && echo healthy || echo unhealthy ;;
    kube-apiserver) kubectl_ get --raw /readyz >/dev/null 2>&1 && echo ready || echo "not ready" ;;
    kube-controller-manager) curl -fsSk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" >/dev/null 2>&1 &&
        echo healthy || echo unhealthy ;;
    kube-scheduler) curl -fsSk --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz" >/dev/null 2>&1 &&
        echo healthy || echo unhealthy ;;
    kubelet) node_ready && echo "node $NODE_NAME Ready" || echo "node $NODE_NAME not Ready" ;;
    esac
}

# One pod proves the node works end to end: it is scheduled and runs from the
# local busybox image, `kubectl exec` and `kubectl logs` reach it through the
# API server and the kubelet, and its exec readiness probe turns it Ready once the file the
# probe reads exists.
cmd_check() {
    BIN=$("$HACK/k8s-build.sh" --bin-dir)
    local pod=local-cluster-check out
    kubectl_ delete pod "$pod" --ignore-not-found --wait >/dev/null
    kubectl_ apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: docker.io/local/busybox:latest
    imagePullPolicy: Never
    command: [sh, -c, "echo started; exec sleep 3600"]
    readinessProbe:
      exec:
        command: [cat, /tmp/ready]
      periodSeconds: 1
EOF
    kubectl_ wait --for=jsonpath='{.status.phase}'=Running --timeout=120s pod/"$pod" >/dev/null
    log "check: pod $pod runs on $(kubectl_ get pod "$pod" -o jsonpath='{.spec.nodeName} at {.status.podIP}')"
    out=$(kubectl_ exec "$pod" -- sh -c 'echo exec-ok')
    [ "$out" = exec-ok ] || die "check: kubectl exec printed '$out', want 'exec-ok'"
    log "check: kubectl exec works"
    out=$(kubectl_ logs "$pod")
    [ "$out" = started ] || die "check: kubectl logs printed '$out', want 'started'"
    log "check: kubectl logs works"
    [ "$(kubectl_ get pod "$pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = False ] ||
        die "check: pod is Ready before its readiness probe can pass"
    kubectl_ exec "$pod" -- touch /tmp/ready
    kubectl_ wait --for=condition=Ready --timeout=60s pod/"$pod" >/dev/null
    log "check: the exec readiness probe turned the pod Ready"
    kubectl_ delete pod "$pod" --wait >/dev/null
    log "check: passed"
}

cmd_env() { echo "KUBECONFIG=$ADMIN_KUBECONFIG"; }

main() {
    local verb=${1:-}
    case $verb in
    up | down | api-up | api-stop)
        # One caller at a time.
        mkdir -p "$(dirname "$DIR")"
        exec 9>"$DIR.lock"
        flock 9
        "cmd_${verb//-/_}"
        ;;
    status | env) "cmd_$verb" ;;
    check) cmd_check ;;
    import)
        shift
        containerd_ import "$@"
        ;;
    *) die "usage: $0 up|api-up|api-stop|down|status|env|check|import TARBALL..." ;;
    esac
}

main "$@"
