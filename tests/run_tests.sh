#!/usr/bin/env bash
# Runs every test program ($BUILD/tests/test_*, BUILD defaulting to build) and every shell test
# (tests/test_*.sh, which see BUILD too).
# Kernel sets (kernels/cpu/kernel_set.h): the suite runs under the set a process takes by default
# (the highest this CPU runs, or CTITAN_KERNEL_SET), and the numerics tests (NUMERICS below: the
# kernels, parity and precision tests) run again under every lower set the CPU runs, named
# test_x[set]. A program built once per set (test_x-SET, the Makefile's KSET_TESTS) runs under
# its own set, where the CPU runs it.
# Each prints PASS/FAIL lines per case; a program that dies without a FAIL line counts as one
# failure. The last line is "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export BUILD=${BUILD:-build}  # `make BUILD=dir test` puts BUILD in the environment
passed=0; failed=0; failed_names=()
log_dir=$BUILD/test-logs; mkdir -p "$log_dir"
# Sanitizer build (make test SANITIZE=1, BUILD=build-san). Every report, from any process a test
# starts (a ctitan run whose exit status a shell test expects to be non-zero, an mpirun child),
# goes to a file under $log_dir/sanitizer/ (log_path) rather than into the output the test reads;
# a test after which such a report exists fails (once), with its first lines. A report also ends
# its program (UBSan: halt_on_error, and the build's -fno-sanitize-recover). Leak checking stays on
# for ctitan's code; OpenMPI's own leaks are suppressed (tests/sanitizers/lsan.supp), and since its
# libraries have no frame pointers, the stacks that name them need the slow unwinder
# (fast_unwind_on_malloc=0). Every process mpirun starts inherits these variables.
san_dir=
if [ "${SANITIZE:-}" = 1 ]; then
  san_dir=$PWD/$log_dir/sanitizer; rm -rf "$san_dir"; mkdir -p "$san_dir/new"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0}:log_path=$san_dir/new/report
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}:log_path=$san_dir/new/report
fi
# A test program's time limit. The instrumented build runs CPU-bound code about ten times slower:
# on a 2-core Zen 4 VM `ctitan plan --tables` (the planner's search) takes 20 s in the plain
# build, and test_plan_cli took 276 s instrumented (past 300 before the planner was made faster).
test_timeout=300; [ -n "$san_dir" ] && test_timeout=1200
run_one() {
  local name=$1; shift
  local log="$log_dir/$name.log"
  local t0=$SECONDS
  timeout "$test_timeout" "$@" >"$log" 2>&1; local rc=$?
  local p f
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  # Sanitizer reports this test's processes left. Not one: LeakSanitizer in a child forked from a
  # multi-threaded process, which cannot see the other threads' memory (say, a gemm thread's
  # packing buffers) and says "False leaks are possible"; its other reports still count.
  local reports=()
  if [ -n "$san_dir" ] && [ -n "$(ls "$san_dir/new")" ]; then
    mkdir -p "$san_dir/$name"; mv "$san_dir/new/"* "$san_dir/$name/"
    for r in "$san_dir/$name"/*; do
      if grep -qE 'ERROR: AddressSanitizer|runtime error' "$r" ||
         { grep -q 'ERROR: LeakSanitizer' "$r" && ! grep -q 'was not suspended' "$r"; }; then reports+=("$r"); fi
    done
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ ${#reports[@]} -eq 0 ]; then
    f=1; echo "FAIL $name (exit $rc, no FAIL line)" >>"$log"
  fi
  if [ ${#reports[@]} -gt 0 ]; then
    f=$((f + 1))
    { echo "FAIL $name: ${#reports[@]} sanitizer report(s), in $san_dir/$name/:"
      grep -hE 'ERROR: |SUMMARY: |runtime error|^    #[0-9] ' "${reports[@]}" | head -12 | sed 's/^/  sanitizer: /'; } >>"$log"
  fi
  passed=$((passed + p)); failed=$((failed + f))
  printf '%-40s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
  if [ "$f" -ne 0 ]; then failed_names+=("$name"); grep -E '^FAIL |check failed|error|^  sanitizer: ' "$log" | head -20 | sed 's/^/    /'; fi
}
NUMERICS='^test_(kernels_.*|parity_.*|loss_parallel|trainer_reference|precision_cli)$'
runnable=$("$BUILD/ctitan" kernels --runnable) || { echo "FAIL $BUILD/ctitan kernels --runnable"; exit 1; }
default_set=${CTITAN_KERNEL_SET:-$(echo "$runnable" | tail -1)}
others=$(echo "$runnable" | grep -vx "$default_set" | tr '\n' ' ')
echo "kernel sets this CPU runs: $(echo "$runnable" | tr '\n' ' ')(the suite under $default_set${others:+; numerics again under $others})"
is_runnable() { echo "$runnable" | grep -qx "$1"; }
tests=()  # "name|command..." of every test, for the runs under the other sets
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  case "$name" in
    *-*) set_name=${name##*-}
         is_runnable "$set_name" && CTITAN_KERNEL_SET=$set_name run_one "$name" "$t"
         continue ;;
  esac
  run_one "$name" "$t"
  tests+=("$name|$t")
done
for t in tests/test_*.sh; do
  [ -f "$t" ] || continue
  run_one "$(basename "$t" .sh)" bash "$t"
  tests+=("$(basename "$t" .sh)|bash $t")
done
for set_name in $others; do
  for entry in "${tests[@]}"; do
    name=${entry%%|*}
    [[ $name =~ $NUMERICS ]] || continue
    # (word splitting of the command is wanted: "bash tests/x.sh")
    # shellcheck disable=SC2086
    CTITAN_KERNEL_SET=$set_name run_one "$name[$set_name]" ${entry#*|}
  done
done
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
