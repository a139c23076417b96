# shellcheck shell=bash
# OCI image-layout tarballs without a container engine or a registry, for
# `ctr images import` (and `kind load image-archive`). Sourced, not run:
#
#   . hack/oci-image.sh
#   oci_busybox_rootfs DIR                  fill DIR with busybox-static and its applets
#   oci_image_tar OUT NAME ENTRYPOINT CMD LAYER_DIR...
#                                           write the tarball OUT for image NAME, one
#                                           uncompressed layer per directory (bottom
#                                           first); ENTRYPOINT and CMD are JSON arrays
#                                           (CMD may be empty); prints the manifest digest
#
# Output is reproducible: the same inputs give the same digests (sorted
# entries, mtime 0, uid/gid 0), so re-importing an unchanged image is a no-op
# for the runtime.

# sha256 hex digest of a file.
oci_digest() { sha256sum "$1" | cut -d' ' -f1; }

# Moves file $1 into the layout $2 as a blob and prints its hex digest.
oci_add_blob() {
    local d
    d=$(oci_digest "$1")
    mv "$1" "$2/blobs/sha256/$d"
    echo "$d"
}

# A deterministic tar of directory $1's contents at $2.
oci_tar_dir() {
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$2" .
}

oci_busybox_rootfs() {
    local root=$1 applet
    mkdir -p "$root/bin" "$root/etc" "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    chmod 1777 "$root/tmp"
}

oci_image_tar() {
    local out=$1 name=$2 entrypoint=$3 cmd=$4
    shift 4
    local work layout arch dir digest size diff_ids="" layers="" history=""
    arch=$(dpkg --print-architecture)
    work=$(mktemp -d)
    layout=$work/layout
    mkdir -p "$layout/blobs/sha256"
    for dir in "$@"; do
        oci_tar_dir "$dir" "$work/layer.tar"
        size=$(stat -c %s "$work/layer.tar")
        digest=$(oci_add_blob "$work/layer.tar" "$layout")
        diff_ids+="${diff_ids:+,}\"sha256:$digest\""
        layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$digest\",\"size\":$size}"
        history+="${history:+,}{\"created_by\":\"podprobe hack/oci-image.sh: $(basename "$dir")\"}"
    done
    cat >"$work/config.json" <<EOF
{"architecture":"$arch","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":$entrypoint,${cmd:+\"Cmd\":$cmd,}"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":[$diff_ids]},"history":[$history]}
EOF
    local config config_size manifest manifest_size
    config_size=$(stat -c %s "$work/config.json")
    config=$(oci_add_blob "$work/config.json" "$layout")
    cat >"$work/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$config_size},"layers":[$layers]}
EOF
    manifest_size=$(stat -c %s "$work/manifest.json")
    manifest=$(oci_add_blob "$work/manifest.json" "$layout")
    printf '{"imageLayoutVersion":"1.0.0"}\n' >"$layout/oci-layout"
    cat >"$layout/index.json" <<EOF
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$manifest_size,"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"${name##*:}"}}]}
EOF
    oci_tar_dir "$layout" "$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$work"
    echo "sha256:$manifest"
}
