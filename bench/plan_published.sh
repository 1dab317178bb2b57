#!/usr/bin/env bash
# The planner against published runs: each run's layout evaluated with `ctitan plan --layout`,
# its predicted tokens/s per GPU beside the published figure, the ratio, and the relative effects
# (compile, float8, 8 -> 128 GPUs, async tp) beside the published ones. Prints markdown tables that
# docs/planner.md quotes. Only runs the planner (no training): a few seconds.
#
# The runs: TorchTitan's docs/performance.md, Llama 3.1 8B and 70B on Meta's Grand Teton H100s
# (profiles/h100_hbm2e_500w.toml), FSDP, sequence 8192, local batch 2, TorchTitan's per-op
# selective checkpointing, bf16 (tables 1 and 3); and table 2, the 8B with context parallel on 8
# GPUs, local batch 1, full checkpointing, compile and float8: FSDP 8 at sequence 32768, FSDP 4 x
# CP 2 at 65536, FSDP 2 x CP 4 at 131072, CP 8 at 262144 (the sequence grows with cp); and table
# 4, the 70B on 256 GPUs, FSDP 32 x TP 8, local batch 16, full checkpointing, compile and float8,
# without and with async tensor parallel.
#   BUILD=build bash bench/plan_published.sh [extra plan options, e.g. --gpu h100_sxm; --stack ctitan]
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "plan_published: $bin not built (make)"; exit 1; }
gpu=h100_hbm2e_500w stack=torchtitan
extra=("$@")

# name | model | gpus | layout | seq | local batch | ac | flags | published tok/s per GPU
runs=(
  "8 GPUs, bf16|8b|8|fsdp8|8192|2|op||5762"
  "8 GPUs, compile|8b|8|fsdp8|8192|2|op|--compile|6667"
  "8 GPUs, compile + float8|8b|8|fsdp8|8192|2|op|--compile --float8|8532"
  "128 GPUs, bf16|8b|128|fsdp128|8192|2|op||5605"
  "128 GPUs, compile|8b|128|fsdp128|8192|2|op|--compile|6514"
  "128 GPUs, compile + float8|8b|128|fsdp128|8192|2|op|--compile --float8|8380"
  "8 GPUs, seq 32768, fsdp 8, full AC, compile + float8|8b|8|fsdp8|32768|1|full|--compile --float8|3890"
  "8 GPUs, seq 65536, fsdp 4 x cp 2, full AC, compile + float8|8b|8|fsdp4,cp2|65536|1|full|--compile --float8|2540"
  "8 GPUs, seq 131072, fsdp 2 x cp 4, full AC, compile + float8|8b|8|fsdp2,cp4|131072|1|full|--compile --float8|1071"
  "8 GPUs, seq 262144, cp 8, full AC, compile + float8|8b|8|cp8|262144|1|full|--compile --float8|548"
  "70B, 256 GPUs, fsdp 32 x tp 8, full AC, compile + float8|70b|256|fsdp32,tp8|8192|16|full|--compile --float8 --async_tp off|829"
  "70B, 256 GPUs, fsdp 32 x tp 8, full AC, compile + float8, async tp|70b|256|fsdp32,tp8|8192|16|full|--compile --float8|876"
)

declare -A pred pub
echo "| run | published tok/s/GPU | predicted | predicted / published | predicted GiB per GPU |"
echo "| --- | ---: | ---: | ---: | ---: |"
for row in "${runs[@]}"; do
  IFS='|' read -r name model gpus layout seq local ac flags published <<<"$row"
  # shellcheck disable=SC2086  # flags is a word list
  out=$("$bin" plan --model "$model" --gpus "$gpus" --gpu "$gpu" --stack "$stack" --seq_len "$seq" --layout "$layout" --local_batch "$local" \
        --ac "$ac" $flags "${extra[@]}" 2>&1)
  tps=$(printf '%s\n' "$out" | sed -n 's/^throughput: \([0-9]*\) tokens\/s per device.*/\1/p')
  fits=$(printf '%s\n' "$out" | grep -q "DOES NOT FIT" && echo " (does not fit)" || echo "")
  gib=$(printf '%s\n' "$out" | sed -n 's/^memory per device: \([0-9.]*\) GiB.*/\1/p')
  if [ -z "$tps" ]; then echo "| $name | $published | error: $(printf '%s' "$out" | tail -1) | | |"; continue; fi
  pred[$name]=$tps pub[$name]=$published
  awk -v n="$name" -v p="$tps" -v q="$published" -v f="$fits" -v g="$gib" \
    'BEGIN { printf "| %s | %d | %d%s | %.2f | %.1f |\n", n, q, p, f, p / q, g }'
done

echo
echo "| effect | published | predicted | difference (points) |"
echo "| --- | ---: | ---: | ---: |"
effect() {  # NAME NUMERATOR-RUN DENOMINATOR-RUN
  local a=${pred[$2]:-} b=${pred[$3]:-}
  [ -n "$a" ] && [ -n "$b" ] || { echo "| $1 | | (missing run) | |"; return; }
  awk -v n="$1" -v pa="${pub[$2]}" -v pb="${pub[$3]}" -v qa="$a" -v qb="$b" \
    'BEGIN { x = pa / pb; y = qa / qb; printf "| %s | %.3f | %.3f | %+.1f |\n", n, x, y, 100 * (y - x) }'
}
effect "compile / bf16, 8 GPUs" "8 GPUs, compile" "8 GPUs, bf16"
effect "compile + float8 / compile, 8 GPUs" "8 GPUs, compile + float8" "8 GPUs, compile"
effect "compile / bf16, 128 GPUs" "128 GPUs, compile" "128 GPUs, bf16"
effect "compile + float8 / compile, 128 GPUs" "128 GPUs, compile + float8" "128 GPUs, compile"
effect "128 / 8 GPUs, bf16" "128 GPUs, bf16" "8 GPUs, bf16"
effect "128 / 8 GPUs, compile" "128 GPUs, compile" "8 GPUs, compile"
effect "128 / 8 GPUs, compile + float8" "128 GPUs, compile + float8" "8 GPUs, compile + float8"
effect "async tp, 70B on 256 GPUs" "70B, 256 GPUs, fsdp 32 x tp 8, full AC, compile + float8, async tp" "70B, 256 GPUs, fsdp 32 x tp 8, full AC, compile + float8"
