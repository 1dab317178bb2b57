#!/usr/bin/env bash
# Every file reader refuses what is not a regular file, and a file over its size limit, before
# reading: one line on stderr naming the file, a non-zero exit, within seconds.
#   - a FIFO (no writer) as --model (eval, generate), to `data info`, as a config file, a
#     tokenizer, a `data prepare` input, a Hugging Face config.json, a metrics file to plot:
#     opening one for reading used to block forever;
#   - /dev/zero as a tokenizer, a config file, an `encode --input`: used to be read until memory
#     ran out (the commands run under `ulimit -v`, so the old code fails fast instead);
#   - a config file and a tokenizer file over their limits (sparse files, no disk used);
#   - in a checkpoint's step folder, a FIFO or a link to /dev/zero as a rank file (resume and
#     `checkpoint verify` checksummed whatever they were given: blocked, or read without end),
#     and manifest.toml as a folder;
#   - a FIFO or /dev/zero as a pipeline schedule CSV (`pipeline show`, `train`): blocked, or grew
#     memory to gigabytes before a word; a 300 MB sparse config.json; a hardware profile whose
#     efficiency is 1e-320 (subnormal: every planned time came out inf).
# And every writer refuses a FIFO where it writes (opening one for writing blocks until someone
# reads it): a fresh run's metrics.jsonl, run.toml and config.toml (and a folder or a link there),
# the pipeline trace, profiler traces and timeline, memory snapshots, `pipeline show` outputs,
# `plan --emit-config`, `tokenizer train --out` (and /dev/full), and the temporary NAME.tmp of
# the writers that rename into place (`plot`, the Hugging Face export).
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
if [ ! -x "$bin" ]; then echo "SKIP nonregular_files: $bin not built"; exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/fifo"
tok=tests/fixtures/data/bytes.tiktoken
export OMP_NUM_THREADS=1

# The memory cap: `ulimit -v 4000000`, except for a binary built with AddressSanitizer (make test
# SANITIZE=1), whose runtime reserves terabytes of address space at start and could not start
# under it; the runtime's own resident-size cap stands in (the process ends once it holds 4 GB).
if ldd "$bin" 2>/dev/null | grep -q libasan; then
  cap_memory() { export ASAN_OPTIONS="${ASAN_OPTIONS:-}:hard_rss_limit_mb=4000"; }
else
  cap_memory() { ulimit -v 4000000; }
fi

# name, file the message must name, words it must hold, command... The one line is on stderr; with
# BOTH=1, on stdout and stderr together (`checkpoint verify` reports each step folder on stdout).
check() {
  local name=$1 file=$2 word=$3; shift 3
  local err rc
  if [ "${BOTH:-0}" = 1 ]; then err=$( (cap_memory; timeout 20 "$@") 2>&1); rc=$?
  else err=$( (cap_memory; timeout 20 "$@") 2>&1 >/dev/null); rc=$?; fi
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
     [[ "$err" == *"$file"* ]] && [[ "$err" == *"$word"* ]]; then
    echo "PASS $name"
  else
    echo "FAIL $name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out: blocked)'): $(printf '%s' "$err" | head -c 300)"
  fi
}
nr="not a regular file"
check fifo_as_eval_model "$tmp/fifo" "$nr" "$bin" eval --model "$tmp/fifo" --data "$tmp"
check fifo_as_generate_model "$tmp/fifo" "$nr" "$bin" generate --model "$tmp/fifo" --tokenizer $tok --prompt hi
check fifo_to_data_info "$tmp/fifo" "$nr" "$bin" data info "$tmp/fifo"
check fifo_as_tokenizer "$tmp/fifo" "$nr" "$bin" tokenizer encode --tokenizer "$tmp/fifo" --text hi
check fifo_as_config "$tmp/fifo" "$nr" "$bin" train --config "$tmp/fifo"
check fifo_as_prepare_input "$tmp/fifo" "$nr" "$bin" data prepare --input "$tmp/fifo" --tokenizer $tok --out "$tmp/d" --quiet
check fifo_as_encode_input "$tmp/fifo" "$nr" "$bin" tokenizer encode --tokenizer $tok --input "$tmp/fifo"
check dev_zero_as_tokenizer /dev/zero "$nr" "$bin" tokenizer encode --tokenizer /dev/zero --text hi
check dev_zero_as_generate_tokenizer /dev/zero "$nr" "$bin" generate --model "$tmp/none" --tokenizer /dev/zero --prompt hi
check dev_zero_as_config /dev/zero "$nr" "$bin" train --config /dev/zero
check dev_zero_as_encode_input /dev/zero "$nr" "$bin" tokenizer encode --tokenizer $tok --input /dev/zero
check dev_zero_as_prepare_tokenizer /dev/zero "$nr" "$bin" data prepare --input $tok --tokenizer /dev/zero --out "$tmp/d" --quiet
check directory_as_model "$tmp" "$nr" "$bin" eval --model "$tmp" --data "$tmp"
# JSON readers (core/json): a Hugging Face folder whose config.json is a FIFO, and a FIFO as the
# metrics file to plot.
mkdir -p "$tmp/hf" && mkfifo "$tmp/hf/config.json"
check fifo_as_hf_config "$tmp/hf/config.json" "$nr" "$bin" convert --from hf --model "$tmp/hf" --out "$tmp/m.safetensors"
check fifo_to_plot "$tmp/fifo" "$nr" "$bin" plot "$tmp/fifo" --out "$tmp/p.svg"

