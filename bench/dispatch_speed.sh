#!/usr/bin/env bash
# The cost of choosing kernels at start-up: the default build (baseline objects, kernel sets
# chosen at run time) against a NATIVE=1 build (everything -march=native), bench_train S and M
# in fp32 and bf16, the two binaries run in alternation (bench/compare_train.sh: medians and
# bests, ratio dispatch / native). Builds build-native/ first when it is missing.
#   bench/dispatch_speed.sh [rounds=5]        (SPECS="S 6;M 3": see compare_train.sh)
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-5}
make -s build/bench/bench_train
make -s NATIVE=1 build-native/bench/bench_train
echo "cpu kernels: $(build/ctitan kernels | grep 'taken at start-up' | awk '{print $1}') (dispatch) vs native"
for precision in fp32 bf16; do
  echo "== $precision (native = old, dispatch = new)"
  bash bench/compare_train.sh build-native/bench/bench_train build/bench/bench_train "$rounds" mixed_precision=$precision
done
