#!/usr/bin/env bash
# A private containerd with the CRI plugin, for podprobe's CRI tests.
#
#   hack/containerd.sh up       install what is missing, start, import images, wait for CRI
#   hack/containerd.sh restart  restart containerd, keeping its state (running containers survive)
#   hack/containerd.sh down     stop containers and containerd, remove all state
#   hack/containerd.sh status   say whether it runs and answers CRI calls
#   hack/containerd.sh env      print PODPROBE_CRI_ENDPOINT=unix:///...
#   hack/containerd.sh import TARBALL...  import OCI image tarballs (hack/oci-image.sh)
#
# Everything (config, root, state, socket, PID file, log) lives under
# ${PODPROBE_CRI_DIR:-/tmp/podprobe-cri}; `down` stops only the process named
# in that PID file. Pods get addresses on their own bridge (podprobe0,
# 10.88.77.0/24) with no masquerading: their traffic stays on this machine.
# Images are built locally from Debian's busybox-static (no registry):
# docker.io/local/busybox:latest and the sandbox image docker.io/local/pause:latest.
# Needs root.
set -euo pipefail

DIR=${PODPROBE_CRI_DIR:-/tmp/podprobe-cri}
SOCK=$DIR/containerd.sock
PIDFILE=$DIR/containerd.pid
LOG=$DIR/containerd.log
CONFIG=$DIR/config.toml
BRIDGE=${PODPROBE_CRI_BRIDGE:-podprobe0}
SUBNET=${PODPROBE_CRI_SUBNET:-10.88.77.0/24}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/podprobe
BUSYBOX_IMAGE=docker.io/local/busybox:latest
PAUSE_IMAGE=docker.io/local/pause:latest
CNI_BIN_DIR=/usr/lib/cni
# Bump when the image layout below changes, so cached tarballs are rebuilt.
IMAGE_FORMAT=2

log() { echo "containerd.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# shellcheck source=hack/oci-image.sh
. "$(dirname "$0")/oci-image.sh"

require_root() {
    [ "$(id -u)" = 0 ] || die "must run as root (containerd and runc need it)"
}

# Installs the Debian packages whose files are missing.
ensure_packages() {
    local missing=()
    command -v containerd >/dev/null || missing+=(containerd)
    command -v ctr >/dev/null || missing+=(containerd)
    command -v runc >/dev/null || missing+=(runc)
    [ -x "$CNI_BIN_DIR/bridge" ] || missing+=(containernetworking-plugins)
    dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || missing+=(busybox-static)
    command -v curl >/dev/null || missing+=(curl)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v sha256sum >/dev/null || missing+=(coreutils)
    # Installed with the runtime when its tests were first made to pass here;
    # containerd's CNI setup may call it.
    command -v iptables >/dev/null || missing+=(iptables)
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

pid_of_ours() {
    [ -f "$PIDFILE" ] || return 1
    local pid
    pid=$(cat "$PIDFILE")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # A recycled PID must not be mistaken for our containerd.
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "containerd --config $CONFIG" || return 1
    echo "$pid"
}

# True when the socket answers runtime.v1.RuntimeService/Version with grpc-status 0.
cri_ready() {
    [ -S "$SOCK" ] || return 1
    local headers
    headers=$(printf '\0\0\0\0\0' | curl --silent --max-time 5 --unix-socket "$SOCK" \
        --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
        --data-binary @- --output /dev/null --dump-header - \
        http://localhost/runtime.v1.RuntimeService/Version 2>/dev/null) || return 1
    grep -qi '^grpc-status: *0' <<<"$headers"
}

write_config() {
    mkdir -p "$DIR/root" "$DIR/state" "$DIR/cni/net.d" "$DIR/cni/ipam" "$DIR/pod-logs"
    cat >"$CONFIG" <<EOF
version = 2
root = "$DIR/root"
state = "$DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This sandbox may not lower oom_score_adj; without this every sandbox
  # fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$DIR/cni/net.d"
EOF
    cat >"$DIR/cni/net.d/10-podprobe.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "podprobe",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$SUBNET"}]]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

# Where the CRI plugin mounts pod network namespaces (netns_mounts_under_state_dir).
NETNS_DIR="$DIR/state/io.containerd.grpc.v1.cri/netns"

# Makes $NETNS_DIR a shared mount, so that a container may mount it with
# HostToContainer propagation and see namespaces made after it started
# (podprobe's podNetwork), as on a node whose root is rshared (systemd's
# default). It lies under $DIR, so `down` unmounts it with the rest.
share_netns_dir() {
    mkdir -p "$NETNS_DIR"
    mountpoint -q "$NETNS_DIR" || mount --rbind "$NETNS_DIR" "$NETNS_DIR"
    mount --make-rshared "$NETNS_DIR"
}

start_containerd() {
    write_config
    share_netns_dir
    log "starting containerd (log: $LOG)"
    # fd 9 holds the lock; containerd must not keep it.
    setsid containerd --config "$CONFIG" >>"$LOG" 2>&1 </dev/null 9>&- &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 1 300); do
        cri_ready && return 0
        # Not pid_of_ours: until the forked shell has exec'd containerd, its
        # command line is not containerd's yet, and a busy machine gets there late.
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 30 "$LOG" >&2 || true
    die "containerd at unix://$SOCK did not answer a CRI Version call"
}

