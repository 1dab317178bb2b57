#!/usr/bin/env bash
# Multi-rank `ctitan train` failure cases: each must end the whole job with a one-line message
# and a non-zero exit, never hang.
#   - one rank SIGKILLed mid-run: the others exit within 30 s
#   - a layout whose product is not the world size: refused before any work, naming the numbers
#   - a compute-parallel degree that does not divide the heads: refused, naming both numbers
#   - a corrupt shard: every rank stops, the message names the file
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
tiny=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 4 --model.vocab_size 64
      --model.ffn_hidden_dim 64 --training.seq_len 16 --micro_batch_size 2 --training.dataset synthetic
      --metrics.peak_tflops 1 --metrics.log_freq 1000 --job.dump_folder "$tmp/out")
mpi() { timeout 60 mpirun $asroot --oversubscribe --bind-to none -np "$@"; }

# 1. A rank killed mid-run.
mpi 2 $bin train "${tiny[@]}" --training.steps 1000000 --parallelism.data_shard_degree 2 \
  >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 100); do
  pids=$(pgrep -f "$tmp/out" | while read -r p; do [ "$(ps -o comm= -p "$p")" = ctitan ] && echo "$p"; done)
  [ "$(echo "$pids" | grep -c .)" -ge 2 ] && break
  sleep 0.1
done
sleep 1  # let it get into its steps
victim=$(echo "$pids" | tail -n 1)
t0=$SECONDS
if [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null; then
  wait $job; rc=$?
  dt=$((SECONDS - t0))
  if [ "$rc" -ne 0 ] && [ "$dt" -le 30 ]; then echo "PASS killed_rank_ends_job (${dt}s, exit $rc)"
  else echo "FAIL killed_rank_ends_job: exit $rc after ${dt}s"; fi
else
  kill $job 2>/dev/null; wait $job
  echo "FAIL killed_rank_ends_job: could not find a rank to kill"
fi

# 2. A layout that does not match the world.
out=$(mpi 2 $bin train "${tiny[@]}" --training.steps 2 --parallelism.data_shard_degree 4 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "layout pp 1 × dp_replicate 1 × dp_shard 4 × cp 1 × tp 1 = 4 ranks, but the world has 2"; then
  echo "PASS layout_mismatch_refused"
else echo "FAIL layout_mismatch_refused: exit $rc: $out" | head -3; fi

# 3. tp that does not divide the heads (4 heads, tp 3... world 3).
out=$(mpi 3 $bin train "${tiny[@]}" --training.steps 2 --parallelism.data_shard_degree 1 \
      --parallelism.compute_parallel_degree 3 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "parallelism.compute_parallel_degree 3 does not divide model.n_heads 4"; then
  echo "PASS tp_not_dividing_heads_refused"
else echo "FAIL tp_not_dividing_heads_refused: exit $rc: $out" | head -3; fi

# 4. A corrupt shard: wrong magic.
mkdir -p "$tmp/data"
head -c 4096 /dev/urandom >"$tmp/data/train_000.bin"
out=$(mpi 2 $bin train "${tiny[@]}" --training.steps 2 --training.dataset "$tmp/data" 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "$tmp/data/train_000.bin"; then
  echo "PASS corrupt_shard_stops_every_rank"
else echo "FAIL corrupt_shard_stops_every_rank: exit $rc: $out" | head -3; fi
