#!/usr/bin/env bash
# TorchTitan's Llama 3 configs (tests/fixtures/torchtitan/, unchanged) run as they are.
# - debug_model.toml trains 2 steps here. Overrides: training.dataset synthetic (TorchTitan's
#   c4_test is not on this machine), training.steps 2, a dump folder, metrics.peak_tflops 1 (no
#   peak measured at start-up); the model, batch and sequence are the file's.
# - llama3_8b.toml on one process, llama3_70b.toml and llama3_405b.toml on the 8 ranks their
#   tensor_parallel_degree 8 needs, are refused for memory, with every other setting honoured
#   (job.print_config shows the effective configuration). Override: training.dataset synthetic
#   (their c4 is a TorchTitan download, refused on its own before the memory is sized).
# Each prints the warning block once (by one rank), listing what ctitan does not act on.
# A file with contradictions stops with every one of them, one line each, and nothing else.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL torchtitan_configs: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tt=tests/fixtures/torchtitan
asroot=""
[ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
count() { grep -c -- "$1" "$2"; }
# has NAME FILE PATTERN...: every pattern (grep -E) is in FILE.
has() {
  local name=$1 file=$2; shift 2
  for p in "$@"; do
    grep -qE -- "$p" "$file" || { fail "$name" "no line matches '$p'"; return 1; }
  done
  pass "$name"
}
# one_block NAME ERRFILE KEY...: exactly one warning block, naming each key.
one_block() {
  local name=$1 err=$2; shift 2
  if [ "$(count '^warning: ' "$err")" != 1 ]; then fail "$name" "$(count '^warning: ' "$err") warning blocks"; return; fi
  has "$name" "$err" "$@"
}

# ---- debug_model.toml trains
OMP_NUM_THREADS=2 timeout 280 "$bin" train --config $tt/debug_model.toml --training.dataset synthetic \
  --training.steps 2 --metrics.peak_tflops 1 --job.dump_folder "$tmp/debug" >"$tmp/debug.out" 2>"$tmp/debug.err"
rc=$?
if [ $rc -eq 0 ] && [ -f "$tmp/debug/model.safetensors" ] && [ "$(count '^step ' "$tmp/debug.out")" = 2 ] &&
   ! grep -q '^ctitan train:' "$tmp/debug.err"; then
  pass torchtitan_debug_model_trains
else
  fail torchtitan_debug_model_trains "rc $rc: $(grep -v '^ ' "$tmp/debug.err" | tail -2)"
fi
has torchtitan_debug_model_as_written "$tmp/debug.out" "debugmodel: " "batch 8 x 2048 x accum 1 per rank"
one_block torchtitan_debug_model_warns_once "$tmp/debug.err" '^  metrics.disable_color_printing = false' \
  '^  model.hf_assets_path = "./tests/assets/tokenizer"' '^  training.mixed_precision_param \(not given\)' \
  '^warning: 3 settings are not acted on'

# ---- the big ones: refused for memory, everything else taken as written
# refused NAME RANKS FILE: runs FILE on RANKS processes with job.print_config, expects the memory refusal.
refused() {
  local name=$1 ranks=$2 file=$3 start rc took
  start=$(date +%s)
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=1 timeout 120 "$bin" train --config "$file" --job.print_config true \
      --training.dataset synthetic --job.dump_folder "$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err"
  else
    OMP_NUM_THREADS=1 timeout 120 mpirun -np "$ranks" $asroot --oversubscribe --bind-to none -x OMP_NUM_THREADS \
      "$bin" train --config "$file" --job.print_config true --training.dataset synthetic \
      --job.dump_folder "$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err"
  fi
  rc=$?
  took=$(( $(date +%s) - start ))
  local said
  said=$(grep '^ctitan train: ' "$tmp/$name.err")
  if [ $rc -ne 0 ] && [ "$(echo "$said" | grep -c .)" = 1 ] && [ "$took" -lt 60 ] &&
     echo "$said" | grep -qE 'needs about [0-9.]+ GiB per rank .* this machine has [0-9.]+ GiB available per rank'; then
    pass "${name}_refused_for_memory"
  else
    fail "${name}_refused_for_memory" "rc $rc after ${took}s: $said"
  fi
}

refused torchtitan_8b 1 $tt/llama3_8b.toml
has torchtitan_8b_honoured "$tmp/torchtitan_8b.out" '^flavor = "8B"' '^seq_len = 8192' '^micro_batch_size = 1' \
  '^mode = "selective"' '^selective_ac_option = "op"' '^enable_profiling = true' '^enable_tensorboard = true' \
  '^warmup_steps = 200' '^components = \["model", "loss"\]' '^filter_fqns = \["output"\]'
one_block torchtitan_8b_warns_once "$tmp/torchtitan_8b.err" '^  model.hf_assets_path = ' \
  '^  training.mixed_precision_param \(not given\)' '^warning: 2 settings'

refused torchtitan_70b 8 $tt/llama3_70b.toml
has torchtitan_70b_honoured "$tmp/torchtitan_70b.out" '^flavor = "70B"' '^compute_parallel_degree = 8' \
  '^micro_batch_size = 8' '^mode = "full"' '^lr = 0.00015'
one_block torchtitan_70b_warns_once "$tmp/torchtitan_70b.err" '^  model.hf_assets_path = ' '^warning: 2 settings'

refused torchtitan_405b 8 $tt/llama3_405b.toml
has torchtitan_405b_honoured "$tmp/torchtitan_405b.out" '^flavor = "405B"' '^converters = \["float8"\]' \
  '^float8.enable = true' '^compute_parallel_degree = 8' '^enable_async_comm = true' '^mode = "full"'
awk '/^\[compile\]/ { on = 1; next } /^\[/ { on = 0 } on && /^enable = true/ { found = 1 } END { exit !found }' \
  "$tmp/torchtitan_405b.out" && pass torchtitan_405b_compiles || fail torchtitan_405b_compiles "compile.enable is not true"
one_block torchtitan_405b_warns_once "$tmp/torchtitan_405b.err" '^  model.hf_assets_path = ' \
  '^  quantize.linear.float8.enable_fsdp_float8_all_gather = true' \
  '^  quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp = true' '^warning: 4 settings'

# ---- contradictions: all of them, at once, and nothing runs
sed -e 's/^mode = "selective".*/mode = "full"\nselective = true/' -e 's/^# converters = \["float8"\]/converters = ["float8", "mx"]/' \
  $tt/debug_model.toml >"$tmp/contradicts.toml"
timeout 60 "$bin" train --config "$tmp/contradicts.toml" --training.global_batch_size 12 \
  --job.dump_folder "$tmp/contradicts" >"$tmp/c.out" 2>"$tmp/c.err"
rc=$?
if [ $rc -eq 2 ] && [ "$(count '^ctitan train: ' "$tmp/c.err")" = 3 ] && [ ! -e "$tmp/contradicts" ] &&
   grep -q '^ctitan train: activation_checkpoint.selective = true conflicts with activation_checkpoint.mode = full$' "$tmp/c.err" &&
   grep -q '^ctitan train: model.converters: float8 and mx exclude each other' "$tmp/c.err" &&
   grep -q '^ctitan train: training.global_batch_size 12 is not a multiple of micro_batch_size (training.local_batch_size) 8 x data-parallel degree 1 = 8 sequences' "$tmp/c.err"; then
  pass torchtitan_contradictions_reported_together
else
  fail torchtitan_contradictions_reported_together "rc $rc: $(grep '^ctitan' "$tmp/c.err" | head -4)"
fi
# The same under mpirun: the block and the lines come once, from one rank.
OMP_NUM_THREADS=1 timeout 60 mpirun -np 2 $asroot --oversubscribe --bind-to none -x OMP_NUM_THREADS "$bin" train \
  --config "$tmp/contradicts.toml" --job.dump_folder "$tmp/contradicts" >"$tmp/c2.out" 2>"$tmp/c2.err"
if [ "$(count '^ctitan train: ' "$tmp/c2.err")" = 2 ] && [ "$(count '^warning: ' "$tmp/c2.err")" = 1 ]; then
  pass torchtitan_contradictions_once_under_mpirun
else
  fail torchtitan_contradictions_once_under_mpirun "$(grep -c '^ctitan train: ' "$tmp/c2.err") error lines, $(count '^warning: ' "$tmp/c2.err") blocks"
fi
