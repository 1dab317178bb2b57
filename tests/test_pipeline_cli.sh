#!/usr/bin/env bash
# `ctitan pipeline show` end to end (the grid, the bubble line, SVG / Chrome trace / CSV files, a
# hand-written CSV read back, one-line refusals), and metrics.pipeline_trace: a 2-rank pipeline
# training run writes the measured timeline of its last step, one event per action per rank.
# Needs $BUILD/ctitan (make); fails when it is not built.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL pipeline_cli: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"

pass() { echo "PASS $1"; }
failc() { echo "FAIL $1: $2"; }

# The issue's example: interleaved 1F1B, pp 4, vpp 2, 8 micro-batches.
out=$("$bin" pipeline show --schedule interleaved_1f1b --pp 4 --vpp 2 --microbatches 8 \
      --svg "$tmp/s.svg" --trace "$tmp/s.json" --csv "$tmp/s.csv" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '^rank 0 |0F0 0F1 0F2 0F3 4F0' <<<"$out" && [ "$(grep -c '^rank [0-3] |' <<<"$out")" -eq 4 ]
then pass show_grid; else failc show_grid "rc=$rc $(head -c 400 <<<"$out")"; fi
if grep -q 'simulated 0.1579, textbook (p-1)/(v\*m+p-1) = 0.1579' <<<"$out"; then pass show_bubble_vs_textbook
else failc show_bubble_vs_textbook "$(grep bubble <<<"$out")"; fi
# Peak in flight per rank (Megatron's warm-up: rank 0 holds the most).
if [ "$(awk '/^rank  busy/{f=1;next} f&&NF==5{print $5}' <<<"$out" | tr '\n' ' ')" = "11 9 7 5 " ]; then pass show_peak_in_flight
else failc show_peak_in_flight "$(grep -A4 '^rank  busy' <<<"$out")"; fi
if head -c 5 "$tmp/s.svg" | grep -q '<svg' && [ "$(grep -c '<title>' "$tmp/s.svg")" -eq 128 ]; then pass show_svg
else failc show_svg "$(grep -c '<title>' "$tmp/s.svg" 2>&1)"; fi
events=$(grep -c '"ph": "X"' "$tmp/s.json")
actions=$(tr ',' '\n' <"$tmp/s.csv" | grep -c .)
if [ "$events" -eq "$actions" ] && [ "$events" -gt 128 ]; then pass show_trace_one_event_per_action
else failc show_trace_one_event_per_action "$events events, $actions actions"; fi

# The CSV it wrote, read back as a hand-written schedule, gives the same picture.
back=$("$bin" pipeline show --schedule_file "$tmp/s.csv" --pp 4 2>&1)
if [ "$(grep '^rank' <<<"$back")" = "$(grep '^rank' <<<"$out")" ] && grep -q 'pp 4, vpp 2, 8 micro-batches' <<<"$back"
then pass show_schedule_file; else failc show_schedule_file "$(head -c 400 <<<"$back")"; fi

# Zero bubble beats 1F1B at the same p and m; ZBV uses the V-shape placement.
b1=$("$bin" pipeline show --schedule 1f1b --pp 4 --microbatches 8 | sed -n 's/.*simulated \([0-9.]*\).*/\1/p')
bz=$("$bin" pipeline show --schedule zb_h1 --pp 4 --microbatches 8 | sed -n 's/.*simulated \([0-9.]*\).*/\1/p')
if awk -v a="$bz" -v b="$b1" 'BEGIN{exit !(a < b && b == 0.2727)}'; then pass show_zero_bubble_beats_1f1b
else failc show_zero_bubble_beats_1f1b "zb_h1 $bz 1f1b $b1"; fi
if "$bin" pipeline show --schedule zbv --pp 2 --microbatches 4 | grep -q 'V-shape'; then pass show_zbv_placement
else failc show_zbv_placement "no V-shape"; fi

# Refusals: one line on stderr, non-zero exit.
check_err() {  # name, expected words, command...
  local name=$1 word=$2; shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$word"* ]]; then pass "$name"
  else failc "$name" "rc=$rc err='$err'"; fi
}
check_err err_unknown_schedule "gpipe" "$bin" pipeline show --schedule nope --pp 4 --microbatches 8
check_err err_bad_pp "--pp: 'zero' is not a positive integer" "$bin" pipeline show --schedule 1f1b --pp zero --microbatches 8
check_err err_zero_mb "--microbatches: '0' is not a positive integer" "$bin" pipeline show --schedule 1f1b --pp 2 --microbatches 0
check_err err_missing_pp "needs --pp" "$bin" pipeline show --schedule 1f1b --microbatches 8
check_err err_missing_mb "needs --microbatches" "$bin" pipeline show --schedule 1f1b --pp 2
check_err err_missing_schedule "needs --schedule or --schedule_file" "$bin" pipeline show --pp 2 --microbatches 2
check_err err_interleaved_mb "multiple of" "$bin" pipeline show --schedule interleaved_1f1b --pp 4 --vpp 2 --microbatches 6
check_err err_unknown_option "unknown option '--bogus'" "$bin" pipeline show --bogus 1
check_err err_no_value "--svg: expected a value" "$bin" pipeline show --schedule 1f1b --pp 2 --microbatches 2 --svg
check_err err_unknown_sub "unknown subcommand 'draw'" "$bin" pipeline draw
check_err err_missing_file "$tmp/none.csv" "$bin" pipeline show --schedule_file "$tmp/none.csv" --pp 2
printf '0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n' >"$tmp/broken.csv"  # rank 1 never sends B
check_err err_broken_csv "0RECV_B0" "$bin" pipeline show --schedule_file "$tmp/broken.csv" --pp 2
check_err err_unwritable_svg "/nonexistent/x.svg" "$bin" pipeline show --schedule 1f1b --pp 2 --microbatches 2 --svg /nonexistent/x.svg

# A measured trace: 2 pipeline ranks, 1F1B over 4 micro-batches, 2 steps.
tiny=(--model.dim 32 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 4 --model.vocab_size 64
      --model.ffn_hidden_dim 64 --training.seq_len 16 --micro_batch_size 4 --parallelism.pipeline_microbatch_size 1
      --training.dataset synthetic --metrics.peak_tflops 1 --training.steps 2 --parallelism.pipeline_degree 2)
train() { OMP_NUM_THREADS=1 timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 2 "$bin" train "${tiny[@]}" "$@"; }
log=$(train --pipeline_schedule 1f1b --metrics.pipeline_trace "$tmp/m.json" --job.dump_folder "$tmp/o1" 2>&1); rc=$?
# Each rank's list: 4 F, 4 B, 4 sends, 4 receives, REDUCE_GRADS, RESHARD = 18 actions.
e0=$(grep -c '"ph": "X", "pid": 0,' "$tmp/m.json" 2>/dev/null); e1=$(grep -c '"ph": "X", "pid": 1,' "$tmp/m.json" 2>/dev/null)
f1=$(grep -c '"cat": "F", "ph": "X", "pid": 1,' "$tmp/m.json" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$e0" = 18 ] && [ "$e1" = 18 ] && [ "$f1" = 4 ] && grep -q 'pipeline trace of step 2 written' <<<"$log"
then pass measured_trace_events_per_rank; else failc measured_trace_events_per_rank "rc=$rc e0=$e0 e1=$e1 f1=$f1 $(tail -c 300 <<<"$log")"; fi
# Times are from the earliest start: some event at ts 0, none negative; JSON parses when python is here.
if grep -q '"ts": 0.000,' "$tmp/m.json" && ! grep -q '"ts": -' "$tmp/m.json"; then pass measured_trace_origin
else failc measured_trace_origin "$(grep -m3 '"ph": "X"' "$tmp/m.json")"; fi
if ! command -v python3 >/dev/null || python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/m.json" 2>/dev/null
then pass measured_trace_is_json; else failc measured_trace_is_json "python3 could not parse it"; fi

# ZB-H1 to an SVG: one rect per action that took time (all of them, measured).
log=$(train --pipeline_schedule zb_h1 --metrics.pipeline_trace "$tmp/m.svg" --job.dump_folder "$tmp/o2" 2>&1); rc=$?
if [ $rc -eq 0 ] && head -c 5 "$tmp/m.svg" | grep -q '<svg' && grep -q '>0W3 rank 0' "$tmp/m.svg" && grep -q '>1I3 rank 1' "$tmp/m.svg"
then pass measured_trace_svg; else failc measured_trace_svg "rc=$rc $(tail -c 300 <<<"$log")"; fi