# Over the size limits: sparse files of 2 GiB (nothing is read; the size is enough).
truncate -s 2G "$tmp/big.toml" "$tmp/big.tiktoken"
check config_over_limit "$tmp/big.toml" "limit" "$bin" train --config "$tmp/big.toml"
check tokenizer_over_limit "$tmp/big.tiktoken" "limit" "$bin" tokenizer encode --tokenizer "$tmp/big.tiktoken" --text hi

# Pipeline schedule CSVs: `pipeline show --schedule_file` and train's
# parallelism.pipeline_schedule_file (checked at start-up, before any rank waits on another).
check fifo_as_schedule_csv "$tmp/fifo" "$nr" "$bin" pipeline show --schedule_file "$tmp/fifo" --pp 2
check dev_zero_as_schedule_csv /dev/zero "$nr" "$bin" pipeline show --schedule_file /dev/zero --pp 2
# train reads it only with pipeline_degree 2 or more, so under mpirun (whose own report of the
# failed rank is left out: the one line is ctitan's).
if command -v mpirun >/dev/null; then
  asroot=(); [ "$(id -u)" = 0 ] && asroot=(--allow-run-as-root)
  out=$(OMP_NUM_THREADS=1 timeout 20 mpirun -np 2 "${asroot[@]}" --oversubscribe --bind-to none -x OMP_NUM_THREADS \
        "$bin" train --training.dataset synthetic --pipeline_schedule_file "$tmp/fifo" \
        --parallelism.pipeline_parallel_degree 2 --model.n_layers 2 --model.dim 64 --model.n_heads 4 \
        --model.n_kv_heads 2 --model.vocab_size 128 --training.seq_len 32 --job.dump_folder "$tmp/pp" 2>&1 >/dev/null)
  rc=$?; mine=$(grep -F "$tmp/fifo" <<<"$out")
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c . <<<"$mine")" -eq 1 ] && [[ "$mine" == *"$nr"* ]]; then
    echo "PASS fifo_as_train_schedule_csv"
  else
    echo "FAIL fifo_as_train_schedule_csv: exit $rc$([ $rc -eq 124 ] && echo ' (timed out: blocked)'): $(head -c 300 <<<"$out")"
  fi
fi

# A Hugging Face config.json of 300 MB (sparse): refused by its size, not read whole.
mkdir -p "$tmp/hfbig" && truncate -s 300M "$tmp/hfbig/config.json"
check hf_config_over_limit "$tmp/hfbig/config.json" "limit" "$bin" convert --from hf --model "$tmp/hfbig" --out "$tmp/m.safetensors"

