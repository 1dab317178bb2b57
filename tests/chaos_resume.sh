#!/usr/bin/env bash
# Chaos run: a small 2-rank training job with checkpoints every 2 steps (the newest 2
# kept) is killed with SIGKILL again and again, KILLS times in all (default 50), and resumed after
# each kill with the same command, until it completes. Where the kills land:
#   step        kill -9 from outside of one rank or of every rank, after a random delay: uniform
#               over the run's duration (measured on the uninterrupted run) from the launch, or
#               over the rest of the training from the first step of this attempt. Classified
#               after the fact: "sync/async save" when a step-N.tmp folder was left, "startup"
#               when this attempt had logged no step yet, "step" otherwise.
#   sync save   a failpoint of core/failpoint.h (the process SIGKILLs itself) at a random point of
#               the save (ckpt.before_data, ckpt.mid_file -- rank 0 or 1 -- ckpt.before_manifest,
#               ckpt.before_rename, ckpt.after_rename) of a random one of the saves still to come,
#               in a run with checkpoint.async_mode = disabled
#   async save  the same in a run with checkpoint.async_mode = async (before_data and mid_file
#               are then hit in the writer thread while training goes on)
#   prune       SIGKILL in the middle of the removal of old checkpoints (keep_latest_k): an
#               LD_PRELOAD shim (built here) counts unlinkat calls in the checkpoint folder once
#               a step-N.tmp has been renamed (that is, the pruning of publish()) and kills the
#               process before the Nth, N random -- nothing, some or all files of the old step
#               removed
# Runs alternate between sync and async checkpointing; every run that completes must log the same
# losses and grad norms as the uninterrupted run of the same settings, bit for bit as metrics.jsonl
# prints them, and save a byte-identical model.safetensors; its checkpoints must verify and no
# step-N.tmp may be left. Each run's dump folder has a sibling folder "outside" (files, a subfolder,
# a link): its tree (names, types, modes, sizes, mtimes, contents) and the parent folder's listing
# must be the same after the run as before. An attempt that does not end within 120 s is a hang.
#
#   bash tests/chaos_resume.sh [KILLS] [SEED]          (make chaos)
set -u
cd "$(dirname "$0")/.."
target=${1:-50}
seed=${2:-$$}
RANDOM=$seed
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "chaos: $bin not built (make)"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
failed=0
trap '[ $failed -eq 0 ] && rm -rf "$tmp" || echo "chaos: logs and folders kept in $tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
steps=40 interval=2
job=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.local_batch_size 4 --training.dataset synthetic
     --metrics.peak_tflops 1 --metrics.log_freq 1 --training.steps $steps --checkpoint.enable true
     --checkpoint.interval $interval --checkpoint.keep_latest_k 2 --checkpoint.last_save_model_only false
     --parallelism.data_shard_degree 2)

