#!/usr/bin/env bash
# The planner against this machine: for each layout below, `ctitan plan --layout`
# predicts the per-rank memory and the step time on profiles/this_machine.toml, writes the
# configuration (--emit-config), and `ctitan train` runs exactly that file; the table prints
# predicted / measured for both.
#   memory: the trainer's peak per category on rank 0 (metrics.jsonl memory_peak_mib), summed,
#           against the planner's rank with the most (the same rank here: rank 0 holds the
#           embedding and the most pipeline micro-batches in flight);
#   time:   the median step_seconds of steps 3.. (the first ones warm up).
# The issue asks for memory within 10% and time within 25%. Time depends on the machine's load:
# run it on a quiet machine. About 10 minutes on 2 cores (STEPS=8; M layouts use 4 steps).
#   bash bench/plan_vs_measured.sh            (BUILD=build, PROFILE=this_machine)
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
profile=${PROFILE:-this_machine}
steps=${STEPS:-8}
[ -x "$bin" ] || { echo "plan_vs_measured: $bin not built (make)"; exit 1; }
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

debug=(--config configs/llama3_debug.toml --seq_len 256)
# Bench M (bench/bench_train.c): 12 layers, dim 768, 12 heads, FFN 2048, vocab 32768, seq 512.
cat >"$tmp/m.toml" <<'EOF'
[model]
flavor = "debugmodel"
dim = 768
n_layers = 12
n_heads = 12
n_kv_heads = 12
ffn_hidden_dim = 2048
vocab_size = 32768
[training]
seq_len = 512
dataset = "synthetic"
EOF
bench_m=(--config "$tmp/m.toml")

# name | model | ranks | plan arguments
cases=(
  "single|debug|1|--layout single --local_batch 8"
  "fsdp2|debug|2|--layout fsdp2 --local_batch 4"
  "fsdp4|debug|4|--layout fsdp4 --local_batch 2"
  "tp2|debug|2|--layout tp2 --local_batch 8"
  "fsdp2,tp2|debug|4|--layout fsdp2,tp2 --local_batch 4"
  "pp2 1f1b|debug|2|--layout pp2 --local_batch 8 --micro_batch 2 --schedule 1f1b"
  "pp2 interleaved|debug|2|--layout pp2 --local_batch 8 --micro_batch 2 --schedule interleaved_1f1b"
  "pp2 zbv|debug|2|--layout pp2 --local_batch 8 --micro_batch 2 --schedule zbv"
  "cp2|debug|2|--layout cp2 --local_batch 8"
  "fsdp2 ac op|debug|2|--layout fsdp2 --local_batch 4 --ac op"
  "fsdp2 ac full|debug|2|--layout fsdp2 --local_batch 4 --ac full"
  "single bf16|debug|1|--layout single --local_batch 8 --precision bf16"
  "fsdp8|debug|8|--layout fsdp8 --local_batch 1"
  "M single|M|1|--layout single --local_batch 4"
  "M fsdp2 ac full|M|2|--layout fsdp2 --local_batch 2 --ac full"
)

printf '%-18s %5s | %9s %9s %6s | %9s %9s %6s\n' layout ranks "mem pred" "measured" ratio "step pred" measured ratio
mem_ok=0 time_ok=0 n=0
for c in "${cases[@]}"; do
  IFS='|' read -r name model ranks args <<<"$c"
  model_args=("${debug[@]}"); n_steps=$steps
  [ "$model" = M ] && { model_args=("${bench_m[@]}"); n_steps=4; }
  cfg=$tmp/case.toml dump=$tmp/run
  # shellcheck disable=SC2086  # $args is the case's words
  if ! "$bin" plan "${model_args[@]}" --gpus "$ranks" --gpu "$profile" $args --steps "$n_steps" \
       --dataset synthetic --emit-config "$cfg" >"$tmp/plan.txt" 2>&1; then
    printf '%-18s %5s | plan failed: %s\n' "$name" "$ranks" "$(tail -1 "$tmp/plan.txt")"; continue
  fi
  pred_mem=$(sed -n 's/^memory per device: \([0-9.]*\) GiB.*/\1/p' "$tmp/plan.txt")
  pred_step=$(sed -n 's/^step: \([0-9.]*\) s.*/\1/p' "$tmp/plan.txt")
  rm -rf "$dump"
  if ! OMP_NUM_THREADS=$(( ranks >= 2 ? 1 : 2 )) timeout 900 mpirun $asroot --oversubscribe --bind-to none -np "$ranks" \
       "$bin" train --config "$cfg" --job.dump_folder "$dump" --metrics.log_freq 1 --metrics.peak_tflops 1 \
       >"$tmp/train.txt" 2>&1; then
    printf '%-18s %5s | train failed: %s\n' "$name" "$ranks" "$(grep -v '^step' "$tmp/train.txt" | tail -1)"; continue
  fi
  meas_mem=$(tail -1 "$dump/metrics.jsonl" | grep -o '"memory_peak_mib": {[^}]*}' | grep -o '[0-9.]*' |
             awk '{s += $1} END {printf "%.6f", s / 1024}')
  meas_step=$(grep -o '"step_seconds": [0-9.]*' "$dump/metrics.jsonl" | tail -n +3 | awk '{print $2}' | sort -g |
              awk '{v[NR] = $1} END {printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  rm_=$(awk -v p="$pred_mem" -v m="$meas_mem" 'BEGIN {printf "%.3f", p / m}')
  rt=$(awk -v p="$pred_step" -v m="$meas_step" 'BEGIN {printf "%.3f", p / m}')
  printf '%-18s %5s | %8.4fG %8.4fG %6s | %8.4fs %8.4fs %6s\n' "$name" "$ranks" "$pred_mem" "$meas_mem" "$rm_" \
    "$pred_step" "$meas_step" "$rt"
  n=$((n + 1))
  awk -v r="$rm_" 'BEGIN {exit !(r >= 0.9 && r <= 1.1)}' && mem_ok=$((mem_ok + 1))
  awk -v r="$rt" 'BEGIN {exit !(r >= 0.75 && r <= 1.25)}' && time_ok=$((time_ok + 1))
done
echo "memory within 10%: $mem_ok of $n layouts; step time within 25%: $time_ok of $n (profile $profile)"
