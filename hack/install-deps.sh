#!/usr/bin/env bash
# Installs what building and testing podprobe needs on a fresh Debian machine
# (as root): protoc for the CRI protos, rustfmt and clippy, IPv6 on loopback.
# The container runtime's packages are installed by hack/containerd.sh; helm
# and promtool are built from their Go modules by hack/helm.sh and
# hack/promtool.sh (hack/test.sh runs them beside the Kubernetes build).
# Idempotent.
set -euo pipefail

need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
# tests/hostile_pods.rs: a network namespace (ip) with a listener (python3).
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# tests/cli_simulate.rs: rsvg-convert renders simulate's SVG timeline.
command -v rsvg-convert >/dev/null 2>&1 || need_apt+=(librsvg2-bin)
# The kind cluster of the end-to-end tests (hack/kind-e2e.sh) where no Docker
# engine answers: rootful podman (with runc, which hack/kind-provider.sh
# chooses over crun), name resolution between its nodes (the CNI dnsname
# plugin), debootstrap and busybox-static for the offline node image
# (hack/kind-node-image.sh).
if ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
  command -v podman >/dev/null 2>&1 || need_apt+=(podman)
  command -v runc >/dev/null 2>&1 || need_apt+=(runc)
  [ -x /usr/lib/cni/dnsname ] || need_apt+=(golang-github-containernetworking-plugin-dnsname)
fi
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
[ -x /bin/busybox ] || need_apt+=(busybox-static)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if command -v rustup >/dev/null 2>&1; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^${component}" \
      || rustup component add "$component"
  done
fi

# The probers' IPv6 tests (tests/tcp_probe.rs, tests/grpc_probe.rs) dial
# [::1]; they fail, never skip, without it.
if [ "$(sysctl -n net.ipv6.conf.lo.disable_ipv6 2>/dev/null || echo absent)" != 0 ]; then
  echo "install-deps: enabling IPv6 on loopback" >&2
  sysctl -qw net.ipv6.conf.lo.disable_ipv6=0 \
    || echo "install-deps: this kernel has no IPv6 loopback: the IPv6 probe tests will fail" >&2
fi
