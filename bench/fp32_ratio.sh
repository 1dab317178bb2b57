#!/usr/bin/env bash
# Benchmark S (or M) in fp32 against the machine's fp32 matmul peak, run after run: the figure
# the project holds it to (at least 0.85), with the spread a shared VM gives it. Runs bench_train
# `runs` times in a row and prints, for each run and then as min / median / max over the runs,
# its three estimators (bench_train.c explains them):
#   ct-paired   each step against ctitan's 2048^3 measured just before it (median of a run)
#   dnnl-paired each step against oneDNN's 2048^3 measured right after it (median of a run)
#   strict      the run's mean step against the best oneDNN 2048^3 rate of the run
# and how many runs of each reached 0.85; then ct/dnnl, ctitan's 2048^3 over oneDNN's (the median
# of the run's rounds: the gap between the two paired columns). Beside them the share of the CPUs'
# time the hypervisor took during the run's paired rounds (steal), and at the end the paired
# ratios of every quiet round of all runs pooled (under 5% steal, bench_train.c): on a VM whose
# host takes a quarter of its CPU time, the rounds the host left alone are the ones that say what
# the code does.
#
#   bench/fp32_ratio.sh [S|M] [runs] [steps] [key=value ...]
#     (defaults: S, 8 runs, 8 steps; M: 3 steps; settings after the steps go to bench_train, e.g.
#     compile.enable=true)
set -u
cd "$(dirname "$0")/.."
bench=${1:-S}
runs=${2:-8}
steps=${3:-$([ "$bench" = M ] && echo 3 || echo 8)}
shift $(($# < 3 ? $# : 3))
settings=("$@")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
bin=build/bench/bench_train
[ -x "$bin" ] || { echo "fp32_ratio.sh: $bin is missing (make $bin)" >&2; exit 1; }
case "$bench" in S | M) ;; *) echo "fp32_ratio.sh: benchmark '$bench' is not S or M" >&2; exit 1 ;; esac

tmp=$(mktemp)
quiet_tmp=$(mktemp)
trap 'rm -f "$tmp" "$quiet_tmp"' EXIT
echo "bench $bench in fp32, $runs runs of $steps steps, $OMP_NUM_THREADS threads${settings[*]:+, ${settings[*]}}"
printf '%4s %10s %11s %12s %8s %8s %6s %6s\n' run "step (ms)" ct-paired dnnl-paired strict ct/dnnl steal quiet
for r in $(seq 1 "$runs"); do
  out=$("$bin" "$bench" "$steps" "${settings[@]}" 2>&1) || { echo "fp32_ratio.sh: bench_train failed:" >&2; echo "$out" >&2; exit 1; }
  step=$(echo "$out" | grep -o 'step [0-9.]* ms mean' | awk '{print $2}')
  ct=$(echo "$out" | grep 'paired with the peak measured before' | grep -o 'ratio [0-9.]* median' | awk '{print $2}')
  dn=$(echo "$out" | grep "paired with oneDNN's sgemm" | grep -o 'ratio [0-9.]* median' | awk '{print $2}')
  st=$(echo "$out" | grep 'mean step against the best oneDNN' | grep -o '): [0-9.]*$' | awk '{print $2}')
  peaks=$(echo "$out" | grep "ctitan's 2048^3 against oneDNN's" | grep -o ': [0-9.]* median' | awk '{print $2}')
  steal_line=$(echo "$out" | grep 'hypervisor steal over the paired rounds')
  steal=$(echo "$steal_line" | grep -o 'rounds: [0-9]*%' | awk '{print $2}')
  nquiet=$(echo "$steal_line" | grep -o 'steal: [0-9]* of' | awk '{print $2}')
  echo "$steal_line" | grep -o '[0-9.]\+/[0-9.]\+' | tr '/' ' ' >>"$quiet_tmp"
  if [ -z "$step" ] || [ -z "$ct" ] || [ -z "$dn" ] || [ -z "$st" ]; then
    echo "fp32_ratio.sh: could not read bench_train's figures (fp32 lines missing?):" >&2
    echo "$out" >&2
    exit 1
  fi
  printf '%4d %10s %11s %12s %8s %8s %6s %6s\n' "$r" "$step" "$ct" "$dn" "$st" "${peaks:--}" "${steal:--}" \
    "${nquiet:--}"
  echo "$ct $dn $st ${peaks:-0}" >>"$tmp"
done

# min / median / max of column c (of file f, default the runs' figures), and how many are >= 0.85
summary() {
  awk -v c="$1" '{print $c}' "${2:-$tmp}" | sort -g | awk '{a[NR] = $1; if ($1 >= 0.85) n++}
    END {m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
         printf "%.2f / %.2f / %.2f, %d of %d at 0.85 or above", a[1], m, a[NR], n, NR}'
}
echo "min / median / max over the runs:"
echo "  ct-paired   $(summary 1)"
echo "  dnnl-paired $(summary 2)"
echo "  strict      $(summary 3)"
echo "  ct/dnnl     $(summary 4 | sed 's/, [0-9]* of [0-9]* at 0.85 or above//')"
if [ -s "$quiet_tmp" ]; then
  echo "quiet rounds of all runs, pooled ($(wc -l <"$quiet_tmp") rounds under 5% steal):"
  echo "  ct-paired   $(summary 1 "$quiet_tmp")"
  echo "  dnnl-paired $(summary 2 "$quiet_tmp")"
else
  echo "quiet rounds of all runs: none (no round under 5% steal, or no /proc/stat)"
fi
