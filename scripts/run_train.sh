#!/usr/bin/env bash
# Launches `ctitan train` on NRANKS processes.
#
#   NRANKS=4 CONFIG=configs/llama3_debug.toml scripts/run_train.sh --training.steps 10 ...
#   NGPU=4 CONFIG_FILE=configs/llama3_debug.toml scripts/run_train.sh     (TorchTitan's names)
#
# Environment:
#   NRANKS          processes (default 1). 1 runs build/ctitan directly, without mpirun
#                   (HOSTFILE and MPIRUN_ARGS are then unused). NGPU is the same setting.
#   CONFIG          TOML file (default configs/llama3_debug.toml beside this script's repo).
#                   CONFIG_FILE is the same setting, and so is an argument --job.config_file
#                   PATH (or --config PATH), which is taken out of the arguments and passed as
#                   --config. Two of these naming different files are refused.
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
# others waiting (and comm/ gives every collective a timeout besides).
#
# Stopping (NRANKS > 1). mpirun passes SIGINT and SIGTERM on to its ranks as SIGTERM but kills
# them odls_base_sigkill_timeout (1 s) later, too soon to save; SIGUSR1 it passes on untouched.
# So mpirun runs in a session of its own (a terminal's Ctrl-C reaches this script only), and
# this script, the one process in front of it:
#   - on the first SIGINT or SIGTERM sends mpirun SIGUSR1: every rank finishes the step in
#     flight, saves a checkpoint (when checkpoint.enable) and exits 0, within
#     checkpoint.signal_grace_seconds;
#   - on a second sends mpirun SIGTERM: the ranks end at once, leaving the last complete
#     checkpoint (a third sends SIGKILL to mpirun's whole session);
#   - exits with mpirun's status (0 after a clean stop).
# A scheduler that signals the ranks itself (srun --signal) needs none of this. With NRANKS=1
# the program runs in this script's place and takes Ctrl-C itself, the same way.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${CTITAN_BIN:-$root/build/ctitan}

die() { echo "run_train.sh: $*" >&2; exit 2; }

# TorchTitan's names beside ours: NGPU for NRANKS, CONFIG_FILE for CONFIG.
if [ -n "${NRANKS:-}" ] && [ -n "${NGPU:-}" ] && [ "$NRANKS" != "$NGPU" ]; then
  die "NRANKS=$NRANKS and NGPU=$NGPU disagree (they are one setting: set one)"
fi
nranks=${NRANKS:-${NGPU:-1}}
if [ -n "${CONFIG:-}" ] && [ -n "${CONFIG_FILE:-}" ] && [ "$CONFIG" != "$CONFIG_FILE" ]; then
  die "CONFIG=$CONFIG and CONFIG_FILE=$CONFIG_FILE disagree (they are one setting: set one)"
fi
config=${CONFIG:-${CONFIG_FILE:-}}
config_from=${CONFIG:+CONFIG}; config_from=${config_from:-${CONFIG_FILE:+CONFIG_FILE}}
# --job.config_file PATH / --config PATH among the arguments ('-' or '_', or =PATH): taken out
# and passed as the one --config.
args=()
while [ $# -gt 0 ]; do
  a=$1; shift
  name=${a%%=*}; name=${name//-/_}
  if [ "$name" = __job.config_file ] || [ "$name" = __config ]; then
    if [[ $a == *=* ]]; then v=${a#*=}
    else
      [ $# -gt 0 ] || die "$a: expected a file name after it"
      v=$1; shift
    fi
    [ -n "$v" ] || die "$a: expected a file name"
    if [ -n "$config" ] && [ "$config" != "$v" ]; then
      die "$a $v and ${config_from:-an earlier argument} ($config) name different config files: give one"
    fi
    config=$v; config_from="$a $v"
  else
    args+=("$a")
  fi
done
set -- ${args[@]+"${args[@]}"}
config=${config:-$root/configs/llama3_debug.toml}

[[ $nranks =~ ^[0-9]+$ ]] && [ "$nranks" -ge 1 ] || die "NRANKS must be a positive integer, got '$nranks'"
[ -f "$config" ] || die "config file '$config' not found (set CONFIG or --job.config_file)"
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
[ "$nranks" -gt 1 ] || exec "${cmd[@]}"

# mpirun in a session of its own, stopped through this script (see the top of this file).
# setsid execs in place here (a background job of a script is no process-group leader), so $!
# is mpirun's pid, its session's and its process group's id.
command -v setsid >/dev/null || die "setsid (util-linux) not found: needed to keep Ctrl-C from mpirun's ranks"
stops=0
stop() {
  stops=$((stops + 1))
  case $stops in
    1) echo "run_train.sh: $1: asking every rank to finish its step and save (again to end at once)" >&2
       kill -USR1 "$mpirun_pid" 2>/dev/null || true ;;
    2) echo "run_train.sh: $1 again: ending now; the last complete checkpoint stays" >&2
       kill -TERM "$mpirun_pid" 2>/dev/null || true ;;
    *) kill -KILL -- "-$mpirun_pid" 2>/dev/null || true ;;
  esac
}
trap 'stop SIGINT' INT
trap 'stop SIGTERM' TERM
setsid "${cmd[@]}" </dev/null &
mpirun_pid=$!
# `wait` returns early (status > 128) when a trapped signal arrives: then wait again, until it
# returns mpirun's own status (bash keeps it should mpirun end meanwhile).
while :; do
  signalled=$stops rc=0
  wait "$mpirun_pid" || rc=$?
  [ "$stops" != "$signalled" ] && [ "$rc" -gt 128 ] && continue
  break
done
exit "$rc"
