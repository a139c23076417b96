#!/usr/bin/env bash
# Builds a kind node image offline, from files of this project's own, and
# prints its name:
#
#   hack/kind-node-image.sh [VERSION]     (default: the newest pinned release,
#                                          hack/k8s-build.sh --versions)
#   hack/kind-node-image.sh --control-plane-images VERSION DIR
#                                          only the OCI tarballs of the images
#                                          kubeadm VERSION runs, into DIR, and
#                                          the sandbox image's name on stdout
#                                          (hack/kind-upgrade.sh loads them into
#                                          a running node)
#
# The image is a Debian bookworm root filesystem (debootstrap from Debian's
# archive: systemd, iptables, runc, the CNI plugins), plus
# - kubelet, kubeadm and kubectl of VERSION (hack/k8s-build.sh);
# - containerd 2 (hack/containerd-build.sh) with hack/kind-node/containerd.toml;
# - the images kubeadm runs (kube-apiserver, kube-controller-manager,
#   kube-scheduler, etcd) and the sandbox image, as OCI tarballs under
#   /kind/images (hack/oci-image.sh), imported into containerd at boot before
#   the kubelet starts (podprobe-kind-images.service): nothing is pulled;
# - /kind/version, the kubelet's units and kubeadm drop-in, and the node's
#   pod network from its podCIDR (hack/kind-node/pod-network.sh);
# - hack/kind-node/entrypoint as PID 1 before systemd.
# There is no CoreDNS and no kube-proxy image: clusters made from it skip
# both addons (hack/kind-e2e.sh's kind config).
#
# Imported with the kind provider's engine (hack/kind-provider.sh) as
# localhost/podprobe/kind-node:VERSION-<hash of its inputs>, so an unchanged
# image is not built again. The Debian root filesystem is cached under
# ${PODPROBE_CACHE:-~/.cache/podprobe}/kind-node. Needs root (debootstrap).
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=hack/oci-image.sh
. "$HACK/oci-image.sh"
# shellcheck source=hack/kind-provider.sh
. "$HACK/kind-provider.sh"

CACHE="${PODPROBE_CACHE:-$HOME/.cache/podprobe}/kind-node"
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the node runs besides the kubelet and containerd: systemd as init;
# iptables, conntrack, ethtool, socat for the kubelet and kubeadm;
# util-linux/mount/kmod/procps for the kubelet's mounts and kind's commands.
PACKAGES=systemd,systemd-sysv,dbus,iptables,iproute2,ca-certificates,kmod,procps,ethtool,socat,conntrack,runc,containernetworking-plugins,util-linux,mount

