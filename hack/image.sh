#!/usr/bin/env bash
# Container images for podprobe and its end-to-end tests, built without a
# container engine or a registry (hack/oci-image.sh) and imported into the
# local cluster's containerd (hack/local-cluster.sh import):
#
#   docker.io/local/podprobe:${PODPROBE_IMAGE_TAG:-dev}
#       `cargo build --release`'s binary at /podprobe plus the shared libraries
#       `ldd` names; entrypoint /podprobe, command `run`.
#   registry.k8s.io/e2e-test-images/agnhost:2.59
#       the agnhost that hack/k8s-build.sh built, under the name and tag
#       Kubernetes v1.35's e2e suite uses (test/utils/image/manifest.go), on a
#       busybox-static layer (sh, wget, nc, httpd) and this machine's
#       /bin/bash with the libraries it loads (upstream's image has bash, and
#       its terminating-pod scenarios run `/bin/bash -c`), so upstream e2e pod
#       specs (netexec, liveness, grpc-health-checking, test-webserver, the
#       bash scripts) run unchanged.
#
#   hack/image.sh              build both, import them, print "NAME DIGEST" per image
#   hack/image.sh --no-import  build only; print "NAME DIGEST TARBALL" per image
#                              (e.g. for `kind load image-archive TARBALL`)
#   hack/image.sh [--no-import] podprobe|agnhost...
#                              only the images named (e.g. agnhost alone, which
#                              needs no cargo build)
#
# Tarballs are reproducible and go to the cargo target directory's image/.
# Importing needs root and a running cluster.
set -euo pipefail

HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HACK")
# shellcheck source=hack/oci-image.sh
. "$HACK/oci-image.sh"

PODPROBE_IMAGE=docker.io/local/podprobe:${PODPROBE_IMAGE_TAG:-dev}
AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.59
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

log() { echo "image.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# Copies the binary $1 to $2/$3 and every shared library it loads (the dynamic
# loader included) to the same path under $2.
copy_with_libraries() {
    local bin=$1 root=$2 dest=$3 lib
    install -D -m 0755 "$bin" "$root/$dest"
    # ldd prints "name => /path (addr)" or "/path (addr)"; vdso has no path.
    for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
        install -D -m 0755 "$(readlink -f "$lib")" "$root/$lib"
    done
}

# Prints "NAME DIGEST TARBALL" for podprobe's image.
build_podprobe() {
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --locked --bin podprobe >&2)
    local work tarball digest
    work=$(mktemp -d)
    copy_with_libraries "$TARGET/release/podprobe" "$work/podprobe" podprobe
    tarball=$TARGET/image/podprobe.oci.tar
    digest=$(oci_image_tar "$tarball" "$PODPROBE_IMAGE" '["/podprobe"]' '["run"]' "$work/podprobe")
    rm -rf "$work"
    echo "$PODPROBE_IMAGE $digest $tarball"
}

# Prints "NAME DIGEST TARBALL" for the agnhost image.
build_agnhost() {
    local bin tarball work digest source
    bin=$("$HACK/k8s-build.sh" --bin-dir)/agnhost
    [ -x "$bin" ] || die "no agnhost at $bin: run hack/k8s-build.sh"
    tarball=$TARGET/image/agnhost.oci.tar
    work=$(mktemp -d)
    oci_busybox_rootfs "$work/busybox-static"
    copy_with_libraries "$(command -v bash)" "$work/bash" bin/bash
    # As upstream's image: /agnhost, the /agnhost-2 link its entrypoint
    # tests use, /uploads for netexec.
    install -D -m 0755 "$bin" "$work/agnhost/agnhost"
    ln -s agnhost "$work/agnhost/agnhost-2"
    mkdir -p "$work/agnhost/uploads"
    # The serving certificate upstream's image carries for TLS servers
    # (`grpc-health-checking --tls-cert-file /localhost.crt`, the 1.37 gRPC
    # TLS probe specs), from the release's own source.
    source=$("$HACK/k8s-build.sh" --source-dir)
    install -m 0644 "$source/test/images/agnhost/porter/localhost.crt" \
        "$source/test/images/agnhost/porter/localhost.key" "$work/agnhost/"
    digest=$(oci_image_tar "$tarball" "$AGNHOST_IMAGE" '["/agnhost"]' '["pause"]' \
        "$work/busybox-static" "$work/bash" "$work/agnhost")
    rm -rf "$work"
    echo "$AGNHOST_IMAGE $digest $tarball"
}

main() {
    local import=yes
    if [ "${1:-}" = --no-import ]; then
        import=no
        shift
    fi
    local images=("$@") image
    [ ${#images[@]} -gt 0 ] || images=(podprobe agnhost)
    for image in "${images[@]}"; do
        case $image in
        podprobe | agnhost) ;;
        *) die "usage: $0 [--no-import] [podprobe|agnhost]..." ;;
        esac
    done
    local built="" name digest tarball
    mkdir -p "$TARGET/image"
    for image in "${images[@]}"; do
        built+="$("build_$image")"$'\n'
    done
    built=${built%$'\n'}
    if [ $import = no ]; then
        echo "$built"
        return
    fi
    while read -r name digest tarball; do
        log "importing $name ($digest)"
        "$HACK/local-cluster.sh" import "$tarball"
        echo "$name $digest"
    done <<<"$built"
}

main "$@"
