#!/usr/bin/env bash
# Activation checkpointing: activation memory per rank and step time for each policy, as ratios to
# no checkpointing, on the debug model at seq_len 1024 and on bench M (bench_train). The memory is
# the trainer's own accounting (the activations category: slots, shared buffers, scratch); the
# step time is the median of the logged steps after the first, so the ratio is the recompute
# overhead (noisy on a shared machine: run twice). The synthetic dataset, as the other benches: the
# figures do not depend on the tokens, and a fresh clone has no prepared corpus (`make run` makes it).
#
#   bench/ac_memory.sh [steps]      (default 4)
set -u
cd "$(dirname "$0")/.."
steps=${1:-4}
bin=build/ctitan
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
policies=("none:" "selective-op:--activation_checkpoint.selective true"
          "elementwise:--activation_checkpoint.selective true --activation_checkpoint.selective_ac_option elementwise"
          "every-2nd:--activation_checkpoint.selective true --activation_checkpoint.selective_ac_option 2"
          "full:--activation_checkpoint.mode full")

# median of the step times (seconds) in a metrics file, steps 2..
median_step() { grep -o '"step_seconds": [0-9.]*' "$1" | tail -n +2 | awk '{print $2}' | sort -g |
                awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
act_mib() { grep -o '"activations": [0-9.]*' "$1" | tail -1 | awk '{print $2}'; }

echo "debug model, seq_len 1024, micro-batch 2, $steps steps, $OMP_NUM_THREADS threads"
base_mem=""; base_t=""
for p in "${policies[@]}"; do
  name=${p%%:*}; flags=${p#*:}
  # shellcheck disable=SC2086
  $bin train --config configs/llama3_debug.toml --training.dataset synthetic --model.tokenizer_path "" \
      --training.seq_len 1024 --micro_batch_size 2 \
      --training.steps "$steps" --validation.enable false --metrics.log_freq 1 --job.dump_folder "$tmp/$name" \
      $flags > "$tmp/$name.log" 2>&1 || { echo "  $name: failed: $(tail -1 "$tmp/$name.log")"; continue; }
  mem=$(act_mib "$tmp/$name/metrics.jsonl"); t=$(median_step "$tmp/$name/metrics.jsonl")
  [ -z "$base_mem" ] && { base_mem=$mem; base_t=$t; }
  awk -v n="$name" -v m="$mem" -v t="$t" -v bm="$base_mem" -v bt="$base_t" 'BEGIN {
      printf "  %-13s activations %8.1f MiB  ratio %.2f   step %.3f s  ratio %.2f\n", n, m, m / bm, t, t / bt }'
done

echo "bench M (bench_train), $steps steps"
base_mem=""; base_t=""
for p in "${policies[@]}"; do
  name=${p%%:*}; flags=${p#*:}
  args=()
  for f in $flags; do
    case $f in --*) key=${f#--} ;; *) args+=("$key=$f") ;; esac
  done
  out=$(build/bench/bench_train M "$steps" "${args[@]}" 2>&1) || { echo "  $name: failed"; continue; }
  mem=$(echo "$out" | grep -o 'activation memory [0-9.]*' | awk '{print $3}')
  t=$(echo "$out" | grep -o 'step [0-9.]* ms mean' | awk '{print $2 / 1000}')
  [ -z "$base_mem" ] && { base_mem=$mem; base_t=$t; }
  awk -v n="$name" -v m="$mem" -v t="$t" -v bm="$base_mem" -v bt="$base_t" 'BEGIN {
      printf "  %-13s activations %8.1f MiB  ratio %.2f   step %.3f s  ratio %.2f\n", n, m, m / bm, t, t / bt }'
done
echo "(the seed's claim for selective checkpointing: about -70% activation memory)"
