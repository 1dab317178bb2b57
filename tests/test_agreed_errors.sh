#!/usr/bin/env bash
# An error every rank agreed on is said once, by rank 0, however many callers wrapped it on the
# way up: one error line, the job's exit status 1, and no MPI_ABORT banner (which only a failure
# some ranks alone met needs). The cases reach the top through wrapping paths:
#   - a resume from a checkpoint whose file is damaged ("checkpoint refused: ..." around the
#     agreed verification failure), 2 and 4 ranks
#   - checkpoint.initial_load_path naming a step folder with a damaged file
#     ("checkpoint.initial_load_path: ..." around it)
#   - a dataset folder that holds no shards
# Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL agreed_errors: $bin not built"; exit 1; }
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 CTITAN_TTY=0
tiny=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 4 --model.vocab_size 64
      --model.ffn_hidden_dim 64 --training.seq_len 16 --micro_batch_size 2 --training.dataset synthetic
      --metrics.peak_tflops 1 --metrics.log_freq 1000 --checkpoint.last_save_model_only false)
mpi() { local n=$1; shift; timeout 120 mpirun $asroot --oversubscribe --bind-to none -np "$n" "$bin" train "${tiny[@]}" "$@"; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# once NAME LOG RC PATTERN: exactly one line of the error (PATTERN), exit 1, no abort banner.
once() {
  local name=$1 log=$2 rc=$3 pat=$4 n
  n=$(grep -c -- "$pat" "$log")
  if [ "$rc" = 1 ] && [ "$n" = 1 ] && ! grep -q 'MPI_ABORT\|mpirun has exited\|^\[rank' "$log"; then
    pass "$name"
  else
    fail "$name" "exit $rc, $n error lines: $(grep -v '^--\|^ \|^$\|^step' "$log" | head -6 | tr '\n' '|')"
  fi
}

# A checkpoint of 2 steps, saved by 2 ranks, its rank-1 file then damaged in the middle.
mpi 2 --parallelism.data_shard_degree 2 --training.steps 2 --checkpoint.enable true --checkpoint.interval 2 \
  --job.dump_folder "$tmp/run" >"$tmp/save.log" 2>&1 || { fail agreed_errors_setup "$(tail -3 "$tmp/save.log")"; exit 0; }
f=$tmp/run/checkpoint/step-2/rank-00001.safetensors
[ -f "$f" ] || { fail agreed_errors_setup "no $f"; exit 0; }
size=$(stat -c %s "$f")
printf 'XXXXXXXX' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
cp -r "$tmp/run/checkpoint/step-2" "$tmp/damaged-step"

for n in 2 4; do
  mpi $n --parallelism.data_shard_degree $n --training.steps 4 --checkpoint.enable true \
    --job.dump_folder "$tmp/run" >"$tmp/resume$n.log" 2>&1
  once "damaged_checkpoint_on_resume_said_once_${n}_ranks" "$tmp/resume$n.log" $? 'checkpoint refused: .*rank-00001.safetensors'
done

mpi 2 --parallelism.data_shard_degree 2 --training.steps 2 --checkpoint.initial_load_path "$tmp/damaged-step" \
  --job.dump_folder "$tmp/fresh" >"$tmp/initial.log" 2>&1
once damaged_initial_load_said_once "$tmp/initial.log" $? 'checkpoint.initial_load_path: .*rank-00001.safetensors'

mkdir -p "$tmp/empty-data"
mpi 4 --parallelism.data_shard_degree 4 --training.steps 2 --training.dataset "$tmp/empty-data" \
  --job.dump_folder "$tmp/nodata" >"$tmp/nodata.log" 2>&1
once empty_dataset_said_once "$tmp/nodata.log" $? "$tmp/empty-data"
