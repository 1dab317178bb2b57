#!/usr/bin/env bash
# Runs every test program ($BUILD/tests/test_*, BUILD defaulting to build) and every shell test
# (tests/test_*.sh, which see BUILD too).
# Each prints PASS/FAIL lines per case; a program that dies without a FAIL line counts as one
# failure. The last line is "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export BUILD=${BUILD:-build}  # `make BUILD=dir test` puts BUILD in the environment
# Sanitizer build (make test SANITIZE=1, BUILD=build-san): a sanitizer report ends the program
# non-zero, so the case fails. Leak checking stays on for ctitan's code; OpenMPI's own leaks are
# suppressed (tests/sanitizers/lsan.supp). Its libraries have no frame pointers, so the stacks
# that name them need the slow (DWARF) unwinder: fast_unwind_on_malloc=0. Every process mpirun
# starts inherits these variables.
if [ "${SANITIZE:-}" = 1 ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
passed=0; failed=0; failed_names=()
log_dir=$BUILD/test-logs; mkdir -p "$log_dir"
run_one() {
  local name=$1; shift
  local log="$log_dir/$name.log"
  local t0=$SECONDS
  timeout 300 "$@" >"$log" 2>&1; local rc=$?
  local p f
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name (exit $rc, no FAIL line)" >>"$log"; fi
  passed=$((passed + p)); failed=$((failed + f))
  printf '%-40s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
  if [ "$f" -ne 0 ]; then failed_names+=("$name"); grep -E '^FAIL |check failed|error|^SUMMARY: ' "$log" | head -20 | sed 's/^/    /'; fi
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "$(basename "$t")" "$t"
done
for t in tests/test_*.sh; do
  [ -f "$t" ] || continue
  run_one "$(basename "$t" .sh)" bash "$t"
done
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
