#!/usr/bin/env bash
# Loading: checkpoints that cannot be used are refused with one line that names the file or the
# setting, and a non-zero exit -- never a silent fresh start; falling back to an older checkpoint
# happens only when asked (--checkpoint.load_step). Then the other ways in and out: a checkpoint's
# step folder or a Hugging Face folder as checkpoint.initial_load_path, keep_latest_k, and the
# final model as a Hugging Face folder. One process (tp 2 where said), a tiny model.
# Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL checkpoint_load: $bin not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

job=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --training.local_batch_size 2 --checkpoint.enable true --checkpoint.keep_latest_k 0
     --checkpoint.interval 10 --training.steps 20)
train() {  # train DUMP ARGS... -> stdout+stderr in DUMP.out, status returned
  local d=$1; shift
  OMP_NUM_THREADS=1 timeout 60 "$bin" train "${job[@]}" --job.dump_folder "$d" "$@" >"$d.out" 2>&1
}
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
errors() { grep -v '^step\|^ranks\|^model\|^precision\|^checkpoint: step' "$1.out"; }

# A fresh copy of a finished run whose newest checkpoint is step 20 (full state, not model-only).
base=$tmp/base
train "$base" --checkpoint.last_save_model_only false || { fail checkpoint_load_base "$(tail -2 "$base.out")"; exit 0; }
fresh() { rm -rf "$tmp/$1"; mkdir -p "$tmp/$1"; cp -r "$base/checkpoint" "$tmp/$1/"; echo "$tmp/$1"; }

# refused NAME WANT DUMP ARGS...: the run exits non-zero with exactly one error line containing WANT.
# It asks for more steps than the checkpoints hold, so that the newest is loaded (one already at
# training.steps has nothing left to do, and is not read).
refused() {
  local name=$1 want=$2 d=$3; shift 3
  if train "$d" --training.steps 30 "$@"; then fail "$name" "exit status 0"; return; fi
  local lines; lines=$(errors "$d" | grep -c .)
  if ! errors "$d" | grep -qF -- "$want"; then fail "$name" "no line with [$want]: $(errors "$d" | head -2)"; return; fi
  [ "$lines" -eq 1 ] && pass "$name" || fail "$name" "$lines lines: $(errors "$d" | head -3)"
}

# A flipped byte in a rank file: the checksum names it.
d=$(fresh corrupt)
f=$d/checkpoint/step-20/rank-00000.safetensors
printf 'X' | dd of="$f" bs=1 seek=5000 conv=notrunc status=none
refused corrupt_file_refused "step-20/rank-00000.safetensors: CRC-32" "$d"
# `ctitan checkpoint verify` finds the same file without training: non-zero, naming it; an
# untouched folder verifies.
if "$bin" checkpoint verify "$d/checkpoint" >"$d.verify" 2>&1; then
  fail checkpoint_verify_names_the_bad_file "exit status 0: $(head -3 "$d.verify")"
elif grep -q "rank-00000.safetensors" "$d.verify" && "$bin" checkpoint verify "$(fresh verify_ok)/checkpoint" >/dev/null 2>&1; then
  pass checkpoint_verify_names_the_bad_file
else
  fail checkpoint_verify_names_the_bad_file "$(head -3 "$d.verify")"
fi
# ... and resuming from the one before it works when the user asks for it.
if train "$d" --checkpoint.load_step 10 && grep -q "resumed from .*step-10 (step 10" "$d.out"; then
  pass corrupt_file_load_step_falls_back
else
  fail corrupt_file_load_step_falls_back "$(errors "$d" | head -2)"
fi

d=$(fresh missing)
rm "$d/checkpoint/step-20/rank-00000.safetensors"
refused missing_file_refused "step-20/rank-00000.safetensors: cannot open: No such file" "$d"

d=$(fresh truncated)
f=$d/checkpoint/step-20/rank-00000.safetensors
truncate -s 1000 "$f"
refused truncated_file_refused "rank-00000.safetensors: 1000 bytes, the manifest says" "$d"

d=$(fresh bad_manifest)
echo 'format = "ctitan-checkpoint"' >"$d/checkpoint/step-20/manifest.toml"
refused bad_manifest_refused "step-20/manifest.toml: 'version' missing" "$d"

d=$(fresh other_model)
refused other_model_refused "does not fit this run" "$d" --model.dim 128

d=$(fresh other_seq_len)
refused other_seq_len_refused "this run's training.seq_len is 16" "$d" --training.seq_len 16

d=$(fresh no_such_step)
refused load_step_missing_refused "checkpoint.load_step 15: no complete checkpoint step-15" "$d" --checkpoint.load_step 15

# The default last save is model-only: it cannot resume, and says what can.
m=$tmp/model_only
train "$m" >/dev/null
refused model_only_refused "holds the weights only" "$m"

# A folder holding only an interrupted save: removed, and a loud warning that training starts over.
d=$tmp/only_tmp
mkdir -p "$d/checkpoint/step-10.tmp" "$d/checkpoint/step-20"
echo partial >"$d/checkpoint/step-10.tmp/rank-00000.safetensors"
if train "$d" --training.steps 2 && grep -q "WARNING: .*holds no complete checkpoint (2 incomplete saves removed): training starts from step 0" "$d.out" &&
   [ ! -e "$d/checkpoint/step-10.tmp" ] && [ ! -e "$d/checkpoint/step-20" ]; then
  pass incomplete_only_warns_and_starts_over
else
  fail incomplete_only_warns_and_starts_over "$(errors "$d" | head -2)"
fi

# keep_latest_k removes older checkpoints once a newer one is complete.
d=$tmp/keep
if train "$d" --checkpoint.interval 2 --checkpoint.keep_latest_k 2 --training.steps 10 &&
   [ "$(ls "$d/checkpoint" | tr '\n' ' ')" = "step-10 step-8 " ]; then
  pass keep_latest_k_keeps_the_newest
