#!/usr/bin/env bash
# A mixture-of-experts model end to end through build/ctitan: trained on one process and under
# expert parallel 2 on the same data and global batch, both exported; `ctitan eval` gives the two
# files the same loss (within 1e-5: the layouts round differently), `ctitan generate` continues a
# prompt from each, and both commands compute the same on the test device as on the cpu.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL moe_cli: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
export OMP_NUM_THREADS=1

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# The byte-level tokenizer (258 ids) and its shards; 8 experts, 2 per token.
tok=tests/fixtures/data/bytes.tiktoken
$bin data prepare --input tests/fixtures/data/corpus --tokenizer $tok --out "$tmp/shards" --quiet >"$tmp/p.log" 2>&1 ||
  { fail moe_cli_prepare "$(tail -2 "$tmp/p.log")"; exit 0; }
moe=(--model.name llama3_moe --model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2
     --model.vocab_size 258 --model.ffn_hidden_dim 24 --training.seq_len 16 --training.dataset "$tmp/shards"
     --model.tokenizer_path $tok --metrics.peak_tflops 1 --training.steps 4 --validation.enable false)

if $bin train "${moe[@]}" --micro_batch_size 4 --job.dump_folder "$tmp/one" >"$tmp/one.log" 2>&1 &&
   timeout 120 mpirun -np 2 $asroot --oversubscribe --bind-to none -x OMP_NUM_THREADS $bin train "${moe[@]}" \
     --micro_batch_size 2 --parallelism.data_shard_degree 2 --parallelism.expert_parallel_degree 2 \
     --job.dump_folder "$tmp/ep2" >"$tmp/ep2.log" 2>&1 &&
   [ -f "$tmp/one/model.safetensors" ] && [ -f "$tmp/ep2/model.safetensors" ]; then
  pass moe_one_process_and_ep2_export
else
  fail moe_one_process_and_ep2_export "$(tail -2 "$tmp/one.log" "$tmp/ep2.log")"
fi

evaluate() { $bin eval "$@" --data "$tmp/shards" --split train --seq_len 16 --batch 2 2>&1 | awk '/^loss /{print $2}'; }
l1=$(evaluate --model "$tmp/one/model.safetensors")
l2=$(evaluate --model "$tmp/ep2/model.safetensors")
if [ -n "$l1" ] && [ -n "$l2" ] && awk -v a="$l1" -v b="$l2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(a > 0 && d <= 1e-5*a)}'; then
  pass moe_eval_ep2_model_equals_one_process_model
else
  fail moe_eval_ep2_model_equals_one_process_model "one process [$l1] ep 2 [$l2]"
fi
ls=$(evaluate --device cpu_sim --model "$tmp/ep2/model.safetensors")
if [ -n "$l2" ] && [ "$ls" = "$l2" ]; then pass moe_eval_on_cpu_sim_equals_cpu; else fail moe_eval_on_cpu_sim_equals_cpu "cpu_sim [$ls] cpu [$l2]"; fi

gen=(--tokenizer $tok --prompt "The" --max_new_tokens 12 --temperature 0.9 --top_k 20 --seed 3)
g1=$($bin generate --model "$tmp/ep2/model.safetensors" "${gen[@]}" 2>/dev/null)
gs=$($bin generate --device cpu_sim --model "$tmp/ep2/model.safetensors" "${gen[@]}" 2>/dev/null)
if [ -n "$g1" ] && [ "${g1:0:3}" = "The" ] && [ "${#g1}" -gt 3 ] && [ "$g1" = "$gs" ]; then
  pass moe_generate_continues_the_prompt_on_cpu_and_cpu_sim
else
  fail moe_generate_continues_the_prompt_on_cpu_and_cpu_sim "cpu [$g1] cpu_sim [$gs]"
fi
