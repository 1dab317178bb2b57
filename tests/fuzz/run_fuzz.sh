#!/usr/bin/env bash
# Runs the libFuzzer targets built in DIR (make fuzz-build) for SECONDS each, one after another,
# and prints one line per target: "PASS fuzz_NAME: N executions in S s, corpus K inputs" from
# libFuzzer's final stats, or "FAIL fuzz_NAME: ..." with the crashing input's path and the first
# lines of the report. Exits non-zero when any target found something.
#   usage: tests/fuzz/run_fuzz.sh DIR SECONDS [NAME ...]     (NAME: toml, cli, shard, ...)
#
# Each target reads its seeds from tests/fuzz/corpus/NAME/ (never written) and keeps what it
# finds in DIR/corpus/NAME/, so a later run goes on from there. A crash's input is saved as
# DIR/artifacts/fuzz_NAME-crash-<sha1>; add it to tests/fuzz/corpus/NAME/ as a regression seed
# once fixed. Limits: 10 s per input, 2 GiB of memory (a bigger allocation is a finding: every
# reader must check sizes against the file before it allocates).
set -u
cd "$(dirname "$0")/../.."
dir=${1:?usage: run_fuzz.sh DIR SECONDS [NAME ...]}
secs=${2:?usage: run_fuzz.sh DIR SECONDS [NAME ...]}
shift 2
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
fi
mkdir -p "$dir/artifacts" "$dir/logs"
bad=0
for name in "${names[@]}"; do
  bin=$dir/fuzz_$name
  seeds=tests/fuzz/corpus/$name
  log=$dir/logs/fuzz_$name.log
  if [ ! -x "$bin" ]; then echo "FAIL fuzz_$name: $bin not built (make fuzz-build)"; bad=1; continue; fi
  if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then echo "FAIL fuzz_$name: no seeds in $seeds"; bad=1; continue; fi
  mkdir -p "$dir/corpus/$name"
  # UBSan's reports end the program (built -fno-sanitize-recover) and ASan's leak check is on:
  # libFuzzer reports either as a crash with the input saved.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/fuzz_$name-" "$dir/corpus/$name" "$seeds" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  corpus=$(ls "$dir/corpus/$name" | wc -l)
  if [ "$rc" -eq 0 ] && [ -n "$execs" ]; then
    echo "PASS fuzz_$name: ${execs} executions in ${took:-$secs} s, corpus $corpus inputs"
  else
    bad=1
    art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "FAIL fuzz_$name: exit $rc after ${execs:-?} executions; input: ${art:-none saved}; log: $log"
    grep -E 'ERROR:|SUMMARY:|property failed|runtime error|#[0-9]+ 0x' "$log" | head -12 | sed 's/^/    /'
  fi
done
exit $bad