stop_containerd() {
    local pid
    pid=$(pid_of_ours) || {
        rm -f "$PIDFILE"
        return 0
    }
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$PIDFILE"
}

# Builds an OCI image-layout tarball at $1 named $2 whose entrypoint is the
# JSON array $3, from /bin/busybox of busybox-static.
build_image() {
    local out=$1 name=$2 entrypoint=$3 work
    work=$(mktemp -d)
    oci_busybox_rootfs "$work/busybox-static"
    oci_image_tar "$out" "$name" "$entrypoint" "" "$work/busybox-static" >/dev/null
    rm -rf "$work"
}

# Imports image $1 (entrypoint $2) unless containerd already has it; the
# tarball is cached per busybox binary and image format.
ensure_image() {
    local name=$1 entrypoint=$2
    ctr_ images ls -q | grep -qxF "$name" && return 0
    local base tarball
    base=${name#docker.io/local/}
    base=${base%%:*}
    mkdir -p "$CACHE"
    tarball="$CACHE/$base-v$IMAGE_FORMAT-$(oci_digest /bin/busybox | cut -c1-16).oci.tar"
    if [ ! -s "$tarball" ]; then
        log "building $name"
        build_image "$tarball" "$name" "$entrypoint"
    fi
    log "importing $name"
    ctr_ images import --snapshotter overlayfs "$tarball" >&2
}

cmd_up() {
    require_root
    ensure_packages
    mkdir -p "$DIR"
    if pid_of_ours >/dev/null && cri_ready; then
        :
    else
        stop_containerd
        start_containerd
    fi
    ensure_image "$BUSYBOX_IMAGE" '["/bin/sh"]'
    ensure_image "$PAUSE_IMAGE" '["/bin/sleep","2147483647"]'
    log "ready: unix://$SOCK"
}

cmd_restart() {
    require_root
    pid_of_ours >/dev/null || die "not running; use 'up'"
    stop_containerd
    start_containerd
    log "restarted: unix://$SOCK"
}

# Kills and deletes every task and container in the CRI namespace, so that no
# shim outlives containerd.
remove_containers() {
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
        ctr_ tasks kill --signal SIGKILL "$id" >/dev/null 2>&1 || true
        ctr_ tasks delete --force "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ containers ls -q 2>/dev/null); do
        ctr_ containers delete "$id" >/dev/null 2>&1 || true
    done
}

cmd_down() {
    require_root
    # A containerd that died leaves shims and containers behind: start it
    # again so that it removes them.
    if ! pid_of_ours >/dev/null && [ -f "$CONFIG" ]; then
        (start_containerd) || log "could not restart containerd to remove its containers"
    fi
    if pid_of_ours >/dev/null; then
        remove_containers
        stop_containerd
    fi
    # Unmount snapshots, sandbox network namespaces and shm left under $DIR,
    # deepest first.
    local mnt
    if [ -d "$DIR" ]; then
        awk -v dir="$DIR/" 'index($2, dir) == 1 { print $2 }' /proc/self/mounts | sort -r |
            while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
    fi
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link delete "$BRIDGE" || true
    fi
    rm -rf "$DIR"
    log "down"
}

cmd_status() {
    local pid
    if pid=$(pid_of_ours) && cri_ready; then
        echo "running (pid $pid) and answering CRI at unix://$SOCK"
    elif pid=$(pid_of_ours); then
        echo "running (pid $pid) but not answering CRI at unix://$SOCK"
        return 1
    else
        echo "not running"
        return 1
    fi
}

cmd_env() { echo "PODPROBE_CRI_ENDPOINT=unix://$SOCK"; }

# Imports the OCI tarballs "$@" (see hack/oci-image.sh), replacing images of
# the same name.
cmd_import() {
    require_root
    cri_ready || die "not running; use 'up'"
    local tarball
    for tarball in "$@"; do
        ctr_ images import --snapshotter overlayfs "$tarball" >&2
    done
}

main() {
    local verb=${1:-}
    case $verb in
    up | restart | down)
        # One caller at a time: parallel test binaries may all ask for "up".
        mkdir -p "$(dirname "$DIR")"
        exec 9>"$DIR.lock"
        flock 9
        "cmd_$verb"
        ;;
    status | env) "cmd_$verb" ;;
    import)
        shift
        cmd_import "$@"
        ;;
    *) die "usage: $0 up|restart|down|status|env|import TARBALL..." ;;
    esac
}

main "$@"
