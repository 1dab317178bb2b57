#!/usr/bin/env bash
# End to end through build/ctitan: a run exports its model; 3 FSDP ranks start from that file
# (checkpoint.initial_load_path: each rank copies its own, padded, shard ranges), take one step
# at lr 0 and export again — the two files must be byte-identical, and equal to the same thing
# done in one process. Then `ctitan eval` and `ctitan generate` on the exported file, and a
# bf16 export that evaluates within bf16 rounding of the fp32 one.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL eval_cli: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
export OMP_NUM_THREADS=1

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# vocab 131, dim 32: the embedding group (4192 elements) does not divide into 3 shards.
common=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 131
        --model.ffn_hidden_dim 72 --training.seq_len 16 --training.dataset synthetic --metrics.peak_tflops 1)

if $bin train "${common[@]}" --micro_batch_size 3 --training.steps 3 --job.dump_folder "$tmp/a" >"$tmp/a.log" 2>&1 &&
   [ -f "$tmp/a/model.safetensors" ]; then
  pass train_exports_model
else
  fail train_exports_model "$(tail -3 "$tmp/a.log")"
fi
A=$tmp/a/model.safetensors

load=(--checkpoint.initial_load_path "$A" --optimizer.lr 0 --optimizer.weight_decay 0 --training.steps 1
      --training.seed 99)
if timeout 120 mpirun -np 3 $asroot --oversubscribe --bind-to none -x OMP_NUM_THREADS $bin train "${common[@]}" \
     "${load[@]}" --micro_batch_size 3 --parallelism.data_shard_degree 3 --job.dump_folder "$tmp/b" >"$tmp/b.log" 2>&1 &&
   cmp -s "$A" "$tmp/b/model.safetensors"; then
  pass fsdp3_initial_load_then_export_is_identical
else
  fail fsdp3_initial_load_then_export_is_identical "$(tail -3 "$tmp/b.log")"
fi
if $bin train "${common[@]}" "${load[@]}" --micro_batch_size 9 --job.dump_folder "$tmp/c" >"$tmp/c.log" 2>&1 &&
   cmp -s "$A" "$tmp/c/model.safetensors"; then
  pass single_initial_load_then_export_is_identical
else
  fail single_initial_load_then_export_is_identical "$(tail -3 "$tmp/c.log")"
fi
# Both started from A on the same global batch (3 ranks x 3 = 1 x 9): the same step-1 loss.
# (The logger prints "step 1 ... loss X", or a progress bar "step 1/1  loss X" on a terminal.)
l3=$(grep -o 'step *1[/ ].*' "$tmp/b.log" | grep -o 'loss [0-9.]*' | head -1 | awk '{print $2}')
l1=$(grep -o 'step *1[/ ].*' "$tmp/c.log" | grep -o 'loss [0-9.]*' | head -1 | awk '{print $2}')
if [ -n "$l1" ] && [ "$l1" = "$l3" ]; then pass fsdp3_first_loss_equals_single; else fail fsdp3_first_loss_equals_single "[$l3] vs [$l1]"; fi

# Tensor parallel: 4 ranks (tp 2 × FSDP 2, sequence parallel) read their column and row
# slices of a file and write the same file back after a step at lr 0.
tpc=("${common[@]}"); tpc[9]=132  # --model.vocab_size: divisible by tp
if $bin train "${tpc[@]}" --micro_batch_size 4 --training.steps 2 --job.dump_folder "$tmp/t" >"$tmp/t.log" 2>&1 &&
   timeout 120 mpirun -np 4 $asroot --oversubscribe --bind-to none -x OMP_NUM_THREADS $bin train "${tpc[@]}" \
     "${load[@]/$A/$tmp/t/model.safetensors}" --micro_batch_size 2 --parallelism.data_shard_degree 2 \
     --parallelism.compute_parallel_degree 2 --sequence_parallel.enable true --job.dump_folder "$tmp/t2" \
     >"$tmp/t2.log" 2>&1 &&
   cmp -s "$tmp/t/model.safetensors" "$tmp/t2/model.safetensors"; then
  pass tp2_fsdp2_initial_load_then_export_is_identical
else
  fail tp2_fsdp2_initial_load_then_export_is_identical "$(tail -3 "$tmp/t2.log")"
fi

# ...and their first loss is the single process's from the same file and batch.
$bin train "${tpc[@]}" "${load[@]/$A/$tmp/t/model.safetensors}" --micro_batch_size 4 --job.dump_folder "$tmp/t1" \
  >"$tmp/t1.log" 2>&1
lt=$(grep -o 'step *1[/ ].*' "$tmp/t2.log" | grep -o 'loss [0-9.]*' | head -1 | awk '{print $2}')
l1=$(grep -o 'step *1[/ ].*' "$tmp/t1.log" | grep -o 'loss [0-9.]*' | head -1 | awk '{print $2}')
if [ -n "$l1" ] && [ "$l1" = "$lt" ]; then pass tp2_first_loss_equals_single; else fail tp2_first_loss_equals_single "[$lt] vs [$l1]"; fi

