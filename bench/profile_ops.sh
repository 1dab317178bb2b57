#!/usr/bin/env bash
# Where a step goes, per operation: trains bench S's (or M's) model with profiling on and sums
# rank 0's recorded spans by name over one profiled step (Chrome trace, core/trace.h). Spans nest
# (a block's span holds its operations'), so the table lists the leaf operations' names as they
# appear, with their count, their total milliseconds and their share of the profiled step.
#
#   bench/profile_ops.sh [S|M] [--extra ctitan flags ...]   e.g. bench/profile_ops.sh S --mixed_precision bf16
set -u
cd "$(dirname "$0")/.."
bench=${1:-S}
shift $(($# ? 1 : 0))
case "$bench" in
S) model=(--model.n_layers 4 --model.dim 256 --model.n_heads 4 --model.n_kv_heads 4 --model.ffn_hidden_dim 768
          --model.vocab_size 8192 --micro_batch_size 8 --training.seq_len 256) ;;
M) model=(--model.n_layers 12 --model.dim 768 --model.n_heads 12 --model.n_kv_heads 12 --model.ffn_hidden_dim 2048
          --model.vocab_size 32768 --micro_batch_size 4 --training.seq_len 512) ;;
*) echo "profile_ops.sh: benchmark '$bench' is not S or M" >&2; exit 1 ;;
esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build/ctitan train --config configs/llama3_debug.toml --training.dataset synthetic --model.tokenizer_path "" \
  "${model[@]}" --training.steps 4 --profiling.enable_profiling true --profiling.profile_freq 4 \
  --job.dump_folder "$out" --checkpoint.enable false --validation.enable false "$@" > "$out/train.log" 2>&1 ||
  { tail -5 "$out/train.log" >&2; exit 1; }
trace=$(ls "$out"/profile_traces/iteration_*/rank0_trace.json 2>/dev/null | tail -1)
[ -n "$trace" ] || { echo "profile_ops.sh: no trace was written" >&2; exit 1; }
grep 'precision:' "$out/train.log" | head -1
# one event per line: "name": "...", ... "dur": N (microseconds)
tr '{' '\n' < "$trace" | sed -n 's/.*"name": *"\([^"]*\)".*"dur": *\([0-9.]*\).*/\1 \2/p' |
  awk '{n[$1]++; t[$1] += $2} $1 == "step" {step += $2}
       END {for (k in t) if (k != "step") printf "%-44s %4d %9.1f ms %6.1f%%\n", k, n[k], t[k] / 1e3, step ? 100 * t[k] / step : 0
            printf "%-44s %4d %9.1f ms\n", "step", 1, step / 1e3}' | sort -k3 -n -r
