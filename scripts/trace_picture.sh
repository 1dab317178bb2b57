#!/usr/bin/env bash
# Draws docs/trace_fsdp2_tp2.svg, the picture of a profile in docs/observability.md: a 4-rank FSDP 2 x TP 2 run of
# a small model (2 micro-batches of gradient accumulation, one OpenMP thread per rank) profiled at
# its 2nd step, rank 0's timeline.svg of that step copied into docs/, and the ranks' traces
# beside it in OUT (default outputs/trace_fsdp2_tp2) to open in https://ui.perfetto.dev.
#   BUILD=build-prof scripts/trace_picture.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-outputs/trace_fsdp2_tp2}
[ -x "$BUILD/ctitan" ] || { echo "trace_picture.sh: $BUILD/ctitan is not built (make BUILD=$BUILD)" >&2; exit 2; }
root=""; [ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
OMP_NUM_THREADS=1 mpirun $root --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS "$BUILD/ctitan" train \
  --model.n_layers 2 --model.dim 128 --model.n_heads 4 --model.n_kv_heads 2 --model.ffn_hidden_dim 384 \
  --model.vocab_size 1024 --training.seq_len 128 --micro_batch_size 2 --gradient_accumulation_steps 2 \
  --training.steps 2 --training.dataset synthetic --metrics.peak_tflops 1 \
  --parallelism.data_shard_degree 2 --parallelism.compute_parallel_degree 2 \
  --profiling.enable_profiling true --profiling.profile_freq 2 --profiling.enable_memory_snapshot true \
  --job.dump_folder "$OUT" --job.overwrite true
cp "$OUT/profile_traces/iteration_2/timeline.svg" docs/trace_fsdp2_tp2.svg
echo "docs/trace_fsdp2_tp2.svg drawn from $OUT/profile_traces/iteration_2 (rank*_trace.json)"