else
  fail keep_latest_k_keeps_the_newest "left: $(ls "$d/checkpoint" 2>&1 | tr '\n' ' ')"
fi

# checkpoint.initial_load_path naming a checkpoint's step folder starts a new run from its weights:
# the same losses as starting from the model file exported at that step.
m=$tmp/model_only
a=$tmp/from_ckpt b=$tmp/from_file
if train "$a" --checkpoint.enable false --training.steps 3 --metrics.log_freq 1 \
     --checkpoint.initial_load_path "$m/checkpoint/step-20" &&
   train "$b" --checkpoint.enable false --training.steps 3 --metrics.log_freq 1 \
     --checkpoint.initial_load_path "$m/model.safetensors" &&
   grep -q "weights loaded from .*step-20" "$a.out" &&
   [ "$(grep -o '"loss": [^,]*' "$a/metrics.jsonl")" = "$(grep -o '"loss": [^,]*' "$b/metrics.jsonl")" ]; then
  pass initial_load_path_from_a_checkpoint
else
  fail initial_load_path_from_a_checkpoint "$(errors "$a" | head -2) $(errors "$b" | head -2)"
fi

# A path that cannot start a run is one line naming it once (not twice).
for bad in missing garbage; do
  p=$tmp/$bad.safetensors
  [ $bad = garbage ] && printf 'garbage' >"$p"
  d=$tmp/initial_$bad
  if train "$d" --checkpoint.enable false --training.steps 2 --checkpoint.initial_load_path "$p"; then
    fail initial_load_path_${bad}_named_once "exit status 0"
  else
    e=$(errors "$d")
    if [ "$(echo "$e" | grep -c .)" = 1 ] && [[ $e == *"checkpoint.initial_load_path: $p: "* ]] &&
       [ "$(echo "$e" | grep -o "$p" | wc -l)" = 1 ]; then
      pass initial_load_path_${bad}_named_once
    else
      fail initial_load_path_${bad}_named_once "$e"
    fi
  fi
done

# checkpoint.initial_load_in_hf: the same model as a Hugging Face folder (ctitan convert --to hf,
# q/k rows in HF's RoPE layout) starts a run with the same losses as the model file -- in one
# process and with tp 2, where each rank reads its own rows and columns of the permuted tensors.
hf=$tmp/hf
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
if "$bin" convert --to hf --model "$m/model.safetensors" --out "$hf" >/dev/null 2>&1; then
  for np in 1 2; do
    a=$tmp/from_hf$np b=$tmp/from_file$np
    extra=(--checkpoint.enable false --training.steps 3 --metrics.log_freq 1 --parallelism.compute_parallel_degree $np)
    launch=(); [ $np -gt 1 ] && launch=(mpirun $asroot --oversubscribe --bind-to none -np $np)
    OMP_NUM_THREADS=1 timeout 60 "${launch[@]}" "$bin" train "${job[@]}" "${extra[@]}" --job.dump_folder "$a" \
      --checkpoint.initial_load_path "$hf" --checkpoint.initial_load_in_hf true >"$a.out" 2>&1
    OMP_NUM_THREADS=1 timeout 60 "${launch[@]}" "$bin" train "${job[@]}" "${extra[@]}" --job.dump_folder "$b" \
      --checkpoint.initial_load_path "$m/model.safetensors" >"$b.out" 2>&1
    if grep -q "weights loaded from the Hugging Face folder" "$a.out" && [ -s "$a/metrics.jsonl" ] &&
       [ "$(grep -o '"loss": [^,]*' "$a/metrics.jsonl")" = "$(grep -o '"loss": [^,]*' "$b/metrics.jsonl")" ]; then
      pass "initial_load_in_hf_tp$np"
    else
      fail "initial_load_in_hf_tp$np" "$(errors "$a" | head -2)"
    fi
  done
  # A folder whose config does not fit the run is refused with one line.
  refused initial_load_in_hf_other_model "(Hugging Face): model file n_layers 2 does not match this run's 3" "$tmp/hf_other" --checkpoint.enable false \
    --model.n_layers 3 --checkpoint.initial_load_path "$hf" --checkpoint.initial_load_in_hf true
else
  fail initial_load_in_hf "ctitan convert --to hf failed"
fi

# checkpoint.last_save_in_hf: the final model also as a Hugging Face folder, which converts back
# to the exported model file byte for byte.
d=$tmp/last_hf
if train "$d" --checkpoint.enable false --training.steps 2 --checkpoint.last_save_in_hf true &&
   "$bin" convert --from hf --model "$d/hf" --out "$d/back.safetensors" >/dev/null 2>&1 &&
   cmp -s "$d/model.safetensors" "$d/back.safetensors"; then
  pass last_save_in_hf_round_trips
else
  fail last_save_in_hf_round_trips "$(errors "$d" | head -2)"
fi

# ... and with the run's tokenizer (model.tokenizer_path) beside it.
d=$tmp/last_hf_tok
if train "$d" --checkpoint.enable false --training.steps 1 --checkpoint.last_save_in_hf true --model.vocab_size 258 \
     --model.tokenizer_path tests/fixtures/data/bytes.tiktoken &&
   grep -q "Hugging Face folder .* (with its tokenizer)" "$d.out" && [ -s "$d/hf/tokenizer.json" ] &&
   [ -s "$d/hf/config.json" ]; then
  pass last_save_in_hf_writes_the_tokenizer
else
  fail last_save_in_hf_writes_the_tokenizer "$(errors "$d" | head -2) $(ls "$d/hf" 2>&1 | tr '\n' ' ')"
fi
