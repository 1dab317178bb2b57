#!/usr/bin/env bash
# SIGTERM / SIGINT (what a scheduler or Ctrl-C sends): every rank finishes the step it is in,
# the state is saved, and each rank exits 0 with one line; running the same command again
# resumes and ends exactly where an uninterrupted run ends. A second signal ends at once. A stop whose save outlasts
# checkpoint.signal_grace_seconds ends anyway, and running a finished job again says so and
# exits 0. A 2-rank FSDP job; the signal goes to one rank's process, as `kill` or srun would send
# it.
# Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL checkpoint_signals: $bin not built"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"

job=(--model.dim 64 --model.n_layers 4 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --metrics.log_freq 1 --training.local_batch_size 2 --parallelism.data_shard_degree 2
     --training.steps 600 --checkpoint.interval 1000 --checkpoint.last_save_model_only false)
run2() {  # run2 DUMP ARGS...
  local dump=$1; shift
  CTITAN_TTY=0 OMP_NUM_THREADS=1 timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 2 \
    "$bin" train "${job[@]}" --job.dump_folder "$dump" "$@" >>"$dump.log" 2>&1
}
losses() { grep -o '"step": [0-9]*, "loss": [^,]*, "grad_norm": [^,]*' "$1/metrics.jsonl"; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# The pid of rank R's process of the job writing to DUMP, once it has logged step 20.
rank_pid() {
  local dump=$1 r=$2 n=0
  local c
  until c=$(grep -c '"step"' "$dump/metrics.jsonl" 2>/dev/null); [ "${c:-0}" -ge 20 ] || [ $n -ge 600 ]; do
    sleep 0.05; n=$((n + 1))
  done
  pgrep -f -- "^$bin train .*--job.dump_folder $dump( |\$)" | sort -n | sed -n "$((r + 1))p"
}

ref=$tmp/ref
run2 "$ref" --checkpoint.enable true || { fail signals_reference "$(tail -2 "$ref.log")"; exit 0; }
# The signalled runs pace each step to at least 5 ms (a sleep after it, core/failpoint.h), so the
# signal lands mid-run however fast the machine: 600 steps last 3 s or more.
export CTITAN_PACE=train.step_end:5

# signal_saves NAME SIGNAL RANK: the signal to one rank saves and stops the whole job cleanly.
signal_saves() {
  local name=$1 sig=$2 rank=$3 d=$tmp/$1
  (run2 "$d" --checkpoint.enable true; echo "rc=$?" >"$d.rc") &
  local pid; pid=$(rank_pid "$d" "$rank")
  [ -n "$pid" ] && kill -s "$sig" "$pid"
  wait
  local line step
  line=$(grep "stopped by $sig after step" "$d.log")
  step=$(echo "$line" | sed -n 's/.*after step \([0-9]*\);.*/\1/p')
  if [ -z "$pid" ] || [ -z "$step" ] || [ "$(cat "$d.rc")" != rc=0 ]; then
    fail "$name" "$(cat "$d.rc"), log: $(grep -v '^step' "$d.log" | tail -2)"; return
  fi
  [ "$step" -lt 600 ] || { fail "$name" "the job ended before the signal"; return; }
  [ -f "$d/checkpoint/step-$step/manifest.toml" ] || { fail "$name" "no checkpoint step-$step"; return; }
  : >"$d.log"
  if ! run2 "$d" --checkpoint.enable true; then fail "$name" "the resumed run failed: $(tail -2 "$d.log")"; return; fi
  local bad=""
  grep -q "resumed from .*step-$step (step $step" "$d.log" || bad="did not resume from step $step"
  [ "$(losses "$ref")" = "$(losses "$d")" ] || bad="$bad; losses differ from the uninterrupted run"
  cmp -s "$ref/model.safetensors" "$d/model.safetensors" || bad="$bad; final model differs"
  [ -z "$bad" ] && pass "$name (stopped after step $step)" || fail "$name" "$bad"
}
signal_saves sigterm_to_rank1_saves_and_resumes SIGTERM 1
signal_saves sigint_to_rank0_saves_and_resumes SIGINT 0

# Without checkpointing a signal still stops every rank cleanly, and says nothing was saved.
d=$tmp/nockpt
(run2 "$d"; echo "rc=$?" >"$d.rc") &
pid=$(rank_pid "$d" 1)
[ -n "$pid" ] && kill -TERM "$pid"
wait
if [ "$(cat "$d.rc")" = rc=0 ] && grep -q "stopped by SIGTERM after step [0-9]* (checkpoint.enable is off: nothing saved)" "$d.log"; then
  pass sigterm_without_checkpointing_stops_cleanly
else
  fail sigterm_without_checkpointing_stops_cleanly "$(cat "$d.rc"): $(grep -v '^step' "$d.log" | tail -2)"
fi

# A second signal does not wait for the step: the job ends at once, with a failure status.
d=$tmp/twice
start=$(date +%s)
(run2 "$d" --checkpoint.enable true --training.steps 100000; echo "rc=$?" >"$d.rc") &
pid=$(rank_pid "$d" 0)
# (a moment apart: two signals sent before the first is delivered merge into one)
[ -n "$pid" ] && kill -TERM "$pid" && sleep 0.005 && kill -TERM "$pid"
wait
took=$(( $(date +%s) - start ))
if [ -n "$pid" ] && [ "$(cat "$d.rc")" != rc=0 ] && [ "$took" -lt 60 ]; then
  pass second_signal_exits_at_once
else
  fail second_signal_exits_at_once "$(cat "$d.rc") after ${took}s: $(grep -v '^step' "$d.log" | tail -3)"
fi

# The start-up line says how long a stop may take to save.
if grep -q "^checkpoint: SIGINT, SIGTERM or SIGUSR1 finishes the step in flight and saves within 30 s" "$ref.log"; then
  pass grace_said_at_start_up
else
  fail grace_said_at_start_up "$(grep -v '^step' "$ref.log" | head -4 | tr '\n' '|')"
fi

# A save that outlasts checkpoint.signal_grace_seconds (each rank's write paced to 4 s) does not
# keep the job: it ends after the grace with a line saying so, and no step folder appears.
d=$tmp/grace
start=$(date +%s)
(CTITAN_PACE=ckpt.write:4000 run2 "$d" --checkpoint.enable true --checkpoint.interval 100000 --training.steps 100000 \
   --checkpoint.signal_grace_seconds 1; echo "rc=$?" >"$d.rc") &
pid=$(rank_pid "$d" 1)
[ -n "$pid" ] && kill -TERM "$pid"
wait
took=$(( $(date +%s) - start ))
if [ -n "$pid" ] && [ "$(cat "$d.rc")" != rc=0 ] && [ "$took" -lt 60 ] &&
   grep -q "^\[rank 1\] ctitan train: the step and the save after a stop signal took longer than checkpoint.signal_grace_seconds (1 s)" "$d.log" &&
   [ -z "$(ls "$d/checkpoint" 2>/dev/null | grep -v '\.tmp$')" ]; then
  pass save_past_the_grace_ends_the_job
else
  fail save_past_the_grace_ends_the_job "$(cat "$d.rc") after ${took}s: $(grep -v '^step\|^ \|^--\|^$' "$d.log" | tail -3 | tr '\n' '|'); $(ls "$d/checkpoint" 2>/dev/null)"
fi

# A run whose checkpoint is already at training.steps has nothing left to do: one line, exit 0,
# whether its last save holds the full state or (the default) the weights alone.
: >"$ref.log"
run2 "$ref" --checkpoint.enable true; rc=$?
if [ $rc = 0 ] && [ "$(grep -c . "$ref.log")" = 1 ] &&
   grep -q "^train: nothing left to do: .*/step-600 is at step 600, training.steps is 600" "$ref.log"; then
  pass finished_run_again_says_nothing_left
else
  fail finished_run_again_says_nothing_left "rc $rc: $(head -4 "$ref.log" | tr '\n' '|')"
fi
d=$tmp/modelonly
one=(OMP_NUM_THREADS=1 CTITAN_TTY=0 timeout 60 "$bin" train "${job[@]}" --parallelism.data_shard_degree 1
     --training.steps 4 --checkpoint.interval 2 --checkpoint.last_save_model_only true --checkpoint.enable true
     --job.dump_folder "$d")
env "${one[@]}" >"$d.log1" 2>&1
out=$(env "${one[@]}" 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(echo "$out" | grep -c .)" = 1 ] && echo "$out" | grep -q "^train: nothing left to do: .*step-4 is at step 4"; then
  pass finished_model_only_run_again_says_nothing_left
else
  fail finished_model_only_run_again_says_nothing_left "rc $rc: $(echo "$out" | head -3 | tr '\n' '|')"
fi