log() { echo "kind-node-image: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# Prints the path of the cached Debian root filesystem tarball, built when
# missing.
base_rootfs() {
    local key tarball work
    key=$(printf '%s\n' "$PACKAGES" "$DEBIAN_MIRROR" bookworm 1 | sha256sum | cut -c1-12)
    tarball="$CACHE/rootfs-bookworm-$key.tar"
    if [ -f "$tarball" ]; then
        echo "$tarball"
        return
    fi
    command -v debootstrap >/dev/null || die "needs debootstrap (Debian: apt-get install debootstrap)"
    mkdir -p "$CACHE"
    work=$(mktemp -d "$CACHE/.rootfs.XXXXXX")
    log "debootstrap bookworm into $work (about a minute)"
    if ! debootstrap --variant=minbase --include="$PACKAGES" bookworm "$work/rootfs" "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1; then
        tail -n 20 "$work/debootstrap.log" >&2
        rm -rf "$work"
        die "debootstrap failed"
    fi
    local root=$work/rootfs
    # What a container needs no copy of: the package cache and lists, docs.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
        "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
    tar --numeric-owner -C "$root" -cf "$work/rootfs.tar" .
    mv "$work/rootfs.tar" "$tarball"
    rm -rf "$work"
    echo "$tarball"
}

# Lays out in $1 what the node image adds to the Debian root filesystem.
node_files() {
    local root=$1 version=$2 bin=$3 containerd=$4 images=$5
    local node="$HACK/kind-node"
    install -D -m 0755 "$bin/kubelet" "$root/usr/bin/kubelet"
    install -D -m 0755 "$bin/kubeadm" "$root/usr/bin/kubeadm"
    install -D -m 0755 "$bin/kubectl" "$root/usr/bin/kubectl"
    local b
    for b in containerd containerd-shim-runc-v2 ctr; do
        install -D -m 0755 "$containerd/$b" "$root/usr/local/bin/$b"
    done
    install -D -m 0755 "$node/entrypoint" "$root/usr/local/bin/entrypoint"
    install -D -m 0755 "$node/pod-network.sh" "$root/kind/bin/pod-network.sh"
    echo "$version" >"$root/kind/version"
    mkdir -p "$root/kind/images" "$root/etc/kubernetes/manifests" "$root/etc/cni/net.d"
    cp "$images"/*.tar "$root/kind/images/"
    install -D -m 0644 /dev/stdin "$root/etc/containerd/config.toml" \
        < <(sed "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#" "$node/containerd.toml")
    local units="$root/etc/systemd/system"
    install -D -m 0644 "$node/containerd.service" "$units/containerd.service"
    install -D -m 0644 "$node/kubelet.service" "$units/kubelet.service"
    install -D -m 0644 "$node/10-kubeadm.conf" "$units/kubelet.service.d/10-kubeadm.conf"
    install -D -m 0644 "$node/kubelet.slice" "$units/kubelet.slice"
    install -D -m 0644 "$node/podprobe-kind-images.service" "$units/podprobe-kind-images.service"
    install -D -m 0644 "$node/podprobe-kind-network.service" "$units/podprobe-kind-network.service"
    mkdir -p "$units/multi-user.target.wants"
    for b in containerd kubelet podprobe-kind-images podprobe-kind-network; do
        ln -sf "/etc/systemd/system/$b.service" "$units/multi-user.target.wants/$b.service"
    done
    # No consoles to log in on, no binfmt_misc to register: units that
    # would fail or wait in a container.
    for b in getty@tty1 systemd-binfmt console-getty; do
        ln -sf /dev/null "$units/$b.service"
    done
    # journald may not read the host's kernel ring buffer.
    install -D -m 0644 /dev/stdin "$root/etc/systemd/journald.conf.d/10-kind-node.conf" <<<$'[Journal]\nReadKMsg=no'
}

# Makes in $2 the OCI tarballs of the images kubeadm $1 runs for $version,
# from the binaries in $bin; sets PAUSE_IMAGE.
control_plane_images() {
    local kubeadm=$1 out=$2 work image name
    work=$(mktemp -d)
    PAUSE_IMAGE=
    while read -r image; do
        name=${image##*/}
        name=${name%%:*}
        case $name in
        kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
            install -D -m 0755 "$bin/$name" "$work/$name/usr/local/bin/$name"
            oci_image_tar "$out/$name.tar" "$image" "[\"/usr/local/bin/$name\"]" "" "$work/$name" >/dev/null
            ;;
        pause)
            # The sandbox only has to hold the pod's namespaces: busybox's
            # sleep, as hack/containerd.sh's sandbox image.
            PAUSE_IMAGE=$image
            oci_busybox_rootfs "$work/pause"
            oci_image_tar "$out/pause.tar" "$image" '["/bin/sleep","2147483647"]' "" "$work/pause" >/dev/null
            ;;
        kube-proxy | coredns) ;; # addons the kind config skips
        *) die "kubeadm lists an image this script does not know how to make: $image" ;;
        esac
    done < <("$kubeadm" config images list --kubernetes-version "$version" 2>/dev/null)
    rm -rf "$work"
    [ -n "$PAUSE_IMAGE" ] || die "kubeadm listed no pause image"
}

main() {
    if [ "${1:-}" = --control-plane-images ]; then
        [ $# = 3 ] || die "usage: $0 --control-plane-images VERSION DIR"
        version=$2
        bin=$(PODPROBE_K8S_VERSION=$version "$HACK/k8s-build.sh")
        mkdir -p "$3"
        control_plane_images "$bin/kubeadm" "$3"
        echo "$PAUSE_IMAGE"
        return
    fi
    version=${1:-$("$HACK/k8s-build.sh" --version)}
    [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, rootful podman)"
    [ -x /bin/busybox ] || die "needs /bin/busybox (Debian: apt-get install busybox-static)"
    kind_provider_setup
    bin=$(PODPROBE_K8S_VERSION=$version "$HACK/k8s-build.sh")
    local containerd base key name work
    containerd=$("$HACK/containerd-build.sh")
    base=$(base_rootfs)
    # Everything the image is made of, so that a change to any of it makes
    # a new image and an unchanged one is reused.
    key=$( (
        echo "$version" "$base"
        cat "$bin/../stamp" 2>/dev/null || true
        sha256sum "$bin"/{kubelet,kubeadm,kubectl,kube-apiserver,kube-controller-manager,kube-scheduler,etcd} "$containerd"/* /bin/busybox
        cat "$0" "$HACK/oci-image.sh" "$HACK"/kind-node/*
    ) | sha256sum | cut -c1-12)
    name="localhost/podprobe/kind-node:$version-$key"
    if "$ENGINE" image inspect "$name" >/dev/null 2>&1; then
        echo "$name"
        return
    fi
    work=$(mktemp -d "$CACHE/.image.XXXXXX")
    # shellcheck disable=SC2064 # expand now: work is local
    trap "rm -rf '$work'" EXIT
    mkdir -p "$work/images" "$work/rootfs"
    control_plane_images "$bin/kubeadm" "$work/images"
    # The Debian root with the node's files on top (an image tarball may
    # hold each path once).
    tar --numeric-owner -C "$work/rootfs" -xf "$base"
    node_files "$work/rootfs" "$version" "$bin" "$containerd" "$work/images"
    tar --numeric-owner -C "$work/rootfs" -cf "$work/image.tar" .
    log "importing $name with $ENGINE"
    "$ENGINE" import \
        --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
        --change 'STOPSIGNAL SIGRTMIN+3' \
        --change 'ENV container=docker' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$work/image.tar" "$name" >/dev/null
    echo "$name"
}

main "$@"
