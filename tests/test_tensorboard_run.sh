#!/usr/bin/env bash
# A training run with --metrics.enable_tensorboard writes one event file (rank 0) whose scalars
# are the run's: loss, grad_norm, lr, tokens_per_s, mfu, memory per category and communication
# per mesh group (FSDP 2 x TP 2), read back by test_tensorboard's own reader (CRCs checked), the
# losses equal to metrics.jsonl's to float precision.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
bin=${CT_BIN:-$B/ctitan}
reader=$B/tests/test_tensorboard
[ -x "$bin" ] && [ -x "$reader" ] || { echo "FAIL tensorboard_run: $bin or $reader not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
OMP_NUM_THREADS=1 timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 4 "$bin" train --model.dim 64 \
  --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128 --model.ffn_hidden_dim 96 \
  --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1 --training.steps 4 --metrics.log_freq 1 \
  --parallelism.data_shard_degree 2 --parallelism.compute_parallel_degree 2 --metrics.enable_tensorboard true \
  --metrics.save_tb_folder tbx --validation.enable true --validation.freq 2 --validation.steps 4 \
  --job.dump_folder "$tmp/run" >"$tmp/run.log" 2>&1 ||
  { echo "FAIL tensorboard_run: the run failed: $(tail -2 "$tmp/run.log")"; exit 0; }
files=$(ls "$tmp"/run/tbx/events.out.tfevents.* 2>/dev/null | wc -l)
[ "$files" = 1 ] && echo "PASS tensorboard_one_event_file_from_rank_0" || echo "FAIL tensorboard_one_event_file_from_rank_0: $files files"
"$reader" --dump "$tmp"/run/tbx/events.out.tfevents.* >"$tmp/dump" 2>&1 || { echo "FAIL tensorboard_file_reads_back: $(head -2 "$tmp/dump")"; exit 0; }
missing=""
for tag in loss grad_norm lr tokens_per_s mfu memory/params_mib memory/activations_mib comm/fsdp/bytes comm/fsdp/wait_s comm/tp/bytes; do
  [ "$(grep -c "^$tag 4 " "$tmp/dump")" = 1 ] || missing="$missing $tag"
done
[ -z "$missing" ] && echo "PASS tensorboard_scalars_of_every_step" || echo "FAIL tensorboard_scalars_of_every_step: missing at step 4:$missing"
verdict=$(paste <(grep '^loss ' "$tmp/dump" | awk '{print $2, $3}') \
                <(grep -o '"step": [0-9]*, "loss": [^,]*' "$tmp/run/metrics.jsonl" | awk -F'[:,]' '{print $2, $4}') |
  awk '{ n++; if ($1 != $3) { print "step " $1 " vs " $3; exit } d = $2 - $4; if (d < 0) d = -d
         if (d > 1e-5 * ($4 < 0 ? -$4 : $4)) { print "step " $1 ": " $2 " vs " $4; exit } }
       END { if (n != 4) print n " losses" }')
[ -z "$verdict" ] && echo "PASS tensorboard_losses_match_metrics" || echo "FAIL tensorboard_losses_match_metrics: $verdict"
# Each step's communication is its own: validation between steps is not counted in the next one.
n=$(awk '$1 ~ /^comm\/(fsdp|tp)\/bytes$/ {print $1, $3}' "$tmp/dump" | sort -u | wc -l)
[ "$n" = 2 ] && echo "PASS tensorboard_comm_per_step_excludes_validation" || echo "FAIL tensorboard_comm_per_step_excludes_validation: $n distinct values"
