#!/usr/bin/env bash
# Launches `ctitan train` on NRANKS processes.
#
#   NRANKS=4 CONFIG=configs/llama3_debug.toml scripts/run_train.sh --training.steps 10 ...
#
# Environment:
#   NRANKS          processes (default 1). 1 runs build/ctitan directly, without mpirun
#                   (HOSTFILE and MPIRUN_ARGS are then unused).
#   CONFIG          TOML file (default configs/llama3_debug.toml beside this script's repo).
#   HOSTFILE        passed to mpirun as --hostfile (multi-node).
#   OMP_NUM_THREADS threads per rank; default max(1, cores / NRANKS) so ranks do not fight
#                   over cores.
#   MPIRUN_ARGS     extra mpirun arguments (word-split), e.g. "--mca btl tcp,self".
#   CTITAN_BIN      the program (default build/ctitan beside this script's repo).
#   DRY_RUN=1       print the command (shell-quoted, one line) instead of running it.
# Every other argument goes to `ctitan train` after --config.
#
# mpirun runs with --bind-to none (OpenMP threads of one rank spread over its cores), with
# --oversubscribe when NRANKS exceeds the cores, and with --allow-run-as-root when root.
# OpenMPI ends the whole job when any rank exits abnormally, so a dead rank never leaves the
# others waiting (and comm/ gives every collective a timeout besides). Ctrl-C or SIGTERM to
# mpirun reaches every rank as SIGTERM: they finish the step, save a checkpoint (when
# checkpoint.enable) and exit 0 -- within odls_base_sigkill_timeout (1 s), after which mpirun
# kills them. Longer saves: MPIRUN_ARGS="--mca odls_base_sigkill_timeout 120", or signal the
# ranks themselves (a scheduler's srun --signal). Not the default: the same timeout also delays
# killing the survivors when a rank dies.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nranks=${NRANKS:-1}
config=${CONFIG:-$root/configs/llama3_debug.toml}
bin=${CTITAN_BIN:-$root/build/ctitan}

die() { echo "run_train.sh: $*" >&2; exit 2; }

[[ $nranks =~ ^[0-9]+$ ]] && [ "$nranks" -ge 1 ] || die "NRANKS must be a positive integer, got '$nranks'"
[ -f "$config" ] || die "config file '$config' not found (set CONFIG)"
if [ -n "${HOSTFILE:-}" ]; then [ -f "$HOSTFILE" ] || die "hostfile '$HOSTFILE' not found"; fi

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if [ -z "${OMP_NUM_THREADS:-}" ]; then
  threads=$((cores / nranks))
  [ "$threads" -ge 1 ] || threads=1
  export OMP_NUM_THREADS=$threads
fi
[[ $OMP_NUM_THREADS =~ ^[0-9]+$ ]] && [ "$OMP_NUM_THREADS" -ge 1 ] ||
  die "OMP_NUM_THREADS must be a positive integer, got '$OMP_NUM_THREADS'"

# Under mpirun a rank's stdout is a pipe or pty whatever the user's terminal is, so the trainer
# learns from here whether to draw a progress bar (1) or print plain lines (0).
if [ -t 1 ]; then export CTITAN_TTY=1; else export CTITAN_TTY=0; fi

cmd=()
if [ "$nranks" -gt 1 ]; then
  cmd+=(mpirun -np "$nranks")
  [ "$(id -u)" -eq 0 ] && cmd+=(--allow-run-as-root)
  # With a hostfile the slots are the hosts' business; locally, more ranks than cores
  # needs --oversubscribe or OpenMPI refuses to start.
  if [ -z "${HOSTFILE:-}" ] && [ "$nranks" -gt "$cores" ]; then cmd+=(--oversubscribe); fi
  [ -n "${HOSTFILE:-}" ] && cmd+=(--hostfile "$HOSTFILE")
  cmd+=(--bind-to none -x OMP_NUM_THREADS -x CTITAN_TTY)
  if [ -n "${MPIRUN_ARGS:-}" ]; then
    read -r -a extra <<<"$MPIRUN_ARGS"
    cmd+=("${extra[@]}")
  fi
fi
cmd+=("$bin" train --config "$config" "$@")

if [ "${DRY_RUN:-0}" = 1 ]; then
  printf 'OMP_NUM_THREADS=%s' "$OMP_NUM_THREADS"
  printf ' %q' "${cmd[@]}"
  printf '\n'
  exit 0
fi
[ -x "$bin" ] || die "'$bin' is not built (run make)"
exec "${cmd[@]}"