# A hardware profile whose matmul_efficiency is subnormal: refused naming the field.
sed 's/^matmul_efficiency = .*/matmul_efficiency = 1e-320/' profiles/h100_sxm.toml >"$tmp/tiny_eff.toml"
check subnormal_profile_number "matmul_efficiency" "1e-9" "$bin" plan --model 8b --gpus 8 --gpu "$tmp/tiny_eff.toml"
check fifo_as_profile "$tmp/fifo" "$nr" "$bin" plan --model 8b --gpus 8 --gpu "$tmp/fifo"

# A checkpoint's step folder: one tiny run saves step 10, then each case is a copy of it.
job=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --training.local_batch_size 2 --checkpoint.enable true --checkpoint.interval 10 --training.steps 10
     --checkpoint.last_save_model_only false)
if ! timeout 60 "$bin" train "${job[@]}" --job.dump_folder "$tmp/run" >"$tmp/run.out" 2>&1; then
  echo "FAIL checkpoint_base: $(tail -2 "$tmp/run.out")"
  exit 0
fi
copy() { rm -rf "$tmp/$1"; cp -r "$tmp/run" "$tmp/$1"; echo "$tmp/$1/checkpoint/step-10"; }
s=$(copy rank_fifo); rm "$s/rank-00000.safetensors"; mkfifo "$s/rank-00000.safetensors"
BOTH=1 check fifo_as_rank_file_verify "$s/rank-00000.safetensors" "$nr" "$bin" checkpoint verify "$tmp/rank_fifo/checkpoint"
check fifo_as_rank_file_resume "rank-00000.safetensors" "$nr" "$bin" train "${job[@]}" --training.steps 20 \
  --job.dump_folder "$tmp/rank_fifo"
s=$(copy rank_zero); rm "$s/rank-00000.safetensors"; ln -s /dev/zero "$s/rank-00000.safetensors"
BOTH=1 check dev_zero_as_rank_file_verify "$s/rank-00000.safetensors" "$nr" "$bin" checkpoint verify "$tmp/rank_zero/checkpoint"
check dev_zero_as_rank_file_resume "rank-00000.safetensors" "$nr" "$bin" train "${job[@]}" --training.steps 20 \
  --job.dump_folder "$tmp/rank_zero"
s=$(copy manifest_dir); rm "$s/manifest.toml"; mkdir "$s/manifest.toml"
BOTH=1 check manifest_as_folder_verify "$s/manifest.toml" "directory" "$bin" checkpoint verify "$tmp/manifest_dir/checkpoint"

# The run folder's metrics log, rewritten on resume to drop the steps after the checkpoint.
d=$(copy metrics_fifo); rm "$tmp/metrics_fifo/metrics.jsonl"; mkfifo "$tmp/metrics_fifo/metrics.jsonl"
check fifo_as_metrics_log_resume "$tmp/metrics_fifo/metrics.jsonl" "$nr" "$bin" train "${job[@]}" --training.steps 20 \
  --job.dump_folder "$tmp/metrics_fifo"

# `tokenizer train` inputs (each read whole while it is split).
check fifo_as_tokenizer_train_input "$tmp/fifo" "$nr" "$bin" tokenizer train --input "$tmp/fifo" --vocab-size 300 \
  --out "$tmp/t.tiktoken"
check dev_zero_as_tokenizer_train_input /dev/zero "$nr" "$bin" tokenizer train --input /dev/zero --vocab-size 300 \
  --out "$tmp/t.tiktoken"

# ---- Writers: a FIFO (or a folder) where ctitan writes is refused in one line, never opened for
# writing (that blocks until someone reads it). Each command runs under `timeout`, so a writer
# that blocks fails its case instead of hanging the suite.
small=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
       --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
       --training.local_batch_size 2 --training.steps 3)
