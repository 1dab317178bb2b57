#!/usr/bin/env bash
# Weak scaling as the planner predicts it: the recommended layout of each reference
# table model (`ctitan plan --tables`, H100 SXM) kept -- tp, pp, schedule, micro-batches, per-rank
# batch, checkpointing, precision -- while the data-parallel degree grows with the device count
# from 8 to 512 (the global batch grows with it). A series starts at the first count where the
# layout exists (70B's pp8 x tp4 needs 32 devices, 405B's pp16 x tp8 128). Prints tokens/s per
# device, its ratio to the series' first count, and each dimension's exposed communication.
# The first two series are TorchTitan's published 8B setting (FSDP, local batch 2, op checkpointing;
# bf16, then compile + float8), the others the tables' recommendations.
# Only runs `ctitan plan --layout` (no training): about a minute.
#   BUILD=build bash bench/plan_scaling.sh        (GPU=h100_sxm)
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
gpu=${GPU:-h100_sxm}
[ -x "$bin" ] || { echo "plan_scaling: $bin not built (make)"; exit 1; }

# name | model | seq | devices per data-parallel rank | layout with D for the data degree | options
series=(
  "8B fsdp (TT)|8b|8192|1|fsdpD|--local_batch 2 --ac op --no_float8"
  "8B fsdp (TT) comp|8b|8192|1|fsdpD|--local_batch 2 --ac op --compile --float8"
  "10B dp,fsdp8|10b|4096|8|dpD,fsdp8|--local_batch 32 --micro_batch 2 --ac op --float8 --compile"
  "10B fsdp|10b|4096|1|fsdpD|--local_batch 32 --micro_batch 2 --ac op --float8 --compile"
  "70B pp8,dp,tp4|70b|8192|32|pp8,dpD,tp4|--local_batch 512 --micro_batch 1 --schedule 1f1b --ac op --float8 --compile"
  "405B pp16,dp,tp8|405b|8192|128|pp16,dpD,tp8|--local_batch 1024 --micro_batch 1 --schedule 1f1b --ac full --float8 --compile"
)
printf '%-18s %5s  %-16s %9s %6s %9s  %s\n' series gpus layout "tok/s/dev" ratio "step s" "exposed communication s (per dimension)"
for s in "${series[@]}"; do
  IFS='|' read -r name model seq per layout opts <<<"$s"
  base=""
  for gpus in 8 16 32 64 128 256 512; do
    (( gpus % per == 0 && gpus >= per )) || continue
    d=$(( gpus / per ))
    # a data degree of 1 is left out of the layout (fsdp1 alone is "single")
    l=$(echo "${layout//D/$d}" | sed -E 's/(^|,)(dp|fsdp)1(,|$)/\1/; s/^,//; s/,$//; s/^$/single/')
    # shellcheck disable=SC2086  # $opts is the series' words
    out=$("$bin" plan --model "$model" --gpus "$gpus" --gpu "$gpu" --seq_len "$seq" --layout "$l" $opts 2>&1)
    tps=$(echo "$out" | sed -n 's/^throughput: \([0-9]*\) tokens.*/\1/p')
    [ -n "$tps" ] || { printf '%-18s %5s  %-16s %s\n' "$name" "$gpus" "$l" "$(echo "$out" | tail -1)"; continue; }
    step=$(echo "$out" | sed -n 's/^step: \([0-9.]*\) s.*/\1/p')
    fits=$(echo "$out" | grep -q 'DOES NOT FIT' && echo " (does not fit)")
    exposed=$(echo "$out" | awk '/communication [0-9.]* s, exposed/ {printf "%s %s  ", $1, $6}')
    [ -z "$base" ] && base=$tps
    printf '%-18s %5s  %-16s %9s %5.1f%% %9s  %s%s\n' "$name" "$gpus" "$l" "$tps" \
      "$(awk -v a="$tps" -v b="$base" 'BEGIN {print 100 * a / b}')" "$step" "$exposed" "$fits"
  done
done
