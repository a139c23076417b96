# shellcheck shell=bash
# (sourced) Reads a cargo test log, for hack/test.sh's summary and
# hack/compat-matrix.sh's results:
#
#   suites PREFIX LOG   one line per test binary of LOG, its name prefixed
#                       with PREFIX: "suite passed failed ignored seconds"; a
#                       binary that printed no result (it crashed, or was never
#                       run) is reported with failed "?".

suites() {
  awk -v prefix="$1" '
    function flush() { if (suite != "" && !done) print suite, "-", "?", "-", "-"; suite = ""; done = 0 }
    /^ *Running / {
      flush()
      # Unit tests: "podprobe_core:src/lib.rs", the name of the test
      # binary without its hash, then the file.
      if ($2 == "unittests") {
        bin = $4; sub(/^.*\//, "", bin); sub(/-[0-9a-f]+\)$/, "", bin)
        suite = prefix bin ":" $3
      } else suite = prefix $2
      next
    }
    /^ *Doc-tests / { flush(); suite = prefix "doc:" $2; next }
    /^test result:/ {
      passed = failed = ignored = 0; secs = "-"
      for (i = 1; i <= NF; i++) {
        if ($(i + 1) ~ /^passed;?$/) passed = $i
        if ($(i + 1) ~ /^failed;?$/) failed = $i
        if ($(i + 1) ~ /^ignored;?$/) ignored = $i
        if ($i == "in") secs = $(i + 1)
      }
      if (suite != "") print suite, passed, failed, ignored, secs
      done = 1
    }
    END { flush() }
  ' "$2"
}
