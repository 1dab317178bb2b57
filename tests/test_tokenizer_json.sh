#!/usr/bin/env bash
# tokenizer.json and the tokenizer record of token shards, end to end through the CLI:
#   - a rank file and the same vocabulary as a tokenizer.json have one hash and give the same ids;
#   - `data prepare` with a tokenizer.json records its hash, BOS and EOS in every shard;
#   - train refuses a tokenizer that is not the data's, eval data that is not the model's, generate
#     a tokenizer that is not the model's (each naming both), validation data and split shards of
#     another tokenizer; a matching run trains and its model file records the tokenizer;
#   - version 1 shards (no record) still load, with a one-line note that they cannot be checked;
#   - a bad tokenizer.json is refused in one line that names the file and the field.
# Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL tokenizer_json: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
F=tests/fixtures/tokenizer
A=tests/fixtures/data/bytes.tiktoken  # byte b is id b; <|begin_of_text|> 256, <|end_of_text|> 257
# B: the same 258 ids with bytes 0x00 and 0x01 swapped: another tokenizer of the same size.
sed -e '1s/ 0$/ 1/' -e '2s/ 1$/ 0/' "$A" >"$tmp/B.tiktoken"
B=$tmp/B.tiktoken
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
hash_of() { "$bin" tokenizer info --tokenizer "$1" 2>/dev/null | awk '/^hash /{print $2}'; }

