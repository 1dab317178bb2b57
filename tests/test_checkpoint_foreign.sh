#!/usr/bin/env bash
# What is in a checkpoint folder but not the run's own: symbolic links out of it (a step folder
# that links to another folder, a file in a step folder that links out, a link to ..) are never
# followed by the start-up cleanup, the pruning or a save -- everything outside stays byte for
# byte as it was -- and a step folder copied from another run (step-50 holding step 10) is
# reported with one line naming both steps, then neither resumed from nor pruned.
# One process, a tiny model. Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL checkpoint_foreign: $bin not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

job=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --training.local_batch_size 2 --checkpoint.enable true --checkpoint.keep_latest_k 0
     --checkpoint.interval 10 --training.steps 20 --checkpoint.last_save_model_only false)
train() {  # train DUMP ARGS... -> stdout+stderr in DUMP.out, status returned
  local d=$1; shift
  OMP_NUM_THREADS=1 timeout 60 "$bin" train "${job[@]}" --job.dump_folder "$d" "$@" >"$d.out" 2>&1
}
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
errors() { grep -v '^step\|^ranks\|^model\|^precision\|^checkpoint: step\|^checkpoint: resumed' "$1.out"; }
# Every file under a folder (not following links): path, type, link target and contents.
tree_hash() { (cd "$1" && find . -printf '%p %y %s %l\n' -type f -exec md5sum {} + | sort | md5sum); }

base=$tmp/base
train "$base" || { fail checkpoint_foreign_base "$(tail -2 "$base.out")"; exit 0; }
fresh() { rm -rf "$tmp/$1"; mkdir -p "$tmp/$1"; cp -r "$base/checkpoint" "$tmp/$1/"; echo "$tmp/$1"; }

# The outside world the links point at: files, a folder, and another run's complete checkpoint.
out=$tmp/outside
mkdir -p "$out/sub"
echo "precious a" >"$out/a.bin"; echo "precious b" >"$out/sub/b.bin"
cp -r "$base/checkpoint/step-10" "$out/other_run_step"
echo "precious top" >"$tmp/top.txt"
outside_hash() { tree_hash "$out"; md5sum "$tmp/top.txt"; }
before=$(outside_hash)

# Start-up cleanup: links named like interrupted saves, a link to .., and a real interrupted save
# holding a link to a file outside and a link to ..; the run resumes from step-20 and leaves
# every link in place.
d=$(fresh cleanup)
c=$d/checkpoint
ln -s "$out" "$c/step-5"; ln -s "$out" "$c/step-6.tmp"; ln -s .. "$c/step-7"
mkdir "$c/step-8"; echo partial >"$c/step-8/rank-00000.safetensors"
ln -s "$out/a.bin" "$c/step-8/rank-00001.safetensors"; ln -s .. "$c/step-8/up"
if train "$d" --training.steps 22 && grep -q "resumed from .*step-20 (step 20" "$d.out" &&
   [ "$(outside_hash)" = "$before" ] && [ -L "$c/step-5" ] && [ -L "$c/step-6.tmp" ] && [ -L "$c/step-7" ] &&
   [ -L "$c/step-8/rank-00001.safetensors" ] && [ -e "$d/checkpoint/../config.toml" ]; then
  if errors "$d" | grep -q "step-5.*symbolic link" && errors "$d" | grep -q "step-8/rank-00001.safetensors.*symbolic link"; then
    pass cleanup_never_follows_a_link
  else
    fail cleanup_never_follows_a_link "the links are not named: $(errors "$d" | head -4)"
  fi
else
  fail cleanup_never_follows_a_link "$(errors "$d" | head -3)"
fi

# Pruning: step-30 links to another run's complete checkpoint; keep_latest_k 1 removes the
# run's own older ones only.
d=$(fresh prune)
c=$d/checkpoint
ln -s "$out/other_run_step" "$c/step-1"
if train "$d" --training.steps 40 --checkpoint.keep_latest_k 1 && [ "$(outside_hash)" = "$before" ] &&
   [ "$(ls "$c" | tr '\n' ' ')" = "step-1 step-40 " ]; then
  pass pruning_never_follows_a_link
