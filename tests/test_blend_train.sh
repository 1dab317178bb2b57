#!/usr/bin/env bash
# A run on a dataset blend (training.dataset "W1 PATH1 W2 PATH2"): metrics.jsonl reports the
# tokens drawn from each dataset (summing to the tokens trained on), and a run resumed from the
# step-2 checkpoint of another ends with that run's loss (the blend's position replayed).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL blend_train: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

tok=tests/fixtures/data/bytes.tiktoken
$bin data prepare --input tests/fixtures/data/corpus --tokenizer $tok --out "$tmp/web" --quiet >/dev/null 2>&1
printf 'A second corpus, of other words entirely.\n%%\nIts documents are short and repetitive, repetitive.\n' >"$tmp/c2.txt"
for i in 1 2 3 4 5 6; do cat "$tmp/c2.txt"; echo "%"; done >"$tmp/code.txt"
$bin data prepare --input "$tmp/code.txt" --tokenizer $tok --out "$tmp/code" --quiet >/dev/null 2>&1
run=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 258
     --model.ffn_hidden_dim 72 --training.seq_len 16 --micro_batch_size 4 --training.steps 4
     --training.dataset "0.7 $tmp/web 0.3 $tmp/code" --model.tokenizer_path $tok --validation.enable false
     --metrics.peak_tflops 1 --metrics.log_freq 1)
$bin train "${run[@]}" --job.dump_folder "$tmp/a" >"$tmp/a.log" 2>&1
last=$(tail -1 "$tmp/a/metrics.jsonl" 2>/dev/null)
web=$(echo "$last" | sed -n 's/.*"data_tokens": {"web": \([0-9]*\), "code": \([0-9]*\)}.*/\1/p')
code=$(echo "$last" | sed -n 's/.*"data_tokens": {"web": \([0-9]*\), "code": \([0-9]*\)}.*/\2/p')
if [ -n "$web" ] && [ $((web + code)) -eq $((4 * 4 * 16)) ] && [ "$web" -gt "$code" ] && [ "$code" -gt 0 ]; then
  pass blend_metrics_count_tokens_per_dataset
else
  fail blend_metrics_count_tokens_per_dataset "$(tail -2 "$tmp/a.log") | $last"
fi

ck=(--checkpoint.enable true --checkpoint.interval 2 --checkpoint.keep_latest_k 0 --checkpoint.last_save_model_only false)
$bin train "${run[@]}" "${ck[@]}" --job.dump_folder "$tmp/b" >"$tmp/b1.log" 2>&1
mkdir -p "$tmp/r/checkpoint" && cp -r "$tmp/b/checkpoint/step-2" "$tmp/r/checkpoint/"  # as a run killed after step 2 leaves it
$bin train "${run[@]}" "${ck[@]}" --job.dump_folder "$tmp/r" >"$tmp/b2.log" 2>&1
la=$(grep '^step 4/4' "$tmp/b1.log" | awk '{print $4}')
lb=$(grep '^step 4/4' "$tmp/b2.log" | awk '{print $4}')
if [ -n "$la" ] && [ "$la" = "$lb" ] && grep -q "resum" "$tmp/b2.log"; then pass blend_resume_matches_uninterrupted
else fail blend_resume_matches_uninterrupted "uninterrupted [$la] resumed [$lb]: $(tail -2 "$tmp/b2.log")"; fi

out=$($bin train "${run[@]}" --training.dataset "0.7 $tmp/web 0.3" --job.dump_folder "$tmp/c" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "weight-path pairs"; then
  pass blend_bad_spec_one_line; else fail blend_bad_spec_one_line "rc $rc: $out"; fi
