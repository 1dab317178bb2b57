#!/usr/bin/env bash
# Context parallel: activation memory per rank of the debug model at one sequence length for
# cp 1, 2 and 4 (the `a` figure of the step line: peak bytes of activations on rank 0), and its
# ratio to cp 1 -- close to 1/cp when the ring moves keys and values (the all-gather method also
# holds the gathered ones).
#   bench/cp_memory.sh [seq_len=4096] [rotate_method=ring]
set -u
cd "$(dirname "$0")/.."
T=${1:-4096} METHOD=${2:-ring}
ROOT=""; [ "$(id -u)" -eq 0 ] && ROOT="--allow-run-as-root"
base=""
for cp in 1 2 4; do
  a=$(OMP_NUM_THREADS=1 CTITAN_TTY=0 mpirun $ROOT --oversubscribe --bind-to none -np $cp build/ctitan train \
        --config configs/llama3_debug.toml --training.dataset synthetic --model.tokenizer_path "" \
        --training.seq_len "$T" --micro_batch_size 1 --training.steps 1 --validation.enable false \
        --parallelism.context_extension_degree $cp --parallelism.context_parallel_rotate_method "$METHOD" \
        --parallelism.data_shard_degree 1 --job.dump_folder "outputs/cp_memory_$cp" 2>&1 |
      sed -n 's/.* a \([0-9.]*\).*/\1/p' | tail -1)
  [ -z "$a" ] && { echo "cp $cp: the run failed"; exit 1; }
  [ -z "$base" ] && base=$a
  awk -v cp=$cp -v a="$a" -v b="$base" -v T="$T" -v m="$METHOD" \
    'BEGIN {printf "cp %d (%s, seq_len %d): activations %.1f MiB per rank, %.2fx of cp 1 (1/cp = %.2f)\n", cp, m, T, a, a / b, 1 / cp}'
done
