#!/usr/bin/env bash
# OpenMP threads per rank when OMP_NUM_THREADS is not set: this node's cores divided by the ranks
# on this node as the launcher says (OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE under mpirun, MPICH's
# MPI_LOCALNRANKS, srun's SLURM_STEP_TASKS_PER_NODE for SLURM_NODEID), or Slurm's
# SLURM_CPUS_PER_TASK; never more than the cores the process may run on. The `ranks` line at
# start-up says the count.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL threads_per_rank: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cores=$(nproc --all 2>/dev/null || getconf _NPROCESSORS_ONLN)
allowed=$(nproc)
half=$((cores / 2)); [ "$half" -ge 1 ] || half=1; [ "$half" -le "$allowed" ] || half=$allowed
third=$((cores / 3)); [ "$third" -ge 1 ] || third=1; [ "$third" -le "$allowed" ] || third=$allowed
whole=$cores; [ "$whole" -le "$allowed" ] || whole=$allowed
asroot=""
[ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
tiny=(train --training.steps 1 --model.n_layers 1 --training.seq_len 16 --micro_batch_size 1
      --metrics.peak_tflops 1 --job.overwrite true)

# threads NAME WANT ENV...: one process with ENV; its ranks line must say WANT threads.
threads() {
  local name=$1 want=$2; shift 2
  local got
  got=$(env -u OMP_NUM_THREADS "$@" timeout 60 "$bin" "${tiny[@]}" --job.dump_folder "$tmp/$name" 2>&1 |
        grep -o '[0-9]* OpenMP threads\? per rank' | grep -o '^[0-9]*')
  if [ "$got" = "$want" ]; then echo "PASS threads_$name ($got)"; else echo "FAIL threads_$name: want $want, got '$got'"; fi
}
threads alone "$whole"
threads mpich_two_local "$half" MPI_LOCALNRANKS=2
threads srun_step_node_2 "$third" "SLURM_STEP_TASKS_PER_NODE=1,3(x2)" SLURM_NODEID=2
threads srun_step_node_0 "$whole" "SLURM_STEP_TASKS_PER_NODE=1,3(x2)" SLURM_NODEID=0
threads slurm_cpus_per_task 1 SLURM_CPUS_PER_TASK=1
threads set_by_user 1 OMP_NUM_THREADS=1

# Under mpirun: 2 ranks on this node share its cores.
got=$(env -u OMP_NUM_THREADS timeout 120 mpirun -np 2 $asroot --oversubscribe --bind-to none "$bin" "${tiny[@]}" \
      --job.dump_folder "$tmp/mpirun" 2>&1 | grep -o '[0-9]* OpenMP threads\? per rank' | grep -o '^[0-9]*')
if [ "$got" = "$half" ]; then echo "PASS threads_mpirun_two_local ($got)"; else echo "FAIL threads_mpirun_two_local: want $half, got '$got'"; fi
