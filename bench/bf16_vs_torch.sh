#!/usr/bin/env bash
# bench S or M in bf16, ctitan against PyTorch side by side: the two run in alternation, `rounds`
# times, on the same machine in the same sitting, and the medians are compared. PyTorch runs each
# of its setups (bf16 autocast + torch.compile, bf16 autocast alone, and fp32 eager: on a CPU
# without bf16 units PyTorch's own fastest is fp32), and ctitan runs under every cpu kernel set
# this CPU offers (CTITAN_KERNEL_SET), so a machine without AVX-512 BF16 or AMX still shows the
# ratio its sets reach.
#
#   bench/bf16_vs_torch.sh [S|M] [rounds=3]
#     PYTHON (default build/venv/bin/python: `make test-interop` installs torch there),
#     TORCH_SETUPS (default "bf16-compile bf16 fp32"), CTITAN_STEPS / TORCH_STEPS (per run),
#     CTITAN_SETS (default: every set this CPU runs; e.g. "amx" for the start-up choice alone),
#     CTITAN_SETTINGS (key=value settings for ctitan's runs, e.g. "compile.enable=true").
set -u
cd "$(dirname "$0")/.."
bench=${1:-S}
rounds=${2:-3}
py=${PYTHON:-build/venv/bin/python}
torch_bench=../shared/bench/torch_llama_bench.py
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
case "$bench" in
S) dims=(); csteps=${CTITAN_STEPS:-6}; tsteps=${TORCH_STEPS:-6} ;;
M) dims=(--B 4 --T 512 --L 12 --C 768 --NH 12 --V 32768); csteps=${CTITAN_STEPS:-3}; tsteps=${TORCH_STEPS:-3} ;;
*) echo "bf16_vs_torch.sh: benchmark '$bench' is not S or M" >&2; exit 1 ;;
esac
[ -x build/bench/bench_train ] || { echo "bf16_vs_torch.sh: build/bench/bench_train is missing (make build/bench/bench_train)" >&2; exit 1; }
[ -x "$py" ] || { echo "bf16_vs_torch.sh: no python at $py (set PYTHON, or: python3 -m venv build/venv && build/venv/bin/pip install torch)" >&2; exit 1; }
[ -f "$torch_bench" ] || { echo "bf16_vs_torch.sh: $torch_bench is missing" >&2; exit 1; }

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
sets=${CTITAN_SETS:-$(build/ctitan kernels 2>/dev/null | sed -n 's/^  *\([a-z0-9_]*\)  *runs on this CPU.*/\1/p')}
[ -n "$sets" ] || sets=auto
read -r -a setups <<< "${TORCH_SETUPS:-bf16-compile bf16 fp32}"
declare -A got
for ((r = 1; r <= rounds; r++)); do
  for s in $sets; do
    v=$(CTITAN_KERNEL_SET=$s build/bench/bench_train "$bench" "$csteps" mixed_precision=bf16 ${CTITAN_SETTINGS:-} |
        sed -n 's/.*tokens\/s \([0-9]*\) mean.*/\1/p')
    got["ctitan-$s"]+="${v:-0} "
    echo "round $r: ctitan bf16, kernel set $s: ${v:-failed} tokens/s"
  done
  for t in "${setups[@]}"; do
    case "$t" in
    bf16-compile) flags=(--bf16-autocast --compile) ;;
    bf16) flags=(--bf16-autocast) ;;
    fp32) flags=() ;;
    *) echo "bf16_vs_torch.sh: unknown torch setup '$t'" >&2; exit 1 ;;
    esac
    v=$("$py" "$torch_bench" "${dims[@]}" --steps "$tsteps" --warmup 2 --threads "$OMP_NUM_THREADS" "${flags[@]}" 2>&1 |
        sed -n 's/^RESULT.* \([0-9][0-9,]*\) tokens\/s.*/\1/p' | tr -d ,)  # "2,626 tokens/s"
    got["torch-$t"]+="${v:-0} "
    echo "round $r: torch $t: ${v:-failed} tokens/s"
  done
done
best_torch=0 best_name=none
for t in "${setups[@]}"; do
  m=$(printf '%s\n' ${got["torch-$t"]} | median)
  echo "torch $t: median $m tokens/s"
  awk -v m="$m" -v b="$best_torch" 'BEGIN {exit !(m > b)}' && best_torch=$m best_name=$t
done
for s in $sets; do
  m=$(printf '%s\n' ${got["ctitan-$s"]} | median)
  awk -v b="$bench" -v s="$s" -v m="$m" -v t="$best_torch" -v n="$best_name" \
    'BEGIN {printf "bench %s bf16, kernel set %s: median %d tokens/s = %.2f x PyTorch'"'"'s fastest here (%s, %d tokens/s)\n", b, s, m, t ? m / t : 0, n, t}'
done
