#!/usr/bin/env bash
# What a crash during a save leaves, and that the previous checkpoint always resumes correctly.
# A 2-rank FSDP job saves at steps 10, 20, 30; each case kills it during the save of step 20 --
# one rank or every rank, at each point of the save (core/failpoint.h: the process SIGKILLs
# itself there), or with kill -9 from outside at random moments -- then runs the same command
# again, which must resume from the last complete checkpoint, remove the half-written one, and
# end with the same losses and the same final model as a run that was never interrupted.
# Plus: a full disk during a save is a clear error and leaves the previous checkpoint intact.
# Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL checkpoint_crash: $bin not built"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
cleanup() { mountpoint -q "$tmp/full" 2>/dev/null && umount "$tmp/full"; rm -rf "$tmp"; }
trap cleanup EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"

job=(--model.dim 64 --model.n_layers 4 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --metrics.log_freq 1 --checkpoint.enable true --checkpoint.keep_latest_k 0
     --checkpoint.last_save_model_only false --training.steps 30 --checkpoint.interval 10
     --parallelism.data_shard_degree 2 --training.local_batch_size 2)

run2() {  # run2 DUMP ARGS...
  local dump=$1; shift
  OMP_NUM_THREADS=1 timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 2 \
    "$bin" train "${job[@]}" --job.dump_folder "$dump" "$@" >>"$dump.log" 2>&1
}
losses() { grep -o '"step": [0-9]*, "loss": [^,]*, "grad_norm": [^,]*' "$1/metrics.jsonl"; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

ref=$tmp/ref
run2 "$ref" || { fail checkpoint_crash_reference "$(tail -3 "$ref.log")"; exit 0; }

# resumes_like_ref NAME DUMP STEP [ARGS...]: the same command again resumes from step STEP and
# ends as the uninterrupted run did; no incomplete folder survives.
resumes_like_ref() {
  local name=$1 d=$2 step=$3; shift 3
  : >"$d.log"
  if ! run2 "$d" "$@"; then fail "$name" "the resumed run failed: $(grep -v '^step' "$d.log" | tail -2)"; return; fi
  local bad=""
  grep -q "resumed from .*/step-$step (step $step" "$d.log" || bad="did not resume from step $step: $(grep -m1 resumed "$d.log")"
  [ "$(losses "$ref")" = "$(losses "$d")" ] || bad="$bad; losses differ from the uninterrupted run"
  cmp -s "$ref/model.safetensors" "$d/model.safetensors" || bad="$bad; final model differs"
  ls -d "$d"/checkpoint/*.tmp >/dev/null 2>&1 && bad="$bad; an incomplete folder survived"
  [ -z "$bad" ] && pass "$name" || fail "$name" "$bad"
}

# crash NAME POINT RANK RESUME_STEP: dies at POINT (on RANK, or every rank when RANK is "all")
# during the second save, then resumes.
crash() {
  local name=$1 point=$2 rank=$3 step=$4 d=$tmp/$1
  local r=$rank; [ "$rank" = all ] && r=""
  if CTITAN_FAILPOINT=$point CTITAN_FAILPOINT_RANK=$r CTITAN_FAILPOINT_HIT=2 run2 "$d"; then
    fail "$name" "the job survived the failpoint"; return
  fi
  [ -f "$d/checkpoint/step-10/manifest.toml" ] || { fail "$name" "step-10 lost"; return; }
  if [ "$step" = 10 ] && [ -f "$d/checkpoint/step-20/manifest.toml" ]; then
    fail "$name" "the interrupted step-20 looks complete"; return
  fi
  resumes_like_ref "$name" "$d" "$step"
}

crash crash_before_data_rank1 ckpt.before_data 1 10
crash crash_before_data_all ckpt.before_data all 10
crash crash_mid_file_rank1 ckpt.mid_file 1 10
crash crash_mid_file_all ckpt.mid_file all 10
crash crash_before_manifest ckpt.before_manifest 0 10
crash crash_before_rename ckpt.before_rename 0 10
crash crash_after_rename ckpt.after_rename 0 20

# kill -9 from outside at random moments: every process of the job, or only rank 1. A longer job
# that saves every 5 steps and keeps the newest 3 (so pruning runs under fire too), against its
# own uninterrupted reference. Each step is paced to last at least 20 ms (CTITAN_PACE, a sleep
# after the step: the numbers do not change), so the kill lands mid-run on a machine of any speed.
long=(--training.steps 160 --checkpoint.interval 5 --checkpoint.keep_latest_k 3)
ref_long=$tmp/ref_long
run2 "$ref_long" "${long[@]}" || fail kill9_reference "$(tail -3 "$ref_long.log")"
kill_randomly() {
  local name=$1 who=$2 seed=$3 d=$tmp/$1
  RANDOM=$seed
  (CTITAN_PACE=train.step_end:20 run2 "$d" "${long[@]}") 2>/dev/null &
  local job_pid=$!
  local waited=0 delay=$((1 + RANDOM % 9))  # tenths of a second after the first checkpoint
  until ls -d "$d"/checkpoint/step-5 >/dev/null 2>&1 || [ $waited -ge 300 ]; do sleep 0.05; waited=$((waited + 1)); done
  sleep "0.$delay"
  local pids
  if [ "$who" = all ]; then pids=$(pgrep -f -- "--job.dump_folder $d " || true)
  else pids=$(pgrep -f -- "^$bin train .*--job.dump_folder $d " | sort -n | tail -1 || true); fi
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  wait $job_pid 2>/dev/null
  local last
  last=$(ls "$d/checkpoint" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
  if [ -z "$pids" ] || [ "$last" = 160 ]; then fail "$name" "the job ended before the kill (make it longer)"; return; fi
  if [ -z "$last" ]; then fail "$name" "no complete checkpoint before the kill"; return; fi
  local ref=$ref_long
  resumes_like_ref "$name (killed after step-$last)" "$d" "$last" "${long[@]}"
}
kill_randomly kill9_all_ranks_a all 1
kill_randomly kill9_all_ranks_b all 2
kill_randomly kill9_one_rank_a one 3
kill_randomly kill9_one_rank_b one 4

# ---- a full disk during a save ---------------------------------------------------------------
# The job resumes from the reference's step-10 in a folder with room for that checkpoint and the
# metrics but not for another checkpoint: a small tmpfs where mounting is allowed, else a file
# size limit (ulimit -f, with SIGXFSZ ignored so the write fails with EFBIG instead of killing).
full=$tmp/full
mkdir -p "$full/checkpoint"
how="tmpfs"
used=$(du -sk "$ref/checkpoint/step-10" | cut -f1)
if ! mount -t tmpfs -o size=$((used + 600))k tmpfs "$full" 2>/dev/null; then how="ulimit -f"; fi
mkdir -p "$full/checkpoint"
cp -r "$ref/checkpoint/step-10" "$full/checkpoint/"
if [ "$how" = tmpfs ]; then
  run2 "$full"; rc=$?
else
  (trap '' XFSZ; ulimit -f $((used / 4)); run2 "$full"); rc=$?
fi
msg=$(grep -v '^step' "$full.log" | grep -m1 -i "no space left\|file too large")
bad=""
[ $rc -ne 0 ] || bad="exit status 0"
[ -n "$msg" ] || bad="$bad; no clear message: $(grep -v '^step' "$full.log" | tail -2)"
ls -d "$full"/checkpoint/step-20* >/dev/null 2>&1 && bad="$bad; the failed step-20 was left behind"
# The previous checkpoint is intact: it verifies and resumes on a disk with room.
mkdir -p "$tmp/after_full/checkpoint"
cp -r "$full/checkpoint/step-10" "$tmp/after_full/checkpoint/"
cp "$ref/metrics.jsonl" "$tmp/after_full/"  # steps 1-10 as they were logged
[ -z "$bad" ] && resumes_like_ref "full_disk_during_save ($how)" "$tmp/after_full" 10 || fail "full_disk_during_save ($how)" "$bad"
