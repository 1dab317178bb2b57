#!/usr/bin/env bash
# What a run prints, where it goes:
#   - to a file or pipe: one plain line per log step (step/total, loss, tokens/s, ms/step, MFU,
#     memory, ETA), never a carriage return or an escape sequence;
#   - to the user's terminal (a pty from `script`): a bar redrawn in place, cut to the terminal's
#     width (COLUMNS);
#   - under mpirun, even on a terminal: plain lines (mpirun hands each rank a pty of its own);
#   - an error every rank meets is printed once, and the job ends without MPI_ABORT's banner.
# Needs $BUILD/ctitan (make) and `script` (util-linux).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL output: $bin not built (make)"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
command -v script >/dev/null || { echo "FAIL output: no 'script' command (util-linux)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
tiny="--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128 \
--model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1 \
--metrics.log_freq 1 --training.steps 3"
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
export OMP_NUM_THREADS=1
unset CTITAN_TTY

# To a file.
"$bin" train $tiny --job.dump_folder "$tmp/file" >"$tmp/file.out" 2>&1
if ! grep -q $'\r\|\033' "$tmp/file.out" && grep -qE '^step 3/3  loss [0-9.]+ .* [0-9.]+ ms/step  MFU .* ETA ' "$tmp/file.out"; then
  pass plain_lines_to_a_file
else
  fail plain_lines_to_a_file "$(head -c 300 "$tmp/file.out" | cat -A | head -3)"
fi

# To a terminal 60 columns wide.
COLUMNS=60 script -qec "$bin train $tiny --job.dump_folder $tmp/tty" /dev/null >"$tmp/tty.out" 2>&1
widest=$(tr '\r' '\n' <"$tmp/tty.out" | sed 's/\x1b\[K//g' | grep '^\[' | awk '{ if (length($0) > w) w = length($0) } END { print w + 0 }')
if grep -q $'\r\033\[K\[######' "$tmp/tty.out" && [ "$widest" -gt 0 ] && [ "$widest" -le 59 ]; then
  pass bar_on_a_terminal_fits_its_width
else
  fail bar_on_a_terminal_fits_its_width "widest $widest: $(head -c 200 "$tmp/tty.out" | cat -A)"
fi
# ... unless asked for lines.
COLUMNS=60 script -qec "$bin train $tiny --metrics.progress lines --job.dump_folder $tmp/tty_lines" /dev/null >"$tmp/tty_lines.out" 2>&1
if ! grep -q $'\033' "$tmp/tty_lines.out" && grep -q '^step 3/3' "$tmp/tty_lines.out"; then
  pass metrics_progress_lines_on_a_terminal
else
  fail metrics_progress_lines_on_a_terminal "$(head -c 200 "$tmp/tty_lines.out" | cat -A)"
fi

# mpirun on a terminal: every rank's stdout is mpirun's pty, not the user's terminal.
script -qec "mpirun $asroot --oversubscribe --bind-to none -np 2 $bin train $tiny --parallelism.data_shard_degree 2 --job.dump_folder $tmp/mpi" /dev/null >"$tmp/mpi.out" 2>&1
if ! grep -q $'\033' "$tmp/mpi.out" && grep -q '^step 3/3' "$tmp/mpi.out"; then
  pass plain_lines_under_mpirun_on_a_terminal
else
  fail plain_lines_under_mpirun_on_a_terminal "$(head -c 300 "$tmp/mpi.out" | cat -A)"
fi

# One error, one line: a layout every rank finds wrong, and a bad setting every rank parses.
mpirun $asroot --oversubscribe --bind-to none -np 4 "$bin" train $tiny --parallelism.data_shard_degree 3 \
  --job.dump_folder "$tmp/e1" >"$tmp/e1.out" 2>&1; rc=$?
n=$(grep -c 'ctitan train:' "$tmp/e1.out")
if [ $rc -ne 0 ] && [ "$n" = 1 ] && ! grep -q MPI_ABORT "$tmp/e1.out" &&
   grep -q '^ctitan train: layout .* = 3 ranks, but the world has 4$' "$tmp/e1.out"; then
  pass layout_error_printed_once_without_abort
else
  fail layout_error_printed_once_without_abort "rc $rc, $n lines: $(grep -v '^--\|^ \|^$' "$tmp/e1.out" | head -3)"
fi
mpirun $asroot --oversubscribe --bind-to none -np 3 "$bin" train $tiny --training.steps -3 \
  --job.dump_folder "$tmp/e2" >"$tmp/e2.out" 2>&1; rc=$?
n=$(grep -c 'ctitan train:' "$tmp/e2.out")
if [ $rc -ne 0 ] && [ "$n" = 1 ] && ! grep -q MPI_ABORT "$tmp/e2.out"; then
  pass config_error_printed_once
else
  fail config_error_printed_once "rc $rc, $n lines"
fi

# Plain mpirun, no OMP_NUM_THREADS: each rank takes its share of the node's cores, not all of them.
cores=$(nproc)
want=$(( cores / 2 )); [ "$want" -ge 1 ] || want=1
env -u OMP_NUM_THREADS mpirun $asroot --oversubscribe --bind-to none -np 2 "$bin" train $tiny \
  --parallelism.data_shard_degree 2 --job.dump_folder "$tmp/threads" >"$tmp/threads.out" 2>&1
if grep -qE "^ranks 2: .*; $want OpenMP threads? per rank" "$tmp/threads.out"; then
  pass plain_mpirun_shares_the_cores
else
  fail plain_mpirun_shares_the_cores "want $want: $(grep '^ranks' "$tmp/threads.out")"
fi

# profiling.trace_actions: each action of the accumulation schedule (F0 B0 F1 B1, then the gradient
# reduction and the reshard) on stderr as it starts, every step; off by default (the file run above).
"$bin" train $tiny --training.steps 2 --gradient_accumulation_steps 2 --profiling.trace_actions true \
  --job.dump_folder "$tmp/actions" >/dev/null 2>"$tmp/actions.err"
want=$(printf '[executor] %s\n' 0F0 0B0 0F1 0B1 REDUCE_GRADS RESHARD 0F0 0B0 0F1 0B1 REDUCE_GRADS RESHARD)
got=$(grep '^\[executor\]' "$tmp/actions.err")
if [ "$got" = "$want" ] && ! grep -q '^\[executor\]' "$tmp/file.out"; then
  pass trace_actions_prints_every_action
else
  fail trace_actions_prints_every_action "$(echo "$got" | head -3 | tr '\n' '|') (untraced run: $(grep -c '^\[executor\]' "$tmp/file.out") lines)"
fi
