#!/usr/bin/env bash
# Peak resident memory of a bf16 training run of bench M (layers 12, dim 768, 12 heads, FFN 2048,
# vocab 32768, 4 x 512 tokens, AdamW), ctitan against PyTorch (bf16 autocast, eager: the
# reference bench in ../shared/bench), one after the other on the same threads, and the
# activations ctitan's tracker counts for each checkpointing policy. Peak RSS comes from
# /usr/bin/time -v (the kernel's high-water mark of the whole process). Each figure is also shown
# less the process's baseline -- ctitan's binary and libraries loaded (`ctitan --version`),
# PyTorch imported (`import torch`) -- so the comparison is of what the training itself holds.
#
#   bench/memory_vs_torch.sh [PYTHON]     (PYTHON: an interpreter with torch; default python3)
set -u
cd "$(dirname "$0")/.."
py=${1:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
torch_bench=../shared/bench/torch_llama_bench.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rss_mib() { awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$1"; }

/usr/bin/time -v build/ctitan --version > /dev/null 2> "$tmp/base.ct" || { echo "build/ctitan missing: run make"; exit 1; }
base_ct=$(rss_mib "$tmp/base.ct")
echo "bench M in bf16, 2 steps, $OMP_NUM_THREADS threads; peak RSS in MiB (less the process baseline)"
for p in "none:" "op:activation_checkpoint.mode=selective activation_checkpoint.selective_ac_option=op" \
         "elementwise:activation_checkpoint.mode=selective activation_checkpoint.selective_ac_option=elementwise"; do
  name=${p%%:*}; flags=${p#*:}
  # shellcheck disable=SC2086
  /usr/bin/time -v build/bench/bench_train M 2 mixed_precision=bf16 $flags > "$tmp/ct.out" 2> "$tmp/ct.time" ||
    { echo "  ctitan ($name): failed: $(tail -2 "$tmp/ct.out" "$tmp/ct.time")"; continue; }
  act=$(grep -o 'activation memory [0-9.]*' "$tmp/ct.out" | awk '{print $3}')
  rss=$(rss_mib "$tmp/ct.time")
  printf "  ctitan, ac %-12s peak RSS %6d (%6d)   tracked activations %8.1f MiB\n" "$name" "$rss" $((rss - base_ct)) "$act"
done
if ! "$py" -c 'import torch' 2> /dev/null; then
  echo "  PyTorch: not installed for $py (pip install torch), skipped"
  exit 0
fi
/usr/bin/time -v "$py" -c 'import torch' 2> "$tmp/base.pt"
base_pt=$(rss_mib "$tmp/base.pt")
/usr/bin/time -v "$py" "$torch_bench" --B 4 --T 512 --L 12 --C 768 --NH 12 --V 32768 --H 2048 --steps 2 --warmup 1 \
    --threads "$OMP_NUM_THREADS" --bf16-autocast > "$tmp/pt.out" 2> "$tmp/pt.time" ||
  { echo "  PyTorch: failed: $(tail -2 "$tmp/pt.time")"; exit 1; }
rss=$(rss_mib "$tmp/pt.time")
printf "  PyTorch bf16 autocast      peak RSS %6d (%6d)\n" "$rss" $((rss - base_pt))
