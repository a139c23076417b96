#!/usr/bin/env bash
# (sourced) go_tool NAME MODULE/CMD VERSION [GO INSTALL FLAGS...]: builds a Go
# command at a pinned version with `go install` into
# ${PODPROBE_CACHE:-~/.cache/podprobe}/tools/NAME-VERSION/ and prints the
# binary's path. A binary already there is reused (the directory is named by
# the version, so a new pin builds anew; after changing the flags, delete the
# directory). Used by hack/helm.sh and hack/promtool.sh; the Go module proxy
# serves the modules.
go_tool() {
  local name=$1 package=$2 version=$3
  shift 3
  local dir="${PODPROBE_CACHE:-$HOME/.cache/podprobe}/tools/$name-$version"
  if [ ! -x "$dir/$name" ]; then
    command -v go >/dev/null 2>&1 || {
      echo "$name: go is not installed; it builds $package@$version" >&2
      return 1
    }
    echo "$name: building $package@$version into $dir (a few minutes cold)" >&2
    mkdir -p "$dir"
    # Into a temporary directory first: an interrupted build leaves no
    # binary that a later run would take for a finished one.
    local tmp
    tmp=$(mktemp -d "$dir/.build.XXXXXX")
    if ! GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" nice -n 10 go install "$@" "$package@$version" >&2; then
      rm -rf "$tmp"
      echo "$name: go install $package@$version failed" >&2
      return 1
    fi
    mv "$tmp/$name" "$dir/$name"
    rm -rf "$tmp"
  fi
  echo "$dir/$name"
}
