#!/usr/bin/env bash
# hack/deps.sh: the module dependency graph of both crates (src/ and
# crates/podprobe-core/src), for issue #26 (one-way imports). A report; the
# check that CI runs is tests/layering.rs, and this script is a front end
# to that test's scanner (its report_for_hack_deps_sh test), so the two
# cannot read the graph differently: imports of the core through
# `podprobe_core::` paths, resolved to the file that defines the item, with the layers of tests/layering.rs's LAYERS.
#
# Usage:
#   hack/deps.sh [MODE] [DIR]
#     MODE  edges   every file -> file edge, with its layers, items and
#                   lines (default)
#           top     the top-level module graph
#           cycles  the edges that close a cycle between top-level modules
#                   and between files (KNOWN_TOP_CYCLES, KNOWN_FILE_CYCLES)
#           upward  file edges the layering forbids (KNOWN_UPWARD, or
#                   KNOWN_TEST_UPWARD with TEST=1)
#           all     all of the above
#     DIR   the checkout to read (DIR/src, DIR/crates/podprobe-core/src);
#           default this one. The two arguments may come in either order.
#   Environment:
#     REV=<commit>  read that commit of DIR (git archive into a temp dir)
#                   instead of the work tree
#     TEST=1        the imports of #[cfg(test)] code instead of the
#                   product's (cycles are always the product's)
#
# Examples:
#   hack/deps.sh cycles
#   REV=HEAD~3 hack/deps.sh upward
#   TEST=1 hack/deps.sh edges | grep testing
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
MODE=edges
REPO="$here"
for arg in "$@"; do
  case "$arg" in
    edges | top | cycles | upward | all) MODE="$arg" ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) REPO="$(cd "$arg" && pwd)" ;;
  esac
done
tmp=$(mktemp -d /tmp/podprobe-deps.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${REV:-}" ]; then
  mkdir "$tmp/tree"
  git -C "$REPO" archive "$REV" src crates/podprobe-core/src | tar -x -C "$tmp/tree"
  REPO="$tmp/tree"
fi
for f in src/lib.rs crates/podprobe-core/src/lib.rs; do
  if [ ! -f "$REPO/$f" ]; then
    echo "deps.sh: $REPO/$f not found" >&2
    exit 2
  fi
done
# The test's messages go to stderr, so that a failure to build shows.
PODPROBE_DEPS="$MODE" PODPROBE_DEPS_TEST="${TEST:-}" PODPROBE_DEPS_DIR="$REPO" \
  PODPROBE_DEPS_OUT="$tmp/report" \
  cargo test --quiet --manifest-path "$here/Cargo.toml" --test layering \
  -- --exact report_for_hack_deps_sh >&2
cat "$tmp/report"
