#!/usr/bin/env bash
# A run that goes wrong says so and ends -- every rank, within seconds:
#   - a NaN / Inf loss or gradient norm stops the run with one line and saves nothing (or, with
#     training.skip_nonfinite_steps, the step is skipped and counted); metrics.jsonl stays JSON;
#   - a dump folder rank 0 cannot write ends all ranks (it used to leave them in a collective);
#   - ranks with different configurations stop at start-up naming the first differing setting;
#   - a rank that stops answering (SIGSTOP) is named by the others when their collective times out
#     (comm.train_timeout_seconds);
#   - a second run in the same folder keeps the first one's metrics; config.toml is written.
#   - a metrics file that stops taking writes (a full disk) is said once, and training goes on.
# Needs $BUILD/ctitan (make).
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL run_safety: $bin not built"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
tiny=(--model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
      --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
      --metrics.log_freq 1)
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
one() { local d=$1; shift; OMP_NUM_THREADS=1 timeout 60 "$bin" train "${tiny[@]}" --job.dump_folder "$d" "$@" >"$d.out" 2>&1; }
mpi() {  # mpi NRANKS PROGRAM ARGS...: stdout+stderr in $out, status returned
  local n=$1; shift
  CTITAN_TTY=0 OMP_NUM_THREADS=1 timeout 60 mpirun $asroot --oversubscribe --bind-to none -np "$n" "$@" >"$out" 2>&1
}
# Lines of ctitan's own (not mpirun's banner), without the per-step lines.
said() { grep -v '^step\|^ranks\|^model\|^precision\|^---\|^ \|^$\|MPI_ABORT\|NOTE: invoking\|You may or may not\|exactly when\|^with errorcode\|^Primary job\|^mpirun\|^Process name\|^Exit code\|^process' "$1"; }
valid_json_numbers() { ! grep -qiE '[:,] *-?(nan|inf)' "$1"; }

# ---- non-finite values -------------------------------------------------------------------------
d=$tmp/nan
if one "$d" --training.steps 30 --optimizer.lr 1e3; then fail nonfinite_stops "exit status 0"
else
  line=$(said "$d.out")
  if echo "$line" | grep -qE "^train: step [0-9]+: the (loss|gradient norm) is (NaN|\+Inf|-Inf): training stopped, nothing saved" &&
     [ "$(echo "$line" | grep -c .)" -eq 1 ] && [ ! -e "$d/model.safetensors" ] &&
     grep -q '"grad_norm": null\|"loss": null' "$d/metrics.jsonl" && valid_json_numbers "$d/metrics.jsonl"; then
    pass nonfinite_stops_with_one_line_and_saves_nothing
  else
    fail nonfinite_stops_with_one_line_and_saves_nothing "$line"
  fi
fi
d=$tmp/nan_skip
if one "$d" --training.steps 12 --optimizer.lr 1e3 --training.skip_nonfinite_steps true &&
   grep -q '"skipped_steps": [1-9]' "$d/metrics.jsonl" && valid_json_numbers "$d/metrics.jsonl" &&
   "$bin" eval --model "$d/model.safetensors" --data synthetic --batch 2 --steps 2 >"$d.eval" 2>&1 &&
   grep -qE 'loss [0-9]+\.[0-9]+' "$d.eval"; then
  pass nonfinite_skip_counts_and_keeps_a_finite_model
else
  fail nonfinite_skip_counts_and_keeps_a_finite_model "$(said "$d.out" | tail -2) $(tail -1 "$d.eval" 2>/dev/null)"
fi

# ---- a failure on rank 0 alone ends every rank ---------------------------------------------------
touch "$tmp/a_file"
out=$tmp/readonly.out
start=$(date +%s)
if mpi 2 "$bin" train "${tiny[@]}" --training.steps 3 --job.dump_folder "$tmp/a_file/run"; then
  fail unwritable_dump_folder_ends_every_rank "exit status 0"
else
  took=$(( $(date +%s) - start ))
  if [ "$took" -lt 20 ] && said "$out" | grep -q "cannot create folder $tmp/a_file/run"; then
    pass "unwritable_dump_folder_ends_every_rank (${took}s)"
  else
    fail unwritable_dump_folder_ends_every_rank "${took}s: $(said "$out" | head -2)"
  fi
fi

