#!/usr/bin/env bash
# `ctitan plan`: the search ranks layouts that fit, --explain walks the decision,
# --layout evaluates one layout, --tables prints the three reference tables, a model that cannot
# fit is refused with by how much and what would fit, bad input is one line and exit 2, and the
# TOML emitted for the best layout of a small case runs with `ctitan train` unchanged (and its
# memory is what the planner predicted), and --calibrate under mpirun measures every core of the
# node. Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL plan_cli: $bin not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
export OMP_NUM_THREADS=1
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# ---- search: a ranked table of layouts that fit; rank 1 is the fastest
out=$tmp/search.txt
if "$bin" plan --model 8b --gpus 8 --gpu h100_sxm --seq_len 8192 --global_batch_tokens 128K >"$out" 2>&1 &&
   grep -q "layouts considered, [1-9][0-9]* fit" "$out"; then
  # tokens/s per device (the second-to-last column) never increases down the table
  if awk '/^ *[0-9]+  /{v = $(NF-1); if (NR > 1 && prev != "" && v > prev + 0.5) bad = 1; prev = v} END {exit bad}' "$out"; then
    pass search_ranks_by_tokens_per_s
  else fail search_ranks_by_tokens_per_s "rows out of order: $(grep -E '^ *[0-9]+  ' "$out" | head -3)"; fi
else
  fail search_ranks_by_tokens_per_s "$(tail -2 "$out")"
fi

# ---- memory headroom: the profile keeps memory free for the runtime, the header says how much,
# and no layout that fills the device past it is ranked as fitting (8B on 8 x 79.6 GiB: some
# layouts need 78.7 GiB)
out=$tmp/headroom.txt
if "$bin" plan --model 8b --gpus 8 --seq_len 256 --all >"$out" 2>&1 &&
   grep -q "(79.6 GiB each, 4.0 of it kept free for the runtime (memory_headroom_gib), 75.6 for the run)" "$out" &&
   awk '/^ *[0-9]+  /{ if ($(NF-7) > 75.6) bad = 1; n++ } END { exit bad || !n }' "$out"; then
  pass plan_keeps_memory_headroom
else fail plan_keeps_memory_headroom "$(head -1 "$out"; awk '/^ *[0-9]+  /{ if ($(NF-7) > 75.6) print }' "$out" | head -2)"; fi
"$bin" plan --model 8b --gpus 8 --seq_len 256 --all --memory_headroom_gib 0 >"$tmp/nohead.txt" 2>&1
if grep -q "(79.6 GiB each)" "$tmp/nohead.txt" &&
   awk '/^ *[0-9]+  /{ if ($(NF-7) > 75.6) more = 1 } END { exit !more }' "$tmp/nohead.txt"; then
  pass plan_headroom_is_a_setting
else fail plan_headroom_is_a_setting "$(head -1 "$tmp/nohead.txt")"; fi

# ---- --explain: the five steps, each with predicted figures
out=$tmp/explain.txt
"$bin" plan --model 70b --gpus 64 --gpu h100_sxm --seq_len 8192 --global_batch_tokens 1M --explain >"$out" 2>&1
bad=""
for step in "1. Data sharding alone" "2. Tensor parallel within a node" "3. Pipeline across nodes" \
            "4. Context parallel" "5. Checkpointing and precision" "Chosen: "; do
  grep -q "^$step" "$out" || bad="$bad; no '$step'"
done
grep -q "GiB (parameters" "$out" || bad="$bad; no memory breakdown"
[ -z "$bad" ] && pass explain_walks_the_decision || fail explain_walks_the_decision "${bad#; }: $(tail -2 "$out")"

# ---- --layout: one layout evaluated, with the breakdown the issue lists
out=$tmp/layout.txt
if "$bin" plan --model 70b --gpus 256 --gpu h100 --seq_len 8192 --layout fsdp32,tp8 --local_batch 16 --ac full \
     --float8 --compile >"$out" 2>&1; then rc=0; else rc=$?; fi
