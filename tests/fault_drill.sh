#!/usr/bin/env bash
# Fault drill: a 4-rank job (FSDP 2 x tp 2, checkpoints every 3 steps, comm.train_timeout_seconds
# 5) is hit at a random moment by one of four faults, RUNS times (default 20):
#   kill     kill -9 of a random rank
#   stop     SIGSTOP of a random rank (it hangs, holding its peers in a collective)
#   readonly the dump folder's file system remounted read-only
#   full     the dump folder's file system filled up
# Each run must end within the limit (the timeout plus the watchdog's question and start-up)
# with a message that names the rank (kill, stop) or the file (disk faults, which every writing
# rank meets) and the cause, and every complete checkpoint left on disk must verify
# (`ctitan checkpoint verify`). The disk faults need a tmpfs mount (root); without
# one they are replaced by kill / stop, and the drill says so.
#
#   bash tests/fault_drill.sh [RUNS] [SEED]          (make fault-drill)
set -u
cd "$(dirname "$0")/.."
runs=${1:-20}
RANDOM=${2:-$$}
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "fault_drill: $bin not built (make)"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
cleanup() { for m in "$tmp"/disk*; do mountpoint -q "$m" 2>/dev/null && umount -R -l "$m"; done; rm -rf "$tmp"; }
trap cleanup EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
limit=30  # seconds from the fault to the end of the job: timeout 5 + question 3 + slack
job=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --metrics.log_freq 1 --training.steps 1000000 --parallelism.data_shard_degree 2
     --parallelism.compute_parallel_degree 2 --checkpoint.enable true --checkpoint.interval 3
     --checkpoint.keep_latest_k 3 --comm.train_timeout_seconds 5)
can_mount=yes
mkdir -p "$tmp/probe" && mount -t tmpfs -o size=1m tmpfs "$tmp/probe" 2>/dev/null && umount "$tmp/probe" || can_mount=no
[ $can_mount = yes ] || echo "fault_drill: cannot mount a tmpfs here: disk faults replaced by kill / stop"

passed=0 failed=0
for i in $(seq 1 "$runs"); do
  kinds=(kill stop readonly full)
  [ $can_mount = yes ] || kinds=(kill stop)
  kind=${kinds[RANDOM % ${#kinds[@]}]}
  victim=$((RANDOM % 4))
  delay=$((RANDOM % 20))  # tenths of a second after the first checkpoint
  d=$tmp/disk$i
  mkdir -p "$d"
  [ $can_mount = yes ] && mount -t tmpfs -o size=64m tmpfs "$d"
  (CTITAN_TTY=0 OMP_NUM_THREADS=1 timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 4 \
     "$bin" train "${job[@]}" --job.dump_folder "$d/run" >"$tmp/log$i" 2>&1; echo $? >"$tmp/rc$i") &
  n=0
  until [ -f "$d/run/checkpoint/step-3/manifest.toml" ] || [ $n -ge 600 ]; do sleep 0.05; n=$((n + 1)); done
  sleep "$((delay / 10)).$((delay % 10))"
  pids=($(pgrep -f -- "^$bin train .*--job.dump_folder $d/run\$" | sort -n))
  start=$(date +%s.%N)
  case $kind in
    kill) kill -9 "${pids[$victim]}" ;;
    stop) kill -STOP "${pids[$victim]}" ;;
    # The checkpoint folder bind-mounted read-only over itself (a remount of the whole tmpfs is
    # refused while the metrics file is open for writing).
    # (refused as "busy" while a save holds a file open there: retried until it takes)
    readonly) mount --bind "$d/run/checkpoint" "$d/run/checkpoint"
              for try in $(seq 1 100); do mount -o remount,bind,ro "$d/run/checkpoint" 2>/dev/null && break; sleep 0.02; done ;;
    full) dd if=/dev/zero of="$d/filler" bs=1M count=64 status=none 2>/dev/null ;;
  esac
  wait
  took=$(echo "$(date +%s.%N) - $start" | bc)
  [ "$kind" = stop ] && kill -CONT "${pids[$victim]}" 2>/dev/null
  # What the job said, without mpirun's banners and the per-step lines.
  said=$(grep -v '^step\|^ranks\|^model\|^precision\|^checkpoint: step\|^---\|^ \|^$' "$tmp/log$i" | head -3 | tr '\n' ' ')
  case $kind in
    kill) want="rank $victim .*exited on signal 9|process rank $victim .* signal 9" ;;
    stop) want="rank $victim did not answer \\(stopped" ;;
    # A disk fault hits every rank that writes: the message names the file and the cause (and
    # "rank R:" when only some ranks met it).
    readonly) want="train: .*$d/run/[^ ]*: .*Read-only file system" ;;
    full) want="train: .*$d/run/[^ ]*: .*No space left on device" ;;
  esac
  verdict=ok
  [ "$(cat "$tmp/rc$i")" != 0 ] || verdict="exit status 0"
  awk -v t="$took" -v l=$limit 'BEGIN { exit !(t < l) }' || verdict="took ${took}s"
  grep -qE "$want" "$tmp/log$i" || verdict="no message naming rank and cause: $said"
  [ "$kind" = readonly ] && umount "$d/run/checkpoint"
  if ! "$bin" checkpoint verify "$d/run/checkpoint" >"$tmp/verify$i" 2>&1; then verdict="checkpoints corrupted: $(grep BAD "$tmp/verify$i" | head -1)"; fi
  if [ "$verdict" = ok ]; then
    passed=$((passed + 1))
    printf 'PASS drill %2d: %-8s rank %d after %.1fs: ended in %.1fs; %s\n' "$i" "$kind" "$victim" "$(echo "$delay / 10" | bc -l)" "$took" "$(echo "$said" | cut -c1-150)"
  else
    failed=$((failed + 1))
    printf 'FAIL drill %2d: %-8s rank %d: %s\n' "$i" "$kind" "$victim" "$verdict"
  fi
  [ $can_mount = yes ] && umount -R -l "$d"
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
