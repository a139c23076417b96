# shellcheck shell=bash
# (sourced) The container engine kind runs its nodes on, for hack/kind-e2e.sh
# and hack/kind-node-image.sh:
#
#   kind_provider_setup   sets ENGINE (docker or podman) and, for podman,
#                         KIND_EXPERIMENTAL_PROVIDER and CONTAINERS_CONF
#
# Docker when an engine answers `docker info`; else rootful podman (kind
# refuses rootless podman on a cgroup v1 host), with a containers.conf of
# this script's own, never the host's global files:
# - default_ulimits: podman raises RLIMIT_NOFILE/NPROC for a container by
#   default, which fails without CAP_SYS_RESOURCE ("setrlimit ... operation
#   not permitted"); these limits are within what the sandbox allows;
# - runtime = "runc": crun refuses this host's hybrid cgroup v1 hierarchy.
# Its multi-node clusters need name resolution between the nodes (workers
# join <cluster>-control-plane:6443): the CNI dnsname plugin, from Debian.

kind_provider_setup() {
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        ENGINE=docker
        return
    fi
    command -v podman >/dev/null 2>&1 || {
        echo "kind-provider: neither a Docker engine nor podman is available (Debian: apt-get install podman)" >&2
        return 1
    }
    [ "$(id -u)" = 0 ] || {
        echo "kind-provider: kind with podman on this host needs rootful podman: run as root" >&2
        return 1
    }
    ENGINE=podman
    export KIND_EXPERIMENTAL_PROVIDER=podman
    local conf_dir="${PODPROBE_CACHE:-$HOME/.cache/podprobe}/podman"
    mkdir -p "$conf_dir"
    export CONTAINERS_CONF="$conf_dir/containers.conf"
    cat >"$CONTAINERS_CONF.tmp" <<'CONF'
# Written by podprobe's hack/kind-provider.sh; see there why.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONF
    mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"
}