bad=""
for want in "^layout fsdp32,tp8" "^memory per device: " "^  params " "^  grads " "^  optim " "^  activations " \
            "^  comm " "^step: .* compute .* exposed communication .* bubble" "tokens/s per device" "MFU"; do
  grep -q "$want" "$out" || bad="$bad; no '$want'"
done
[ $rc -le 1 ] || bad="$bad; exit $rc"
[ -z "$bad" ] && pass layout_is_evaluated || fail layout_is_evaluated "${bad#; }: $(tail -2 "$out")"
out=$tmp/pp.txt
if "$bin" plan --model 70b --gpus 512 --gpu h100 --seq_len 8192 --layout fsdp8,tp8,pp8 --local_batch 32 \
     --schedule interleaved_1f1b >"$out" 2>&1 || [ $? -eq 1 ]; then
  grep -q "interleaved_1f1b x2" "$out" && grep -qE "bubble [0-9.]*[1-9]" "$out" && pass pipeline_layout_has_a_bubble ||
    fail pipeline_layout_has_a_bubble "$(grep -E '^(layout|step)' "$out")"
else fail pipeline_layout_has_a_bubble "$(tail -1 "$out")"; fi

# ---- a mixture-of-experts model: total and active parameters, the all-to-alls of expert parallelism
out=$tmp/moe.txt
if "$bin" plan --model qwen3_30b_a3b --gpus 64 --seq_len 4096 --layout fsdp64,ep4 --local_batch 2 >"$out" 2>&1 ||
   [ $? -eq 1 ]; then
  bad=""
  for want in "30.53B parameters, 3.35B active per token" "^layout fsdp64,ep4 " "^  ep  *communication [0-9.]*[1-9]"; do
    grep -q "$want" "$out" || bad="$bad; no '$want'"
  done
  ! grep -q "planned only" "$out" || bad="$bad; marked planned only, but ctitan train runs expert parallelism"
  [ -z "$bad" ] && pass moe_layout_counts_active_and_all_to_all || fail moe_layout_counts_active_and_all_to_all "${bad#; }"
else fail moe_layout_counts_active_and_all_to_all "$(tail -1 "$out")"; fi

# ...and a layout the trainer refuses (DeepSeek's shared expert under tp) is planned, and said so.
out=$tmp/moe_tp.txt
if "$bin" plan --model deepseek_v3_like --gpus 64 --seq_len 4096 --layout fsdp8,tp8 --local_batch 2 >"$out" 2>&1 ||
   [ $? -eq 1 ]; then
  grep -A1 "^layout fsdp8,tp8 " "$out" | grep -q "planned only: ctitan train refuses this layout today: model.moe.num_shared_experts 1" &&
    pass moe_layout_the_trainer_refuses_is_marked || fail moe_layout_the_trainer_refuses_is_marked "$(grep -A1 '^layout' "$out")"
else fail moe_layout_the_trainer_refuses_is_marked "$(tail -1 "$out")"; fi

# ---- --tables: three tables, each with a recommended row
out=$tmp/tables.txt
"$bin" plan --tables >"$out" 2>&1
n=$(grep -c "^Table [123]\. " "$out"); rows=$(grep -cE '^ +1  ' "$out")
[ "$n" = 3 ] && [ "$rows" = 3 ] && pass tables_print_three_recommendations ||
  fail tables_print_three_recommendations "$n tables, $rows first rows: $(tail -2 "$out")"

# ---- a model that cannot fit: how much, and what would
out=$tmp/refuse.txt
"$bin" plan --model 405b --gpus 8 --gpu h100 --seq_len 8192 --global_batch_tokens 64K >"$out" 2>&1; rc=$?
line=$(grep "nothing fits" "$out")
if [ $rc -eq 1 ] && echo "$line" | grep -qE "needs [0-9.]+ GiB per device .* [0-9.]+ GiB more than .* it fits on [0-9]+ devices"; then
  pass refusal_says_by_how_much_and_what_fits
