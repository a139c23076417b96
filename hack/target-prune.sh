#!/usr/bin/env bash
# Deletes from the cargo target directory what earlier builds of this
# workspace left behind and the current one no longer uses: the test,
# example and binary executables and the workspace's own rlibs under hashes
# of older sources (each test binary is some 280 MB with its debug
# information, and every change to the code gives all of them new hashes).
# The target directory lives in the cache, outside the checkout, and is
# shared by every run on the machine (hack/test.sh); without this it grows
# by a whole set of test binaries per change until the disk is full.
#
# What the current build uses is what cargo reports for it: hack/test.sh runs
# this after its builds, so the two cargo calls below only list (no
# compiling). The dependencies' rlibs, build scripts and proc macros stay.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}

keep=$(mktemp)
trap 'rm -f "$keep"' EXIT
# Every path of every artifact of the two builds (also the sources', which
# are not in the target directory and so match nothing below).
{
  cargo test --locked --workspace --features testing --no-run --message-format=json
  cargo build --locked --release --bin podprobe --message-format=json
} 2>/dev/null | grep '"reason":"compiler-artifact"' | grep -o '"/[^"]*"' | tr -d '"' | sort -u >"$keep"
if ! [ -s "$keep" ]; then
  echo "target-prune: cargo listed no artifacts; nothing deleted" >&2
  exit 1
fi

before=$(du -sm "$target" | cut -f1)
removed=0
for dir in "$target"/debug/deps "$target"/debug/examples "$target"/release/deps; do
  [ -d "$dir" ] || continue
  while IFS= read -r -d '' file; do
    if grep -qxF "$file" "$keep"; then continue; fi
    rm -f "$file" "${file%.rlib}.d"
    removed=$((removed + 1))
  done < <(find "$dir" -maxdepth 1 -type f \( \( -perm -u+x ! -name '*.so' \) \
    -o -name 'libpodprobe-*.rlib' -o -name 'libpodprobe_core-*.rlib' \
    -o -name 'libkubectl_podprobe-*.rlib' \) -print0)
done
# hack/test.sh builds without incremental compilation (CARGO_INCREMENTAL=0):
# what an incremental build left there is never read again.
rm -rf "$target"/debug/incremental
after=$(du -sm "$target" | cut -f1)
echo "target-prune: removed $removed stale outputs; $target: ${before} MiB -> ${after} MiB;" \
  "free: $(df -h --output=avail "$target" | tail -n 1 | tr -d ' ')"