else
  fail pruning_never_follows_a_link "left: $(ls "$c" | tr '\n' ' ') $(errors "$d" | head -3)"
fi

# A save whose step folder is a link out: refused with one line naming it, nothing outside touched.
d=$(fresh save_over_link)
c=$d/checkpoint
ln -s "$out" "$c/step-30"
if train "$d" --training.steps 30; then
  fail save_refuses_a_linked_step_folder "exit status 0"
elif [ "$(outside_hash)" = "$before" ] && errors "$d" | grep -q "step-30.*symbolic link" && [ -L "$c/step-30" ]; then
  pass save_refuses_a_linked_step_folder
else
  fail save_refuses_a_linked_step_folder "$(errors "$d" | head -3)"
fi
[ "$(outside_hash)" = "$before" ] || fail outside_untouched "the tree outside the run changed"

# step-50 copied from step-10: reported once, with both steps; the run resumes from step-20.
d=$(fresh copied)
cp -r "$d/checkpoint/step-10" "$d/checkpoint/step-50"
if train "$d" --training.steps 22 && grep -q "resumed from .*step-20 (step 20" "$d.out"; then
  line=$(errors "$d" | grep "step-50")
  if [ "$(echo "$line" | grep -c .)" = 1 ] && [[ $line == *"step 10"* ]] && [[ $line == *50* ]] &&
     [ -f "$d/checkpoint/step-50/manifest.toml" ]; then
    pass copied_step_folder_is_not_the_latest
  else
    fail copied_step_folder_is_not_the_latest "report: [$line]"
  fi
else
  fail copied_step_folder_is_not_the_latest "$(grep "resumed" "$d.out") $(errors "$d" | head -2)"
fi

# ... nor pruned, nor counted when pruning: keep_latest_k 2 keeps the run's two newest.
d=$tmp/copied_prune
mkdir -p "$d/checkpoint"
cp -r "$base/checkpoint/step-10" "$d/checkpoint/step-50"
if train "$d" --training.steps 40 --checkpoint.keep_latest_k 2 &&
   [ "$(ls "$d/checkpoint" | tr '\n' ' ')" = "step-30 step-40 step-50 " ]; then
  pass copied_step_folder_is_not_pruned
else
  fail copied_step_folder_is_not_pruned "left: $(ls "$d/checkpoint" | tr '\n' ' ')"
fi

# `checkpoint verify` of a folder where something was skipped unchecked is not a pass: a step
# folder that is a link, or a copy from another run, gives exit status 3 (not 0), after the
# run's own checkpoints verify, with a line saying how many were skipped. A bad file still gives 1.
verify_status() {  # verify_status NAME WANT FOLDER
  local out rc
  out=$("$bin" checkpoint verify "$3" 2>&1); rc=$?
  if [ $rc = "$2" ] && { [ "$2" != 3 ] || grep -q "skipped, not verified (exit status 3)" <<<"$out"; }; then pass "$1"
  else fail "$1" "exit $rc, want $2: $(tr '\n' '|' <<<"$out" | head -c 400)"; fi
}
d=$(fresh verify_link)
ln -s "$out/other_run_step" "$d/checkpoint/step-30"
verify_status verify_with_a_linked_step_folder_is_not_a_pass 3 "$d/checkpoint"
d=$(fresh verify_copy)
cp -r "$d/checkpoint/step-10" "$d/checkpoint/step-50"
verify_status verify_with_a_copied_step_folder_is_not_a_pass 3 "$d/checkpoint"
f=$(ls "$d/checkpoint/step-20"/rank-*.safetensors | head -1)
truncate -s -1 "$f"
verify_status verify_bad_file_outranks_skipped 1 "$d/checkpoint"
verify_status verify_clean_folder_passes 0 "$(fresh verify_clean)/checkpoint"
