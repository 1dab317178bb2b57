#!/usr/bin/env bash
# Checkpoint speed: save and load throughput per rank, and how long a save stops training,
# synchronous against async (checkpoint.async_mode async), on a 2-rank FSDP job.
#
#   bash bench/checkpoint_speed.sh            (BUILD=build, OUT=a temporary folder, removed)
#
# Model: dim 512, 8 layers (about 30M parameters, 0.36 GB of state with both AdamW moments),
# saving every 10 of 30 steps. Printed per mode: the trainer's own figures for each save (MB/s per
# rank = file bytes over the slowest rank's write + fsync time; the pause = what save_and_commit
# took from the training loop on the slowest rank), the mean step time of the steps without a
# save, and the total time against a run that does not checkpoint. Then the load of step 20
# (each rank reads only its shard's ranges) as MB/s per rank.
set -u
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/ctitan
[ -x "$bin" ] || { echo "checkpoint_speed: $bin not built (make)"; exit 1; }
out=${OUT:-$(mktemp -d)}
[ -n "${OUT:-}" ] || trap 'rm -rf "$out"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
job=(--model.dim 512 --model.n_layers 8 --model.n_heads 8 --model.n_kv_heads 8 --model.vocab_size 2048
     --training.seq_len 128 --training.local_batch_size 2 --training.dataset synthetic --metrics.log_freq 1
     --parallelism.data_shard_degree 2 --training.steps 30 --checkpoint.interval 10
     --checkpoint.last_save_model_only false --checkpoint.keep_latest_k 0 --metrics.peak_tflops 1)
run() {  # run NAME ARGS...
  local d=$out/$1; shift
  local t0; t0=$(date +%s.%N)
  CTITAN_TTY=0 OMP_NUM_THREADS=1 mpirun $asroot --oversubscribe --bind-to none -np 2 \
    "$bin" train "${job[@]}" --job.dump_folder "$d" "$@" >"$d.log" 2>&1 || { echo "run $d failed:"; tail -3 "$d.log"; exit 1; }
  echo "$(date +%s.%N) - $t0" | bc >"$d.seconds"
}
# Mean step_seconds of the steps that did not save (11-19 and 21-29: the step after a save pays
# for an async writer's competition for the cores, so it counts).
mean_step() { grep -o '"step": [0-9]*, .*"step_seconds": [0-9.]*' "$1/metrics.jsonl" |
  awk -F'[:,]' '{ s = $2 + 0; if (s > 10 && s % 10) { sum += $NF; n++ } } END { printf "%.1f", 1e3 * sum / n }'; }

echo "checkpoint speed: 2 ranks FSDP, dim 512 x 8 layers, $(nproc) cores, folder $out"
run none
run sync --checkpoint.enable true
run async --checkpoint.enable true --checkpoint.async_mode async
base=$(cat "$out/none.seconds")
for mode in sync async; do
  d=$out/$mode
  echo "$mode:"
  grep '^checkpoint: step' "$d.log" | sed 's/^checkpoint: /  /; s/ saved to [^ ]* / /'
  total=$(cat "$d.seconds")
  printf '  mean step %s ms (no checkpoint: %s ms); whole run %.1f s = %.2f x the run without checkpoints\n' \
    "$(mean_step "$d")" "$(mean_step "$out/none")" "$total" "$(echo "$total / $base" | bc -l)"
done
pause() { grep '^checkpoint: step 20 ' "$out/$1.log" | sed -n 's/.*training paused \([0-9]*\) ms.*/\1/p'; }
ps=$(pause sync) pa=$(pause async)
[ -n "$ps" ] && [ -n "$pa" ] && [ "$ps" -gt 0 ] &&
  printf 'async pause / sync pause at step 20: %s / %s ms = %.2f\n' "$pa" "$ps" "$(echo "$pa / $ps" | bc -l)"

# Load: resume the synchronous run from its step 20.
load=$out/load
mkdir -p "$load/checkpoint"
cp -r "$out/sync/checkpoint/step-20" "$load/checkpoint/"
run load --checkpoint.enable true --training.steps 21
grep -o 'read .* per rank)' "$load.log" | sed 's/^/load: /'
