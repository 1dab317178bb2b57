#!/usr/bin/env bash
# Failure drills for comm/: each runs $BUILD/tests/test_comm --scenario NAME under mpirun
# (3 ranks) and checks that the whole job ends quickly, with a non-zero status and one line
# naming the rank and the cause. The collective cases themselves are in tests/test_comm.c.
#   timeout    rank 1 never joins an all-reduce; the others time out (2 s) and end the job
#   fatal      rank 1 calls ct_fatal while the others sit in an all-reduce (300 s timeout)
#   kill       rank 1 is SIGKILLed while the others sit in an all-reduce (300 s timeout)
#   mpierror   MPI itself refuses a call (negative tag); the error becomes a ct_fatal line
#   badpeer    a send to a rank outside the group
#   rsoverlap  a reduce-scatter whose send and recv buffers overlap
#   u8reduce   a reduction of raw bytes (u8), which the MPI backend refuses (bf16 it reduces)
set -u
cd "$(dirname "$0")/.."
bin=${CT_TEST_COMM_BIN:-${BUILD:-build}/tests/test_comm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)

# drill NAME EXPECTED_FIXED_STRING [MIN_SECONDS]
drill() {
  local name=$1 want=$2 min_s=${3:-0}
  if [ ! -x "$bin" ]; then echo "FAIL comm_$name: $bin is not built"; return; fi
  local out=$tmp/$name.log t0 t1 rc
  t0=$(date +%s.%N)
  timeout 60 mpirun "${mpirun_flags[@]}" -np 3 "$bin" --scenario "$name" --timeout 2 >"$out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 0 ]; then
    echo "FAIL comm_$name: the job exited 0"
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL comm_$name: still running after 60 s (hang)"
  elif awk -v s="$secs" 'BEGIN { exit !(s >= 30) }'; then
    echo "FAIL comm_$name: the job took $secs s to end (limit 30 s)"
  elif awk -v s="$secs" -v m="$min_s" 'BEGIN { exit !(s < m) }'; then
    echo "FAIL comm_$name: ended after $secs s, before the $min_s s timeout could pass"
  elif ! grep -qF -- "$want" "$out"; then
    echo "FAIL comm_$name: no line '$want' in: $(grep -v '^--' "$out" | head -5 | tr '\n' '|')"
  elif grep -q "finished without failing" "$out"; then
    echo "FAIL comm_$name: a rank got past the failure: $(grep 'finished without' "$out" | head -1)"
  else
    echo "PASS comm_$name ($secs s, exit $rc)"
  fi
}

drill timeout "[rank 0] comm: all_reduce on group world timed out after 2 s" 2
# Rank 2 times out too (it waits as long as rank 0), unless rank 0's abort got there first.
drill fatal "[rank 1] test: deliberate failure in the middle of a step"
# OpenMPI's mpirun names the dead rank: "process rank 1 with PID ... exited on signal 9".
drill kill "process rank 1 with PID"
drill mpierror "[rank 0] comm: send on group world failed: MPI_ERR_TAG: invalid tag"
drill badpeer "[rank 0] comm: send on group world: peer 6 is not a rank of the group (size 3)"
drill rsoverlap "comm: reduce_scatter on group world: send and recv buffers overlap"
drill u8reduce "comm: all_reduce on group world: cannot reduce u8 data with the MPI backend"
