#!/usr/bin/env bash
# Subcommands: every one answers --help with its usage (exit 0); an option's
# name may be spelt with '-' or '_' (cli/options.h) and both give the same result, train's
# settings too (core/config.h); generate and eval warn on stderr when they run past the sequence
# length the model was trained at; a file that is not a model (the tokenizer) given as --model is
# refused in one line that says so.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL subcommands: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# ---- --help of every subcommand
helps=("tokenizer" "tokenizer train" "tokenizer encode" "tokenizer decode" "data" "data prepare" "data info"
       "generate" "eval" "pipeline" "pipeline show" "convert" "checkpoint" "checkpoint list" "checkpoint verify" "plot")
for c in "${helps[@]}"; do
  # shellcheck disable=SC2086  # $c is the command's words
  out=$($bin $c --help 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -q "^usage: ctitan $c" <<<"$out"; then pass "help: $c"
  else fail "help: $c" "rc=$rc: $(head -2 <<<"$out")"; fi
done

# ---- one flag style: '-' and '_' are the same, = works too
corpus=tests/fixtures/data/corpus
$bin tokenizer train --input $corpus --vocab-size 300 --out "$tmp/dash.tok" >/dev/null 2>"$tmp/e1"; r1=$?
$bin tokenizer train --input $corpus --vocab_size 300 --out "$tmp/under.tok" >/dev/null 2>"$tmp/e2"; r2=$?
$bin tokenizer train --input=$corpus --vocab_size=300 --out="$tmp/eq.tok" >/dev/null 2>"$tmp/e3"; r3=$?
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ] && cmp -s "$tmp/dash.tok" "$tmp/under.tok" && cmp -s "$tmp/dash.tok" "$tmp/eq.tok"
then pass vocab_size_spellings_identical; else fail vocab_size_spellings_identical "rc $r1 $r2 $r3: $(cat "$tmp/e1" "$tmp/e2" "$tmp/e3")"; fi

one_line_err() {  # name, expected text, command...
  local name=$1 want=$2; shift 2
  local out rc; out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 2 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -qF -- "$want" <<<"$out"; then pass "$name"
  else fail "$name" "rc=$rc: $out"; fi
}
one_line_err unknown_option "unknown option '--bogus'" $bin tokenizer train --bogus 1
one_line_err missing_value "--out: expected a value" $bin tokenizer train --input $corpus --vocab-size 300 --out
one_line_err bad_number "--max-new-tokens: expected an integer" $bin generate --max-new-tokens ten
one_line_err eval_bad_number "--seq-len: expected an integer" $bin eval --seq-len=0

# ---- a tokenizer given as --model: one line naming the file, saying what it is not
tok=tests/fixtures/data/bytes.tiktoken
not_a_model() {  # name, command...
  local name=$1; shift
  local out rc; out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -qF "$tok: not a safetensors model file" <<<"$out" \
     && grep -q "a tokenizer or text file?" <<<"$out" && ! grep -q "too large" <<<"$out"; then pass "$name"
  else fail "$name" "rc=$rc: $out"; fi
}
not_a_model eval_tokenizer_as_model $bin eval --model $tok --data "$tmp/none" --steps 1
not_a_model generate_tokenizer_as_model $bin generate --model $tok --tokenizer $tok --prompt "Hi" --max-new-tokens 2

# ---- the trained-length warnings: a model trained at 16 tokens
$bin data prepare --input $corpus --tokenizer "$tmp/dash.tok" --out "$tmp/shards" --quiet >/dev/null 2>&1
# (train's settings spelt with '-' for '_' too, canonical names and TorchTitan's)
$bin train --model.dim 32 --model.n-layers 2 --model.n_heads 4 --model.n-kv-heads 2 --model.vocab_size 300 \
  --model.ffn-hidden-dim 72 --training.seq-len 16 --training.dataset synthetic --metrics.peak-tflops 1 \
  --training.local-batch-size 2 --parallelism.data-shard-degree 1 --training.steps 1 --job.dump-folder "$tmp/run" \
  >"$tmp/train.log" 2>&1
M=$tmp/run/model.safetensors
if [ -f "$M" ] && grep -q "batch 2 x 16" "$tmp/train.log"; then pass train_settings_with_dashes
else fail train_settings_with_dashes "$(tail -3 "$tmp/train.log")"; fi
err=$($bin generate --model "$M" --tokenizer "$tmp/dash.tok" --prompt "Hi" --max-new-tokens 40 --temperature 0 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && grep -q "warning: .*exceed the sequence length the model was trained at (16)" <<<"$err"; then pass generate_warns_past_trained_length
else fail generate_warns_past_trained_length "rc=$rc: $err"; fi
err=$($bin generate --model "$M" --tokenizer "$tmp/dash.tok" --prompt "Hi" --max_new_tokens 4 --temperature 0 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && ! grep -q "warning" <<<"$err"; then pass generate_quiet_within_trained_length
else fail generate_quiet_within_trained_length "rc=$rc: $err"; fi
err=$($bin eval --model "$M" --data "$tmp/shards" --split train --seq_len 32 --steps 1 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && grep -q "warning: --seq_len 32 exceeds the sequence length the model was trained at (16)" <<<"$err"; then pass eval_warns_past_trained_length
else fail eval_warns_past_trained_length "rc=$rc: $err"; fi
err=$($bin eval --model "$M" --data "$tmp/shards" --split train --seq-len 16 --steps 1 2>&1 >/dev/null); rc=$?
if [ $rc -eq 0 ] && ! grep -q "warning" <<<"$err"; then pass eval_quiet_at_trained_length
else fail eval_quiet_at_trained_length "rc=$rc: $err"; fi
