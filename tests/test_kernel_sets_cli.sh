#!/usr/bin/env bash
# The kernel set through build/ctitan: `ctitan kernels` lists the build's sets and marks the one
# taken at start-up; CTITAN_KERNEL_SET picks it (a set the build or the CPU lacks ends the process
# with one line, exit 2); a run's `ranks` line names the set every rank runs, training.kernel_set
# picks it (refused in one line where the CPU lacks it), and two ranks whose start-up choices
# differ (one forced to the lowest set) run the lower one.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
if [ ! -x "$bin" ]; then echo "FAIL kernel_sets_cli: no $bin (make first)"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
export OMP_NUM_THREADS=1
unset CTITAN_KERNEL_SET

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

runnable=$("$bin" kernels --runnable)
lowest=$(echo "$runnable" | head -1) best=$(echo "$runnable" | tail -1)
all=$("$bin" kernels | awk 'NR > 1 { print $1 }')
lacking=$(comm -23 <(echo "$all" | sort) <(echo "$runnable" | sort) | head -1)

if "$bin" kernels | grep -Eq "^  $best +runs on this CPU \(taken at start-up\)$"; then
  pass kernels_lists_the_start_choice
else
  fail kernels_lists_the_start_choice "$("$bin" kernels)"
fi
if CTITAN_KERNEL_SET=$lowest "$bin" kernels | grep -Eq "^  $lowest +runs on this CPU \(taken at start-up\)$"; then
  pass env_picks_the_set
else
  fail env_picks_the_set "$(CTITAN_KERNEL_SET=$lowest "$bin" kernels)"
fi

# One line on stderr, exit status `code`.
expect_error() {  # name, code, expected text, command...
  local name=$1 code=$2 want=$3; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq "$code" ] && [ "$(echo "$out" | grep -c .)" -eq 1 ] && echo "$out" | grep -qF -- "$want"; then
    pass "$name"
  else
    fail "$name" "exit $rc: $out"
  fi
}
expect_error env_unknown_set_refused 2 "ctitan: CTITAN_KERNEL_SET=avx9: this build has no such kernel set (it has" \
  env CTITAN_KERNEL_SET=avx9 "$bin" kernels
if [ -n "$lacking" ]; then
  expect_error env_lacking_set_refused 2 "ctitan: CTITAN_KERNEL_SET=$lacking: this CPU lacks " \
    env CTITAN_KERNEL_SET="$lacking" "$bin" kernels
else
  pass "env_lacking_set_refused (this CPU runs every set: nothing to refuse)"
fi

common=(--model.dim 32 --model.n_layers 1 --model.n_heads 4 --model.vocab_size 64 --model.ffn_hidden_dim 48
        --training.seq_len 16 --training.dataset synthetic --metrics.peak_tflops 1 --micro_batch_size 2
        --training.steps 1)
if "$bin" train "${common[@]}" --job.dump_folder "$tmp/a" >"$tmp/a.log" 2>&1 &&
   grep -Eq "^ranks 1: .*; cpu kernels $best \(the CPU runs up to $best\)$" "$tmp/a.log"; then
  pass ranks_line_names_the_set
else
  fail ranks_line_names_the_set "$(grep -m1 '^ranks' "$tmp/a.log"; tail -1 "$tmp/a.log")"
fi
if "$bin" train "${common[@]}" --training.kernel_set "$lowest" --job.dump_folder "$tmp/b" >"$tmp/b.log" 2>&1 &&
   grep -Eq "^ranks 1: .*; cpu kernels $lowest \(the CPU runs up to $best\)$" "$tmp/b.log"; then
  pass setting_picks_a_lower_set
else
  fail setting_picks_a_lower_set "$(grep -m1 '^ranks' "$tmp/b.log"; tail -1 "$tmp/b.log")"
fi
if [ -n "$lacking" ]; then
  expect_error setting_lacking_set_refused 1 "training.kernel_set $lacking: this CPU lacks " \
    "$bin" train "${common[@]}" --training.kernel_set "$lacking" --job.dump_folder "$tmp/c"
fi
if [ "$all" != native ]; then
  expect_error setting_native_refused_here 1 "training.kernel_set native: this build has no such kernel set" \
    "$bin" train "${common[@]}" --training.kernel_set native --job.dump_folder "$tmp/d"
fi

# Two ranks, rank 0 forced to the lowest set, rank 1 taking its best: both run the lowest.
if mpirun $asroot --oversubscribe -np 1 -x CTITAN_KERNEL_SET="$lowest" "$bin" train "${common[@]}" \
     --parallelism.data_shard_degree 2 --job.dump_folder "$tmp/e" : -np 1 "$bin" train "${common[@]}" \
     --parallelism.data_shard_degree 2 --job.dump_folder "$tmp/e" >"$tmp/e.log" 2>&1 &&
   grep -Eq "^ranks 2: .*; cpu kernels $lowest on every rank \(" "$tmp/e.log"; then
  pass ranks_agree_on_the_lowest_choice
else
  fail ranks_agree_on_the_lowest_choice "$(grep -m1 '^ranks' "$tmp/e.log"; tail -2 "$tmp/e.log")"
fi
