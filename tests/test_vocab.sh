#!/usr/bin/env bash
# The tokenizer, the data and the model's vocabulary: model.vocab_size 0 takes
# the tokenizer's id count, else the shards' header; a tokenizer or shards with more ids than the
# model are refused with the setting that fixes it; a missing tokenizer is refused for real data;
# validation never scores the training data (a single shard file as the dataset).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL vocab: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
tok=tests/fixtures/data/bytes.tiktoken  # 258 ids
"$bin" data prepare --input tests/fixtures/data/corpus --tokenizer $tok --out "$tmp/shards" --quiet >/dev/null 2>&1 ||
  { echo "FAIL vocab: data prepare failed"; exit 1; }
small=(--model.dim 32 --model.n_layers 1 --model.n_heads 4 --model.n_kv_heads 4 --model.ffn_hidden_dim 48
       --training.seq_len 16 --micro_batch_size 2 --training.steps 1 --metrics.peak_tflops 1)
n=0
run() { n=$((n + 1)); timeout 60 "$bin" train "${small[@]}" --job.dump_folder "$tmp/r$n" "$@" >"$tmp/r$n.out" 2>&1; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
said() { grep -v '^step\|^ranks\|^precision\|^model saved' "$tmp/r$n.out" | head -2; }

if run --training.dataset "$tmp/shards" && grep -q "vocab 258)" "$tmp/r$n.out"; then pass vocab_from_the_shards_header
else fail vocab_from_the_shards_header "$(said)"; fi
if run --training.dataset synthetic --model.tokenizer_path $tok && grep -q "vocab 258)" "$tmp/r$n.out"; then
  pass vocab_from_the_tokenizer
else fail vocab_from_the_tokenizer "$(said)"; fi
if ! run --training.dataset "$tmp/shards" --model.vocab_size 128 &&
   said | grep -q "was made with a vocabulary of 258 ids, more than the model's 128: set model.vocab_size 258"; then
  pass shards_with_more_ids_refused_with_the_fix
else fail shards_with_more_ids_refused_with_the_fix "$(said)"; fi
if ! run --training.dataset synthetic --model.tokenizer_path $tok --model.vocab_size 200 &&
   said | grep -q "has 258 ids, more than the model's vocabulary of 200: set model.vocab_size 258"; then
  pass tokenizer_with_more_ids_refused_with_the_fix
else fail tokenizer_with_more_ids_refused_with_the_fix "$(said)"; fi
if ! run --training.dataset "$tmp/shards" --model.tokenizer_path "$tmp/missing.tiktoken" &&
   said | grep -q "model.tokenizer_path $tmp/missing.tiktoken: No such file"; then
  pass missing_tokenizer_refused_for_real_data
else fail missing_tokenizer_refused_for_real_data "$(said)"; fi
one=$(ls "$tmp"/shards/train_*.bin | head -1)
if ! run --training.dataset "$one" --validation.enable true &&
   said | grep -q "is one shard file, so validation would read the training data"; then
  pass validation_never_reads_the_training_file
else fail validation_never_reads_the_training_file "$(said)"; fi
