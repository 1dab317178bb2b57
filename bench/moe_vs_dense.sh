#!/usr/bin/env bash
# The MoE debug model (configs/llama3_moe_debug.toml: 8 experts of hidden 256, 2 per token)
# beside the dense debug model with the same active parameters (SwiGLU hidden 512 = 2 x 256),
# run in alternation on synthetic tokens: tokens/s and MFU (the step line's, on active FLOPs),
# medians of the last steps of each run, and the ratio MoE / dense. What the ratio measures: the
# router, the permutation of rows by expert and the grouped matmul's smaller products, against
# one dense matmul per layer.
#   bench/moe_vs_dense.sh [rounds=3] [steps=12]      (BUILD=build by default)
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
rounds=${1:-3} steps=${2:-12}
common=(--training.dataset synthetic --training.steps "$steps" --metrics.log_freq 1 --validation.enable false
        --checkpoint.enable false --job.overwrite true --job.dump_folder "${TMPDIR:-/tmp}/ct_moe_vs_dense")
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
run() {  # run CONFIG [flags]: "tokens/s MFU", each the median over the steps after the first third
  local lines
  lines=$("$bin" train --config "$@" "${common[@]}" 2>/dev/null | grep '^step' | tail -n +$((steps / 3 + 1)))
  echo "$(awk '{for (i = 2; i <= NF; i++) if ($i == "tok/s") print $(i-1)}' <<<"$lines" | median)" \
       "$(awk '{for (i = 1; i < NF; i++) if ($i == "MFU") print $(i+1) + 0}' <<<"$lines" | median)"
}
moe_t=() dense_t=() moe_m=() dense_m=()
for ((r = 1; r <= rounds; r++)); do
  read -r t m < <(run configs/llama3_moe_debug.toml); moe_t+=("$t"); moe_m+=("$m")
  read -r t m < <(run configs/llama3_debug.toml --model.ffn_hidden_dim 512); dense_t+=("$t"); dense_m+=("$m")
  echo "round $r: moe ${moe_t[-1]} tokens/s (MFU ${moe_m[-1]}%), dense ${dense_t[-1]} tokens/s (MFU ${dense_m[-1]}%)"
done
of() { printf '%s\n' "$@" | median; }
mt=$(of "${moe_t[@]}") dt=$(of "${dense_t[@]}") mm=$(of "${moe_m[@]}") dm=$(of "${dense_m[@]}")
awk -v mt="$mt" -v dt="$dt" -v mm="$mm" -v dm="$dm" 'BEGIN {
  printf "median: moe %d tokens/s, MFU %.1f%%; dense (same active parameters) %d tokens/s, MFU %.1f%%; moe / dense %.2f\n",
         mt, mm, dt, dm, mt / dt }'
