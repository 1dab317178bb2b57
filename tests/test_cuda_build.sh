#!/usr/bin/env bash
# The CUDA backend compiles and links: `make CUDA=1` of ctitan and of the GPU test
# programs (tests/cuda/), in a scratch build folder, for one architecture (sm_90) at -O2 to keep
# it short. Nothing runs on a GPU here: this only keeps the CUDA sources from rotting.
# Objects of $BUILD (default build/) seed the scratch folder so only the CUDA sources and the
# files that test CT_HAVE_CUDA are compiled again (a fresh $BUILD makes it compile everything).
# Without nvcc it prints one PASS line that says the backend was NOT compiled (SKIP).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# A CPU build (no ct_kernels_cuda in $BUILD/ctitan) refuses training.device cuda with one line.
bin=$BUILD/ctitan
if [ -x "$bin" ] && ! nm "$bin" 2>/dev/null | grep -q ' ct_kernels_cuda$'; then
  d=$(mktemp -d)
  out=$(OMP_NUM_THREADS=1 timeout 60 "$bin" train --training.device cuda --training.steps 1 --job.dump_folder "$d/run" 2>&1)
  rc=$?
  rm -rf "$d"
  if [ $rc -ne 0 ] && echo "$out" | grep -q 'this ctitan was built without CUDA (make CUDA=1)'; then
    pass cpu_build_refuses_cuda_device
  else
    fail cpu_build_refuses_cuda_device "exit $rc: $(echo "$out" | tail -2)"
  fi
  out=$(OMP_NUM_THREADS=1 timeout 60 "$bin" train --job.device cuda --training.steps 1 --job.dump_folder /nonexistent/x 2>&1)
  if echo "$out" | grep -q 'this ctitan was built without CUDA (make CUDA=1)'; then pass job_device_is_an_alias
  else fail job_device_is_an_alias "$(echo "$out" | tail -2)"; fi
fi

if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  pass "cuda_build (SKIP: no nvcc at $CUDA_HOME/bin/nvcc -- the CUDA backend was NOT compiled)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -d "$BUILD/src" ]; then cp -rp "$BUILD/src" "$tmp/"; fi
rm -f "$tmp"/src/core/version.o  # it carries the commit; cheap to make again
for f in $(grep -rl CT_HAVE_CUDA src --include='*.c'); do rm -f "$tmp/${f%.c}.o"; done
touch "$tmp/.setup-done"

t0=$SECONDS
progs=("$tmp/ctitan")
for t in tests/cuda/test_*.c; do [ -e "$t" ] && progs+=("$tmp/tests/cuda/$(basename "${t%.c}")"); done
out=$(make CUDA=1 BUILD="$tmp" CUDA_HOME="$CUDA_HOME" CUDA_GENCODE="-gencode=arch=compute_90,code=sm_90" \
      NVCC_OPT=-O2 -j1 "${progs[@]}" 2>&1)
rc=$?
secs=$((SECONDS - t0))
if [ $rc -ne 0 ]; then
  fail cuda_build "make CUDA=1 exit $rc after ${secs}s: $(echo "$out" | grep -E ' error|Error|undefined' | head -5)"
  exit 0
fi
missing=""
for p in "${progs[@]}"; do [ -x "$p" ] || missing="$missing $p"; done
if [ -n "$missing" ]; then fail cuda_build "not built:$missing"; exit 0; fi
pass "cuda_build (ctitan and ${#progs[@]} program(s) compiled and linked with CUDA=1 in ${secs}s)"

# The build holds both backends: the cuda kernel table and the nccl comm backend, with device code for sm_90.
syms=$(nm "$tmp/ctitan" 2>/dev/null)
if echo "$syms" | grep -q ' ct_kernels_cuda$' && echo "$syms" | grep -q ' ct_comm_backend_nccl$'; then
  pass cuda_build_has_cuda_and_nccl_tables
else
  fail cuda_build_has_cuda_and_nccl_tables "nm $tmp/ctitan shows no ct_kernels_cuda or no ct_comm_backend_nccl"
fi
# (Only where cuobjdump is installed: this machine's toolkit has none, so the case is absent here.)
if [ -x "$CUDA_HOME/bin/cuobjdump" ]; then
  if "$CUDA_HOME/bin/cuobjdump" --list-elf "$tmp/ctitan" 2>/dev/null | grep -q 'sm_90'; then
    pass cuda_build_has_sm90_code
  else
    fail cuda_build_has_sm90_code "cuobjdump --list-elf shows no sm_90 code in ctitan"
  fi
fi