else
  fail refusal_says_by_how_much_and_what_fits "exit $rc: $line"
fi

# ---- bad input: one line, exit 2
bad_input() {  # NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2; shift 2
  "$bin" plan "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] && grep -q -- "$want" "$tmp/bad.err"; then pass "$name"
  else fail "$name" "exit $rc: $(head -2 "$tmp/bad.err")"; fi
}
bad_input bad_model_is_named "unknown model 'llama9'" --model llama9 --gpus 8
bad_input bad_layout_word_is_named "'xp4' is not a degree" --model 8b --gpus 8 --seq_len 8192 --layout fsdp2,xp4
bad_input layout_product_must_match "uses 16 devices, --gpus is 8" --model 8b --gpus 8 --seq_len 8192 --layout fsdp2,tp8
bad_input expert_parallel_must_divide "must divide the 128 experts" --model qwen3_30b_a3b --gpus 8 --seq_len 4096 --layout fsdp8,ep3
bad_input expert_parallel_needs_experts "has no experts" --model 8b --gpus 8 --seq_len 8192 --layout fsdp8,ep2
bad_input unknown_profile_is_named "nosuchgpu" --model 8b --gpus 8 --gpu nosuchgpu
bad_input bad_batch_is_named "global_batch_tokens" --model 8b --gpus 8 --seq_len 8192 --global_batch_tokens 12Q
bad_input devices_are_required "how many devices" --model 8b
bad_input headroom_must_leave_memory "--memory_headroom_gib 80.0 leaves nothing of the 79.6 GiB" --model 8b --gpus 8 \
  --memory_headroom_gib 80
bad_input stack_is_named "--stack: expected ctitan or torchtitan, got 'pytorch'" --model 8b --gpus 8 --seq_len 8192 \
  --stack pytorch
bad_input seq_len_is_required "--seq_len: how many tokens per sequence" --model 8b --gpus 8
bad_input float8_needs_fp8_units "A100 SXM 80GB has no fp8 matmul units (peak_tflops_fp8 = 0 in its profile 'a100_80gb')" \
  --model 8b --gpus 8 --gpu a100 --seq_len 8192 --layout fsdp8 --float8
bad_input explain_needs_a_search "--explain walks a search's decision" --model 8b --gpus 8 --seq_len 8192 \
  --layout fsdp8 --explain
bad_input zbv_runs_two_stages_per_rank "ZBVZeroBubble needs exactly 2 stages per rank (got vpp 4)" --model 8b --gpus 8 \
  --seq_len 8192 --layout pp2,fsdp4 --local_batch 8 --schedule zbv --stages_per_rank 4
bad_input one_stage_schedule_refuses_more "1F1B runs one stage per rank (got vpp 2)" --model 8b --gpus 8 \
  --seq_len 8192 --layout pp2,fsdp4 --local_batch 8 --schedule 1f1b --stages_per_rank 2

bad_input async_tp_is_on_or_off "--async_tp: expected on or off, got 'yes'" --model 8b --gpus 8 --seq_len 8192 \
  --async_tp yes
bad_input async_tp_contradicts_no_async "--async_tp on contradicts --no_async_comm" --model 8b --gpus 8 --seq_len 8192 \
  --no_async_comm --async_tp on
bad_input float8_all_gather_needs_float8 "--float8_all_gather gathers float8 matmuls' weights in fp8: add --float8" \
  --model 8b --gpus 8 --seq_len 8192 --layout fsdp8 --float8_all_gather
bad_input emit_needs_one_overlap_switch "ctitan train overlaps FSDP's and tp's communication together" --model 8b \
  --gpus 8 --seq_len 8192 --layout fsdp4,tp2 --async_tp off --emit-config "$tmp/apart.toml"
bad_input emit_refuses_fp8_gathers "ctitan train gathers FSDP's parameters in the compute dtype" --model 8b --gpus 8 \
  --seq_len 8192 --layout fsdp8 --float8 --float8_all_gather --emit-config "$tmp/f8ag.toml"