# ---- one tokenizer, two files -----------------------------------------------------------------
h1=$(hash_of $F/hand.tiktoken); h2=$(hash_of $F/hand_ranks_json); h3=$(hash_of $F/hand_ranks_json/tokenizer.json)
h4=$(hash_of $F/hand_json)
if [ ${#h1} -eq 32 ] && [ "$h1" = "$h2" ] && [ "$h2" = "$h3" ] && [ ${#h4} -eq 32 ] && [ "$h4" != "$h1" ]; then
  pass rank_file_and_its_tokenizer_json_hash_equal
else fail rank_file_and_its_tokenizer_json_hash_equal "rank $h1, json folder $h2, json file $h3, other $h4"; fi
text="the other thing's 12345 eee in the ringing, <|begin_of_text|> tin  thee <|end_of_text|>"
for sp in "" --specials; do
  a=$("$bin" tokenizer encode --tokenizer $F/hand.tiktoken --text "$text" $sp 2>&1)
  b=$("$bin" tokenizer encode --tokenizer $F/hand_ranks_json --text "$text" $sp 2>&1)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "rank_file_and_tokenizer_json_encode_alike${sp:+_specials}"
  else fail "rank_file_and_tokenizer_json_encode_alike${sp:+_specials}" "[$a] vs [$b]"; fi
done
# Hand-worked (tests/test_tokenizer_json.c): "a", <|endoftext|> 266, "b"; --bos adds the config's 266.
out=$("$bin" tokenizer encode --tokenizer $F/hand_json --text "a<|endoftext|>b" --specials --bos 2>&1)
if [ "$out" = "266 97 266 98" ]; then pass encode_specials_and_bos_from_config; else fail encode_specials_and_bos_from_config "$out"; fi
printf '"the"\n"a<|endoftext|>b"\n' >"$tmp/in.jsonl"
out=$("$bin" tokenizer encode --tokenizer $F/hand_json --input "$tmp/in.jsonl" --jsonl --specials 2>&1)
if [ "$out" = "$(printf '257\n97 266 98')" ]; then pass encode_jsonl_line_per_text; else fail encode_jsonl_line_per_text "$out"; fi

out=$("$bin" tokenizer encode --tokenizer $F/hand_pairs.tokenizer.json --text x --eos 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$out" = "ctitan tokenizer encode: $F/hand_pairs.tokenizer.json names no EOS token: give eos_token in the tokenizer_config.json beside it" ]; then
  pass encode_eos_refused_without_config
else fail encode_eos_refused_without_config "rc $rc: $out"; fi

# ---- shards record the tokenizer --------------------------------------------------------------
"$bin" data prepare --input tests/fixtures/data/corpus --tokenizer $F/hand_json --out "$tmp/dj" --quiet >/dev/null 2>&1
info=$("$bin" data info "$tmp/dj/train_000.bin" 2>&1)
if [[ "$info" == *"tokenizer $h4, bos 266, eos 266"* ]]; then pass prepare_records_tokenizer_json
else fail prepare_records_tokenizer_json "$info (want $h4)"; fi
# add_bos_token true: every document starts with BOS ([A], 267) and ends with EOS (266). The first
# document of the corpus is a_fortunes' first fortune; the first shard token is at byte 64.
mkdir "$tmp/bos" && cp $F/hand_json/tokenizer.json "$tmp/bos/" &&
  printf '{"bos_token": "[A]", "eos_token": "<|endoftext|>", "add_bos_token": true}' >"$tmp/bos/tokenizer_config.json"
"$bin" data prepare --input tests/fixtures/data/corpus --tokenizer "$tmp/bos" --out "$tmp/dbos" --val-fraction 0 --quiet >/dev/null 2>&1
first=$(od -An -tu2 -j64 -N2 "$tmp/dbos/train_000.bin" 2>/dev/null | tr -d ' ')
count=$(od -An -tu2 -v -j64 "$tmp/dbos/train_000.bin" 2>/dev/null | tr -s ' ' '\n' | grep -c '^267$')
ends=$(od -An -tu2 -v -j64 "$tmp/dbos/train_000.bin" 2>/dev/null | tr -s ' ' '\n' | grep -c '^266$')
if [ "$first" = 267 ] && [ "$count" = 4 ] && [ "$ends" = 4 ]; then pass prepare_adds_bos_when_config_says
else fail prepare_adds_bos_when_config_says "first token $first, $count BOS and $ends EOS for 4 documents"; fi
out=$("$bin" data prepare --input tests/fixtures/data/corpus --tokenizer $F/hand_pairs.tokenizer.json --out "$tmp/dx" \
      --quiet 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ "$out" == *"names no EOS token"* ]]; then
  pass prepare_refuses_tokenizer_without_eos
else fail prepare_refuses_tokenizer_without_eos "rc $rc: $out"; fi

"$bin" data prepare --input tests/fixtures/data/corpus --tokenizer "$A" --out "$tmp/dA" --val-fraction 0.5 --quiet >/dev/null 2>&1
"$bin" data prepare --input tests/fixtures/data/corpus --tokenizer "$B" --out "$tmp/dB" --val-fraction 0.5 --quiet >/dev/null 2>&1
hA=$(hash_of "$A"); hB=$(hash_of "$B")
small=(--model.dim 32 --model.n_layers 1 --model.n_heads 4 --model.n_kv_heads 4 --model.ffn_hidden_dim 48
       --training.seq_len 8 --micro_batch_size 2 --training.steps 1 --metrics.peak_tflops 1)
n=0
run() { n=$((n + 1)); timeout 60 "$bin" train "${small[@]}" --job.dump_folder "$tmp/r$n" "$@" >"$tmp/r$n.out" 2>&1; }
said() { grep -v '^step\|^ranks\|^precision\|^model saved\|^model \|^kernel' "$tmp/r$n.out" | head -3; }

if ! run --training.dataset "$tmp/dA" --model.tokenizer_path "$B" &&
   said | grep -q "model.tokenizer_path $B (tokenizer $hB, bos 256, eos 257, 258 ids) is not the tokenizer training.dataset $tmp/dA was made with (tokenizer $hA"; then
  pass train_refuses_tokenizer_not_the_datas
else fail train_refuses_tokenizer_not_the_datas "$(said)"; fi
if run --training.dataset "$tmp/dA" --model.tokenizer_path "$A" && [ -s "$tmp/r$n/model.safetensors" ] &&
   ! grep -q "note:" "$tmp/r$n.out"; then
  pass train_accepts_the_datas_tokenizer
else fail train_accepts_the_datas_tokenizer "$(said)"; fi
MA=$tmp/r$n/model.safetensors
if ! run --training.dataset "$tmp/dA" --validation.enable true --validation.dataset "$tmp/dB" &&
   said | grep -q "the validation split of $tmp/dB was made with tokenizer $hB.*the training split of $tmp/dA with tokenizer $hA"; then
  pass train_refuses_validation_data_of_another_tokenizer
else fail train_refuses_validation_data_of_another_tokenizer "$(said)"; fi
mkdir "$tmp/mixed" && cp "$tmp/dA/train_000.bin" "$tmp/mixed/train_000.bin" && cp "$tmp/dB/train_000.bin" "$tmp/mixed/train_001.bin"
if ! run --training.dataset "$tmp/mixed" && said | grep -q "$tmp/mixed/train_001.bin: made with tokenizer $hB.*but $tmp/mixed/train_000.bin with tokenizer $hA"; then
  pass train_refuses_split_mixing_tokenizers
else fail train_refuses_split_mixing_tokenizers "$(said)"; fi

ev() { "$bin" eval --model "$1" --data "$2" --split train --seq_len 8 --batch 2 2>&1; }
out=$(ev "$MA" "$tmp/dB"); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
   [[ "$out" == *"model $MA was trained on data of tokenizer $hA"*"but $tmp/dB (train split) was made with tokenizer $hB"* ]]; then
  pass eval_refuses_data_of_another_tokenizer
else fail eval_refuses_data_of_another_tokenizer "rc $rc: $out"; fi
out=$(ev "$MA" "$tmp/dA"); rc=$?
if [ $rc -eq 0 ] && [[ "$out" == *"loss "* ]] && [[ "$out" != *"note:"* ]]; then pass eval_accepts_the_models_data
else fail eval_accepts_the_models_data "rc $rc: $out"; fi
gen() { "$bin" generate --model "$MA" --tokenizer "$1" --prompt "Hi" --max_new_tokens 2 --temperature 0 2>&1 >/dev/null; }
out=$(gen "$B"); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
   [[ "$out" == *"--tokenizer $B (tokenizer $hB, bos 256, eos 257) is not the one model $MA was trained with (tokenizer $hA"* ]]; then
  pass generate_refuses_another_tokenizer
else fail generate_refuses_another_tokenizer "rc $rc: $out"; fi
out=$(gen "$A"); rc=$?
if [ $rc -eq 0 ] && [[ "$out" != *"note:"* ]]; then pass generate_accepts_the_models_tokenizer
else fail generate_accepts_the_models_tokenizer "rc $rc: $out"; fi

# A model trained on tokenizer.json data, exported to a Hugging Face folder with its tokenizer: the
# tokenizer.json and tokenizer_config.json go as they are (their merges are their own).
if run --training.dataset "$tmp/dj" --model.tokenizer_path $F/hand_json && [ -s "$tmp/r$n/model.safetensors" ] &&
   "$bin" convert --to hf --model "$tmp/r$n/model.safetensors" --out "$tmp/hf" --tokenizer $F/hand_json >/dev/null 2>&1 &&
   cmp -s "$tmp/hf/tokenizer.json" $F/hand_json/tokenizer.json && cmp -s "$tmp/hf/tokenizer_config.json" $F/hand_json/tokenizer_config.json &&
   [ "$(hash_of "$tmp/hf")" = "$h4" ]; then
  pass convert_to_hf_copies_tokenizer_json
else fail convert_to_hf_copies_tokenizer_json "$(said; ls "$tmp/hf" 2>&1 | tr '\n' ' ')"; fi

# ---- version 1 shards: no record, a note ----------------------------------------------------------
mkdir "$tmp/v1" && cp "$tmp/dA"/*.bin "$tmp/v1/"
for f in "$tmp"/v1/*.bin; do
  printf '\001\000\000\000' | dd of="$f" bs=1 seek=8 conv=notrunc status=none
  dd if=/dev/zero of="$f" bs=1 seek=28 count=36 conv=notrunc status=none
done
info=$("$bin" data info "$tmp/v1/train_000.bin" 2>&1)
if [[ "$info" == *"no tokenizer recorded"* ]]; then pass version_1_shard_reads_without_record
else fail version_1_shard_reads_without_record "$info"; fi
if run --training.dataset "$tmp/v1" --model.tokenizer_path "$B" && [ "$(grep -c '^note:' "$tmp/r$n.out")" -eq 1 ] &&
   grep -q "^note: training.dataset $tmp/v1 records no tokenizer .*cannot be checked" "$tmp/r$n.out"; then
  pass train_on_version_1_shards_notes_it
else fail train_on_version_1_shards_notes_it "$(said)"; fi
out=$(ev "$MA" "$tmp/v1"); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'note:' <<<"$out")" -eq 1 ] && [[ "$out" == *"$tmp/v1 records no tokenizer"* ]]; then
  pass eval_on_version_1_shards_notes_it
else fail eval_on_version_1_shards_notes_it "rc $rc: $out"; fi

# ---- bad tokenizer.json: one line, the file and the field -----------------------------------------
bad() {  # name, sed expression, expected words
  mkdir -p "$tmp/$1" && sed -e "$2" $F/hand_json/tokenizer.json >"$tmp/$1/tokenizer.json"
  local err rc
  err=$("$bin" tokenizer encode --tokenizer "$tmp/$1" --text hi 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$tmp/$1/tokenizer.json: $3"* ]]; then
    pass "refused_$1"
  else fail "refused_$1" "rc $rc: $err"; fi
}
bad wrong_model_type 's/"type": "BPE"/"type": "WordPiece"/' 'model.type is "WordPiece"'
bad missing_merges 's/"merges": \[/"merges_": [/' 'model.merges is absent'
bad bad_json 's/"vocab": {/"vocab": {{/' 'bad JSON at byte'
bad unknown_pre_tokenizer 's/"type": "Split"/"type": "Whitespace"/' 'pre_tokenizer.pretokenizers[0].type "Whitespace" is not supported'
