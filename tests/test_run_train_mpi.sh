#!/usr/bin/env bash
# Tests of scripts/run_train.sh, the launcher. The command it builds is checked with DRY_RUN=1
# (build/ctitan need not exist); real launches use a stand-in program (CTITAN_BIN) that reports
# what each rank saw, and one whose rank 1 dies, to check that the job goes down with it.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
launch=scripts/run_train.sh
cfg=$tmp/c.toml
echo '# empty' >"$cfg"
cores=$(nproc)
root=$(pwd)
asroot=""
[ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root "

# expect NAME WANT GOT
expect() {
  if [ "$2" = "$3" ]; then echo "PASS $1"; else printf 'FAIL %s: expected [%s] got [%s]\n' "$1" "$2" "$3"; fi
}

got=$(env -u OMP_NUM_THREADS NRANKS=1 CONFIG=$cfg DRY_RUN=1 $launch --training.steps 3 'two words')
expect launcher_single_rank_runs_directly \
  "OMP_NUM_THREADS=$cores $root/build/ctitan train --config $cfg --training.steps 3 two\\ words" "$got"

got=$(env -u OMP_NUM_THREADS NRANKS=2 CONFIG=$cfg DRY_RUN=1 $launch --x 1)
t=$((cores / 2)); [ "$t" -ge 1 ] || t=1
over=""; [ 2 -gt "$cores" ] && over="--oversubscribe "
expect launcher_two_ranks \
  "OMP_NUM_THREADS=$t mpirun -np 2 ${asroot}${over}--bind-to none -x OMP_NUM_THREADS -x CTITAN_TTY $root/build/ctitan train --config $cfg --x 1" "$got"

n=$((cores + 1))
got=$(env -u OMP_NUM_THREADS NRANKS=$n CONFIG=$cfg DRY_RUN=1 $launch)
expect launcher_oversubscribes_past_cores \
  "OMP_NUM_THREADS=1 mpirun -np $n ${asroot}--oversubscribe --bind-to none -x OMP_NUM_THREADS -x CTITAN_TTY $root/build/ctitan train --config $cfg" "$got"

got=$(OMP_NUM_THREADS=3 NRANKS=1 CONFIG=$cfg DRY_RUN=1 $launch)
expect launcher_keeps_omp_threads "OMP_NUM_THREADS=3 $root/build/ctitan train --config $cfg" "$got"

echo "localhost slots=8" >"$tmp/hosts"
got=$(OMP_NUM_THREADS=1 HOSTFILE=$tmp/hosts MPIRUN_ARGS="--mca btl_base_verbose 0" NRANKS=8 CONFIG=$cfg DRY_RUN=1 $launch)
expect launcher_hostfile_and_extra_args \
  "OMP_NUM_THREADS=1 mpirun -np 8 ${asroot}--hostfile $tmp/hosts --bind-to none -x OMP_NUM_THREADS -x CTITAN_TTY --mca btl_base_verbose 0 $root/build/ctitan train --config $cfg" "$got"

# TorchTitan's habits: NGPU for NRANKS, CONFIG_FILE for CONFIG, --job.config_file among the
# arguments (taken out, passed as the one --config; '-' or '_' in the name, PATH after it or =PATH).
got=$(env -u OMP_NUM_THREADS -u NRANKS -u CONFIG NGPU=2 CONFIG_FILE=$cfg DRY_RUN=1 $launch --x 1)
expect launcher_takes_ngpu_and_config_file \
  "OMP_NUM_THREADS=$t mpirun -np 2 ${asroot}${over}--bind-to none -x OMP_NUM_THREADS -x CTITAN_TTY $root/build/ctitan train --config $cfg --x 1" "$got"
for form in "--job.config_file $cfg" "--job.config-file=$cfg" "--config $cfg"; do
  read -r -a words <<<"$form"
  got=$(env -u CONFIG -u CONFIG_FILE OMP_NUM_THREADS=1 NRANKS=1 DRY_RUN=1 $launch --a 1 "${words[@]}" --b 2)
  expect "launcher_takes_config_argument ($form)" "OMP_NUM_THREADS=1 $root/build/ctitan train --config $cfg --a 1 --b 2" "$got"
done
got=$(OMP_NUM_THREADS=1 NRANKS=1 CONFIG=$cfg DRY_RUN=1 $launch --job.config_file "$cfg")
expect launcher_same_config_twice_is_one "OMP_NUM_THREADS=1 $root/build/ctitan train --config $cfg" "$got"

# Refusals: one line on stderr, exit 2, nothing run.
refuse() {
  local name=$1 want=$2; shift 2
  local err rc
  err=$(env "$@" DRY_RUN=1 $launch 2>&1 >/dev/null); rc=$?
  expect "$name" "2 $want" "$rc $err"
}
refuse launcher_refuses_zero_ranks "run_train.sh: NRANKS must be a positive integer, got '0'" NRANKS=0 CONFIG=$cfg
refuse launcher_refuses_bad_ranks "run_train.sh: NRANKS must be a positive integer, got 'four'" NRANKS=four CONFIG=$cfg
refuse launcher_refuses_missing_config "run_train.sh: config file '$tmp/none.toml' not found (set CONFIG or --job.config_file)" NRANKS=2 CONFIG=$tmp/none.toml
refuse launcher_refuses_missing_hostfile "run_train.sh: hostfile '$tmp/nohosts' not found" NRANKS=2 CONFIG=$cfg HOSTFILE=$tmp/nohosts
refuse launcher_refuses_bad_threads "run_train.sh: OMP_NUM_THREADS must be a positive integer, got 'x'" NRANKS=2 CONFIG=$cfg OMP_NUM_THREADS=x
refuse launcher_refuses_nranks_ngpu_disagreeing "run_train.sh: NRANKS=2 and NGPU=4 disagree (they are one setting: set one)" \
  NRANKS=2 NGPU=4 CONFIG=$cfg
echo '# other' >"$tmp/other.toml"
refuse launcher_refuses_config_config_file_disagreeing \
  "run_train.sh: CONFIG=$cfg and CONFIG_FILE=$tmp/other.toml disagree (they are one setting: set one)" \
  NRANKS=1 CONFIG=$cfg CONFIG_FILE=$tmp/other.toml
err=$(env -u CONFIG_FILE NRANKS=1 CONFIG=$cfg DRY_RUN=1 $launch --job.config_file "$tmp/other.toml" 2>&1 >/dev/null); rc=$?
expect launcher_refuses_config_and_other_argument \
  "2 run_train.sh: --job.config_file $tmp/other.toml and CONFIG ($cfg) name different config files: give one" "$rc $err"
err=$(env -u CONFIG -u CONFIG_FILE NRANKS=1 DRY_RUN=1 $launch --job.config_file "$tmp/none.toml" 2>&1 >/dev/null); rc=$?
expect launcher_refuses_missing_config_argument \
  "2 run_train.sh: config file '$tmp/none.toml' not found (set CONFIG or --job.config_file)" "$rc $err"
err=$(env -u CONFIG -u CONFIG_FILE NRANKS=1 DRY_RUN=1 $launch --x 1 --job.config_file 2>&1 >/dev/null); rc=$?
expect launcher_refuses_config_argument_without_file "2 run_train.sh: --job.config_file: expected a file name after it" "$rc $err"
err=$(NRANKS=1 CONFIG=$cfg CTITAN_BIN=$tmp/missing $launch 2>&1); rc=$?
expect launcher_refuses_unbuilt_binary "2 run_train.sh: '$tmp/missing' is not built (run make)" "$rc $err"

# A real launch of 3 ranks: every rank runs the program with the arguments and the threads.
cat >"$tmp/fake" <<'EOF'
#!/usr/bin/env bash
echo "rank ${OMPI_COMM_WORLD_RANK:-none} of ${OMPI_COMM_WORLD_SIZE:-none} omp $OMP_NUM_THREADS args $*"
EOF
chmod +x "$tmp/fake"
got=$(env -u OMP_NUM_THREADS NRANKS=3 CONFIG=$cfg CTITAN_BIN=$tmp/fake $launch --a 'b c' 2>&1 | sort)
want=""
for r in 0 1 2; do want+="rank $r of 3 omp 1 args train --config $cfg --a b c"$'\n'; done
expect launcher_runs_every_rank "${want%$'\n'}" "$got"

# A rank that dies takes the job down: rank 1 kills itself, the others would sleep 120 s.
cat >"$tmp/dies" <<'EOF'
#!/usr/bin/env bash
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then sleep 0.3; kill -9 $$; fi
sleep 120
EOF
chmod +x "$tmp/dies"
t0=$SECONDS
out=$(NRANKS=3 CONFIG=$cfg CTITAN_BIN=$tmp/dies timeout 60 $launch 2>&1); rc=$?
secs=$((SECONDS - t0))
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$secs" -ge 30 ]; then
  echo "FAIL launcher_dead_rank_ends_job: exit $rc after $secs s"
elif ! grep -q "process rank 1 with PID" <<<"$out"; then
  echo "FAIL launcher_dead_rank_ends_job: mpirun did not name rank 1: $(head -c 300 <<<"$out")"
else
  echo "PASS launcher_dead_rank_ends_job ($secs s)"
fi