# ---- overlap per dimension, and fp8 gathers, each in the label and in the times
out=$tmp/apart.txt
"$bin" plan --model 8b --gpus 8 --seq_len 8192 --stack torchtitan --layout fsdp4,tp2 --async_tp off >"$out" 2>&1
exp_off=$(sed -n 's/^  tp  *communication .* exposed \([0-9.]*\) s$/\1/p' "$out")
"$bin" plan --model 8b --gpus 8 --seq_len 8192 --stack torchtitan --layout fsdp4,tp2 >"$tmp/both.txt" 2>&1
exp_on=$(sed -n 's/^  tp  *communication .* exposed \([0-9.]*\) s$/\1/p' "$tmp/both.txt")
grep -q "^layout fsdp4,tp2 (.*, fsdp prefetch)" "$out" && grep -q "FSDP prefetch on, async tp off" "$out" &&
  awk -v a="$exp_off" -v b="$exp_on" 'BEGIN {exit !(a > b && b >= 0 && a != "")}' &&
  pass overlap_switches_apart || fail overlap_switches_apart "tp exposed ${exp_off:-?} (async tp off) vs ${exp_on:-?}: $(grep '^layout' "$out")"
gather_s() { sed -n 's/^  dp_shard  *communication \([0-9.]*\) s.*/\1/p' "$1"; }
"$bin" plan --model 8b --gpus 8 --seq_len 8192 --layout fsdp8 --float8 >"$tmp/f8.txt" 2>&1
"$bin" plan --model 8b --gpus 8 --seq_len 8192 --layout fsdp8 --float8 --float8_all_gather >"$out" 2>&1
grep -q "^layout fsdp8 (.*, fp8 gathers)" "$out" &&
  awk -v a="$(gather_s "$out")" -v b="$(gather_s "$tmp/f8.txt")" 'BEGIN {exit !(a != "" && a < b)}' &&
  pass float8_all_gather_is_evaluated || fail float8_all_gather_is_evaluated "$(grep -E '^(layout|  dp_shard)' "$out")"

# ---- a search on a GPU without fp8 units offers no float8 layout (it offers some bf16 ones)
out=$tmp/a100.txt
"$bin" plan --model 8b --gpus 8 --gpu a100 --seq_len 8192 --all >"$out" 2>&1
n=$(grep -cE '^ +[0-9]+  ' "$out"); f8=$(grep -E '^ +[0-9]+  ' "$out" | grep -c 'float8')
[ "$n" -gt 0 ] && [ "$f8" = 0 ] && pass search_offers_no_float8_without_fp8_units ||
  fail search_offers_no_float8_without_fp8_units "$n rows, $f8 of them float8: $(tail -1 "$out")"

# ---- the label says the stages per rank the pipeline runs
out=$tmp/vpp4.txt
"$bin" plan --model 8b --gpus 8 --seq_len 8192 --layout pp2,fsdp4 --local_batch 8 --schedule interleaved_1f1b \
  --stages_per_rank 4 >"$out" 2>&1
grep -q "^layout pp2,fsdp4 (.*interleaved_1f1b x4," "$out" && pass stages_per_rank_in_the_label ||
  fail stages_per_rank_in_the_label "$(grep '^layout' "$out"; tail -1 "$out")"

# ---- an odd sequence length without context parallel is a sequence like any other; with
# context parallel it must split into 2 x cp chunks, and the refusal says so
out=$tmp/odd.txt
if "$bin" plan --model 8b --gpus 8 --seq_len 8191 --layout fsdp8 >"$out" 2>&1 || [ $? -eq 1 ]; then
  grep -q "tokens/s per device" "$out" && pass odd_seq_len_without_cp_is_evaluated ||
    fail odd_seq_len_without_cp_is_evaluated "$(tail -1 "$out")"