# The prune shim.
cat >"$tmp/prunekill.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int armed, count;
int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    size_t n = strlen(from);
    if (r == 0 && n > 4 && !strcmp(from + n - 4, ".tmp") && strstr(from, "/step-")) armed = 1;
    return r;
}
int unlinkat(int fd, const char *name, int flags) {
    static int (*real)(int, const char *, int);
    if (!real) real = (int (*)(int, const char *, int))dlsym(RTLD_NEXT, "unlinkat");
    const char *hit = getenv("CHAOS_PRUNE_HIT");
    if (armed && hit) {
        char link[64], path[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t k = readlink(link, path, sizeof path - 1);
        if (k > 0) {
            path[k] = 0;
            if (strstr(path, "/checkpoint") && ++count == atoi(hit)) {
                fprintf(stderr, "chaos: SIGKILL in pruning before unlinkat %s/%s\n", path, name);
                kill(getpid(), SIGKILL);
            }
        }
    }
    return real(fd, name, flags);
}
EOF
cc -shared -fPIC -O1 -o "$tmp/prunekill.so" "$tmp/prunekill.c" -ldl || { echo "chaos: cannot build the prune shim"; exit 1; }

now_ms() { date +%s%3N; }
# launch DUMP LOG MODE [ENV...]: starts an attempt in the background (pid in $job_pid); its output
# goes to LOG.attempt, appended to LOG when it ends (finish LOG: its exit status in $rc).
launch() {
  local dump=$1 log=$2 mode=$3; shift 3
  : >"$log.attempt"
  (env "$@" CTITAN_TTY=0 OMP_NUM_THREADS=1 timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 2 \
     "$bin" train "${job[@]}" "${extra[@]}" --checkpoint.async_mode "$mode" --job.dump_folder "$dump" >"$log.attempt" 2>&1
   echo $? >"$log.rc") &
  job_pid=$!
}
finish() { wait "$job_pid" 2>/dev/null; cat "$1.attempt" >>"$1"; rc=$(cat "$1.rc"); }
losses() { grep -o '"step": [0-9]*, "loss": [^,]*, "grad_norm": [^,]*' "$1/metrics.jsonl"; }
last_step() { ls "$1/checkpoint" 2>/dev/null | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1; }
tree_sig() {  # names, types, modes, sizes, mtimes and contents under $1
  (cd "$1" && find . -printf '%p %y %m %s %T@ %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

# Uninterrupted references, one per checkpointing mode.
extra=()
declare -A ref_ms ref_first_ms
for mode in disabled async; do
  r=$tmp/ref_$mode
  t0=$(now_ms)
  launch "$r" "$r.log" "$mode"
  until grep -q '^step ' "$r.log.attempt" 2>/dev/null || ! kill -0 "$job_pid" 2>/dev/null; do sleep 0.01; done
  t1=$(now_ms)
  finish "$r.log"
  [ "$rc" = 0 ] || { echo "chaos: the uninterrupted $mode run failed: $(tail -3 "$r.log")"; exit 1; }
  t2=$(now_ms)
  ref_ms[$mode]=$((t2 - t0)); ref_first_ms[$mode]=$((t2 - t1))
  echo "chaos: uninterrupted run (async_mode $mode): ${ref_ms[$mode]} ms, final $(losses "$r" | tail -1)"
done
if [ "$(losses "$tmp/ref_disabled")" != "$(losses "$tmp/ref_async")" ]; then
  echo "chaos: note: sync and async references log different losses (each run is compared with its own)"
fi

declare -A kills=([step]=0 [startup]=0 [sync save]=0 [async save]=0 [prune]=0)
declare -A points
total=0 runs=0 completed=0 identical=0 failed=0 outside_ok=1 hangs=0
sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }

run_i=0
while [ $total -lt "$target" ]; do
  run_i=$((run_i + 1)); runs=$((runs + 1))
  mode=disabled; [ $((run_i % 2)) = 0 ] && mode=async
  savekind="sync save"; [ $mode = async ] && savekind="async save"
  base=$tmp/runs/$run_i; d=$base/run; L=$tmp/logs/run$run_i
  mkdir -p "$tmp/logs"
  mkdir -p "$base/outside/sub"
  echo "outside file $run_i" >"$base/outside/a.txt"; head -c 4096 /dev/urandom >"$base/outside/sub/b.bin"
  ln -s ../a.txt "$base/outside/sub/link"
  sig_before=$(tree_sig "$base/outside"); list_before=$(ls -A "$base")
  budget=$((2 + RANDOM % 6))  # kills in this run before it may finish
  attempt=0 run_kills=0 how=""
  while :; do
    attempt=$((attempt + 1))
    last=$(last_step "$d"); last=${last:-0}
    # Killed before its first checkpoint: the folder holds that attempt's outputs and nothing to
    # resume from, which the trainer refuses without --job.overwrite true (it starts over).
    extra=(); [ -d "$d" ] && [ -z "$(last_step "$d")" ] && extra=(--job.overwrite true)
    remaining_saves=$(((steps - last) / interval))
    kind=none
    if [ $run_kills -lt $budget ] && [ $total -lt "$target" ] && [ "$remaining_saves" -gt 0 ]; then
      r=$((RANDOM % 100))
      if [ $r -lt 50 ]; then kind=external; elif [ $r -lt 80 ]; then kind=save; else kind=prune; fi
    fi
    case $kind in
      none|external) launch "$d" "$L" $mode ;;
      save)
        pts=(ckpt.before_data ckpt.mid_file ckpt.before_manifest ckpt.before_rename ckpt.after_rename)
        pt=${pts[RANDOM % 5]}; rk=0
        case $pt in ckpt.before_data|ckpt.mid_file) rk=$((RANDOM % 2)) ;; esac
        hit=$((1 + RANDOM % remaining_saves))
        how="$pt rank $rk save $hit"
        launch "$d" "$L" $mode CTITAN_FAILPOINT=$pt CTITAN_FAILPOINT_RANK=$rk CTITAN_FAILPOINT_HIT=$hit ;;
      prune)
        # 5 unlinkat calls per pruned step (4 files, the folder), about one pruned step per save
        hit=$((1 + RANDOM % (5 * remaining_saves)))
        how="prune unlinkat $hit"
        launch "$d" "$L" $mode LD_PRELOAD="$tmp/prunekill.so" CHAOS_PRUNE_HIT=$hit ;;
    esac
    started=$(now_ms)
    victim=""
    if [ $kind = external ]; then
      if [ $((RANDOM % 10)) -lt 3 ]; then
        delay=$((RANDOM * 32768 + RANDOM)); delay=$((delay % ref_ms[$mode]))
        how="kill -9 ${delay} ms after the launch"
      else
        until grep -q '^step ' "$L.attempt" 2>/dev/null || ! kill -0 "$job_pid" 2>/dev/null; do sleep 0.01; done
        span=$((ref_first_ms[$mode] * (steps - last) / steps + 1))
        delay=$((RANDOM * 32768 + RANDOM)); delay=$((delay % span))
        how="kill -9 ${delay} ms after the first step"
        started=$(now_ms)
      fi
      sleep_ms $((delay - ($(now_ms) - started) > 0 ? delay - ($(now_ms) - started) : 0))
      pids=($(pgrep -f -- "^$bin train .*--job.dump_folder $d\$" | sort -n))
      if [ ${#pids[@]} -gt 0 ]; then
        if [ $((RANDOM % 3)) = 0 ]; then victim="all"; kill -9 "${pids[@]}" 2>/dev/null
        else victim=$((RANDOM % ${#pids[@]})); kill -9 "${pids[$victim]}" 2>/dev/null; fi
        how="$how (rank $victim)"
      fi
    fi
    finish "$L"
    if [ "$rc" = 124 ]; then
      hangs=$((hangs + 1)); failed=$((failed + 1))
      echo "FAIL run $run_i attempt $attempt: hung (120 s) after $how"; kill -9 $(pgrep -f -- "--job.dump_folder $d\$") 2>/dev/null; break
    fi
    if [ "$rc" = 0 ]; then
      [ $kind != none ] && echo "     run $run_i attempt $attempt: $how did not land: the run completed"
      break
    fi
    # It died: from which kill?
    phase=""
    case $kind in
      none) echo "FAIL run $run_i attempt $attempt: an uninterrupted resume failed (rc $rc): $(grep -v '^step' "$L.attempt" | tail -2)"
            failed=$((failed + 1)); break ;;
      external)
        if [ -z "$victim" ]; then
          echo "FAIL run $run_i attempt $attempt: failed (rc $rc) before the kill: $(grep -v '^step' "$L.attempt" | tail -2)"
          failed=$((failed + 1)); break
        fi
        if ls -d "$d"/checkpoint/step-*.tmp >/dev/null 2>&1; then phase=$savekind
        elif ! grep -q '^step ' "$L.attempt"; then phase=startup
        else phase=step; fi ;;
      save) grep -q "signal 9\|Killed\|killed" "$L.attempt" || { echo "FAIL run $run_i attempt $attempt: rc $rc without the failpoint's kill ($how): $(grep -v '^step' "$L.attempt" | tail -2)"; failed=$((failed + 1)); break; }
            phase=$savekind; points[$pt]=$((${points[$pt]:-0} + 1)) ;;
      prune) grep -q "chaos: SIGKILL in pruning" "$L.attempt" || { echo "FAIL run $run_i attempt $attempt: rc $rc without the prune kill: $(grep -v '^step' "$L.attempt" | tail -2)"; failed=$((failed + 1)); break; }
             phase=prune ;;
    esac
    kills[$phase]=$((${kills[$phase]} + 1)); total=$((total + 1)); run_kills=$((run_kills + 1))
    printf '     run %d attempt %d (%s): %-48s -> %-10s (last complete checkpoint: %s)\n' \
      "$run_i" "$attempt" "$mode" "$how" "$phase" "$(l=$(last_step "$d"); [ -n "$l" ] && echo "step-$l" || echo none)"
    # every rank of the killed job is gone before the resume
    for w in $(seq 1 100); do pgrep -f -- "--job.dump_folder $d\$" >/dev/null || break; sleep 0.05; done
  done
  [ "$rc" = 0 ] || continue
  completed=$((completed + 1))
  ref=$tmp/ref_$mode bad=""
  [ "$(losses "$ref")" = "$(losses "$d")" ] || bad="losses differ: $(diff <(losses "$ref") <(losses "$d") | head -4 | tr '\n' ' ')"
  cmp -s "$ref/model.safetensors" "$d/model.safetensors" || bad="$bad; model.safetensors differs"
  ls -d "$d"/checkpoint/*.tmp >/dev/null 2>&1 && bad="$bad; a step-N.tmp folder was left"
  "$bin" checkpoint verify "$d/checkpoint" >"$L.verify" 2>&1 || bad="$bad; checkpoint verify: $(grep -m1 BAD "$L.verify")"
  if [ "$(tree_sig "$base/outside")" != "$sig_before" ] || [ "$(ls -A "$base")" != "$(printf '%s\n' $list_before run | sort)" ]; then
    outside_ok=0; bad="$bad; the outside folder or the parent listing changed"
  fi
  if [ -z "$bad" ]; then
    identical=$((identical + 1))
    echo "PASS run $run_i ($mode, $run_kills kills, $attempt attempts): final $(losses "$d" | tail -1); model identical"
  else
    failed=$((failed + 1)); echo "FAIL run $run_i ($mode): $bad"
  fi
done

pp=""; for p in "${!points[@]}"; do pp="$pp $p ${points[$p]},"; done
echo "chaos: save failpoints:${pp%,} (seed $seed)"
outside="outside tree unchanged"; [ $outside_ok = 1 ] || outside="OUTSIDE TREE CHANGED"
echo "chaos: $total kills (step ${kills[step]}, startup ${kills[startup]}, sync save ${kills[sync save]}, async save ${kills[async save]}, prune ${kills[prune]}), $completed runs completed, $identical identical to the uninterrupted run, $hangs hangs, $outside"
[ $failed -eq 0 ] && [ $identical -eq $runs ]
