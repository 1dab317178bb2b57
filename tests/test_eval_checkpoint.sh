#!/usr/bin/env bash
# eval, generate and convert --to hf take a checkpoint's step folder as well as a model file: a
# run saved under FSDP 2 x TP 2 (4 ranks) exports its model at the last step and checkpoints the
# same step; every command must give the same numbers (and convert the same bytes) from either.
# A damaged step folder is refused in one line naming the file.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL eval_checkpoint: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
export OMP_NUM_THREADS=1
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

tok=tests/fixtures/data/bytes.tiktoken
$bin data prepare --input tests/fixtures/data/corpus --tokenizer $tok --out "$tmp/shards" --quiet >"$tmp/p.log" 2>&1
run=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 258
     --model.ffn_hidden_dim 72 --training.seq_len 16 --training.dataset "$tmp/shards" --model.tokenizer_path $tok
     --metrics.peak_tflops 1 --micro_batch_size 2 --training.steps 4 --validation.enable false
     --checkpoint.enable true --checkpoint.interval 4 --checkpoint.keep_latest_k 0
     --parallelism.data_shard_degree 2 --parallelism.compute_parallel_degree 2)
if timeout 240 mpirun -np 4 $asroot --oversubscribe --bind-to none -x OMP_NUM_THREADS -x CTITAN_DEVICE \
     -x OMPI_MCA_btl_vader_single_copy_mechanism $bin train "${run[@]}" --job.dump_folder "$tmp/r" >"$tmp/r.log" 2>&1 &&
   [ -f "$tmp/r/model.safetensors" ] && [ -f "$tmp/r/checkpoint/step-4/manifest.toml" ]; then
  pass fsdp2_tp2_run_saves_model_and_step_4
else
  fail fsdp2_tp2_run_saves_model_and_step_4 "$(tail -3 "$tmp/r.log")"
fi
M=$tmp/r/model.safetensors S=$tmp/r/checkpoint/step-4

ev=(--data "$tmp/shards" --split train --seq_len 16 --batch 2 --steps 3)
lm=$($bin eval --model "$M" "${ev[@]}" 2>&1 | awk '/^loss /{print $2, $4}')
ls=$($bin eval --model "$S" "${ev[@]}" 2>&1 | awk '/^loss /{print $2, $4}')
if [ -n "$lm" ] && [ "$lm" = "$ls" ]; then pass eval_step_folder_equals_model_file
else fail eval_step_folder_equals_model_file "step folder [$ls] model file [$lm]"; fi

gen=(--tokenizer $tok --prompt "The" --max_new_tokens 12 --temperature 0.9 --top_k 20 --seed 5)
gm=$($bin generate --model "$M" "${gen[@]}" 2>/dev/null)
gs=$($bin generate --model "$S" "${gen[@]}" 2>/dev/null)
if [ -n "$gm" ] && [ "$gm" = "$gs" ]; then pass generate_step_folder_equals_model_file
else fail generate_step_folder_equals_model_file "[$gs] vs [$gm]"; fi

$bin convert --to hf --model "$M" --out "$tmp/hf_m" >"$tmp/cm.log" 2>&1
$bin convert --to hf --model "$S" --out "$tmp/hf_s" >"$tmp/cs.log" 2>&1
if [ -f "$tmp/hf_m/model.safetensors" ] && cmp -s "$tmp/hf_m/model.safetensors" "$tmp/hf_s/model.safetensors" &&
   cmp -s "$tmp/hf_m/config.json" "$tmp/hf_s/config.json" && ! ls "$tmp"/*.from-checkpoint.* >/dev/null 2>&1; then
  pass convert_step_folder_equals_model_file
else
  fail convert_step_folder_equals_model_file "$(tail -2 "$tmp/cs.log")"
fi

# A rank file cut short: one line naming it, exit non-zero, for each command.
cp -r "$S" "$tmp/bad"
f=$(ls "$tmp/bad" | grep -v -e manifest -e config | head -1)
truncate -s 100 "$tmp/bad/$f"
out=$($bin eval --model "$tmp/bad" "${ev[@]}" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "$f"; then pass eval_damaged_step_folder_one_line
else fail eval_damaged_step_folder_one_line "rc $rc: $out"; fi
out=$($bin convert --to hf --model "$tmp/bad" --out "$tmp/hf_bad" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "$f"; then pass convert_damaged_step_folder_one_line
else fail convert_damaged_step_folder_one_line "rc $rc: $out"; fi