# A fresh run's folder holding a FIFO under one of the names the run writes; the run stops at
# start-up with the one line.
for name in metrics.jsonl run.toml config.toml; do
  d="$tmp/w_${name%%.*}"; mkdir -p "$d"; mkfifo "$d/$name"
  check "fifo_as_written_$name" "$d/$name" "$nr" "$bin" train "${small[@]}" --job.dump_folder "$d"
done
d="$tmp/w_dir"; mkdir -p "$d/metrics.jsonl"
check folder_as_written_metrics_log "$d/metrics.jsonl" "directory" "$bin" train "${small[@]}" --job.dump_folder "$d"
# A link under a name the run owns: refused, and the file it points to left as it was.
d="$tmp/w_link"; mkdir -p "$d"; echo keep >"$tmp/outside.txt"; ln -s "$tmp/outside.txt" "$d/run.toml"
check link_as_written_run_toml "$d/run.toml" "symbolic link" "$bin" train "${small[@]}" --job.dump_folder "$d"
[ "$(cat "$tmp/outside.txt")" = keep ] && echo "PASS link_target_left_alone" || echo "FAIL link_target_left_alone: written through"

# Outputs a run writes on the side (traces, the timeline picture, memory snapshots): the run goes
# on and says once that this one could not be written.
warn() {
  local name=$1 file=$2; shift 2
  local err rc
  err=$(timeout 20 "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$file"* ]] && [[ "$err" == *"$nr"* ]]
  then echo "PASS $name"
  else echo "FAIL $name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out: blocked)'): $(printf '%s' "$err" | head -c 300)"; fi
}
side=(--profiling.enable_profiling true --profiling.profile_freq 2 --profiling.enable_memory_snapshot true)
for f in pp.json profile_traces/iteration_2/rank0_trace.json profile_traces/iteration_2/timeline.svg \
         memory_snapshot/rank0.txt; do
  d="$tmp/w_side_$(basename "$f")"; mkdir -p "$d/$(dirname "$f")"; mkfifo "$d/$f"
  warn "fifo_as_written_$(basename "$f")" "$d/$f" "$bin" train "${small[@]}" "${side[@]}" \
    --metrics.pipeline_trace "$d/pp.json" --job.dump_folder "$d"
done

# Files commands write where the user says.
check fifo_as_pipeline_svg "$tmp/fifo" "$nr" "$bin" pipeline show --schedule 1F1B --pp 2 --microbatches 4 --svg "$tmp/fifo"
check fifo_as_pipeline_trace "$tmp/fifo" "$nr" "$bin" pipeline show --schedule 1F1B --pp 2 --microbatches 4 --trace "$tmp/fifo"
check fifo_as_pipeline_csv "$tmp/fifo" "$nr" "$bin" pipeline show --schedule 1F1B --pp 2 --microbatches 4 --csv "$tmp/fifo"
check fifo_as_plan_emit_config "$tmp/fifo" "$nr" "$bin" plan --model 8b --gpus 8 --gpu h100_sxm --seq_len 8192 --emit-config "$tmp/fifo"
check fifo_as_tokenizer_train_out "$tmp/fifo" "$nr" "$bin" tokenizer train --input $tok --vocab-size 300 --out "$tmp/fifo"
check dev_full_as_tokenizer_train_out /dev/full "character device" "$bin" tokenizer train --input $tok --vocab-size 300 \
  --out /dev/full
# Written to NAME.tmp, then renamed: a FIFO under the temporary name is refused too.
mkfifo "$tmp/p.svg.tmp"
check fifo_as_plot_temp "$tmp/p.svg.tmp" "$nr" "$bin" plot "$tmp/run/metrics.jsonl" --out "$tmp/p.svg"
for f in config.json.tmp model.safetensors.tmp; do
  d="$tmp/w_hf_${f%%.*}"; mkdir -p "$d"; mkfifo "$d/$f"
  check "fifo_as_hf_export_$f" "$d/$f" "$nr" "$bin" convert --to hf --model "$tmp/run/model.safetensors" --out "$d"
done
