#!/usr/bin/env bash
# Builds one pinned Kubernetes release's binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubeadm, kubelet, kubectl), etcd
# and agnhost from their upstream Go modules (hack/k8s-build/<version>/go.mod),
# and prints the directory that holds them.
#
# Each directory under hack/k8s-build pins one release. PODPROBE_K8S_VERSION
# chooses it; the default is the newest, the one CI and the local cluster run.
#
# The binaries are cached outside the checkout, under
# ${PODPROBE_CACHE:-$HOME/.cache/podprobe}/k8s/<version>/bin, and reused while
# go.mod/go.sum are unchanged: a fresh clone on the same machine builds
# nothing. Without a cache the script builds (it never depends on one).
# Builds run under `nice -n 19`, on every core: whatever else runs keeps the
# cores it needs.
#
#   hack/k8s-build.sh            build if needed, print the bin directory
#   hack/k8s-build.sh --version  print the pinned Kubernetes version
#   hack/k8s-build.sh --bin-dir  print the bin directory without building
#   hack/k8s-build.sh --source-dir
#                                print the k8s.io/kubernetes module's source directory
#   hack/k8s-build.sh --versions print every pinned version, oldest first
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
versions="$(find "$here/k8s-build" -mindepth 2 -maxdepth 2 -name go.mod -printf '%h\n' | xargs -n1 basename | sort -V)"
if [ "${1:-}" = --versions ]; then
  echo "$versions"
  exit 0
fi
want="${PODPROBE_K8S_VERSION:-$(tail -n1 <<<"$versions")}"
mod_dir="$here/k8s-build/$want"
if [ ! -f "$mod_dir/go.mod" ]; then
  echo "k8s-build: no pinned release $want; pinned:" $versions >&2
  exit 1
fi

k8s_version="$(sed -n 's#^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\).*#\1#p' "$mod_dir/go.mod")"
if [ -z "$k8s_version" ]; then
  echo "k8s-build: no 'k8s.io/kubernetes vX.Y.Z' requirement in $mod_dir/go.mod" >&2
  exit 1
fi
if [ "${1:-}" = --version ]; then
  echo "$k8s_version"
  exit 0
fi
if [ "${1:-}" = --source-dir ]; then
  # The release's module source (downloaded by the build), for files that
  # go into images beside the binaries.
  (cd "$mod_dir" && go mod download k8s.io/kubernetes && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  exit 0
fi

cache_root="${PODPROBE_CACHE:-$HOME/.cache/podprobe}"
version_dir="$cache_root/k8s/$k8s_version"
bin_dir="$version_dir/bin"
if [ "${1:-}" = --bin-dir ]; then
  echo "$bin_dir"
  exit 0
fi
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubeadm kubelet kubectl agnhost etcd)

# The cache key: the version names the directory, the module files' hash
# guards against a changed pin under the same version.
stamp="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" | sha256sum | cut -d' ' -f1)"

cache_is_complete() {
  [ "$(cat "$version_dir/stamp" 2>/dev/null)" = "$stamp" ] || return 1
  local b
  for b in "${binaries[@]}"; do
    [ -x "$bin_dir/$b" ] || return 1
  done
}

if cache_is_complete; then
  echo "$bin_dir"
  exit 0
fi

# One build at a time; a caller that waited finds the other's binaries.
mkdir -p "$version_dir"
exec 8>"$version_dir/build.lock"
flock 8
if cache_is_complete; then
  echo "$bin_dir"
  exit 0
fi

command -v go >/dev/null 2>&1 || {
  echo "k8s-build: needs a Go toolchain (go >= 1.25) on PATH" >&2
  exit 1
}

# The same version stamps upstream's build sets, so that the node, kubectl
# and the API server report the release instead of v0.0.0-master.
minor="${k8s_version#v1.}"
minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

tmp="$(mktemp -d "$version_dir/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "k8s-build: building Kubernetes $k8s_version, etcd and agnhost into $bin_dir (this takes a while)" >&2
start=$SECONDS
(
  cd "$mod_dir"
  # `tool` names every tool directive of go.mod. Static binaries, like
  # upstream's release builds of these components. On every core, at the
  # lowest priority: hack/test.sh builds this beside the Rust phases, which
  # then keep the cores they need, and once they are done this takes them
  # all (one package at a time, it was the cold run's critical path: 54 of
  # its minutes on a fresh machine, half of them with a core idle).
  CGO_ENABLED=0 nice -n 19 \
    go build -trimpath -ldflags "$ldflags" -o "$tmp/" tool 8>&-
)
# The etcd server's main package is its module's root, go.etcd.io/etcd/server/v3,
# which go names "server".
mv "$tmp/server" "$tmp/etcd"
for b in "${binaries[@]}"; do
  [ -x "$tmp/$b" ] || { echo "k8s-build: $b was not built" >&2; exit 1; }
done
rm -rf "$bin_dir"
chmod 755 "$tmp"
mv "$tmp" "$bin_dir"
trap - EXIT
echo "$stamp" >"$version_dir/stamp"
echo "k8s-build: built in $((SECONDS - start)) s" >&2
echo "$bin_dir"
