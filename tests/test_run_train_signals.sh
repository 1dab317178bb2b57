#!/usr/bin/env bash
# Stopping a multi-rank job started by scripts/run_train.sh, as a terminal's Ctrl-C does: SIGINT
# to the script's whole process group (a terminal signals its foreground group, not one process).
#   - ctrl_c_saves_step_in_flight: the step in flight is saved (a checkpoint at a step past the
#     last periodic one) although the save takes 1.5 s, longer than the 1 s mpirun grants its
#     ranks after passing on SIGINT/SIGTERM; the script exits 0, and the same command resumes
#     from that step and ends with the losses of an uninterrupted run;
#   - second_signal_ends_at_once: a second signal (SIGTERM to the script, as a scheduler sends)
#     ends the job at once although the stop's save would take 20 s; the exit status says it
#     failed, and the last complete checkpoint is left as it was.
# Each job has a watchdog that kills it after 150 s, so a stop that does not stop fails its case
# instead of hanging the suite. Needs mpirun, setsid (the script uses it) and $BUILD/ctitan.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
[ -x "$bin" ] || { echo "SKIP run_train_signals: $bin not built"; exit 0; }
command -v mpirun >/dev/null || { echo "SKIP run_train_signals: no mpirun"; exit 0; }
command -v setsid >/dev/null || { echo "SKIP run_train_signals: no setsid"; exit 0; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cat >"$tmp/job.toml" <<'EOF'
[model]
dim = 64
n_layers = 4
n_heads = 4
n_kv_heads = 2
vocab_size = 128
ffn_hidden_dim = 96
[training]
seq_len = 32
dataset = "synthetic"
local_batch_size = 2
steps = 600
[metrics]
peak_tflops = 1
log_freq = 1
[parallelism]
data_shard_degree = 2
[checkpoint]
enable = true
interval = 50
last_save_model_only = false
EOF
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
steps_logged() { grep -c '"step"' "$1/metrics.jsonl" 2>/dev/null || echo 0; }
losses() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1/metrics.jsonl"; }

# launch DUMP ARGS...: the script in the background in a process group of its own, as a
# terminal's foreground job is; sets $job (its pid, which is also its group's id). Job control
# (set -m) gives it the group, and leaves SIGINT as it is: without it a background command starts
# with SIGINT ignored, and a shell cannot trap a signal ignored at its start.
launch() {
  local dump=$1; shift
  set -m
  CTITAN_TTY=0 OMP_NUM_THREADS=1 NRANKS=2 CONFIG=$tmp/job.toml CTITAN_BIN=$bin \
    scripts/run_train.sh --job.dump_folder "$dump" "$@" >"$dump.log" 2>&1 </dev/null &
  job=$!
  set +m
  # The watchdog: whatever is left of this job after 150 s (the script, mpirun, the ranks).
  (sleep 150; kill -KILL -- "-$job" $(pgrep -f -- "--job.dump_folder $dump( |\$)") 2>/dev/null) &
  watchdog=$!
}
# finish: waits for the script; sets $rc, stops the watchdog.
finish() {
  wait "$job"; rc=$?
  kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
}
# until_ COND...: polls COND every 50 ms for at most 60 s.
until_() { local n=0; until "$@" || [ $n -ge 1200 ]; do sleep 0.05; n=$((n + 1)); done; "$@"; }
saved() { [ -f "$1/checkpoint/step-$2/manifest.toml" ]; }
past() { [ "$(steps_logged "$1")" -ge "$2" ]; }

# The uninterrupted run the resumed one must match.
ref=$tmp/ref
launch "$ref"; finish
[ "$rc" = 0 ] || { fail run_train_signals_reference "exit $rc: $(tail -3 "$ref.log")"; exit 0; }

# Ctrl-C once, after the periodic save of step 50; steps paced to 5 ms, each save to 1.5 s.
d=$tmp/once
export CTITAN_PACE=train.step_end:5,ckpt.write:1500
launch "$d"
until_ saved "$d" 50 && until_ past "$d" 55
kill -INT -- "-$job"
finish
unset CTITAN_PACE
step=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\);.*/\1/p' "$d.log")
name=ctrl_c_saves_step_in_flight
if [ "$rc" != 0 ] || [ -z "$step" ]; then
  fail $name "exit $rc: $(grep -v '^step' "$d.log" | tail -3 | tr '\n' '|')"
elif [ "$step" -le 50 ] || [ $((step % 50)) = 0 ] || ! saved "$d" "$step"; then
  fail $name "stopped after step $step, checkpoints: $(ls "$d/checkpoint" | tr '\n' ' ')"
elif [ "$(grep -c '^run_train.sh: SIGINT: asking every rank' "$d.log")" != 1 ]; then
  fail $name "the script did not say once what the signal does: $(grep run_train.sh "$d.log" | tr '\n' '|')"
else
  launch "$d"; finish
  bad=""
  [ "$rc" = 0 ] || bad="the resumed run exited $rc: $(tail -2 "$d.log" | tr '\n' '|')"
  grep -q "resumed from .*step-$step (step $step" "$d.log" || bad="$bad; did not resume from step $step"
  [ "$(losses "$ref")" = "$(losses "$d")" ] || bad="$bad; losses differ from the uninterrupted run"
  [ -z "$bad" ] && pass "$name (saved step $step, resumed to 600)" || fail $name "$bad"
fi

# Twice: a first signal starts a stop whose save would take 20 s; a second ends the job at once.
# The job resumes from a complete checkpoint of step 10, made first, which must stay complete.
d=$tmp/twice
launch "$d" --training.steps 10 --checkpoint.interval 10; finish
if [ "$rc" != 0 ] || ! saved "$d" 10; then
  fail second_signal_ends_at_once "the first run: exit $rc: $(tail -2 "$d.log")"
else
  CTITAN_PACE=train.step_end:5,ckpt.write:20000 launch "$d" --training.steps 100000 --checkpoint.interval 100000
  until_ past "$d" 30
  kill -INT -- "-$job"
  sleep 0.5
  t0=$(date +%s.%N)
  kill -TERM "$job"
  finish
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  verify=$("$bin" checkpoint verify "$d/checkpoint/step-10" 2>&1); vrc=$?
  if [ "$rc" = 0 ] || [ "$(echo "$took < 10" | bc)" != 1 ]; then
    fail second_signal_ends_at_once "exit $rc after ${took}s: $(grep -v '^step' "$d.log" | tail -3 | tr '\n' '|')"
  elif ! grep -q '^run_train.sh: SIGTERM again: ending now' "$d.log"; then
    fail second_signal_ends_at_once "the script did not say so: $(grep run_train.sh "$d.log" | tr '\n' '|')"
  elif [ $vrc != 0 ] || [ "$(ls "$d/checkpoint" | grep -v '\.tmp$' | tr '\n' ' ')" != "step-10 " ]; then
    fail second_signal_ends_at_once "checkpoints left: $(ls "$d/checkpoint" | tr '\n' ' '); verify: $verify"
  else
    pass "second_signal_ends_at_once (exit $rc, ${took%.*} s after it)"
  fi
fi
