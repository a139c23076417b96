#!/usr/bin/env bash
# Builds the Dockerfile with buildah on a machine that cannot pull its base
# images (no registry access, no Docker engine), against stand-ins built here:
#
#   RUST_IMAGE     Debian bookworm (debootstrap --variant=minbase, with gcc,
#                  libc6-dev and ca-certificates) plus this machine's Rust
#                  toolchain, at rust:1.95-bookworm's paths (/usr/local/cargo)
#   RUNTIME_IMAGE  what gcr.io/distroless/cc-debian12 carries that podprobe
#                  uses: glibc, libgcc_s, the dynamic loader, CA
#                  certificates, /etc/passwd; no shell
#
# then checks the result: entrypoint, command and user, the files in the
# image, its size, and that /podprobe runs (`--version`, `run --help`).
#
# What this verifies: every instruction of the Dockerfile (the apt-get of
# protoc, the build with its cache mounts, the copy between stages, the
# image config). What it cannot: the real base images' contents (a
# different glibc in distroless/cc would show only there) and multi-arch
# builds (buildx, QEMU).
#
#   hack/dockerfile-check.sh     needs root, Debian's buildah and debootstrap
#                                (installed when missing), about 15 minutes
#                                on two cores the first time
#
# Not part of hack/test.sh: it takes long and tests the packaging, not
# podprobe. Work files go to ${PODPROBE_CACHE:-~/.cache/podprobe}/dockerfile-check.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
WORK=${PODPROBE_CACHE:-$HOME/.cache/podprobe}/dockerfile-check
# overlay (buildah's default) needs a kernel with native overlay diff; vfs
# works everywhere but copies every layer (20 GB here).
STORAGE=(--storage-driver "${PODPROBE_BUILDAH_DRIVER:-overlay}")
BUILDER=localhost/standin/rust:1.95-bookworm
RUNTIME=localhost/standin/distroless-cc-debian12
IMAGE=localhost/podprobe:dockerfile-check

log() { echo "dockerfile-check.sh: $*" >&2; }

install_tools() {
    local missing=()
    command -v buildah >/dev/null || missing+=(buildah)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        log "apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# $1: a directory holding the image's root filesystem; $2: its name; more
# arguments go to `buildah config`.
commit_root() {
    local dir=$1 name=$2 container
    shift 2
    container=$(buildah "${STORAGE[@]}" from scratch)
    buildah "${STORAGE[@]}" copy "$container" "$dir" / >/dev/null
    if [ $# -gt 0 ]; then buildah "${STORAGE[@]}" config "$@" "$container"; fi
    buildah "${STORAGE[@]}" commit -q "$container" "$name" >/dev/null
    buildah "${STORAGE[@]}" rm "$container" >/dev/null
}

standin_builder() {
    local root=$WORK/builder toolchain
    if [ ! -e "$root/.debootstrapped" ]; then
        rm -rf "$root"
        log "debootstrap bookworm"
        debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates \
            bookworm "$root" http://deb.debian.org/debian >"$WORK/debootstrap.log"
        touch "$root/.debootstrapped"
    fi
    # This machine's CA bundle: a network that intercepts TLS (as this
    # project's build machines' does) has its CA only there.
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    toolchain=$(rustc --print sysroot)
    rm -rf "$root/usr/local/rustup"
    mkdir -p "$root/usr/local/rustup/toolchain" "$root/usr/local/cargo/bin"
    cp -a "$toolchain/." "$root/usr/local/rustup/toolchain/"
    for bin in cargo rustc rustdoc; do
        ln -sf "/usr/local/rustup/toolchain/bin/$bin" "$root/usr/local/cargo/bin/$bin"
    done
    commit_root "$root" "$BUILDER" \
        --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env CARGO_HOME=/usr/local/cargo
}

standin_runtime() {
    local from=$WORK/builder root=$WORK/runtime lib
    rm -rf "$root"
    mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/etc/ssl/certs" "$root/tmp"
    for lib in libc.so.6 libm.so.6 libgcc_s.so.1 libdl.so.2 libpthread.so.0 librt.so.1; do
        cp -L "$from/lib/x86_64-linux-gnu/$lib" "$root/lib/x86_64-linux-gnu/"
    done
    cp -L "$from/lib64/ld-linux-x86-64.so.2" "$root/lib64/"
    cp -L "$from/etc/ssl/certs/ca-certificates.crt" "$root/etc/ssl/certs/"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' \
        >"$root/etc/passwd"
    commit_root "$root" "$RUNTIME"
}

check_image() {
    local container mount
    log "image config: $(buildah "${STORAGE[@]}" inspect --format \
        'entrypoint {{.OCIv1.Config.Entrypoint}} cmd {{.OCIv1.Config.Cmd}} user {{.OCIv1.Config.User}}' "$IMAGE")"
    container=$(buildah "${STORAGE[@]}" from "$IMAGE")
    mount=$(buildah "${STORAGE[@]}" mount "$container")
    log "files:"
    (cd "$mount" && find . -type f | sort) >&2
    log "size: $(du -sh "$mount" | cut -f1)"
    chroot "$mount" /podprobe --version >&2
    chroot "$mount" /podprobe run --help >/dev/null
    buildah "${STORAGE[@]}" umount "$container" >/dev/null
    buildah "${STORAGE[@]}" rm "$container" >/dev/null
}

main() {
    mkdir -p "$WORK"
    install_tools
    standin_builder
    standin_runtime
    log "buildah build (the Dockerfile, with the stand-in bases)"
    buildah "${STORAGE[@]}" build --network host --layers \
        --build-arg RUST_IMAGE="$BUILDER" --build-arg RUNTIME_IMAGE="$RUNTIME" \
        --build-arg PODPROBE_REVISION="$(git -C "$ROOT" rev-parse --short HEAD)" \
        -t "$IMAGE" "$ROOT" >&2
    check_image
    log "ok"
}

main