else fail odd_seq_len_without_cp_is_evaluated "$(tail -1 "$out")"; fi
"$bin" plan --model 8b --gpus 8 --seq_len 8191 --top 3 >"$out" 2>&1 && grep -qE '^ +1  fsdp|^ +1  [a-z]' "$out" &&
  ! grep -qE '^ +[0-9]+  [^ ]*cp[0-9]' "$out" && pass odd_seq_len_search_ranks_layouts_without_cp ||
  fail odd_seq_len_search_ranks_layouts_without_cp "$(tail -1 "$out")"
bad_input odd_seq_len_with_cp_names_the_split "does not split into 2 x context_extension_degree 2" --model 8b --gpus 8 \
  --seq_len 8191 --layout fsdp4,cp2

# ---- the emitted TOML of a small case runs unchanged, with the memory predicted
cfg=$tmp/best.toml
if "$bin" plan --config configs/llama3_debug.toml --gpus 2 --gpu this_machine --seq_len 128 \
     --global_batch_tokens 1024 --steps 3 --dataset synthetic --emit-config "$cfg" >"$tmp/emit.txt" 2>&1; then
  layout=$(sed -n 's/^wrote .* (layout \(.*\))$/\1/p' "$tmp/emit.txt")
  abs_bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
  mkdir -p "$tmp/work"  # the run's relative dump folder lands here
  if (cd "$tmp/work" && timeout 300 mpirun $asroot --oversubscribe --bind-to none -np 2 "$abs_bin" train --config "$cfg") \
       >"$tmp/train.txt" 2>&1 && [ "$(find "$tmp/work" -name metrics.jsonl -exec cat {} + | grep -c '"step"')" -ge 1 ]; then
    pass "emitted_config_runs_unchanged ($layout)"
    # rank 0's peak memory (the sum of its categories) against the prediction in the file's header
    pred=$(sed -n 's/.* \([0-9.]*\) MiB per device.*/\1/p' "$cfg" | head -1)
    meas=$(find "$tmp/work" -name metrics.jsonl -exec tail -1 {} \; | grep -o '"memory_peak_mib": {[^}]*}' |
           grep -o '[0-9.]*' | awk '{s += $1} END {print s}')
    if awk -v p="$pred" -v m="$meas" 'BEGIN {exit !(m > 0 && p / m >= 0.9 && p / m <= 1.1)}'; then
      pass "emitted_config_memory_as_predicted (${pred} vs ${meas} MiB)"
    else fail emitted_config_memory_as_predicted "predicted ${pred:-?} MiB, measured ${meas:-?} MiB"; fi
  else
    fail emitted_config_runs_unchanged "$(grep -v '^step' "$tmp/train.txt" | tail -2)"
  fi
else
  fail emitted_config_runs "$(tail -2 "$tmp/emit.txt")"
fi

# ---- --calibrate as documented (mpirun -np 2), with mpirun binding each rank to one core (its
# default): rank 0 widens its own affinity and measures on every core, so the profile holds the
# node's rate; the profile it writes is one `ctitan plan --gpu FILE` reads
cores=$(getconf _NPROCESSORS_ONLN)  # (not nproc: it answers OMP_NUM_THREADS, set above)
bind=core; [ "$cores" -lt 2 ] && bind=none
out=$tmp/calibrate.txt
if timeout 300 mpirun $asroot --oversubscribe --bind-to $bind -np 2 "$bin" plan --calibrate --out "$tmp/me.toml" \
     >"$out" 2>&1; then
  if grep -q "rank 0 runs on $cores of them" "$out" && grep -q "^devices_per_node = $cores$" "$tmp/me.toml" &&
     "$bin" plan --config configs/llama3_debug.toml --gpus 2 --gpu "$tmp/me.toml" --seq_len 128 \
       --global_batch_tokens 1024 >"$tmp/plan_me.txt" 2>&1; then
    pass "calibrate_measures_every_core ($(grep -o 'bound to [0-9]* when it started' "$out"))"
  else fail calibrate_measures_every_core "$(grep calibrating "$out"; tail -1 "$tmp/plan_me.txt" 2>/dev/null)"; fi
else
  fail calibrate_measures_every_core "$(tail -2 "$out")"
fi
