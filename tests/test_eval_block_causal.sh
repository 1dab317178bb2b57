#!/usr/bin/env bash
# `ctitan eval` uses the attention mask and RoPE positions a model was trained with: a run with
# model.attn_mask_type block_causal and model.rope_positions document on a corpus of short
# documents records both in its model file and its step folder; eval of either gives the loss the
# trainer's own validation printed for the same step (same windows: --batch = the global batch,
# --steps = validation.steps), and says which mask it used. The same weights through a Hugging
# Face folder (which carries no mask: causal, sequence positions) evaluate to a different loss.
# A model file whose recorded mask is malformed is refused in one line naming the key.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL eval_block_causal: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# 600 documents of 3-32 letters: about 11 of them in each 64-token window.
awk 'BEGIN { srand(3); for (i = 0; i < 600; i++) { n = 3 + int(rand() * 30); s = "";
             for (j = 0; j < n; j++) s = s sprintf("%c", 97 + int(rand() * 8)); printf "{\"text\": \"%s\"}\n", s } }' \
  >"$tmp/docs.jsonl"
tok=tests/fixtures/data/bytes.tiktoken
$bin data prepare --input "$tmp/docs.jsonl" --tokenizer $tok --out "$tmp/shards" --quiet >"$tmp/p.log" 2>&1 ||
  fail prepare "$(tail -2 "$tmp/p.log")"

run=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 258
     --model.ffn_hidden_dim 72 --model.rope_theta 10 --training.seq_len 64 --training.dataset "$tmp/shards"
     --model.tokenizer_path $tok --metrics.peak_tflops 1 --micro_batch_size 2 --training.steps 20
     --optimizer.lr 1e-2 --model.attn_mask_type block_causal --model.rope_positions document
     --validation.enable true --validation.freq 20 --validation.steps 3
     --checkpoint.enable true --checkpoint.interval 20 --checkpoint.keep_latest_k 0)
if $bin train "${run[@]}" --job.dump_folder "$tmp/r" >"$tmp/r.log" 2>&1 && [ -f "$tmp/r/model.safetensors" ] &&
   [ -f "$tmp/r/checkpoint/step-20/manifest.toml" ]; then
  pass block_causal_run_saves_model_and_step
else
  fail block_causal_run_saves_model_and_step "$(tail -3 "$tmp/r.log")"
fi
M=$tmp/r/model.safetensors S=$tmp/r/checkpoint/step-20
val=$(grep '"step": *20' "$tmp/r/metrics.jsonl" | grep -o '"val_loss": *[0-9.]*' | awk -F: '{gsub(/ /, "", $2); print $2}')

ev=(--data "$tmp/shards" --split val --seq_len 64 --batch 2 --steps 3)
$bin eval --model "$M" "${ev[@]}" >"$tmp/em.log" 2>&1
lm=$(awk '/^loss /{print $2}' "$tmp/em.log")
if [ -n "$val" ] && [ "$lm" = "$val" ]; then pass eval_equals_validation
else fail eval_equals_validation "eval [$lm] validation [$val]: $(tail -2 "$tmp/em.log")"; fi
if grep -q "attention: block_causal (documents end at EOS id 257), RoPE positions: document" "$tmp/em.log"; then
  pass eval_says_its_mask
else
  fail eval_says_its_mask "$(cat "$tmp/em.log")"
fi
ls_=$($bin eval --model "$S" "${ev[@]}" 2>&1 | awk '/^loss /{print $2}')
if [ -n "$ls_" ] && [ "$ls_" = "$val" ]; then pass eval_step_folder_equals_validation
else fail eval_step_folder_equals_validation "step folder [$ls_] validation [$val]"; fi

# The same weights without the record (a Hugging Face round trip): causal, and another loss.
$bin convert --to hf --model "$M" --out "$tmp/hf" >"$tmp/c1.log" 2>&1 &&
  $bin convert --from hf --model "$tmp/hf" --out "$tmp/back.safetensors" >"$tmp/c2.log" 2>&1
$bin eval --model "$tmp/back.safetensors" "${ev[@]}" >"$tmp/ec.log" 2>&1
lc=$(awk '/^loss /{print $2}' "$tmp/ec.log")
if [ -n "$lc" ] && [ -n "$lm" ] && [ "$lc" != "$lm" ] && ! grep -q "^attention:" "$tmp/ec.log"; then
  pass causal_eval_differs
else
  fail causal_eval_differs "causal [$lc] block_causal [$lm]: $(tail -2 "$tmp/c2.log" "$tmp/ec.log")"
fi

# A malformed record: one line naming the key (same length, so the header stays valid).
sed 's/"attn_mask_type":"block_causal"/"attn_mask_type":"block_causa!"/' "$M" >"$tmp/bad.safetensors"
out=$($bin eval --model "$tmp/bad.safetensors" "${ev[@]}" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(echo "$out" | grep -c .)" -eq 1 ] && echo "$out" | grep -q "attn_mask_type"; then
  pass malformed_mask_refused
else
  fail malformed_mask_refused "rc $rc: $out"
fi
