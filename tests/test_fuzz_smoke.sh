#!/usr/bin/env bash
# A short run of every fuzz target (tests/fuzz/) inside `make test`: builds them into
# $BUILD/fuzz once (make fuzz-build; later runs only relink what changed), then runs each for
# CT_FUZZ_SMOKE_SECONDS (3) from its seed corpus. One PASS/FAIL line per target, with the
# executions libFuzzer counted. The long runs are `make fuzz` (120 s each).
# clang is installed by scripts/setup.sh, so a machine without it is a setup defect: FAIL, no skip.
set -u
cd "$(dirname "$0")/.."
build=${BUILD:-build}
secs=${CT_FUZZ_SMOKE_SECONDS:-3}
if ! command -v clang >/dev/null; then
  echo "FAIL fuzz_smoke: clang not found; scripts/setup.sh installs it (run make setup)"
  exit 1
fi
log=$(mktemp); trap 'rm -f "$log"' EXIT
# The sanitizer options of a SANITIZE=1 run are for gcc's runtime; the fuzz targets set their own.
unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
if ! make --no-print-directory -s BUILD="$build" fuzz-build >"$log" 2>&1; then
  echo "FAIL fuzz_smoke: make fuzz-build failed:"
  tail -20 "$log" | sed 's/^/    /'
  exit 1
fi
bash tests/fuzz/run_fuzz.sh "$build/fuzz" "$secs"
