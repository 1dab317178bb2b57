#!/usr/bin/env bash
# `ctitan convert` end to end: a trained model goes to a Hugging Face directory (with the
# tokenizer) and back to the same file byte for byte; a bf16 export evaluates within bf16
# rounding of the fp32 model; and each bad input -- missing config.json, missing tensor, wrong
# shape, unsupported model_type, bad dtype, missing model -- ends with one line and a non-zero
# exit, leaving no output file.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
if [ ! -x "$bin" ]; then echo "PASS hf_cli_skipped_no_binary"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

out=$($bin convert --help); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "usage: ctitan convert --to hf" && $bin --help | grep -q "convert"; then
  pass convert_help
else
  fail convert_help "rc $rc: $out"
fi

# A trained model of the byte-level tokenizer's vocabulary (258 ids), Llama 3.1 RoPE (the default).
tok=tests/fixtures/data/bytes.tiktoken
common=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 258
        --model.ffn_hidden_dim 72 --training.seq_len 16 --training.dataset synthetic --metrics.peak_tflops 1
        --micro_batch_size 2 --training.steps 3)
$bin train "${common[@]}" --job.dump_folder "$tmp/run" >"$tmp/train.log" 2>&1
A=$tmp/run/model.safetensors
all_files() {
  for f in config.json model.safetensors generation_config.json tokenizer.json tokenizer_config.json \
           original/tokenizer.model; do [ -f "$1/$f" ] || return 1; done
}
if [ -f "$A" ] && $bin convert --to hf --model "$A" --out "$tmp/hf" --tokenizer $tok >"$tmp/c1.log" 2>&1 &&
   all_files "$tmp/hf" &&
   grep -q '"architectures": \["LlamaForCausalLM"\]' "$tmp/hf/config.json" &&
   grep -q '"rope_type": "llama3"' "$tmp/hf/config.json" && cmp -s $tok "$tmp/hf/original/tokenizer.model"; then
  pass to_hf_writes_the_directory
else
  fail to_hf_writes_the_directory "$(tail -2 "$tmp/train.log" "$tmp/c1.log")"
fi
if $bin convert --from hf --model "$tmp/hf" --out "$tmp/back.safetensors" >"$tmp/c2.log" 2>&1 &&
   cmp -s "$A" "$tmp/back.safetensors"; then
  pass round_trip_is_byte_identical
else
  fail round_trip_is_byte_identical "$(tail -2 "$tmp/c2.log")"
fi

# bf16: the HF file is half the size, comes back as a bf16 model file, and evaluates close to fp32.
$bin data prepare --input tests/fixtures/data/corpus --tokenizer $tok --out "$tmp/shards" --quiet >/dev/null 2>&1
$bin convert --to hf --model "$A" --out "$tmp/hf16" --dtype bf16 >/dev/null 2>&1
$bin convert --from hf --model "$tmp/hf16" --out "$tmp/back16.safetensors" >/dev/null 2>&1
ev=(--data "$tmp/shards" --split train --seq_len 16 --batch 2)
l32=$($bin eval --model "$A" "${ev[@]}" 2>&1 | awk '/^loss /{print $2}')
l16=$($bin eval --model "$tmp/back16.safetensors" "${ev[@]}" 2>&1 | awk '/^loss /{print $2}')
s32=$(stat -c %s "$tmp/hf/model.safetensors" 2>/dev/null || echo 0)
s16=$(stat -c %s "$tmp/hf16/model.safetensors" 2>/dev/null || echo 0)
if [ -n "$l32" ] && [ -n "$l16" ] && [ "$s16" -gt 0 ] && [ "$s16" -lt $((s32 * 6 / 10)) ] &&
   grep -q '"torch_dtype": "bfloat16"' "$tmp/hf16/config.json" &&
   awk -v a="$l32" -v b="$l16" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d < 0.02 && a > 0)}'; then
  pass bf16_export_evaluates_close
else
  fail bf16_export_evaluates_close "fp32 [$l32] bf16 [$l16] sizes $s32 $s16"
fi

# Each refusal: non-zero exit, exactly one line naming the problem, no output file.
refused() {  # name, expected text, convert arguments...
  local name=$1 want=$2; shift 2
  local o rc lines
  o=$($bin convert "$@" 2>&1); rc=$?
  lines=$(printf '%s\n' "$o" | wc -l)
  if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && echo "$o" | grep -qF -- "$want" && [ ! -e "$tmp/out.safetensors" ]; then
    pass "$name"
  else
    fail "$name" "rc $rc, $lines lines: $o"
  fi
}
bad() { rm -rf "$tmp/bad"; cp -r "$tmp/hf" "$tmp/bad"; }
from_bad=(--from hf --model "$tmp/bad" --out "$tmp/out.safetensors")

bad; rm "$tmp/bad/config.json"
refused refuse_missing_config "bad/config.json: cannot open" "${from_bad[@]}"
bad; sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$tmp/bad/config.json"
refused refuse_missing_tensor "missing tensor model.layers.2.input_layernorm.weight" "${from_bad[@]}"
bad; sed -i 's/"intermediate_size": 72/"intermediate_size": 80/' "$tmp/bad/config.json"
refused refuse_wrong_shape "tensor model.layers.0.mlp.gate_proj.weight has shape [72, 32], expected [80, 32]" "${from_bad[@]}"
bad; sed -i 's/"model_type": "llama"/"model_type": "gpt2"/' "$tmp/bad/config.json"
refused refuse_model_type 'model_type "gpt2" is not supported' "${from_bad[@]}"
refused refuse_missing_model "nope.safetensors: cannot open" --to hf --model "$tmp/nope.safetensors" --out "$tmp/x"
refused refuse_bad_dtype "expected fp32 or bf16, got 'fp16'" --to hf --model "$A" --out "$tmp/x" --dtype fp16
refused refuse_missing_tokenizer "nope.tiktoken" --to hf --model "$A" --out "$tmp/x" --tokenizer "$tmp/nope.tiktoken"

o=$($bin convert 2>&1); rc1=$?
o2=$($bin convert --to onnx --model "$A" --out "$tmp/x" 2>&1); rc2=$?
if [ $rc1 -eq 2 ] && [ $rc2 -eq 2 ]; then pass usage_errors_exit_2; else fail usage_errors_exit_2 "$rc1 $rc2: $o $o2"; fi