# A mismatched model is refused by every rank with one line naming the setting.
out=$($bin train "${common[@]}" --micro_batch_size 3 --model.n_layers 3 --checkpoint.initial_load_path "$A" --job.dump_folder "$tmp/d" 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "n_layers 2 does not match this run's 3"; then
  pass initial_load_mismatch_refused
else
  fail initial_load_mismatch_refused "rc $rc: $(echo "$out" | tail -2)"
fi

# Eval and generate with the byte-level tokenizer (258 ids), so models of vocabulary 258.
tok=tests/fixtures/data/bytes.tiktoken
$bin data prepare --input tests/fixtures/data/corpus --tokenizer $tok --out "$tmp/shards" --quiet >"$tmp/p.log" 2>&1
big=("${common[@]/131/258}" --micro_batch_size 2)
$bin train "${big[@]}" --training.steps 2 --job.dump_folder "$tmp/e" >"$tmp/e.log" 2>&1
$bin train "${big[@]}" --training.steps 2 --job.dump_folder "$tmp/f" --checkpoint.export_dtype bf16 >"$tmp/f.log" 2>&1
E=$tmp/e/model.safetensors F=$tmp/f/model.safetensors
le=$($bin eval --model "$E" --data "$tmp/shards" --split train --seq_len 16 --batch 2 2>&1 | awk '/^loss /{print $2}')
lf=$($bin eval --model "$F" --data "$tmp/shards" --split train --seq_len 16 --batch 2 2>&1 | awk '/^loss /{print $2}')
if [ -n "$le" ] && [ -n "$lf" ] && awk -v a="$le" -v b="$lf" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d < 0.02 && a > 0)}'; then
  pass eval_fp32_and_bf16_exports_agree
else
  fail eval_fp32_and_bf16_exports_agree "fp32 [$le] bf16 [$lf]"
fi
sz_e=$(stat -c %s "$E"); sz_f=$(stat -c %s "$F")
if [ "$sz_f" -lt $((sz_e * 6 / 10)) ]; then pass bf16_export_is_half_size; else fail bf16_export_is_half_size "$sz_f vs $sz_e"; fi

g1=$($bin generate --model "$E" --tokenizer $tok --prompt "The" --max_new_tokens 10 --temperature 0.9 --top_k 20 --seed 3 2>/dev/null)
g2=$($bin generate --model "$E" --tokenizer $tok --prompt "The" --max_new_tokens 10 --temperature 0.9 --top_k 20 --seed 3 2>/dev/null)
if [ -n "$g1" ] && [ "$g1" = "$g2" ] && [ "${g1:0:3}" = "The" ]; then pass generate_cli_seeded; else fail generate_cli_seeded "[$g1] [$g2]"; fi

# The same numbers on the test device (memory the host cannot touch outside backend calls).
ls=$($bin eval --device cpu_sim --model "$E" --data "$tmp/shards" --split train --seq_len 16 --batch 2 2>&1 | awk '/^loss /{print $2}')
lc=$($bin eval --device cpu --model "$E" --data "$tmp/shards" --split train --seq_len 16 --batch 2 2>&1 | awk '/^loss /{print $2}')
if [ -n "$lc" ] && [ "$ls" = "$lc" ]; then pass eval_on_cpu_sim_equals_cpu; else fail eval_on_cpu_sim_equals_cpu "cpu_sim [$ls] cpu [$lc]"; fi
gen_args=(--model "$E" --tokenizer "$tok" --prompt "The" --max_new_tokens 10 --temperature 0.9 --top_k 20 --seed 3)
gs=$($bin generate --device cpu_sim "${gen_args[@]}" 2>/dev/null)
gc=$($bin generate --device cpu "${gen_args[@]}" 2>/dev/null)
if [ -n "$gc" ] && [ "$gs" = "$gc" ]; then pass generate_on_cpu_sim_equals_cpu; else fail generate_on_cpu_sim_equals_cpu "[$gs] vs [$gc]"; fi
out=$($bin eval --device tpu --model "$E" --data "$tmp/shards" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q -- "--device tpu"; then
  pass eval_unknown_device_one_line; else fail eval_unknown_device_one_line "rc $rc: $out"; fi

out=$($bin eval --model "$tmp/nope.safetensors" --data "$tmp/shards" 2>&1); rc=$?
lines=$(printf '%s\n' "$out" | wc -l)
if [ $rc -ne 0 ] && [ "$lines" -eq 1 ]; then pass eval_missing_model_one_line; else fail eval_missing_model_one_line "rc $rc: $out"; fi
out=$($bin generate --model "$E" --tokenizer "$tmp/nope" --prompt x 2>&1); rc=$?
lines=$(printf '%s\n' "$out" | wc -l)
if [ $rc -ne 0 ] && [ "$lines" -eq 1 ]; then pass generate_missing_tokenizer_one_line; else fail generate_missing_tokenizer_one_line "rc $rc: $out"; fi

# A model whose weights hold a NaN (a diverged run's): eval and generate refuse it with one line
# naming the tensor, instead of printing "loss nan" and exiting 0. One element of the first
# tensor's data (8-byte length + JSON header, then the data section) set to a quiet NaN.
N=$tmp/nan.safetensors
cp "$E" "$N"
hdr=$(od -An -t u8 -N8 "$N" | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of="$N" bs=1 seek=$((8 + hdr + 4)) conv=notrunc status=none
out=$($bin eval --model "$N" --data "$tmp/shards" --split train --seq_len 16 --batch 2 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "holds 1 non-finite value"; then
  pass eval_nan_model_refused
else
  fail eval_nan_model_refused "rc $rc: $out"
fi
out=$($bin generate --model "$N" --tokenizer $tok --prompt x 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "holds 1 non-finite value"; then pass generate_nan_model_refused; else fail generate_nan_model_refused "rc $rc: $out"; fi
