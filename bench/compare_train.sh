#!/usr/bin/env bash
# Side-by-side speed of two builds of bench_train (e.g. before and after a restructure), run in
# alternation on the same machine so drifts in load hit both alike. Prints each run's tokens/s
# and, per benchmark, the ratio new / old of the best and of the median runs.
#   bench/compare_train.sh OLD_BIN NEW_BIN [rounds=3] [key=value ...]   (settings for both, e.g.
#   mixed_precision=bf16); SPECS="S 6;M 3" picks the benchmarks and their steps
set -u
old=$1 new=$2 rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
settings=("$@")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
tps() { "$1" "$2" "$3" "${settings[@]}" | sed -n 's/.*tokens\/s \([0-9]*\) mean.*/\1/p'; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# SPECS: the benchmarks and their step counts, ";"-separated (default "S 6;M 3")
IFS=';' read -r -a specs <<< "${SPECS:-S 6;M 3}"
for spec in "${specs[@]}"; do
  set -- $spec
  o=(); n=()
  for ((r = 0; r < rounds; r++)); do
    o+=("$(tps "$old" "$1" "$2")"); n+=("$(tps "$new" "$1" "$2")")
    echo "benchmark $1 round $((r + 1)): old ${o[-1]} tokens/s, new ${n[-1]} tokens/s"
  done
  ob=$(printf '%s\n' "${o[@]}" | sort -n | tail -1); nb=$(printf '%s\n' "${n[@]}" | sort -n | tail -1)
  om=$(printf '%s\n' "${o[@]}" | median); nm=$(printf '%s\n' "${n[@]}" | median)
  awk -v b="$1" -v ob="$ob" -v nb="$nb" -v om="$om" -v nm="$nm" \
    'BEGIN {printf "benchmark %s: best old %d new %d (new/old %.3f); median old %d new %d (new/old %.3f)\n", b, ob, nb, nb/ob, om, nm, nm/om}'
done