# ---- one configuration ----------------------------------------------------------------------------
# Rank 1 gets extra settings, as a different command line or config file on another host would.
cat >"$tmp/rank1_differs.sh" <<EOF
#!/usr/bin/env bash
extra=()
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && extra=("\$@")
exec "$bin" train ${tiny[*]} --training.steps 3 --job.dump_folder "$tmp/cfg" "\${extra[@]}"
EOF
chmod +x "$tmp/rank1_differs.sh"
for c in "training.steps 20|training.steps = 20 here, 3 on rank 0" \
         "optimizer.lr 1e-3|optimizer.lr = 0.001 here, 0.0008 on rank 0" \
         "training.seed 7|training.seed = 7 here, 42 on rank 0" \
         "model.dim 128|model.dim = 128 here, 64 on rank 0"; do
  setting=${c%%|*} want=${c#*|}
  out=$tmp/cfg.out
  name="different_${setting%% *}_on_one_rank_is_named"
  if mpi 2 "$tmp/rank1_differs.sh" --${setting% *} ${setting#* }; then fail "$name" "exit status 0"
  elif said "$out" | grep -qF "rank 1: the configuration differs from rank 0's: $want"; then pass "$name"
  else fail "$name" "$(said "$out" | head -2)"; fi
done

# ---- a stalled rank is named ---------------------------------------------------------------------
d=$tmp/stall
out=$d.out
(mpi 4 "$bin" train "${tiny[@]}" --training.steps 100000 --parallelism.data_shard_degree 2 \
   --parallelism.compute_parallel_degree 2 --comm.train_timeout_seconds 3 --job.dump_folder "$d"; echo "rc=$?" >"$d.rc") &
n=0
logged() { local c; c=$(grep -c '"step"' "$1" 2>/dev/null); echo "${c:-0}"; }
until [ "$(logged "$d/metrics.jsonl")" -ge 5 ] || [ $n -ge 400 ]; do sleep 0.05; n=$((n + 1)); done
victim=$(pgrep -f -- "^$bin train .*--job.dump_folder $d\$" | sort -n | sed -n 3p)
start=$(date +%s)
[ -n "$victim" ] && kill -STOP "$victim"
wait
took=$(( $(date +%s) - start ))
[ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
if [ -n "$victim" ] && [ "$(cat "$d.rc")" != rc=0 ] && [ "$took" -lt 30 ] &&
   said "$out" | grep -qE "timed out after 3 s: rank 2 did not answer \(stopped, stuck outside communication, or dead\)"; then
  pass "stalled_rank_is_named (${took}s)"
else
  fail stalled_rank_is_named "victim ${victim:-none}, ${took}s, $(cat "$d.rc" 2>/dev/null): $(said "$out" | head -2)"
fi

# ---- runs in the same folder ---------------------------------------------------------------------
# A second run refuses a folder another run wrote (run.toml) unless --job.overwrite, which keeps the
# first run's metrics aside; each run records its id, start, version and effective config.
d=$tmp/again
one "$d" --training.steps 2
id1=$(sed -n 's/^run_id = "\(.*\)"/\1/p' "$d/run.toml")
if one "$d" --training.steps 3; then
  fail second_run_refuses_another_runs_folder "exit status 0"
elif said "$d.out" | grep -q "job.dump_folder $d holds the outputs of run $id1 (started .*): choose another folder, or pass --job.overwrite true"; then
  pass second_run_refuses_another_runs_folder
else
  fail second_run_refuses_another_runs_folder "$(said "$d.out" | head -2)"
fi
sleep 1.1
one "$d" --training.steps 3 --job.overwrite true
kept=$(ls "$d"/metrics-*.jsonl 2>/dev/null | head -1)
if [ -n "$kept" ] && [ "$(grep -c '"step"' "$kept")" = 2 ] && [ "$(grep -c '"step"' "$d/metrics.jsonl")" = 3 ] &&
   grep -q '"time": [0-9]' "$d/metrics.jsonl" && grep -q '^steps = 3' "$d/config.toml" &&
   grep -q '^ctitan_version = "0\.' "$d/run.toml" && ! grep -q "run_id = \"$id1\"" "$d/run.toml"; then
  pass overwrite_keeps_the_first_runs_metrics_and_records_the_run
else
  fail overwrite_keeps_the_first_runs_metrics_and_records_the_run "$(ls "$d") $(cat "$d/run.toml" 2>&1 | head -3)"
fi
# The recorded config.toml starts the same run again (loadable with --config).
d2=$tmp/from_config
if OMP_NUM_THREADS=1 timeout 60 "$bin" train --config "$d/config.toml" --job.dump_folder "$d2" >"$d2.out" 2>&1 &&
   [ "$(grep -o '"loss": [^,]*' "$d/metrics.jsonl")" = "$(grep -o '"loss": [^,]*' "$d2/metrics.jsonl")" ]; then
  pass recorded_config_reruns_the_run
else
  fail recorded_config_reruns_the_run "$(said "$d2.out" | head -2)"
fi

# ---- a metrics file that stops taking writes (a full disk) --------------------------------------
# Every write is checked: a full disk must not leave metrics.jsonl short without a word.
# The dump folder is a tmpfs with room for run.toml and config.toml (sized from a run's own, as
# the settings grow) and one more page, which metrics.jsonl fills after about a dozen steps. The run says so once, names the file, and trains on (the final model
# cannot be saved there either; that error is not what this case checks). Mounting needs root, as
# the checkpoint crash test's full disk does (a file size limit cannot stand in: MPI's start-up
# writes shared-memory files under the same limit).
d=$tmp/metrics_full
mkdir -p "$d"
one "$tmp/sizing" --training.steps 1
pages=1
for f in run.toml config.toml; do pages=$((pages + ($(stat -c %s "$tmp/sizing/$f" 2>/dev/null || echo 0) + 4095) / 4096)); done
if ! mount -t tmpfs -o size=$((pages * 4))k tmpfs "$d" 2>"$d.mount"; then
  fail metrics_write_failure_said_once_and_training_goes_on "cannot mount a tmpfs here: $(head -1 "$d.mount")"
else
  one "$d" --training.steps 60
  warned=$(grep -c "metrics: WARNING: cannot write $d/metrics.jsonl (No space left on device): it ends before step" "$d.out")
  last=$(grep -o '"step": [0-9]*' "$d/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
  if [ "$warned" = 1 ] && grep -q "^step 60/60" "$d.out" && [ -n "$last" ] && [ "$last" -lt 60 ]; then
    pass metrics_write_failure_said_once_and_training_goes_on
  else
    fail metrics_write_failure_said_once_and_training_goes_on "warned $warned times, last step in the file ${last:-none}: $(said "$d.out" | head -3)"
  fi
  umount "$d"
fi
